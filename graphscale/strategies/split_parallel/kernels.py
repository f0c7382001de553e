"""The online split's numba kernels: every vertex of a sample to its owner, its position and its cache flag
(:func:`assign_kernel`), and one pass over a block's edges into per-worker local CSRs and shipped rows, in
``halo`` mode (:func:`split_halo_kernel`) or ``preagg`` mode (:func:`split_preagg_kernel`); see
:mod:`graphscale.strategies.split_parallel.split`."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def assign_kernel(gids, part_code, level_ends, code, cached, counts):
    """Per row of V^(0): ``code = own_pos << 8 | owner`` and whether its owner caches it; O(1) per row.

    ``counts[l]`` snapshots the rows per owner after the first ``level_ends[l]`` rows (ascending ends:
    the levels are prefixes of V^(0)).
    """
    n = gids.size
    w = counts.shape[1]
    running = np.zeros(w, np.int64)
    level = 0
    while level < level_ends.size and level_ends[level] == 0:
        level += 1
    for r in range(n):
        pc = part_code[gids[r]]
        i = pc & 127
        code[r] = (running[i] << 8) | i
        cached[r] = pc >> 7
        running[i] += 1
        while level < level_ends.size and level_ends[level] == r + 1:
            counts[level, :] = running
            level += 1


@nb.njit(cache=True)
def _segments(indptr, code, nd, w):
    """Row and edge segments of every worker's local CSR: ``(lptr_off [w+1], seg_off [w+1])``.

    Worker ``j``'s row pointers are ``lptr[lptr_off[j]:lptr_off[j+1]]``; its edges are written from
    ``seg_off[j]`` on (a segment as long as the in-degrees of its destinations: room for all of them).
    """
    nod = np.zeros(w, np.int64)
    deg = np.zeros(w, np.int64)
    for v in range(nd):
        j = code[v] & 255
        nod[j] += 1
        deg[j] += indptr[v + 1] - indptr[v]
    lptr_off = np.zeros(w + 1, np.int64)
    seg_off = np.zeros(w + 1, np.int64)
    for j in range(w):
        lptr_off[j + 1] = lptr_off[j] + nod[j] + 1
        seg_off[j + 1] = seg_off[j] + deg[j]
    return lptr_off, seg_off


@nb.njit(cache=True)
def split_halo_kernel(indptr, indices, code, nd, ns, w, n_own_src, lptr, lidx, mark, cut_at, cut_key):
    """Halo mode: one pass over the edges, one over the (source, receiver) pairs, one over the cut edges.

    Returns the rows each worker ships to each other worker and every worker's local CSR over its own
    destinations (halo row ``k`` from sender ``i`` at receiver ``j`` is local source
    ``n_own_src[j] + hoff[j, i] + k``). ``lptr`` (``>= nd + w``) and ``lidx`` (``>= nnz``) receive the
    local CSRs; ``mark`` (``>= ns * w``) and ``cut_*`` (``>= nnz``) are scratch.
    """
    lptr_off, seg_off = _segments(indptr, code, nd, w)
    lptr[lptr_off[:w]] = 0
    fill = seg_off[:w].copy()
    mark[: ns * w] = -1
    cnt = np.zeros(w * w, np.int64)
    nc = 0
    for v in range(nd):  # pass 1 (branch-free): local edges in place, cut edges listed
        cv = code[v]
        j = cv & 255
        r = cv >> 8
        f = fill[j]  # a local copy: the stores into lidx cannot alias it
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            cu = code[u]
            lidx[f] = cu >> 8  # overwritten below when the edge is cut
            cut_at[nc] = f
            cut_key[nc] = u * w + j
            nc += (cu & 255) != j
            f += 1
        fill[j] = f
        lptr[lptr_off[j] + r + 1] = f - seg_off[j]
    for c in range(nc):  # flag the (u, j) pairs of the cut edges
        key = cut_key[c]
        if mark[key] == -1:
            mark[key] = -2
            u = key // w
            cnt[(code[u] & 255) * w + key - u * w] += 1
    pair_off = np.zeros(w * w + 1, np.int64)
    for k in range(w * w):
        pair_off[k + 1] = pair_off[k] + cnt[k]
    rows = np.empty(pair_off[w * w], np.int64)
    cursor = pair_off[: w * w].copy()
    for u in range(ns):  # slots in ascending source-row order
        i = code[u] & 255
        for j in range(w):
            if mark[u * w + j] == -2:
                k = i * w + j
                mark[u * w + j] = cursor[k] - pair_off[k]
                rows[cursor[k]] = u
                cursor[k] += 1
    hoff = np.zeros(w * w, np.int64)  # hoff[j, i]: first halo row from sender i at receiver j
    for j in range(w):
        acc = 0
        for i in range(w):
            hoff[j * w + i] = acc
            acc += cnt[i * w + j]
    for c in range(nc):  # pass 3: point the cut edges at their halo rows
        key = cut_key[c]
        u = key // w
        j = key - u * w
        lidx[cut_at[c]] = n_own_src[j] + hoff[j * w + (code[u] & 255)] + mark[key]
    computed = seg_off[1:] - seg_off[:w]
    local = indices.size - nc
    return (cnt, pair_off, rows, lptr[: nd + w], lidx[: seg_off[w]], lptr_off, seg_off[:w].copy(), computed,
            computed.copy(), local)


@nb.njit(cache=True)
def split_preagg_kernel(indptr, indices, code, nd, w, lptr, lidx, xidx, mark, cut_key, cut_pos):
    """Preagg mode: one pass over the edges, one over the (destination, sender) pairs, one over the cut edges.

    Returns the reference vertices per (sender, receiver), the senders' partial-sum CSRs (one row per
    reference slot, sender-major, then receiver) and every worker's local CSR. ``lptr`` (``>= nd + w``),
    ``lidx`` and ``xidx`` (``>= nnz``) receive the CSRs; ``mark`` (``>= nd * w``) and ``cut_*``
    (``>= nnz``) are scratch.
    """
    lptr_off, seg_off = _segments(indptr, code, nd, w)
    lptr[lptr_off[:w]] = 0
    fill = seg_off[:w].copy()
    mark[: nd * w] = 0  # mark[v, i]: edges of v from sender i, then (v, i)'s reference row (scratch array)
    cnt = np.zeros(w * w, np.int64)
    computed = np.zeros(w, np.int64)
    nc = 0
    for v in range(nd):  # pass 1: local edges in place, cut edges listed, edges per (v, i) pair counted
        cv = code[v]
        j = cv & 255
        r = cv >> 8
        f = fill[j]  # a local copy: the stores into lidx cannot alias it
        for e in range(indptr[v], indptr[v + 1]):  # branch-free: both stores happen, one cursor moves
            cu = code[indices[e]]
            i = cu & 255
            cut = i != j
            lidx[f] = cu >> 8
            cut_key[nc] = v * w + i
            cut_pos[nc] = cu >> 8
            f += 1 - cut
            nc += cut
        fill[j] = f
        lptr[lptr_off[j] + r + 1] = f - seg_off[j]
    for c in range(nc):  # edges per (v, i) pair (kept out of pass 1: no store-to-load chain there)
        mark[cut_key[c]] += 1
    for v in range(nd):  # reference pairs per (sender, receiver)
        j = code[v] & 255
        for i in range(w):
            if mark[v * w + i] > 0:
                cnt[i * w + j] += 1
    pair_off = np.zeros(w * w + 1, np.int64)
    for k in range(w * w):
        pair_off[k + 1] = pair_off[k] + cnt[k]
    total = pair_off[w * w]
    rows = np.empty(total, np.int64)
    xptr = np.zeros(total + 1, np.int64)
    cursor = pair_off[: w * w].copy()
    for v in range(nd):  # reference slots in ascending destination-row order
        j = code[v] & 255
        for i in range(w):
            m = mark[v * w + i]
            if m > 0:
                k = cursor[i * w + j]
                rows[k] = v
                xptr[k + 1] = m
                computed[i] += m
                mark[v * w + i] = k
                cursor[i * w + j] += 1
    for k in range(total):
        xptr[k + 1] += xptr[k]
    xfill = xptr[:total].copy()
    for c in range(nc):  # pass 3: the cut edges into their reference rows, in edge order
        k = mark[cut_key[c]]
        xidx[xfill[k]] = cut_pos[c]
        xfill[k] += 1
    local_count = fill - seg_off[:w]
    computed += local_count
    return (cnt, pair_off, rows, xptr, xidx[:nc], lptr[: nd + w], lidx[: seg_off[w]], lptr_off, seg_off[:w].copy(),
            local_count, computed, indices.size - nc)

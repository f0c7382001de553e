"""GSplit's split of a sampled mini-batch into per-worker local splits (numba kernels, O(1) per vertex and edge).

**Offline** (:class:`SplitPlan`, once per run). A vertex partition ``owner[N]``
into ``W`` parts is turned into *split ids*: part ``0``'s vertices first, then
part ``1``'s, ...; inside a part by descending degree (ties by ascending
vertex id). Part ``i`` holds the split-id range ``[poff[i], poff[i+1])``, so

* ``owner(v)`` is a range check of ``split_id[v]`` against ``poff`` (a
  branch-free count of the ``W - 1`` inner boundaries it reaches);
* worker ``i`` caches the ``cap_i = min(cap, |part i|)`` highest-degree vertices
  of its part (``cap = floor(cache_fraction * N)``), and ``v`` is cached by its
  owner iff ``split_id[v] - poff[owner(v)] < cap`` (the slot is that difference).

Both answers are folded once into a one-byte table ``part_code[v] = owner(v) |
cached(v) << 7``, so the online split reads one byte per vertex (a table of
``N`` bytes stays in cache far better than the ``8 N`` bytes of ``split_id``);
the split id itself is read only by a worker for its own cache hits.

The caches are disjoint, ``C_i`` lies inside part ``i``, and their union is
``C = union_i C_i`` with ``|C| = sum_i min(cap, |part i|)``. Sampling, dropout
and the model keep the dataset's vertex ids: the graph itself is not
renumbered (GSplit stores it renumbered, which makes the range check
table-free), so a split-parallel run draws exactly the mini-batches of
``single``; the price is one ``[N]`` byte-table lookup per vertex.

**Online** (:func:`split_minibatch`, per mini-batch, on the blocks of one
sample of all ``B`` targets). The levels ``V^(0) ⊇ V^(1) ⊇ ... ⊇ V^(L)`` of a
sample are prefixes of ``blocks[0].src_ids`` (the sampler lists destinations
first), so one pass over ``V^(0)`` gives every vertex its owner, its position
in its owner's list (``own_pos``: the owner's rows of every level are a prefix
of its rows of the level below) and whether its owner caches it. Then, per block, one
branch-free pass over its edges ``u -> v`` (``v`` in ``V^(l+1)``, ``u`` in
``V^(l)``) writes every local edge into its worker's CSR and lists the cut
edges; a pass over the (vertex, worker) pairs numbers the shipped rows and a
pass over the cut edges only finishes them. With ``i = owner(u)``, ``j = owner(v)``:

* ``i == j``: a local edge of split ``j``;
* ``i != j``, mode ``"preagg"`` (GraphSAGE): ``v`` is a *reference vertex* of
  ``i`` for ``j``; ``i`` pre-aggregates its sources of ``v`` into one row of
  ``ref[i->j]`` and ships it (one row per reference vertex and sender);
* ``i != j``, mode ``"halo"`` (GAT and generic layers): ``u`` joins
  ``halo[i->j]``; its row is shipped once to ``j``, which computes the edge.

Every ``i -> j`` list is in ascending row order of the sample (one order, known
to sender and receiver alike, because every worker splits the same sample).

**Closed forms** (``s`` bytes per element, ``d`` feature width, ``h_l`` the width
shipped at layer ``l``):

* rows loaded from the host: ``sum_i |load_i| = |V^(0) \\ C|`` (each miss once,
  by its owner); feature bytes ``|V^(0) \\ C| * d * s``;
* shuffle rows of layer ``l``: ``sum_{i != j} |ref_l[i->j]|`` (preagg) or
  ``sum_{i != j} |halo_l[i->j]|`` (halo); bytes ``rows * h_l * s`` forward and the
  same again backward when the shipped tensor depends on parameters;
* edges computed: ``sum_i |E_i| = sum_l |E^(l)|`` (each sampled edge once; in
  preagg mode a cut edge is computed by the source's owner, in halo mode by the
  destination's owner);
* split quality: edge skew ``(max_i |E_i| - min_i |E_i|) / mean_i |E_i|`` and
  local-edge fraction ``#local / #edges``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numba as nb
import numpy as np
import torch

from graphscale.data.block import Block

PREAGG = "preagg"
HALO = "halo"
MODES = (PREAGG, HALO)
#: Workers a split can address (the owner takes the low 7 bits of ``SplitPlan.part_code``).
MAX_PARTS = 128


# ------------------------------------------------------------------ kernels
@nb.njit(cache=True)
def _split_ids_kernel(owner, degree, num_parts):
    """Counting sort by part, then (degree desc, id asc) inside each part: returns (perm, split_id, poff)."""
    n = owner.size
    poff = np.zeros(num_parts + 1, np.int64)
    for v in range(n):
        poff[owner[v] + 1] += 1
    for p in range(num_parts):
        poff[p + 1] += poff[p]
    cursor = poff[:num_parts].copy()
    perm = np.empty(n, np.int64)
    for v in range(n):
        p = owner[v]
        perm[cursor[p]] = v
        cursor[p] += 1
    for p in range(num_parts):  # stable sort of each part by descending degree (ids stay ascending within ties)
        lo, hi = poff[p], poff[p + 1]
        keys = -degree[perm[lo:hi]]
        order = np.argsort(keys, kind="mergesort")
        perm[lo:hi] = perm[lo:hi][order]
    split_id = np.empty(n, np.int64)
    for i in range(n):
        split_id[perm[i]] = i
    return perm, split_id, poff


@nb.njit(cache=True)
def _part_code_kernel(split_id, poff, cap):
    """``owner(v) | cached(v) << 7`` for every vertex: the range check and the cache test, once."""
    n = split_id.size
    w = poff.size - 1
    out = np.empty(n, np.uint8)
    for v in range(n):
        s = split_id[v]
        i = 0
        for k in range(1, w):  # branch-free range check against the inner boundaries
            i += s >= poff[k]
        out[v] = i | ((s - poff[i] < cap) << 7)
    return out


@nb.njit(cache=True)
def _assign_kernel(gids, part_code, level_ends, code, cached, counts):
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


def _assign(gids: np.ndarray, plan: SplitPlan, level_sizes: list[int] | None = None):
    """``(code, cached, own_counts [levels, W])`` of the rows ``gids`` of V^(0) (see :func:`_assign_kernel`).

    ``code`` is int32 when ``own_pos << 8`` fits (half the cache footprint for the edge passes).
    """
    sizes = [gids.size] if level_sizes is None else list(level_sizes)
    order = np.argsort(sizes, kind="stable")
    ends = np.asarray(sizes, np.int64)[order]
    code = np.empty(gids.size, np.int32 if gids.size < (1 << 23) else np.int64)
    cached = np.empty(gids.size, np.bool_)
    counts = np.zeros((len(sizes), plan.num_parts), np.int64)
    _assign_kernel(gids, plan.part_code, ends, code, cached, counts)
    own_counts = np.empty_like(counts)
    own_counts[order] = counts
    return code, cached, own_counts


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
def _split_halo_kernel(indptr, indices, code, nd, ns, w, n_own_src, lptr, lidx, mark, cut_at, cut_key):
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
def _split_preagg_kernel(indptr, indices, code, nd, w, lptr, lidx, xidx, mark, cut_key, cut_pos):
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


# ------------------------------------------------------------------ offline plan
@dataclass
class SplitPlan:
    """The offline part of GSplit: partition-contiguous, degree-sorted split ids and the cache capacity.

    Attributes:
        num_parts: workers ``W``.
        perm: int64 ``[N]``; split id ``k`` is vertex ``perm[k]``.
        split_id: int64 ``[N]``; the split id of vertex ``v``.
        poff: int64 ``[W+1]``; part ``i`` holds split ids ``[poff[i], poff[i+1])``.
        cap: cache rows per worker (``floor(cache_fraction * N)``); worker ``i`` caches ``min(cap, |part i|)``.
        part_code: uint8 ``[N]``: ``owner(v) | cached(v) << 7`` (what the online split reads).
    """

    num_parts: int
    perm: np.ndarray
    split_id: np.ndarray
    poff: np.ndarray
    cap: int
    part_code: np.ndarray

    @classmethod
    def build(cls, owner: torch.Tensor | np.ndarray, degrees: torch.Tensor | np.ndarray, num_parts: int,
              cache_fraction: float = 0.0) -> SplitPlan:
        """Relabel ``owner``'s parts into contiguous, degree-sorted split-id ranges.

        Args:
            owner: int ``[N]`` part of every vertex, values in ``[0, num_parts)``.
            degrees: int ``[N]`` degree in the sampling direction (how often a vertex can be drawn as a source:
                the out-degree; equal to the in-degree on symmetric graphs).
            num_parts: ``W``.
            cache_fraction: per-worker cache size as a fraction of all ``N`` vertices, in ``[0, 1]``.

        Raises:
            ValueError: on a bad owner array, degree shape or cache fraction (naming ``cache_fraction``).
        """
        owner_np = np.ascontiguousarray(torch.as_tensor(owner).cpu().numpy(), dtype=np.int64)
        degree_np = np.ascontiguousarray(torch.as_tensor(degrees).cpu().numpy(), dtype=np.int64)
        if owner_np.ndim != 1 or degree_np.shape != owner_np.shape:
            raise ValueError(f"SplitPlan.build: owner and degrees must be 1-D of equal length, got "
                             f"{owner_np.shape} and {degree_np.shape}")
        if not 1 <= num_parts <= MAX_PARTS:
            raise ValueError(f"split parallelism supports 1 to {MAX_PARTS} workers, got {num_parts}")
        if owner_np.size and (owner_np.min() < 0 or owner_np.max() >= num_parts):
            raise ValueError(f"SplitPlan.build: owner values must lie in [0, {num_parts})")
        if not 0.0 <= float(cache_fraction) <= 1.0:
            raise ValueError(f"cache_fraction must lie in [0, 1], got {cache_fraction!r}")
        perm, split_id, poff = _split_ids_kernel(owner_np, degree_np, int(num_parts))
        cap = int(np.floor(float(cache_fraction) * owner_np.size + 1e-9))
        return cls(int(num_parts), perm, split_id, poff, cap, _part_code_kernel(split_id, poff, np.int64(cap)))

    _ARRAYS = ("perm", "split_id", "poff", "part_code")

    def save(self, folder: Path) -> None:
        """Write the plan as ``.npy`` files (and ``split_plan.json``: ``num_parts``, ``cap``) into ``folder``."""
        for name in self._ARRAYS:
            np.save(folder / f"{name}.npy", getattr(self, name))
        (folder / "split_plan.json").write_text(json.dumps({"num_parts": self.num_parts, "cap": self.cap}))

    @classmethod
    def load(cls, folder: Path) -> SplitPlan:
        """The plan :meth:`save` wrote, memory-mapped read-only: the ``[N]`` arrays exist once per host."""
        folder = Path(folder)
        meta = json.loads((folder / "split_plan.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in cls._ARRAYS}
        return cls(int(meta["num_parts"]), cap=int(meta["cap"]), **arrays)

    @property
    def num_nodes(self) -> int:
        return int(self.split_id.size)

    def part_sizes(self) -> np.ndarray:
        return self.poff[1:] - self.poff[:-1]

    def owner_of(self, ids) -> np.ndarray:
        """Part of each vertex id (range check of the split ids)."""
        ids = np.asarray(torch.as_tensor(ids).cpu().numpy(), dtype=np.int64)
        return np.searchsorted(self.poff, self.split_id[ids], side="right") - 1

    def cache_size(self, part: int) -> int:
        """``|C_part| = min(cap, |part|)``."""
        return int(min(self.cap, self.poff[part + 1] - self.poff[part]))

    def cached_ids(self, part: int) -> torch.Tensor:
        """Vertex ids cached by ``part``, in slot order (highest degree first)."""
        start = int(self.poff[part])
        return torch.from_numpy(self.perm[start:start + self.cache_size(part)].copy())

    def cached_mask(self) -> np.ndarray:
        """bool ``[N]``: whether a vertex is in the union of the caches."""
        part = np.searchsorted(self.poff, self.split_id, side="right") - 1
        return (self.split_id - self.poff[part]) < self.cap

    def cache_slot(self, ids, part: int) -> np.ndarray:
        """Rows of vertices ``ids`` (all cached by ``part``) in ``part``'s cache."""
        return self.split_id[np.asarray(ids, dtype=np.int64)] - self.poff[part]


# ------------------------------------------------------------------ online split
@dataclass
class SplitLayer:
    """The split of one block (model layer), for all workers at once.

    Pairs ``(i, j)`` are stored sender-major: ``cnt[i * W + j]`` rows go from ``i``
    to ``j``; ``rows[pair_off[i*W+j]:pair_off[i*W+j+1]]`` are, in halo mode, the
    *source* rows of the block that ``i`` ships to ``j`` and, in preagg mode, the
    *destination* rows (reference vertices) whose partial sums ``i`` ships to ``j``.
    ``lptr``/``lidx`` hold each worker's local CSR over its own destinations:
    worker ``j``'s row pointers are ``lptr[lptr_off[j]:lptr_off[j+1]]`` and its
    entries ``lidx[lidx_start[j]:lidx_start[j] + lidx_count[j]]``; ``xptr``/``xidx``
    (preagg only) hold the partial-sum CSR over the reference slots; ``indptr`` is
    the block's own row pointer (sampled in-degrees). ``computed[i]`` counts the
    edges worker ``i`` computes.
    """

    mode: str
    num_dst: int
    num_src: int
    cnt: np.ndarray
    pair_off: np.ndarray
    rows: np.ndarray
    lptr: np.ndarray
    lidx: np.ndarray
    indptr: np.ndarray
    lptr_off: np.ndarray
    lidx_start: np.ndarray
    lidx_count: np.ndarray
    computed: np.ndarray
    local_edges: int
    num_edges: int
    xptr: np.ndarray | None = None
    xidx: np.ndarray | None = None

    def pair_counts(self, world: int) -> np.ndarray:
        """``[W, W]`` rows shipped from ``i`` (row) to ``j`` (column)."""
        return self.cnt.reshape(world, world)

    def shuffle_rows(self) -> int:
        """Rows crossing between workers in one direction: ``sum_{i != j}`` of the pair lists."""
        return int(self.cnt.sum())


@dataclass
class SplitMiniBatch:
    """One sampled mini-batch split for ``W`` workers (see the module docstring).

    Attributes:
        num_parts: ``W``.
        gids: int64 ``[|V^(0)|]`` vertex ids of ``V^(0)`` in sample order (levels are prefixes).
        level_sizes: ``|V^(l)|`` for ``l = 0..L`` (``V^(L)`` = the targets).
        code: per row of ``V^(0)``: ``own_pos << 8 | owner`` (see :attr:`owner`, :attr:`own_pos`).
        cached: bool per row of ``V^(0)``: whether its owner caches it.
        plan: the plan the split was made with.
        own_counts: int64 ``[L+1, W]`` rows each worker owns at each level.
        layers: one :class:`SplitLayer` per block.
    """

    num_parts: int
    gids: np.ndarray
    level_sizes: list[int]
    code: np.ndarray
    cached: np.ndarray
    own_counts: np.ndarray
    plan: SplitPlan
    layers: list[SplitLayer] = field(default_factory=list)

    # ------------------------------------------------------------ statistics
    @property
    def owner(self) -> np.ndarray:
        """Owner of every row of ``V^(0)``."""
        return (self.code & 255).astype(np.int64)

    @property
    def own_pos(self) -> np.ndarray:
        """Position of every row of ``V^(0)`` in its owner's list (the same at every level it belongs to)."""
        return (self.code >> 8).astype(np.int64)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def loads(self) -> np.ndarray:
        """``|load_i|``: rows of ``V^(0)`` each worker loads from the host (its global cache misses)."""
        return np.bincount(self.owner[~self.cached], minlength=self.num_parts)

    def hits(self) -> np.ndarray:
        """Rows of ``V^(0)`` each worker gathers from its own cache."""
        return np.bincount(self.owner[self.cached], minlength=self.num_parts)

    def edges_per_split(self) -> np.ndarray:
        """``|E_i|``: edges computed by each worker over all layers."""
        return sum((layer.computed for layer in self.layers), np.zeros(self.num_parts, np.int64))

    def num_edges(self) -> int:
        return int(sum(layer.num_edges for layer in self.layers))

    def local_edges(self) -> int:
        return int(sum(layer.local_edges for layer in self.layers))

    def edge_skew(self) -> float:
        """``(max_i |E_i| - min_i |E_i|) / mean_i |E_i|``."""
        e = self.edges_per_split().astype(np.float64)
        return float((e.max() - e.min()) / e.mean()) if e.mean() > 0 else 0.0

    # ------------------------------------------------------------ per worker
    def local(self, rank: int) -> LocalSplit:
        """The record worker ``rank`` trains on (its part of the structure, as torch tensors)."""
        w = self.num_parts
        if not 0 <= rank < w:
            raise ValueError(f"rank {rank} is not one of the {w} splits")
        own_pos = self.own_pos
        mine = np.flatnonzero((self.code & 255) == rank)  # rows of V^(0) owned by rank, in own_pos order
        gids = self.gids[mine]
        cached = self.cached[mine]
        hit = np.flatnonzero(cached)
        miss = np.flatnonzero(~cached)
        counts = [int(c) for c in self.own_counts[:, rank]]
        layers = []
        for b, layer in enumerate(self.layers):
            n_src, n_dst = counts[b], counts[b + 1]
            p0, p1 = int(layer.lptr_off[rank]), int(layer.lptr_off[rank + 1])
            e0 = int(layer.lidx_start[rank])
            e1 = e0 + int(layer.lidx_count[rank])
            dst_rows = mine[:n_dst]
            send_counts = [int(layer.cnt[rank * w + j]) for j in range(w)]
            recv_counts = [int(layer.cnt[i * w + rank]) for i in range(w)]
            out_rows = layer.rows[layer.pair_off[rank * w]: layer.pair_off[rank * w + w]]
            in_rows = np.concatenate([layer.rows[layer.pair_off[i * w + rank]: layer.pair_off[i * w + rank + 1]]
                                      for i in range(w)]) if w else np.zeros(0, np.int64)
            t = torch.from_numpy
            local = LocalLayer(mode=layer.mode, num_src=n_src, num_dst=n_dst,
                               indptr=t(layer.lptr[p0:p1].copy()), indices=t(layer.lidx[e0:e1].astype(np.int64)),
                               deg=t(layer.indptr[dst_rows + 1] - layer.indptr[dst_rows]), send_counts=send_counts,
                               recv_counts=recv_counts)
            if layer.mode == HALO:
                local.send_index = t(own_pos[out_rows])
                local.halo_ids = t(self.gids[in_rows])
            else:
                x0, x1 = int(layer.pair_off[rank * w]), int(layer.pair_off[rank * w + w])
                xptr = layer.xptr[x0:x1 + 1]
                local.xptr = t(xptr - xptr[0])
                local.xidx = t(layer.xidx[int(xptr[0]):int(xptr[-1])].astype(np.int64))
                local.recv_pos = t(own_pos[in_rows])
            layers.append(local)
        return LocalSplit(rank=rank, gids=torch.from_numpy(gids), own_counts=counts,
                          hit_pos=torch.from_numpy(hit),
                          hit_slot=torch.from_numpy(self.plan.cache_slot(gids[hit], rank)),
                          miss_pos=torch.from_numpy(miss), miss_ids=torch.from_numpy(gids[miss]), layers=layers)


@dataclass
class LocalLayer:
    """Worker ``i``'s part of one block.

    Attributes:
        mode: ``"preagg"`` or ``"halo"``.
        num_src, num_dst: own rows at the block's source and destination level (destinations are a prefix).
        indptr, indices: local CSR over the own destinations; indices are own source rows, and in halo
            mode also halo rows ``num_src + k`` (the ``k``-th received row).
        deg: sampled in-degree of each own destination over *all* splits (the mean's denominator).
        send_counts, recv_counts: rows shipped to / received from each worker.
        send_index: halo mode: own source rows shipped, grouped by receiver.
        halo_ids: halo mode: vertex ids of the received rows, grouped by sender.
        xptr, xidx: preagg mode: CSR of the partial sums shipped (one row per reference slot, grouped by
            receiver; entries are own source rows).
        recv_pos: preagg mode: own destination row of every received partial sum, grouped by sender.
    """

    mode: str
    num_src: int
    num_dst: int
    indptr: torch.Tensor
    indices: torch.Tensor
    deg: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]
    send_index: torch.Tensor | None = None
    halo_ids: torch.Tensor | None = None
    xptr: torch.Tensor | None = None
    xidx: torch.Tensor | None = None
    recv_pos: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.indptr, self.indices, self.deg, self.send_index, self.halo_ids, self.xptr,
                            self.xidx, self.recv_pos) if t is not None]


@dataclass
class LocalSplit:
    """Worker ``rank``'s local split of a mini-batch.

    Attributes:
        rank: the worker.
        gids: vertex ids of its own rows of ``V^(0)``, in own order (its rows of ``V^(l)`` are the first
            ``own_counts[l]``; its targets are the first ``own_counts[L]``).
        own_counts: own rows per level ``l = 0..L``.
        hit_pos, hit_slot: own input rows served by its cache and their cache slots.
        miss_pos, miss_ids: own input rows loaded from the host and their vertex ids.
        layers: one :class:`LocalLayer` per block.
    """

    rank: int
    gids: torch.Tensor
    own_counts: list[int]
    hit_pos: torch.Tensor
    hit_slot: torch.Tensor
    miss_pos: torch.Tensor
    miss_ids: torch.Tensor
    layers: list[LocalLayer]

    @property
    def num_targets(self) -> int:
        return self.own_counts[-1]

    def ids(self, level: int) -> torch.Tensor:
        """Vertex ids of the own rows of level ``level``."""
        return self.gids[: self.own_counts[level]]

    def tensors(self) -> list[torch.Tensor]:
        out = [self.gids, self.hit_pos, self.hit_slot, self.miss_pos, self.miss_ids]
        for layer in self.layers:
            out += layer.tensors()
        return out

    def structure_bytes(self) -> int:
        """Bytes of the index arrays the worker receives for this mini-batch (its split structure)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def to(self, device) -> LocalSplit:
        def move(t):
            return None if t is None else t.to(device, non_blocking=True)
        layers = [LocalLayer(mode=l.mode, num_src=l.num_src, num_dst=l.num_dst, indptr=move(l.indptr),
                             indices=move(l.indices), deg=move(l.deg), send_counts=l.send_counts,
                             recv_counts=l.recv_counts, send_index=move(l.send_index), halo_ids=move(l.halo_ids),
                             xptr=move(l.xptr), xidx=move(l.xidx), recv_pos=move(l.recv_pos)) for l in self.layers]
        return LocalSplit(self.rank, move(self.gids), self.own_counts, move(self.hit_pos), move(self.hit_slot),
                          move(self.miss_pos), move(self.miss_ids), layers)


class SplitWorkspace:
    """Arrays reused by successive :func:`split_minibatch` calls (no fresh pages to fault in per batch).

    A split made with a workspace keeps its local CSRs (``lptr``, ``lidx``, ``xidx``) in it:
    they stay valid until the next call with the same workspace (:meth:`SplitMiniBatch.local` copies
    them out). One workspace per thread.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple[str, str], np.ndarray] = {}

    def get(self, name: str, size: int, dtype=np.int64) -> np.ndarray:
        """An array of at least ``size`` entries of ``dtype`` (contents undefined)."""
        key = (name, np.dtype(dtype).str)
        array = self._arrays.get(key)
        if array is None or array.size < size:
            array = np.empty(max(int(size), int(1.5 * (0 if array is None else array.size))), dtype)
            self._arrays[key] = array
        return array


def _np64(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.ascontiguousarray(t, dtype=np.int64)


def input_loads(input_ids, plan: SplitPlan) -> np.ndarray:
    """``|load_i|`` per worker for the input rows ``input_ids`` (``V^(0)``) under ``plan``'s caches.

    The vertex pass of :func:`split_minibatch` alone (owner and cache test from ``plan.part_code``),
    for comparing cache sizes on one sample without splitting its edges again.
    """
    code, cached, _ = _assign(_np64(input_ids), plan)
    return np.bincount(code[~cached] & 255, minlength=plan.num_parts)


def split_minibatch(blocks: list[Block], plan: SplitPlan, modes: str | list[str],
                    workspace: SplitWorkspace | None = None) -> SplitMiniBatch:
    """Split one sampled mini-batch for ``plan.num_parts`` workers.

    Args:
        blocks: the chained blocks of one sample (``NeighborSampler.sample``), input layer first.
        plan: the offline :class:`SplitPlan`.
        modes: ``"preagg"`` or ``"halo"``, for every block or one per block.
        workspace: scratch arrays to reuse across calls (default: fresh ones).

    Returns:
        The :class:`SplitMiniBatch` of all workers.

    Raises:
        ValueError: unknown mode, wrong number of modes, or blocks that do not chain.
    """
    modes = [modes] * len(blocks) if isinstance(modes, str) else list(modes)
    if len(modes) != len(blocks):
        raise ValueError(f"split_minibatch: {len(modes)} modes for {len(blocks)} blocks")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"split_minibatch: mode must be one of {MODES}, got {m!r}")
    for b in range(1, len(blocks)):
        if blocks[b].num_src != blocks[b - 1].num_dst:
            raise ValueError(f"split_minibatch: blocks[{b}] has {blocks[b].num_src} sources but blocks[{b - 1}] "
                             f"has {blocks[b - 1].num_dst} destinations")
    w = plan.num_parts
    ws = SplitWorkspace() if workspace is None else workspace
    gids = _np64(blocks[0].src_ids)
    sizes = [blocks[0].num_src] + [b.num_dst for b in blocks]
    code, cached, own_counts = _assign(gids, plan, sizes)
    out = SplitMiniBatch(w, gids, sizes, code, cached, own_counts, plan)
    for b, (block, mode) in enumerate(zip(blocks, modes)):
        indptr, indices = _np64(block.indptr), _np64(block.indices)
        nd, ns = block.num_dst, block.num_src
        tag = f"{b}"  # one set of output arrays per block: all blocks' splits live until the next call
        lptr_buf = ws.get("lptr" + tag, nd + w)
        lidx_buf = ws.get("lidx" + tag, indices.size, code.dtype)
        mark, cut_a = ws.get("mark", max(ns, nd) * w), ws.get("cut_a", indices.size)
        if mode == HALO:
            cnt, pair_off, rows, lptr, lidx, lptr_off, start, count, computed, local = _split_halo_kernel(
                indptr, indices, code, nd, ns, w, own_counts[b], lptr_buf, lidx_buf, mark, cut_a,
                ws.get("cut_b", indices.size))
            layer = SplitLayer(mode, nd, ns, cnt, pair_off, rows, lptr, lidx, indptr, lptr_off, start, count,
                               computed, int(local), int(indices.size))
        else:
            cnt, pair_off, rows, xptr, xidx, lptr, lidx, lptr_off, start, count, computed, local = \
                _split_preagg_kernel(indptr, indices, code, nd, w, lptr_buf, lidx_buf,
                                     ws.get("xidx" + tag, indices.size, code.dtype), mark, cut_a,
                                     ws.get("cut_pos", indices.size, code.dtype))
            layer = SplitLayer(mode, nd, ns, cnt, pair_off, rows, lptr, lidx, indptr, lptr_off, start, count,
                               computed, int(local), int(indices.size), xptr, xidx)
        out.layers.append(layer)
    return out

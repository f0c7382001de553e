"""2PS-L (Mayer & Jacobsen), the two-phase streaming edge partitioner with linear run-time, on the streaming
machinery and kernels of :mod:`graphscale.partition.edge_stream` (the interface, the GNN adaptation and the
tie rule are described there).

``2ps-l``: degree pass; ``cluster_passes`` passes of
streaming clustering with volume cap ``0.1 |E| / p`` (a move needs the
smaller *real* volume and must keep the target under the cap); clusters by
volume, descending, to the partition of least volume; a prepartitioning pass
puts every record whose clusters share a partition there (a full partition,
load ``>= 1.05 |E| / p``, sends it to the hash of the higher-degree endpoint,
or the least-loaded partition if that is full too); a last pass places the
remaining records, ``remaining="score"`` (default, the published 2PS-L) on
the better of the two cluster partitions by ``g_u + g_v`` (full-degree HDRF
terms) plus the cluster-volume shares, ``remaining="hash"`` (SDT-GNN's code)
on the hash of the higher-degree endpoint; a full partition is skipped, and
with both full the record goes to the least-loaded partition.

The passes prefetch the rows of the record ``AHEAD`` places ahead (and, ``AHEAD // 2`` places ahead, the
per-cluster entries).
"""

from __future__ import annotations

import numba
import numpy as np

from graphscale.partition.edge_stream import VertexCutPartitioner, hash_part, least_loaded, place
from graphscale.partition.streaming import AHEAD, lpt_assign, open_cluster, part_dtype, prefetch, stream_degrees
from graphscale.registry import PARTITIONERS

_U1 = np.uint64(1)


@numba.njit(nogil=True, cache=True)
def _twops_cluster_chunk(src, dst, deg, c, vol, next_id, cap):  # pragma: no cover - numba
    k = next_id[0]
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            for x in (src[i + AHEAD], dst[i + AHEAD]):
                prefetch(c, x)
                prefetch(deg, x)
        if i + AHEAD // 2 < n:
            for x in (src[i + AHEAD // 2], dst[i + AHEAD // 2]):
                prefetch(vol, c[x])
        u, v = src[i], dst[i]
        k = open_cluster(v, c, vol, deg, open_cluster(u, c, vol, deg, k))
        cu, cv = c[u], c[v]
        if cu == cv or vol[cu] > cap or vol[cv] > cap:
            continue
        real_u, real_v = vol[cu] - deg[u], vol[cv] - deg[v]
        if real_u <= real_v and vol[cv] + deg[u] <= cap:
            vol[cu] -= deg[u]
            vol[cv] += deg[u]
            c[u] = cv
        elif real_v < real_u and vol[cu] + deg[v] <= cap:
            vol[cv] -= deg[v]
            vol[cu] += deg[v]
            c[v] = cu
    next_id[0] = k


@numba.njit(nogil=True, cache=True)
def _linear_choice(u, v, deg, load, cap, p, seed):  # pragma: no cover - numba
    x = u if deg[u] > deg[v] else v
    s = hash_part(seed, x, p)
    if load[s] >= cap:
        s = least_loaded(load)
    return s


@numba.njit(nogil=True, cache=True)
def _twops_pre_chunk(src, dst, deg, c, cpart, load, cap, seed, mask, master, out):  # pragma: no cover - numba
    p = load.size
    left = 0
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            for x in (src[i + AHEAD], dst[i + AHEAD]):
                prefetch(c, x)
                prefetch(mask, x)
                prefetch(master, x)
        if i + AHEAD // 2 < n:
            for x in (src[i + AHEAD // 2], dst[i + AHEAD // 2]):
                prefetch(cpart, c[x])
        u, v = src[i], dst[i]
        s = cpart[c[u]]
        if s != cpart[c[v]]:
            left += 1
            continue
        if load[s] >= cap:
            s = _linear_choice(u, v, deg, load, cap, p, seed)
        place(u, v, s, mask, master)
        load[s] += 1
        out[i] = s
    return left


@numba.njit(nogil=True, cache=True)
def _twops_rest_chunk(src, dst, deg, c, vol, cpart, load, cap, seed, use_score, mask, master,
                      out):  # pragma: no cover - numba
    p = load.size
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            for x in (src[i + AHEAD], dst[i + AHEAD]):
                prefetch(c, x)
                prefetch(deg, x)
                prefetch(mask, x)
                prefetch(master, x)
        if i + AHEAD // 2 < n:
            for x in (src[i + AHEAD // 2], dst[i + AHEAD // 2]):
                prefetch(cpart, c[x])
                prefetch(vol, c[x])
        u, v = src[i], dst[i]
        pu, pv = cpart[c[u]], cpart[c[v]]
        if pu == pv:
            continue  # placed by the prepartitioning pass
        if use_score:
            best, best_score = -1, -1.0
            du, dv = deg[u], deg[v]
            volu, volv = vol[c[u]], vol[c[v]]
            for k in range(2):
                s = pu if k == 0 else pv
                if load[s] >= cap:
                    continue
                bit = _U1 << np.uint64(s & 63)
                score = 0.0
                if mask[u, s >> 6] & bit:
                    score += 2.0 - du / (du + dv)
                if mask[v, s >> 6] & bit:
                    score += 2.0 - dv / (du + dv)
                if volu + volv > 0:
                    score += (volu if s == pu else volv) / (volu + volv)
                if score > best_score:
                    best, best_score = s, score
            s = best if best >= 0 else least_loaded(load)
        else:
            s = _linear_choice(u, v, deg, load, cap, p, seed)
        place(u, v, s, mask, master)
        load[s] += 1
        out[i] = s


@PARTITIONERS.register("2ps-l")
class TwoPSLPartitioner(VertexCutPartitioner):
    """Two-phase streaming, linear run-time (2PS-L); see the module docstring.

    Args:
        cluster_passes: streaming-clustering passes (SDT-GNN's code runs 2).
        remaining: ``"score"`` (published 2PS-L) or ``"hash"`` (SDT-GNN's code) for the records whose
            clusters lie in different partitions.
        balance: a partition is full at ``balance * |E| / p`` records (default 1.05).
        volume_cap: cluster volume cap as a fraction of ``|E| / p`` (default 0.1).
    """

    name = "2ps-l"

    def __init__(self, cluster_passes: int = 2, remaining: str = "score", balance: float = 1.05,
                 volume_cap: float = 0.1) -> None:
        if remaining not in ("score", "hash"):
            raise ValueError(f"2ps-l: remaining must be 'score' or 'hash', got {remaining!r}")
        if cluster_passes < 1 or balance < 1 or volume_cap <= 0:
            raise ValueError(f"2ps-l: need cluster_passes >= 1, balance >= 1, volume_cap > 0; got "
                             f"{cluster_passes}, {balance}, {volume_cap}")
        self.cluster_passes, self.remaining = int(cluster_passes), remaining
        self.balance, self.volume_cap = float(balance), float(volume_cap)

    def _assign(self, runner, num_parts, seed, sink, mask, master, load) -> dict:
        n, m = runner.num_vertices, runner.num_edges
        deg = stream_degrees(runner)
        c = np.zeros(n, np.int64 if n >= 2**31 - 1 else np.int32)
        vol = np.zeros(n + 1, np.int64)
        next_id = np.ones(1, np.int64)
        cap = self.volume_cap * m / num_parts
        for k in range(self.cluster_passes):
            for _, src, dst in runner.chunks(f"clustering {k + 1}"):
                _twops_cluster_chunk(src, dst, deg, c, vol, next_id, cap)
        # clusters by volume, descending (ties: cluster id), each to the partition of least volume
        ids = np.flatnonzero(vol[:next_id[0]] > 0)
        order = ids[np.argsort(-vol[ids], kind="stable")]
        cpart = np.zeros(n + 1, part_dtype(num_parts))
        slot = np.zeros(n + 1, np.int64)
        lpt_assign(order, vol, np.zeros(num_parts, np.int64), slot)
        cpart[order] = slot[order]
        del slot
        full = self.balance * m / num_parts
        remaining = 0
        for first, src, dst in runner.chunks("prepartition"):
            part = sink.buffer(first, src.size)
            remaining += _twops_pre_chunk(src, dst, deg, c, cpart, load, full, seed, mask, master, part)
            sink.commit(first, part)
        for first, src, dst in runner.chunks("partition"):
            part = sink.buffer(first, src.size, existing=True)
            _twops_rest_chunk(src, dst, deg, c, vol, cpart, load, full, seed, self.remaining == "score", mask,
                              master, part)
            sink.commit(first, part)
        return {"clusters": int(ids.size), "prepartitioned_records": int(m - remaining)}

"""SPRING (SDT-GNN, Algorithm 1): streaming clustering, richest-neighbour merging, LPT, edge assignment.

Restated from the spec (§2.2), with its defaults where the paper is silent:

* **Pass 0 (degrees).** ``d(v)`` = records with destination ``v``; ``M`` = records.
* **Pass 1 (clustering, Hollocou et al.).** For each record ``(u, v)`` in stream
  order: an unseen endpoint opens a new cluster (ids ``1, 2, ...``) whose volume
  is its degree; if ``c_u != c_v`` and both volumes are ``<= tau_vol`` the endpoint
  in the cluster of smaller volume (``u`` on ties) moves to the other cluster;
  then the richest neighbours: ``n_u <- v`` if ``d(n_u) < d(v)`` and ``n_v <- u``
  if ``d(n_v) < d(u)`` (``d(unset) = -1``, so the first-seen neighbour wins ties).
  ``tau_vol = volume_cap * M / p`` (default ``0.1 M / p``).
* **Isolated vertices** (in no record) become singleton clusters, numbered after
  the streamed ones in id order.
* **Merging.** The representative ``r(i)`` of a cluster maximises ``d(n_v)`` over
  its members (ties: the smallest vertex id). A cluster ``i`` merges into the
  cluster ``j`` of ``t = n_{r(i)}`` when ``i != j`` and ``|C_i| + |C_j| <= beta |V| / p``
  (default ``beta = 1.05``; with a volume-aware ``lpt`` the cap bounds that load
  instead, see below); ``j`` keeps its id and the representative of larger
  ``d(n_.)`` (ties: smaller vertex id), so it always equals the argmax over the merged members.
  ``merge="paper"`` (default): a min-heap keyed by ``(size, cluster id)`` with
  lazy invalidation; an enlarged target is pushed again at its new size and can
  be revisited (at most ``2 K`` pops). ``merge="code"`` (SDT-GNN's code): one
  pass over the initial ascending ``(size, id)`` order, skipping the last
  cluster, with current sizes. ``merge="none"``: no merging (the "Clustering"
  row of the paper's Table II). Merges run on union-find over cluster ids.
* **LPT.** Merged clusters by load descending (ties: cluster id) go to the
  partition with the least load so far (ties: smallest index), so the largest
  partition's load is at most the mean plus the largest cluster's load.
  ``lpt="vertices"`` (default, the paper): the load is the vertex count ``|C|``.
  ``lpt="edges"``: the cluster volume ``vol(C) = sum of d(v)``, exactly the
  records a partition receives in pass 2 (its aggregation work); vertices of
  degree 0 add no load and all go to the partition least loaded at the end.
  ``lpt="mix"``: the normalised sum ``|C| / |V| + vol(C) / M``, balancing both.
  The merge cap bounds the same load, ``beta`` times a partition's share
  (``beta |V| / p``, ``beta M / p``, ``2 beta / p``): a cap on vertices alone lets
  merges around a hub build a cluster holding several partitions' worth of
  records, which no packing can split (on MUSAE Facebook at p = 16, 2.4x the mean).
  Merge order stays by size. Volumes are summed from the resident degrees after
  pass 1 (the move rule keeps pass 1's ``vol(i)`` equal to the degree sum of
  ``C_i``) and added up along the merges: no extra pass.
* **Restreaming** (``cluster_passes = R > 1``): pass 1 runs ``R`` times over the same stream, the later passes
  starting from the clusters (and volumes, richest neighbours) the earlier ones left.
* **Refinement** (``refine = R > 0``; a training store's default is 2): after LPT, ``R`` rounds of streaming
  label-propagation moves (:mod:`graphscale.partition.refine`): a vertex goes to the partition holding more of
  its neighbours while that partition's LPT load stays within ``beta`` times the mean. LPT places whole
  clusters and never reads the edges between them; on the real graphs of ``../shared/data`` (p = 8) two rounds
  take SPRING's replication factor from 19.0% to 30.5% below HDRF's, at an edge balance of 1.05.
* **Pass 2 (edges).** Record ``u -> v`` goes to ``part(v)``: every vertex's full
  in-neighbourhood is in its partition, a cross-partition undirected edge is in
  both partitions, and the halo replicas come out of the replica bitmask.

Resident state is O(|V|): degrees, cluster ids, volumes, richest neighbours,
per-cluster arrays (compacted to the non-empty clusters), the partition map and
the replica bitmask; the stream is read in chunks of ``chunk_edges`` records.
Every sequential step is a numba kernel, so the result is identical for any
chunk size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numba
import numpy as np

from graphscale.partition.edge_stream import EdgePartitioner
from graphscale.partition.refine import refine as refine_partition
from graphscale.partition.streaming import (
    AHEAD,
    EdgePartSink,
    StreamPartition,
    StreamRunner,
    heap_pop,
    heap_push,
    lpt_assign,
    mask_total,
    neighbourhood_chunk,
    open_cluster,
    part_dtype,
    prefetch,
    replica_mask,
    set_owner_bits,
    stream_degrees,
)
from graphscale.registry import PARTITIONERS

DEFAULT_BETA = 1.05
DEFAULT_VOLUME_CAP = 0.1
MERGE_MODES = ("paper", "code", "none")
_PAPER, _CODE, _NONE = range(3)
LPT_MODES = ("vertices", "edges", "mix")


# ------------------------------------------------------------------ kernels
@numba.njit(nogil=True, cache=True)
def _cluster_chunk(src, dst, deg, c, vol, richest, next_id, cap):  # pragma: no cover - numba
    """Algorithm 1 lines 2-17 over one chunk; ``next_id[0]`` carries ``k`` across chunks.

    Memory-bound: the vertex state of the record ``AHEAD`` places ahead is prefetched, then, ``AHEAD // 2``
    places ahead, the volumes and degrees it points to.
    """
    k = next_id[0]
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            for x in (src[i + AHEAD], dst[i + AHEAD]):
                prefetch(c, x)
                prefetch(deg, x)
                prefetch(richest, x)
        if i + AHEAD // 2 < n:
            for x in (src[i + AHEAD // 2], dst[i + AHEAD // 2]):
                prefetch(vol, c[x])
                if richest[x] >= 0:
                    prefetch(deg, richest[x])
        u, v = src[i], dst[i]
        k = open_cluster(v, c, vol, deg, open_cluster(u, c, vol, deg, k))
        cu, cv = c[u], c[v]
        if cu != cv and vol[cu] <= cap and vol[cv] <= cap:
            if vol[cu] <= vol[cv]:
                vol[cv] += deg[u]
                vol[cu] -= deg[u]
                c[u] = cv
            else:
                vol[cu] += deg[v]
                vol[cv] -= deg[v]
                c[v] = cu
        nu = richest[u]
        if (deg[nu] if nu >= 0 else -1) < deg[v]:
            richest[u] = v
        nv = richest[v]
        if (deg[nv] if nv >= 0 else -1) < deg[u]:
            richest[v] = u
    next_id[0] = k


@numba.njit(nogil=True, cache=True)
def _compact(c, next_id, table):  # pragma: no cover - numba
    """Give isolated vertices singleton ids, then renumber non-empty clusters ``0..K-1`` in id order.

    ``table`` (``>= N + 1`` entries, e.g. the volume array, no longer needed) is scratch. Returns
    ``(sizes [K], K_streamed)``; ``c`` is rewritten in place.
    """
    n = c.size
    k = next_id
    for v in range(n):
        if c[v] == 0:
            c[v] = k
            k += 1
    for i in range(k):
        table[i] = 0
    for v in range(n):
        table[c[v]] += 1
    K = 0
    for i in range(1, k):
        if table[i] > 0:
            K += 1
    sizes = np.empty(K, np.int64)
    K, K_stream = 0, 0
    for i in range(1, k):
        if table[i] > 0:
            sizes[K] = table[i]
            table[i] = K
            K += 1
            if i < next_id:
                K_stream += 1
    for v in range(n):
        c[v] = table[c[v]]
    return sizes, K_stream


@numba.njit(nogil=True, cache=True)
def _representatives(c, richest, deg, rep, repkey):  # pragma: no cover - numba
    """``r(i) = argmax_{v in C_i} d(n_v)``, ties to the smallest id (lines 19-21)."""
    for v in range(c.size):
        i = c[v]
        key = deg[richest[v]] if richest[v] >= 0 else -1
        if key > repkey[i]:
            repkey[i] = key
            rep[i] = v


@numba.njit(nogil=True, cache=True)
def _find(parent, i):  # pragma: no cover - numba
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@numba.njit(nogil=True, cache=True)
def _over_cap(i, j, size, vol, load, n, m, cap):  # pragma: no cover - numba
    """Whether ``C_i + C_j`` exceeds the merge cap on the LPT load (``load``: 0 vertices, 1 edges, 2 mix)."""
    if load == 0:
        return size[i] + size[j] > cap
    if load == 1:
        return vol[i] + vol[j] > cap
    return (size[i] + size[j]) / n + (vol[i] + vol[j]) / m > cap


@numba.njit(nogil=True, cache=True)
def _try_merge(i, size, rep, repkey, richest, c, parent, cap, vol, load, n, m):  # pragma: no cover - numba
    """Merge cluster ``i`` into the cluster of its representative's richest neighbour if allowed; return it or -1."""
    t = richest[rep[i]]
    if t < 0:
        return -1
    j = _find(parent, c[t])
    if j == i or _over_cap(i, j, size, vol, load, n, m, cap):
        return -1
    parent[i] = j
    size[j] += size[i]
    size[i] = 0
    if load != 0:
        vol[j] += vol[i]
        vol[i] = 0
    if repkey[i] > repkey[j] or (repkey[i] == repkey[j] and rep[i] < rep[j]):
        rep[j] = rep[i]
        repkey[j] = repkey[i]
    return j


@numba.njit(nogil=True, cache=True)
def _merge(size, rep, repkey, richest, c, cap, mode, parent, vol, load, n, m):  # pragma: no cover - numba
    """Lines 22-26 in the chosen mode; returns ``(merges, pops)``; ``parent`` ends fully compressed.

    The cap bounds the LPT load (``load``: 0 ``|C|``, 1 ``vol(C)``, 2 ``|C| / n + vol(C) / m``); with a volume-aware
    load ``vol`` (per cluster) is summed along the merges, else it is not read.
    """
    K = size.size
    for i in range(K):
        parent[i] = i
    merges, pops = 0, 0
    if mode == 0:
        ha = np.empty(2 * K + 1, np.int64)
        hb = np.empty(2 * K + 1, np.int64)
        hs = 0
        for i in range(K):
            hs = heap_push(ha, hb, hs, size[i], i)
        while hs > 0:
            s, i, hs = heap_pop(ha, hb, hs)
            pops += 1
            if parent[i] != i or size[i] != s:
                continue  # stale entry
            j = _try_merge(i, size, rep, repkey, richest, c, parent, cap, vol, load, n, m)
            if j >= 0:
                merges += 1
                hs = heap_push(ha, hb, hs, size[j], j)
    elif mode == 1:
        order = np.argsort(size, kind="mergesort")
        for k in range(K - 1):
            i = order[k]
            pops += 1
            if parent[i] != i:
                continue
            if _try_merge(i, size, rep, repkey, richest, c, parent, cap, vol, load, n, m) >= 0:
                merges += 1
    for i in range(K):
        parent[i] = _find(parent, i)
    return merges, pops


@numba.njit(nogil=True, cache=True)
def _relabel(c, table):  # pragma: no cover - numba
    for v in range(c.size):
        c[v] = table[c[v]]


@numba.njit(nogil=True, cache=True)
def _cluster_volumes(c, deg, K):  # pragma: no cover - numba
    """``vol(i) = sum of d(v)`` over the members of every compacted cluster ``i`` (int64 ``[K]``)."""
    vol = np.zeros(K, np.int64)
    for v in range(c.size):
        vol[c[v]] += deg[v]
    return vol



# ------------------------------------------------------------------ driver
@dataclass
class SpringClusters:
    """SPRING's vertex partition and what led to it.

    Attributes:
        owner: partition of every vertex.
        cluster: merged cluster of every vertex (a root id in ``[0, K)``), when ``keep_clusters``.
        initial: cluster of every vertex after pass 1 (compacted ids ``[0, K)``), when ``keep_clusters``.
        cluster_sizes: vertex count of every merged cluster (``int64``, ``[K]``, zeros for merged-away ids).
        info: counts (clusters before / after merging, merges, heap pops, caps, size statistics).
        cluster_volumes: degree sum of every merged cluster (``int64``, ``[K]``), when ``lpt`` is not ``vertices``.
    """

    owner: np.ndarray
    cluster: np.ndarray | None
    initial: np.ndarray | None
    cluster_sizes: np.ndarray
    info: dict
    cluster_volumes: np.ndarray | None = None


def _check_modes(merge: str, lpt: str) -> None:
    if merge not in MERGE_MODES:
        raise ValueError(f"spring: merge must be one of {', '.join(MERGE_MODES)}, got {merge!r}")
    if lpt not in LPT_MODES:
        raise ValueError(f"spring: lpt must be one of {', '.join(LPT_MODES)}, got {lpt!r}")


def lpt_keys(lpt: str, sizes: np.ndarray, volumes: np.ndarray | None, num_vertices: int,
             num_records: int) -> np.ndarray:
    """The load LPT balances, per merged cluster: ``|C|`` (int64), ``vol(C)`` (int64) or ``|C|/|V| + vol(C)/M``."""
    if lpt == "vertices":
        return sizes
    if lpt == "edges":
        return volumes
    return sizes / max(num_vertices, 1) + volumes / max(num_records, 1)


def _size_stats(sizes: np.ndarray) -> tuple[float, float]:
    sizes = sizes[sizes > 0].astype(np.float64)
    return (float(sizes.mean()), float(sizes.std())) if sizes.size else (0.0, 0.0)


def spring_clusters(runner: StreamRunner, num_parts: int, *, beta: float = DEFAULT_BETA,
                    volume_cap: float = DEFAULT_VOLUME_CAP, merge: str = "paper", lpt: str = "vertices",
                    keep_clusters: bool = False, cluster_passes: int = 1, refine: int = 0) -> SpringClusters:
    """Passes 0 and 1, merging and LPT: the vertex partition of SPRING.

    Args:
        runner: the stream (validated ids, timed passes).
        num_parts: ``p`` (already validated against the vertex count).
        beta: balance factor of the merge cap ``beta |V| / p``.
        volume_cap: ``tau_vol`` as a fraction of ``M / p``.
        merge: ``paper``, ``code`` or ``none``.
        lpt: what LPT balances: ``vertices`` (the paper), ``edges`` (cluster volumes) or ``mix`` (both, normalised).
        keep_clusters: also return the per-vertex initial and merged clusters (two more ``[N]`` arrays).
        cluster_passes: clustering passes (restreaming).
        refine: refinement rounds after LPT (:mod:`graphscale.partition.refine`; 0: the paper's partition).
    """
    _check_modes(merge, lpt)
    n, m = runner.num_vertices, runner.num_edges
    deg = stream_degrees(runner)
    idt = np.int64 if 2 * n + 2 >= 2**31 else np.int32
    c = np.zeros(n, idt)
    richest = np.full(n, -1, idt)
    tau = volume_cap * m / num_parts
    next_id = np.ones(1, np.int64)
    vol = np.zeros(n + 1, np.int64)
    for _ in range(cluster_passes):  # later passes restream with the clusters so far (Hollocou et al.'s restreaming)
        for _, src, dst in runner.chunks("clustering"):
            _cluster_chunk(src, dst, deg, c, vol, richest, next_id, tau)
    sizes, k_stream = _compact(c, int(next_id[0]), vol)
    del vol
    K = sizes.size
    volumes = _cluster_volumes(c, deg, K) if lpt != "vertices" else None
    initial = c.copy() if keep_clusters else None
    rep = np.zeros(K, idt)
    repkey = np.full(K, -2, np.int64)
    _representatives(c, richest, deg, rep, repkey)
    if not refine:
        del deg
    load = LPT_MODES.index(lpt)
    cap = beta * (n, m, 2.0)[load] / num_parts  # beta times a partition's share of the load
    mn, mm = max(n, 1), max(m, 1)
    parent = np.empty(K, np.int64)
    mean0, sd0 = _size_stats(sizes)
    merges, pops = _merge(sizes, rep, repkey, richest, c, cap, MERGE_MODES.index(merge), parent,
                          volumes if volumes is not None else np.zeros(0, np.int64), load, mn, mm)
    del rep, repkey, richest
    _relabel(c, parent)
    del parent
    roots = np.flatnonzero(sizes > 0)
    keys = lpt_keys(lpt, sizes, volumes, n, m)
    order = roots[np.argsort(-keys[roots], kind="stable")]
    slot = np.zeros(K, np.int64)
    lpt_assign(order, keys, np.zeros(num_parts, keys.dtype), slot)
    del keys
    owner = slot.astype(part_dtype(num_parts))[c]
    refined = {}
    if refine:  # the vertices whose neighbours live elsewhere follow them (LPT placed whole clusters)
        refined = refine_partition(runner, owner, deg, num_parts, refine, lpt, beta)
        del deg
    mean1, sd1 = _size_stats(sizes)
    info = {"clusters_streamed": int(k_stream), "isolated": int(K - k_stream), "clusters_initial": int(K),
            "clusters_merged": int(roots.size), "merges": int(merges), "heap_pops": int(pops),
            "tau_vol": float(tau), "merge_cap": float(cap), "merge": merge, "lpt": lpt,
            "initial_size_mean": mean0, "initial_size_sd": sd0, "merged_size_mean": mean1, "merged_size_sd": sd1,
            "max_cluster": int(sizes.max(initial=0)), **refined}
    if volumes is not None:
        info["max_cluster_volume"] = int(volumes.max(initial=0))
    return SpringClusters(owner, c if keep_clusters else None, initial, sizes, info, volumes)


@PARTITIONERS.register("spring")
class SpringPartitioner(EdgePartitioner):
    """SPRING; see the module docstring.

    Args:
        merge: ``paper`` (re-ranked heap, default), ``code`` (single pass) or ``none`` (clustering only).
        beta: balance factor of the merge cap (default 1.05).
        volume_cap: ``tau_vol`` as a fraction of ``|E| / p`` (default 0.1).
        lpt: what the LPT packing balances: ``vertices`` (the paper, default), ``edges`` (cluster volumes = the
            records each partition gets) or ``mix`` (``|C| / |V| + vol(C) / M``).
        balance: the same as ``lpt`` under the name ``--balance`` gives it (as for METIS); both given must agree.
        cluster_passes: clustering passes (default 1, the paper); each later one restreams the records with the
            clusters so far (Hollocou et al.'s restreaming; 2PS-L's ``cluster_passes``). Measured (``bench
            partition``, p = 8, shuffled streams, ``lpt=edges``): 2 passes lower RF by 0.2-1.2% on Cora, MUSAE
            Facebook and email-Eu-core and raise it 0.2% on Wiki-Vote, so the default stays 1.
        refine: rounds of streaming label-propagation moves after LPT (:mod:`graphscale.partition.refine`: a
            vertex goes where more of its neighbours are while its partition's load stays within ``beta`` times
            the mean); default 0 (the paper), 2 for a store built for training (below).

    A store built for training (``graphscale partition``, the run's own store, a strategy's chunks: every caller
    of :func:`graphscale.partition.command.build_partitioner` with ``training=True``) balances ``edges`` unless
    told otherwise (:attr:`training_defaults`): a partition's records are its aggregation work, so the most
    loaded partition sets an averaging round's time; the paper's vertex balance stays available as
    ``lpt=vertices`` / ``--balance vertices``. It also refines (``refine=2``): LPT packs whole clusters and
    ignores the edges between them, and the moves lower the replication factor (the halo every partition
    copies) at the same balance; ``refine=0`` gives the paper's partition.
    """

    name = "spring"
    vertex_cut_is_home = True
    #: options a store built for training uses when neither they nor an alias are given
    training_defaults: ClassVar[dict] = {"lpt": "edges", "refine": 2}
    #: option aliases: ``--balance`` sets ``lpt``
    aliases: ClassVar[dict] = {"balance": "lpt"}

    def __init__(self, merge: str = "paper", beta: float = DEFAULT_BETA,
                 volume_cap: float = DEFAULT_VOLUME_CAP, lpt: str = "", balance: str = "",
                 cluster_passes: int = 1, refine: int = 0) -> None:
        if lpt and balance and lpt != balance:
            raise ValueError(f"spring: --balance {balance} and lpt={lpt} disagree; give one")
        lpt = balance or lpt or "vertices"
        _check_modes(merge, lpt)
        if isinstance(cluster_passes, bool) or not isinstance(cluster_passes, int) or cluster_passes < 1:
            raise ValueError(f"spring: cluster_passes must be >= 1, got {cluster_passes!r}")
        if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
            raise ValueError(f"spring: refine must be >= 0 (refinement rounds), got {refine!r}")
        if beta <= 0 or volume_cap <= 0:
            raise ValueError(f"spring: beta and volume_cap must be > 0, got {beta} and {volume_cap}")
        self.merge, self.beta, self.volume_cap, self.lpt = merge, float(beta), float(volume_cap), lpt
        self.cluster_passes, self.refine = int(cluster_passes), int(refine)

    def _stream(self, runner: StreamRunner, num_parts: int, seed: int, sink: EdgePartSink) -> StreamPartition:
        n = runner.num_vertices
        clusters = spring_clusters(runner, num_parts, beta=self.beta, volume_cap=self.volume_cap, merge=self.merge,
                                   lpt=self.lpt, cluster_passes=self.cluster_passes, refine=self.refine)
        owner = clusters.owner
        mask = replica_mask(n, num_parts)
        set_owner_bits(mask, owner)
        records = np.zeros(num_parts, np.int64)
        for first, src, dst in runner.chunks("edges"):
            neighbourhood_chunk(src, dst, owner, mask, records)
            if sink.keeps:
                part = sink.buffer(first, src.size)
                np.take(owner, dst, out=part)
                sink.commit(first, part)
        rf = mask_total(mask) / n
        return StreamPartition(self.name, num_parts, n, runner.num_edges, owner, None, rf, rf, records,
                               info=clusters.info)

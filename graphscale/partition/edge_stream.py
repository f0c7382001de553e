"""The edge-partitioner interface and the edge (vertex-cut) streaming partitioners.

An edge partitioner reads directed records ``u -> v`` from an edge source (an
:class:`~graphscale.data.edge_stream.EdgeStream`, or a :class:`Graph` through
:class:`~graphscale.partition.streaming.GraphEdges`) in chunks of ``chunk_edges`` records, never holding the
edge list, and keeps O(|V|) state: degrees, a replica bitmask (``uint64
[N, ceil(p/64)]``), the home partition of every vertex, per-partition loads.
Sequential decisions run as numba kernels, one call per chunk, so the result
does not depend on the chunk size. The shared machinery (sources, passes,
bitmask kernels, results) is in :mod:`graphscale.partition.streaming`.

Interface: :meth:`EdgePartitioner.partition_stream` returns the partition of
every record (``int16``/``int32 [E]``, a read-only memory map when ``out`` is
given); :meth:`EdgePartitioner.run` returns the full
:class:`~graphscale.partition.streaming.StreamPartition`;
and since every edge partitioner is also a
:class:`~graphscale.partition.base.VertexPartitioner`,
``partition(graph, num_parts, seed)`` returns the home partition of every vertex.

**GNN adaptation** (SDT-GNN, spec §2.4). A vertex-cut leaves neighbourhoods
split, so every vertex gets a *home* (master) partition: the partition of the
last record assigned with it as destination (else, of the last record with it
as source; a vertex in no record goes to the partition with the fewest homes,
in id order). A second pass adds every record ``u -> v`` to ``home(v)``, so the
home partition holds the vertex's full in-neighbourhood. Masters are the
training targets; the other vertices of a partition are halo replicas. The
replication factor ``sum_s |V_s| / |V|`` counts the vertex-cut replicas plus
the neighbourhood replicas (what SDT-GNN's code measures);
``vertex_cut_replication`` is the same without the neighbourhood pass.

Methods (tie rule everywhere: the smallest partition index wins):

* ``hash``: record ``u -> v`` goes to ``splitmix64(seed, min(u,v), max(u,v)) mod p``
  (both directions of an undirected edge land together).
* ``dbh``: ``splitmix64(seed, x) mod p`` with ``x`` the endpoint of smaller full
  degree (equal degrees: the smaller id). One degree pass first.
* ``greedy`` (PowerGraph, SDT-GNN's score form): argmax over ``s`` of
  ``g_u(s) + g_v(s) + (maxload - load_s) / (eps + maxload - minload)`` with
  ``g_x(s) = 1`` when ``x`` already has a replica on ``s``.
* ``hdrf``: ``g_u(s) = 1 + (1 - theta_u)`` when ``u`` has a replica on ``s``,
  ``theta_u = delta_u / (delta_u + delta_v)`` over partial degrees ``delta``
  (counted up to and including this record), plus ``lam`` times the balance term.
* ``2ps-l``: :mod:`graphscale.partition.twops`.

Only ``p`` of each vertex's bits are used, so any ``p`` works; the O(p) score
loops of ``greedy`` and ``hdrf`` make them slower per record as ``p`` grows.
Their assignment pass is memory-bound: for ``p <= 64`` it keeps each vertex's
replica bits, partial degree and encoded home in one packed 16-byte row (one
cache line per endpoint, unpacked into the bitmask and homes after the pass)
and prefetches the rows of the record ``AHEAD`` places ahead.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from pathlib import Path

import numba
import numpy as np
import torch

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.graph import Graph
from graphscale.partition.base import VertexPartitioner, validate_num_parts
from graphscale.partition.streaming import (
    AHEAD,
    EdgePartSink,
    GraphEdges,
    ProgressFn,
    StreamPartition,
    StreamRunner,
    as_edge_source,
    lpt_assign,
    mask_total,
    neighbourhood_chunk,
    part_dtype,
    popcount64,
    prefetch,
    replica_mask,
    set_owner_bits,
    splitmix64,
    stream_degrees,
)
from graphscale.registry import PARTITIONERS

_U1 = np.uint64(1)


@numba.njit(nogil=True, cache=True)
def hash_part(seed, x, p):  # pragma: no cover - numba
    return np.int64(splitmix64(splitmix64(np.uint64(seed)) ^ np.uint64(x)) % np.uint64(p))


@numba.njit(nogil=True, cache=True)
def place(u, v, s, mask, master):  # pragma: no cover - numba
    """Record ``u -> v`` goes to ``s``: both endpoints gain replica ``s``; ``s`` becomes ``v``'s home, and
    ``u``'s source-only home (encoded ``-s - 2``) while ``u`` has none (see the module docstring)."""
    bit = _U1 << np.uint64(s & 63)
    mask[u, s >> 6] |= bit
    mask[v, s >> 6] |= bit
    master[v] = s
    if master[u] < 0:
        master[u] = -s - 2


@numba.njit(nogil=True, cache=True)
def _record_chunk(src, dst, part, master, mask, load):  # pragma: no cover - numba
    """Book a chunk of assigned records: replicas, loads, and the home partition (see the module docstring)."""
    for i in range(src.size):
        s = part[i]
        place(src[i], dst[i], s, mask, master)
        load[s] += 1


@numba.njit(nogil=True, cache=True)
def _hash_chunk(src, dst, p, seed, deg, use_degree, out):  # pragma: no cover - numba
    for i in range(src.size):
        u, v = src[i], dst[i]
        if use_degree:
            x = u if (deg[u] < deg[v] or (deg[u] == deg[v] and u <= v)) else v
            out[i] = hash_part(seed, x, p)
        else:
            lo, hi = min(u, v), max(u, v)
            out[i] = np.int64(splitmix64(splitmix64(np.uint64(seed) ^ np.uint64(lo)) ^ np.uint64(hi))
                              % np.uint64(p))


@numba.njit(nogil=True, cache=True)
def least_loaded(load):  # pragma: no cover - numba
    best = 0
    for s in range(1, load.size):
        if load[s] < load[best]:
            best = s
    return best


@numba.njit(nogil=True, cache=True)
def _hdrf_gains(du, dv):  # pragma: no cover - numba
    """HDRF's replica terms ``1 + (1 - theta)`` of both endpoints, ``theta_u = du / (du + dv)`` (partial degrees)."""
    theta_u = du / (du + dv)
    return 2.0 - theta_u, 2.0 - (1.0 - theta_u)


@numba.njit(nogil=True, cache=True)
def _best_in_word(w, wu, wv, gain_u, gain_v, load, maxload, amin, scale, best, best_score):  # pragma: no cover - numba
    """Greedy / HDRF argmax over the partitions of mask word ``w``; returns the running ``(best, best_score)``.

    ``wu``, ``wv``: the endpoints' replica bits in that word, worth ``gain_u``, ``gain_v``; the balance term is
    ``(maxload - load_s) * scale``.
    """
    # only partitions holding u or v, plus the least-loaded one, can win: visit those, ascending
    cand = wu | wv
    if (amin >> 6) == w:
        cand |= _U1 << np.uint64(amin & 63)
    while cand:
        low = cand & (~cand + _U1)
        cand ^= low
        s = w * 64 + np.int64(popcount64(low - _U1))
        score = (maxload - load[s]) * scale
        if wu & low:
            score += gain_u
        if wv & low:
            score += gain_v
        if score > best_score:
            best, best_score = s, score
    return best, best_score


@numba.njit(nogil=True, cache=True)
def _book_load(load, best, maxload, amin):  # pragma: no cover - numba
    """Count a record on ``best``; returns the new ``(maxload, argmin_load)``."""
    load[best] += 1
    return max(maxload, load[best]), least_loaded(load) if best == amin else amin


@numba.njit(nogil=True, cache=True)
def _greedy_chunk(src, dst, mask, load, state, master, partial, hdrf, lam, eps, out):  # pragma: no cover - numba
    """Greedy / HDRF over a chunk, any ``p``. ``state = [maxload, argmin_load]`` persists across chunks."""
    for i in range(src.size):
        u, v = src[i], dst[i]
        gain_u = gain_v = 1.0
        if hdrf:
            partial[u] += 1
            partial[v] += 1
            gain_u, gain_v = _hdrf_gains(partial[u], partial[v])
        maxload, amin = state[0], state[1]
        scale = lam / (eps + maxload - load[amin])
        best, best_score = -1, -1.0
        for w in range(mask.shape[1]):
            best, best_score = _best_in_word(w, mask[u, w], mask[v, w], gain_u, gain_v, load, maxload, amin, scale,
                                             best, best_score)
        place(u, v, best, mask, master)
        state[0], state[1] = _book_load(load, best, maxload, amin)
        out[i] = best


# The packed state of p <= 64: row x of ``hot`` is [replica mask, partial degree | home code << 56], one cache
# line per endpoint. Home code: 0 = none, s + 1 = source-only home s, s + 65 = destination home s.
_DEGREE = np.uint64((1 << 56) - 1)
_HOME_SHIFT = np.uint64(56)
_DEST_HOME = np.uint64(65 << 56)


@numba.njit(nogil=True, cache=True)
def _greedy_packed_chunk(src, dst, hot, load, state, hdrf, lam, eps, out):  # pragma: no cover - numba
    """:func:`_greedy_chunk` for ``p <= 64`` over the packed ``hot`` rows (see above), prefetched ahead."""
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            prefetch(hot, src[i + AHEAD])
            prefetch(hot, dst[i + AHEAD])
        u, v = src[i], dst[i]
        gain_u = gain_v = 1.0
        if hdrf:
            hot[u, 1] += _U1
            hot[v, 1] += _U1
            gain_u, gain_v = _hdrf_gains(np.int64(hot[u, 1] & _DEGREE), np.int64(hot[v, 1] & _DEGREE))
        maxload, amin = state[0], state[1]
        best = _best_in_word(0, hot[u, 0], hot[v, 0], gain_u, gain_v, load, maxload, amin,
                             lam / (eps + maxload - load[amin]), -1, -1.0)[0]
        bit = _U1 << np.uint64(best)
        hot[u, 0] |= bit
        hot[v, 0] |= bit
        state[0], state[1] = _book_load(load, best, maxload, amin)
        hot[v, 1] = (hot[v, 1] & _DEGREE) | (np.uint64(best + 65) << _HOME_SHIFT)
        if hot[u, 1] < _DEST_HOME:
            hot[u, 1] = (hot[u, 1] & _DEGREE) | (np.uint64(best + 1) << _HOME_SHIFT)
        out[i] = best


@numba.njit(nogil=True, cache=True)
def _unpack_hot(hot, mask, master):  # pragma: no cover - numba
    """Replica masks and encoded homes (as :func:`_greedy_chunk` keeps them) from the packed rows."""
    for x in range(master.size):
        mask[x, 0] = hot[x, 0]
        code = np.int64(hot[x, 1] >> _HOME_SHIFT)
        master[x] = code - 65 if code > 64 else -code - 1


@numba.njit(nogil=True, cache=True)
def _finish_masters(master, counts):  # pragma: no cover - numba
    """Decode source-only homes and give vertices in no record the partition with the fewest homes."""
    n = master.size
    missing = 0
    for v in range(n):
        if master[v] < -1:
            master[v] = -master[v] - 2
        if master[v] >= 0:
            counts[master[v]] += 1
        else:
            missing += 1
    if missing == 0:
        return
    vertices = np.empty(missing, np.int64)
    k = 0
    for v in range(n):
        if master[v] < 0:
            vertices[k] = v
            k += 1
    slot = np.empty(missing, np.int64)
    lpt_assign(np.arange(missing), np.ones(missing, np.int64), counts, slot)
    for k in range(missing):
        master[vertices[k]] = slot[k]


class EdgePartitioner(VertexPartitioner):
    """A streaming partitioner over an edge source; see the module docstring.

    Subclasses implement :meth:`_stream`.
    """

    #: ``"edge"`` for stream partitioners (vertex partitioners have no such attribute or ``"vertex"``).
    kind = "edge"
    #: the per-record partition is always the destination's home (SPRING), so the store needs no ``edge_part``
    vertex_cut_is_home = False

    def partition_stream(self, stream, num_vertices: int | None, num_parts: int, *,
                         chunk_edges: int = DEFAULT_CHUNK_EDGES, out: str | Path | None = None,
                         seed: int = 0) -> np.ndarray:
        """Partition of every record of ``stream``.

        Args:
            stream: an edge source (``EdgeStream``, ``Graph`` or stream path).
            num_vertices: vertex count (ids must be below it); ``None`` = the stream's.
            num_parts: partitions, ``1 <= num_parts <= num_vertices``.
            chunk_edges: records read per chunk.
            out: write the result to this ``.npy`` file and return it memory-mapped.
            seed: for hash-based choices.

        Returns:
            ``int16`` (``int32`` above 32767 parts) ``[E]``.
        """
        return self.run(stream, num_parts, num_vertices=num_vertices, chunk_edges=chunk_edges, out=out,
                        seed=seed).edge_part

    def run(self, stream, num_parts: int, *, num_vertices: int | None = None,
            chunk_edges: int = DEFAULT_CHUNK_EDGES, seed: int = 0, out: str | Path | None = None,
            keep_edge_part: bool = True, progress: ProgressFn | None = None) -> StreamPartition:
        """Partition ``stream``; see :meth:`partition_stream` for the arguments.

        Args:
            keep_edge_part: keep the per-record partition in memory (ignored when ``out`` is given).
            progress: callback ``(pass_name, done, total)`` after every chunk.

        Raises:
            ValueError: bad ``num_parts``, empty graph, a record outside ``[0, num_vertices)``,
                a malformed stream. Nothing is written then.
        """
        start = time.perf_counter()
        source = as_edge_source(stream)
        n = source.num_vertices if num_vertices is None else int(num_vertices)
        validate_num_parts(num_parts, n)
        runner = StreamRunner(source, n, chunk_edges, progress)
        sink = EdgePartSink(runner.num_edges, part_dtype(num_parts), out, keep_edge_part)
        try:
            result = self._stream(runner, num_parts, seed, sink)
            result.edge_part = sink.finish()
        except BaseException:
            sink.abort()
            raise
        result.passes, result.seconds = runner.passes, time.perf_counter() - start
        return result

    @abstractmethod
    def _stream(self, runner: StreamRunner, num_parts: int, seed: int, sink: EdgePartSink) -> StreamPartition:
        """Run the passes; arguments are validated. ``edge_part``, ``passes``, ``seconds`` are filled in later."""

    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        return self._owner(GraphEdges(graph), num_parts, seed)

    def partition_csr(self, csr, num_parts: int, seed: int = 0,
                      chunk_edges: int = DEFAULT_CHUNK_EDGES) -> torch.Tensor:
        """Owner of every vertex, streaming the records of ``csr`` in chunks (see the base class)."""
        validate_num_parts(num_parts, csr.num_vertices)
        if num_parts == 1:
            return torch.zeros(csr.num_vertices, dtype=torch.int64)
        return self._owner(csr, num_parts, seed, chunk_edges)

    def _owner(self, source, num_parts: int, seed: int, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> torch.Tensor:
        result = self.run(source, num_parts, seed=seed, chunk_edges=chunk_edges, keep_edge_part=False)
        return torch.from_numpy(result.owner.astype(np.int64))


class VertexCutPartitioner(EdgePartitioner):
    """A vertex-cut method followed by the GNN adaptation (home partitions + neighbourhood pass)."""

    def _stream(self, runner: StreamRunner, num_parts: int, seed: int, sink: EdgePartSink) -> StreamPartition:
        n = runner.num_vertices
        mask = replica_mask(n, num_parts)
        master = np.full(n, -1, dtype=np.int64 if num_parts > 2**31 - 3 else np.int32)
        load = np.zeros(num_parts, np.int64)
        info = self._assign(runner, num_parts, seed, sink, mask, master, load)
        counts = np.zeros(num_parts, np.int64)
        _finish_masters(master, counts)
        owner = master.astype(part_dtype(num_parts))
        del master
        set_owner_bits(mask, owner)
        vc_total = mask_total(mask)
        records = np.zeros(num_parts, np.int64)
        for _, src, dst in runner.chunks("neighbourhoods"):
            neighbourhood_chunk(src, dst, owner, mask, records)
        total = mask_total(mask)
        info.update(vertex_cut_records=load.tolist())
        return StreamPartition(self.name, num_parts, n, runner.num_edges, owner, None, total / n, vc_total / n,
                               records, info=info)

    @abstractmethod
    def _assign(self, runner: StreamRunner, num_parts: int, seed: int, sink: EdgePartSink, mask: np.ndarray,
                master: np.ndarray, load: np.ndarray) -> dict:
        """Assign every record; update ``mask`` (replicas), ``master`` (encoded homes), ``load`` (records)."""


@PARTITIONERS.register("hash")
class HashPartitioner(VertexCutPartitioner):
    """Random hash of the (unordered) edge; see the module docstring."""

    name = "hash"
    #: hash the endpoint of smaller full degree (DBH) instead of the unordered edge
    by_degree = False

    def _assign(self, runner, num_parts, seed, sink, mask, master, load) -> dict:
        deg = stream_degrees(runner) if self.by_degree else np.zeros(1, np.int32)
        for first, src, dst in runner.chunks("assign"):
            part = sink.buffer(first, src.size)
            _hash_chunk(src, dst, num_parts, seed, deg, self.by_degree, part)
            _record_chunk(src, dst, part, master, mask, load)
            sink.commit(first, part)
        return {}


@PARTITIONERS.register("dbh")
class DBHPartitioner(HashPartitioner):
    """Degree-based hashing: hash the endpoint of smaller full degree; see the module docstring."""

    name = "dbh"
    by_degree = True


@PARTITIONERS.register("greedy")
class GreedyPartitioner(VertexCutPartitioner):
    """PowerGraph greedy vertex-cut (SDT-GNN's score form); see the module docstring.

    Args:
        eps: the balance term's ``epsilon`` (default 1).
    """

    name = "greedy"
    _hdrf = False

    def __init__(self, eps: float = 1.0, lam: float = 1.0) -> None:
        if eps <= 0 or lam < 0:
            raise ValueError(f"{self.name}: eps must be > 0 and lam >= 0, got eps={eps}, lam={lam}")
        self.eps, self.lam = float(eps), float(lam)

    def _assign(self, runner, num_parts, seed, sink, mask, master, load) -> dict:
        state = np.zeros(2, np.int64)
        packed = num_parts <= 64
        if packed:
            hot = np.zeros((runner.num_vertices, 2), np.uint64)
        else:
            partial = np.zeros(runner.num_vertices if self._hdrf else 1, np.int64)
        for first, src, dst in runner.chunks("assign"):
            part = sink.buffer(first, src.size)
            if packed:
                _greedy_packed_chunk(src, dst, hot, load, state, self._hdrf, self.lam, self.eps, part)
            else:
                _greedy_chunk(src, dst, mask, load, state, master, partial, self._hdrf, self.lam, self.eps, part)
            sink.commit(first, part)
        if packed:
            _unpack_hot(hot, mask, master)
        return {}


@PARTITIONERS.register("hdrf")
class HDRFPartitioner(GreedyPartitioner):
    """High-Degree (are) Replicated First (Petroni et al.); see the module docstring.

    Args:
        lam: weight of the balance term (default 1).
        eps: the balance term's ``epsilon`` (default 1).
    """

    name = "hdrf"
    _hdrf = True

    def __init__(self, lam: float = 1.0, eps: float = 1.0) -> None:
        super().__init__(eps=eps, lam=lam)

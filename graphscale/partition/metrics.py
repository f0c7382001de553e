"""Partition quality and cost, computed in one streaming pass with O(|V|) state.

For a home-partition map ``owner`` (every vertex's *inner* partition) and,
for vertex-cut partitioners, the per-record vertex-cut partition ``edge_part``,
partition ``s`` stores every record ``u -> v`` with ``owner[v] = s`` (the full
in-neighbourhoods of its inner vertices) plus, with ``edge_part``, every record
with ``edge_part[e] = s``. Its vertex set ``V_s`` is its inner vertices plus the
endpoints of its records; the others are its *halo*.

* **replication factor** ``RF = sum_s |V_s| / |V|`` (1 = no replication; this is
  the paper's RF and equals ``1 + graphscale.partition.base.replication_factor``
  for a vertex partition, whose ``rho`` counts the halo only);
* **edge cut**: records ``u -> v`` with ``owner[u] != owner[v]`` (a symmetric
  graph stores each undirected cut edge twice), and its fraction of all records;
* **vertex / edge / training-vertex balance**: ``max_s / mean_s`` of inner
  vertices, stored records (before the store's symmetrisation and
  de-duplication) and inner training vertices;
* **time** and **peak RSS** (:func:`peak_rss_bytes`) are filled in by the caller that measured them.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import asdict, dataclass

import numba
import numpy as np

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.partition.csr_source import chunk_reader
from graphscale.partition.streaming import (
    ProgressFn,
    StreamRunner,
    as_edge_source,
    replica_mask,
    set_owner_bits,
)

_U1 = np.uint64(1)


@numba.njit(nogil=True, cache=True)
def _metrics_chunk(src, dst, owner, edge_part, use_edge_part, mask, records, cut):  # pragma: no cover - numba
    c = 0
    for i in range(src.size):
        u, v = src[i], dst[i]
        s = owner[v]
        mask[u, s >> 6] |= _U1 << np.uint64(s & 63)
        records[s] += 1
        if owner[u] != s:
            c += 1
        if use_edge_part:
            t = edge_part[i]
            if t != s:
                bit = _U1 << np.uint64(t & 63)
                mask[u, t >> 6] |= bit
                mask[v, t >> 6] |= bit
                records[t] += 1
    cut[0] += c


@numba.njit(nogil=True, cache=True)
def _bits_per_part(mask, counts):  # pragma: no cover - numba
    p = counts.size
    for v in range(mask.shape[0]):
        for s in range(p):
            if (mask[v, s >> 6] >> np.uint64(s & 63)) & _U1:
                counts[s] += 1


def balance(values) -> float:
    """``max / mean`` of per-partition amounts (``nan`` when they sum to zero)."""
    values = np.asarray(values, dtype=np.float64)
    total = values.sum()
    return float(values.max() * values.size / total) if values.size and total > 0 else float("nan")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this process's own address space.
    ``getrusage(RUSAGE_SELF).ru_maxrss`` is the fallback elsewhere; on Linux it is kept across ``execve``, so
    a child started from a large parent reports at least the parent's size at the fork.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@dataclass
class PartitionMetrics:
    """Quality of a partition (see the module docstring); ``seconds`` / ``peak_rss_bytes`` are the caller's."""

    num_parts: int
    num_vertices: int
    num_edges: int
    replication_factor: float
    edge_cut: int
    vertex_balance: float
    edge_balance: float
    train_balance: float
    inner: list[int]
    local: list[int]
    records: list[int]
    train: list[int] | None = None
    seconds: float | None = None
    peak_rss_bytes: int | None = None

    @property
    def halo(self) -> list[int]:
        return [a - b for a, b in zip(self.local, self.inner)]

    @property
    def edge_cut_fraction(self) -> float:
        return self.edge_cut / self.num_edges if self.num_edges else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "halo": self.halo, "edge_cut_fraction": self.edge_cut_fraction}


class MetricsAccumulator:
    """Collects :class:`PartitionMetrics` chunk by chunk (the store does this during its routing pass).

    Args:
        owner: home partition of every vertex, ``[N]``.
        num_parts: ``p``.
        train_mask: optional bool ``[N]`` for the training-vertex balance.
    """

    def __init__(self, owner: np.ndarray, num_parts: int, train_mask=None) -> None:
        self.owner, self.num_parts = owner, int(num_parts)
        self.train_mask = None if train_mask is None else np.asarray(train_mask, dtype=bool)
        self.mask = replica_mask(owner.size, num_parts)
        set_owner_bits(self.mask, owner)
        self.records = np.zeros(num_parts, np.int64)
        self.cut = np.zeros(1, np.int64)
        self.num_edges = 0
        self._empty = np.zeros(0, owner.dtype)

    def update(self, src: np.ndarray, dst: np.ndarray, edge_part: np.ndarray | None = None) -> None:
        """Account for records ``src[i] -> dst[i]`` (and their vertex-cut partitions, when given)."""
        use = edge_part is not None
        _metrics_chunk(src, dst, self.owner, edge_part if use else self._empty, use, self.mask, self.records,
                       self.cut)
        self.num_edges += src.size

    def result(self) -> PartitionMetrics:
        n, p = self.owner.size, self.num_parts
        local = np.zeros(p, np.int64)
        _bits_per_part(self.mask, local)
        inner = np.bincount(self.owner, minlength=p)
        train = None
        if self.train_mask is not None:
            train = np.bincount(self.owner[self.train_mask], minlength=p)
        return PartitionMetrics(
            num_parts=p, num_vertices=n, num_edges=self.num_edges,
            replication_factor=float(local.sum()) / n if n else float("nan"), edge_cut=int(self.cut[0]),
            vertex_balance=balance(inner), edge_balance=balance(self.records),
            train_balance=balance(train) if train is not None else float("nan"),
            inner=inner.tolist(), local=local.tolist(), records=self.records.tolist(),
            train=None if train is None else train.tolist())


def stream_metrics(stream, owner, num_parts: int, *, edge_part: np.ndarray | None = None, train_mask=None,
                   num_vertices: int | None = None, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                   progress: ProgressFn | None = None) -> PartitionMetrics:
    """Score a partition in one pass over an edge source (see the module docstring).

    Args:
        stream: ``EdgeStream``, ``Graph`` or edge-stream path.
        owner: home partition of every vertex (``[N]``, values in ``[0, num_parts)``).
        num_parts: ``p``.
        edge_part: vertex-cut partition of every record (``[E]``), for edge partitioners.
        train_mask: bool ``[N]`` for the training-vertex balance.
        num_vertices: vertex count (default the stream's).
        chunk_edges: records per chunk.
        progress: callback ``(pass_name, done, total)``.

    Raises:
        ValueError: ``owner`` / ``edge_part`` / ``train_mask`` of the wrong shape or range.
    """
    source = as_edge_source(stream)
    n = source.num_vertices if num_vertices is None else int(num_vertices)
    owner = validate_assignment(owner, n, num_parts, "owner")
    if edge_part is not None:
        edge_part = validate_assignment(edge_part, source.num_edges, num_parts, "edge_part", copy=False)
    if train_mask is not None and np.asarray(train_mask).shape != (n,):
        raise ValueError(f"train_mask must have shape ({n},), got {np.asarray(train_mask).shape}")
    acc = MetricsAccumulator(owner, num_parts, train_mask)
    runner = StreamRunner(source, n, chunk_edges, progress)
    read = None if edge_part is None else chunk_reader(edge_part)
    for first, src, dst in runner.chunks("metrics"):
        acc.update(src, dst, None if read is None else read(first, src.size))
    return acc.result()


def validate_assignment(values, length: int, num_parts: int, what: str, copy: bool = True) -> np.ndarray:
    """Check an integer array of partitions (``[length]``, values in ``[0, num_parts)``); return it as numpy.

    ``copy=False`` keeps a memory map as it is and checks it in slices.
    """
    array = values.numpy() if hasattr(values, "numpy") else values
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.shape != (length,):
        raise ValueError(f"{what} must have shape ({length},), got {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what} must be an integer array, got dtype {array.dtype}")
    step, read = 1 << 22, chunk_reader(array)
    for first in range(0, array.size, step):
        part = read(first, step)
        lo, hi = int(part.min()), int(part.max())
        if lo < 0 or hi >= num_parts:
            raise ValueError(f"{what} values must lie in [0, {num_parts}), got [{lo}, {hi}]")
    if copy:
        dtype = np.int16 if num_parts <= np.iinfo(np.int16).max else np.int32
        array = np.ascontiguousarray(array, dtype=dtype)
    return array

"""Streaming machinery shared by the edge-stream partitioners, SPRING, the metrics and the store.

* **sources**: an :class:`EdgeSource` serves directed records ``u -> v`` in
  chunks: an :class:`~graphscale.data.edge_stream.EdgeStream` (a file) or
  :class:`~graphscale.partition.csr_source.GraphEdges` (the CSR of a graph or a graph directory);
* :class:`StreamRunner` runs named passes over a source: it checks every id
  against the vertex count before any kernel sees it (numba does not bounds-check),
  times each pass and reports progress; an ``EdgeStream`` is read with
  ``readinto`` into buffers allocated once, so a pass holds one chunk;
* shared numba kernels: degrees, the replica bitmask (``uint64 [N, ceil(p/64)]``;
  ``sum_s |V_s|`` is its popcount), the home-neighbourhood pass, a two-key
  min-heap and greedy list scheduling (LPT); :func:`prefetch`, the cache hint
  with which the memory-bound per-record kernels fetch the vertex state of the
  record ``AHEAD`` places ahead;
* results: :class:`StreamPartition` and :class:`EdgePartSink` (where the
  per-record partition goes: memory, a ``.npy`` file written with positioned
  writes, or nowhere).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES, EdgeStream
from graphscale.data.graph import Graph
from graphscale.partition.csr_source import GraphEdges

#: ``progress(pass_name, records_done, records_total)``, called after every chunk.
ProgressFn = Callable[[str, int, int], None]

_U1 = np.uint64(1)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
#: records between prefetching what a record touches and processing it (see :func:`prefetch`)
AHEAD = 32


# ------------------------------------------------------------------ sources
class EdgeSource(Protocol):
    """What the streaming partitioners read: records in chunks (an ``EdgeStream`` or :class:`GraphEdges`)."""

    num_edges: int

    @property
    def num_vertices(self) -> int: ...

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[tuple[np.ndarray, np.ndarray]]: ...


def as_edge_source(obj) -> EdgeSource:
    """An edge source for ``obj``: a :class:`Graph`, a path of an edge stream, or anything with ``chunks``."""
    if isinstance(obj, Graph):
        return GraphEdges(obj)
    if isinstance(obj, (str, Path)):
        return EdgeStream(obj)
    if not hasattr(obj, "chunks") or not hasattr(obj, "num_edges"):
        raise TypeError(f"expected an EdgeStream, a Graph or an edge-stream path, got {type(obj).__name__}")
    return obj


@dataclass
class PassStats:
    """One streaming pass: its name, the records it read and its wall time (reading included)."""

    name: str
    edges: int
    seconds: float

    @property
    def edges_per_s(self) -> float:
        return self.edges / self.seconds if self.seconds > 0 else float("nan")


@numba.njit(nogil=True, cache=True)
def _first_bad(src, dst, n):  # pragma: no cover - numba
    for i in range(src.size):
        if src[i] < 0 or src[i] >= n or dst[i] < 0 or dst[i] >= n:
            return i
    return -1


@numba.njit(nogil=True, cache=True)
def _split_pairs(raw, src, dst, n):  # pragma: no cover - numba
    """De-interleave ``raw [k, 2]`` into ``src``/``dst``; return the first record with an id outside ``[0, n)``."""
    bad = -1
    for i in range(raw.shape[0]):
        u, v = raw[i, 0], raw[i, 1]
        src[i] = u
        dst[i] = v
        if bad < 0 and (u < 0 or u >= n or v < 0 or v >= n):
            bad = i
    return bad


class StreamRunner:
    """Runs named passes over a source: validates every chunk, times the pass, reports progress.

    An :class:`EdgeStream` in native byte order is read with ``readinto`` into buffers allocated once per pass
    (one raw chunk plus one ``src`` and one ``dst`` array), so a pass holds exactly one chunk; other sources
    are iterated through their ``chunks``. A chunk's arrays are reused by the next chunk: use them before
    asking for the next one.

    Args:
        source: the edge source.
        num_vertices: ids must lie in ``[0, num_vertices)``; a record outside raises ``ValueError``
            naming the source and the record index (before any kernel sees it).
        chunk_edges: records per chunk.
        progress: optional callback ``(pass_name, done, total)``.
    """

    def __init__(self, source: EdgeSource, num_vertices: int, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 progress: ProgressFn | None = None) -> None:
        if isinstance(chunk_edges, bool) or not isinstance(chunk_edges, (int, np.integer)) or chunk_edges < 1:
            raise ValueError(f"chunk_edges must be a positive integer, got {chunk_edges!r}")
        self.source, self.num_vertices, self.chunk_edges = source, int(num_vertices), int(chunk_edges)
        self.num_edges = int(source.num_edges)
        self.progress = progress
        self.passes: list[PassStats] = []

    def _error(self, index: int, u, v) -> ValueError:
        return ValueError(f"{self.source!r}: record {index} is ({u}, {v}); vertex ids must lie in "
                          f"[0, {self.num_vertices}) (the declared vertex count)")

    def _read_file(self) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        stream = self.source
        k = max(1, min(self.chunk_edges, self.num_edges))
        raw = np.empty((k, 2), stream.np_dtype)
        native = stream.np_dtype.newbyteorder("=")
        src, dst = np.empty(k, native), np.empty(k, native)
        with open(stream.path, "rb") as f:
            for first in range(0, self.num_edges, k):
                n = min(k, self.num_edges - first)
                view = raw[:n]
                got = f.readinto(memoryview(view).cast("B"))
                if got != view.nbytes:
                    raise ValueError(f"edge stream {stream.path} ended early at record "
                                     f"{first + got // (2 * raw.itemsize)}")
                bad = _split_pairs(view, src, dst, self.num_vertices)
                if bad >= 0:
                    raise self._error(first + bad, src[bad], dst[bad])
                yield src[:n], dst[:n], first

    def _read_source(self) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        first = 0
        for src, dst in self.source.chunks(self.chunk_edges):
            bad = _first_bad(src, dst, self.num_vertices) if src.size else -1
            if bad >= 0:
                raise self._error(first + bad, src[bad], dst[bad])
            yield src, dst, first
            first += src.size

    def chunks(self, name: str) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Yield ``(first_record_index, src, dst)`` for one pass named ``name``."""
        start, done = time.perf_counter(), 0
        fast = isinstance(self.source, EdgeStream) and self.source.np_dtype.isnative
        for src, dst, first in (self._read_file() if fast else self._read_source()):
            yield first, src, dst
            done = first + src.size
            if self.progress is not None:
                self.progress(name, done, self.num_edges)
        self.passes.append(PassStats(name, done, time.perf_counter() - start))


# ------------------------------------------------------------------ kernels
@intrinsic
def prefetch(typingctx, ary, x):
    """Ask the CPU to fetch ``ary[x]`` (1-D) or row ``x`` (2-D, C-contiguous) into its caches (``llvm.prefetch``).

    A hint only: it never faults and has no effect on results.
    """
    def codegen(context, builder, sig, args):  # pragma: no cover - runs when numba compiles
        aryty, xty = sig.args
        arr = context.make_array(aryty)(context, builder, args[0])
        index = [context.cast(builder, args[1], xty, types.intp)]
        index += [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, arr, index)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p],
                                              ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # a read, kept in all caches, data
        return context.get_dummy_value()
    return types.void(ary, x), codegen


@numba.njit(nogil=True, cache=True)
def splitmix64(x):  # pragma: no cover - numba
    """SplitMix64 finaliser of a ``uint64`` (numba; wraps modulo 2**64)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(nogil=True, cache=True)
def count_degrees(dst, deg):  # pragma: no cover - numba
    """``deg[v] += 1`` for every record with destination ``v``."""
    for i in range(dst.size):
        deg[dst[i]] += 1


@numba.njit(nogil=True, cache=True)
def popcount64(x):  # pragma: no cover - numba
    x = x - ((x >> _U1) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)


@numba.njit(nogil=True, cache=True)
def mask_total(mask):  # pragma: no cover - numba
    """Total number of set bits of a ``uint64 [N, W]`` mask: ``sum_s |V_s|``."""
    total = 0
    for v in range(mask.shape[0]):
        for w in range(mask.shape[1]):
            total += popcount64(mask[v, w])
    return total


@numba.njit(nogil=True, cache=True)
def set_owner_bits(mask, owner):  # pragma: no cover - numba
    for v in range(owner.size):
        s = owner[v]
        mask[v, s >> 6] |= _U1 << np.uint64(s & 63)


@numba.njit(nogil=True, cache=True)
def open_cluster(x, c, vol, deg, k):  # pragma: no cover - numba
    """Streaming clustering's first sight of ``x`` (``c[x] == 0``): the new cluster ``k = {x}``, volume ``deg[x]``.

    Returns the next free cluster id. Shared by SPRING's and 2PS-L's clustering passes.
    """
    if c[x] != 0:
        return k
    c[x] = k
    vol[k] += deg[x]
    return k + 1


@numba.njit(nogil=True, cache=True)
def neighbourhood_chunk(src, dst, owner, mask, records):  # pragma: no cover - numba
    """Home-neighbourhood pass: record ``u -> v`` goes to ``owner[v]``; ``u`` and ``v`` gain that replica."""
    n = src.size
    for i in range(n):
        if i + AHEAD < n:
            prefetch(owner, dst[i + AHEAD])
            prefetch(mask, src[i + AHEAD])
            prefetch(mask, dst[i + AHEAD])
        s = owner[dst[i]]
        bit = _U1 << np.uint64(s & 63)
        w = s >> 6
        mask[src[i], w] |= bit
        mask[dst[i], w] |= bit
        records[s] += 1


@numba.njit(nogil=True, cache=True)
def heap_push(ha, hb, size, a, b):  # pragma: no cover - numba
    """Push ``(a, b)`` on a min-heap of pairs held in ``ha``/``hb``; returns the new size."""
    i = size
    ha[i] = a
    hb[i] = b
    while i > 0:
        parent = (i - 1) >> 1
        if ha[parent] < ha[i] or (ha[parent] == ha[i] and hb[parent] <= hb[i]):
            break
        ha[i], ha[parent] = ha[parent], ha[i]
        hb[i], hb[parent] = hb[parent], hb[i]
        i = parent
    return size + 1


@numba.njit(nogil=True, cache=True)
def heap_pop(ha, hb, size):  # pragma: no cover - numba
    """Pop the smallest ``(a, b)`` (lexicographic); returns ``(a, b, new_size)``."""
    a, b = ha[0], hb[0]
    size -= 1
    ha[0], hb[0] = ha[size], hb[size]
    i = 0
    while True:
        left, right, best = 2 * i + 1, 2 * i + 2, i
        if left < size and (ha[left] < ha[best] or (ha[left] == ha[best] and hb[left] < hb[best])):
            best = left
        if right < size and (ha[right] < ha[best] or (ha[right] == ha[best] and hb[right] < hb[best])):
            best = right
        if best == i:
            break
        ha[i], ha[best] = ha[best], ha[i]
        hb[i], hb[best] = hb[best], hb[i]
        i = best
    return a, b, size


@numba.njit(nogil=True, cache=True)
def lpt_assign(order, sizes, load, out):  # pragma: no cover - numba
    """Greedy list scheduling: item ``order[k]`` (in that order) goes to the least-loaded slot.

    ``load`` (``[p]``, int64 or float64 like ``sizes``) holds the starting loads and is updated; ties go to the
    smallest slot index. ``out[item]`` receives the slot.
    """
    p = load.size
    ha = np.empty(p, load.dtype)
    hb = np.empty(p, np.int64)
    size = 0
    for s in range(p):
        size = heap_push(ha, hb, size, load[s], s)
    for k in range(order.size):
        item = order[k]
        a, s, size = heap_pop(ha, hb, size)
        out[item] = s
        load[s] = a + sizes[item]
        size = heap_push(ha, hb, size, load[s], s)


# ----------------------------------------------------------------- results
def part_dtype(num_parts: int) -> np.dtype:
    """``int16`` for up to 32767 parts, else ``int32``."""
    return np.dtype(np.int16 if num_parts <= np.iinfo(np.int16).max else np.int32)


def replica_mask(num_vertices: int, num_parts: int) -> np.ndarray:
    """Zeroed replica bitmask ``uint64 [N, ceil(p / 64)]``."""
    return np.zeros((num_vertices, -(-num_parts // 64)), dtype=np.uint64)


@dataclass
class StreamPartition:
    """What a streaming partitioner produced.

    Attributes:
        method: partitioner name.
        num_parts, num_vertices, num_edges: sizes.
        owner: home partition of every vertex (``int16``/``int32 [N]``).
        edge_part: partition of every record (vertex-cut assignment), or ``None`` when not kept;
            a read-only memory map when written to a file.
        replication_factor: ``sum_s |V_s| / N`` with the GNN adaptation.
        vertex_cut_replication: the same for the vertex-cut alone (equal for SPRING, where they coincide).
        records_per_part: home in-edges per partition (``int64 [p]``: records whose destination is at home
            there); the vertex-cut records per partition are ``info["vertex_cut_records"]``.
        passes: the streaming passes, in order.
        seconds: wall time of the whole run.
        info: method-specific numbers (cluster counts, ...).
    """

    method: str
    num_parts: int
    num_vertices: int
    num_edges: int
    owner: np.ndarray
    edge_part: np.ndarray | None
    replication_factor: float
    vertex_cut_replication: float
    records_per_part: np.ndarray
    passes: list[PassStats] = field(default_factory=list)
    seconds: float = 0.0
    info: dict = field(default_factory=dict)


class EdgePartSink:
    """Where the per-record partition goes: memory, a ``.npy`` file (atomically), or nowhere.

    In file mode records are written with positioned writes (``os.pwrite``) chunk by chunk, never through a
    memory map, so the process's resident set does not grow with the number of records.

    Args:
        num_edges: records.
        dtype: partition dtype.
        out: ``.npy`` path to write (under a temporary name, renamed by :meth:`finish`).
        keep: keep the array in memory when ``out`` is ``None``.
    """

    def __init__(self, num_edges: int, dtype: np.dtype, out: str | Path | None = None, keep: bool = True) -> None:
        self.out = None if out is None else Path(out)
        self.dtype = np.dtype(dtype)
        self.array = None
        self._fd, self._tmp, self._offset = None, None, 0
        if self.out is not None:
            if self.out.is_dir():
                raise FileExistsError(f"{self.out} is a directory; the edge partition must go to a .npy file")
            self._tmp = self.out.with_name(f".{self.out.name}.tmp-{os.getpid()}")
            header = npy_header(self.dtype, (num_edges,))
            self._fd = os.open(self._tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(self._fd, header)
            os.ftruncate(self._fd, len(header) + num_edges * self.dtype.itemsize)
            self._offset = len(header)
        elif keep:
            self.array = np.empty(num_edges, self.dtype)
        self._scratch = np.empty(0, self.dtype)

    @property
    def keeps(self) -> bool:
        """Whether the partitions written here are kept (in memory or in a file)."""
        return self.array is not None or self._fd is not None

    def buffer(self, first: int, n: int, *, existing: bool = False) -> np.ndarray:
        """A writable array for records ``[first, first + n)``; pass it to :meth:`commit` when filled.

        Args:
            existing: in file mode, fill it with what was committed there before.
        """
        if self.array is not None:
            return self.array[first:first + n]
        if self._scratch.size < n:
            self._scratch = np.empty(n, self.dtype)
        buf = self._scratch[:n]
        if existing and self._fd is not None:
            raw = os.pread(self._fd, n * self.dtype.itemsize, self._offset + first * self.dtype.itemsize)
            buf[:] = np.frombuffer(raw, self.dtype)
        return buf

    def commit(self, first: int, buf: np.ndarray) -> None:
        """Store ``buf`` as the partitions of records ``[first, first + len(buf))`` (no-op in memory)."""
        if self._fd is not None:
            data = np.ascontiguousarray(buf, self.dtype).tobytes()
            os.pwrite(self._fd, data, self._offset + first * self.dtype.itemsize)

    def finish(self) -> np.ndarray | None:
        """The result: the array, a read-only memory map of the file, or ``None``."""
        if self._fd is None:
            return self.array
        os.close(self._fd)
        self._fd = None
        os.replace(self._tmp, self.out)
        self._tmp = None
        return np.load(self.out, mmap_mode="r")

    def abort(self) -> None:
        """Discard everything (removes the temporary file)."""
        self.array = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` (version 1.0) header of a C-ordered array of ``dtype`` and ``shape``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()


def stream_degrees(runner: StreamRunner) -> np.ndarray:
    """Degree pass: records per destination (``int32``, or ``int64`` past 2**31 records)."""
    deg = np.zeros(runner.num_vertices, np.int32 if runner.num_edges < 2**31 else np.int64)
    for _, _, dst in runner.chunks("degrees"):
        count_degrees(dst, deg)
    return deg

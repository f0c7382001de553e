"""The binary edge stream: a file of directed ``(src, dst)`` records read in fixed-size chunks.

**Edge stream**: a headerless file of ``(src, dst)`` pairs, little-endian
``int32`` or ``int64``, one directed record per pair. A sidecar ``FILE.json``
(``{"num_vertices", "num_edges", "dtype"}``) is written by the writers and read
when present; without it the dtype comes from an argument or the extension
(``.e32`` / ``.e64``) and the vertex count from a streaming pass (max id + 1).
:class:`EdgeStream` reads it in fixed-size chunks with bounded memory, which is
what the streaming partitioners build on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from graphscale.data.formats import _as_numpy, _int_array, temp_sibling, write_json_atomic
from graphscale.data.graph import Graph

if TYPE_CHECKING:
    from typing_extensions import Self

EDGE_DTYPES = {"int32": np.dtype("<i4"), "int64": np.dtype("<i8")}
EDGE_EXTENSIONS = {".e32": "int32", ".e64": "int64"}
DEFAULT_CHUNK_EDGES = 1 << 22


def sidecar_path(path: str | Path) -> Path:
    """The JSON sidecar of an edge stream file: ``FILE.json``."""
    return Path(str(path) + ".json")


def _check_edge_dtype(dtype: str, where: str) -> np.dtype:
    if dtype not in EDGE_DTYPES:
        raise ValueError(f"{where}: dtype must be one of {', '.join(EDGE_DTYPES)}, got {dtype!r}")
    return EDGE_DTYPES[dtype]


class EdgeStreamWriter:
    """Append ``(src, dst)`` chunks to an edge stream file; atomic on :meth:`close`.

    Records go to a temporary sibling file that is renamed over ``path`` on
    close, followed by the sidecar ``path.json``. Inside ``with``, an exception
    discards the temporary file.

    Args:
        path: the stream file.
        dtype: ``int32`` or ``int64``.
        num_vertices: declared vertex count (ids are checked against it); default max id + 1.
        overwrite: replace an existing file at ``path``.
    """

    def __init__(self, path: str | Path, dtype: str = "int32", num_vertices: int | None = None, *,
                 overwrite: bool = True) -> None:
        self.path = Path(path)
        self.dtype = dtype
        self._np_dtype = _check_edge_dtype(dtype, f"EdgeStreamWriter({self.path})")
        limit = np.iinfo(self._np_dtype).max
        if num_vertices is not None and not 0 <= num_vertices <= limit + 1:
            raise ValueError(f"EdgeStreamWriter({self.path}): num_vertices={num_vertices} does not fit dtype {dtype}")
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"edge stream {self.path} already exists (pass overwrite=True to replace it)")
        if self.path.is_dir():
            raise FileExistsError(f"{self.path} is a directory; an edge stream must be a file")
        self.num_vertices = num_vertices
        self.num_edges = 0
        self._max_id = -1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temp_sibling(self.path, "tmp")
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed by close()/abort()

    def append(self, src, dst) -> None:
        """Append records ``src[i] -> dst[i]``."""
        if self._file is None:
            raise ValueError(f"EdgeStreamWriter({self.path}) is already closed")
        where = f"EdgeStreamWriter({self.path})"
        src, dst = _int_array(src, "src", where), _int_array(dst, "dst", where)
        if src.shape != dst.shape:
            raise ValueError(f"{where}: src and dst differ in length ({src.size} vs {dst.size})")
        if not src.size:
            return
        lo, hi = int(min(src.min(), dst.min())), int(max(src.max(), dst.max()))
        bound = np.iinfo(self._np_dtype).max + 1 if self.num_vertices is None else self.num_vertices
        if lo < 0 or hi >= bound:
            raise ValueError(f"EdgeStreamWriter({self.path}): vertex ids must lie in [0, {bound}) "
                             f"(dtype {self.dtype}, num_vertices {self.num_vertices}), got [{lo}, {hi}]")
        pairs = np.empty((src.size, 2), dtype=self._np_dtype)
        pairs[:, 0], pairs[:, 1] = src, dst
        pairs.tofile(self._file)
        self.num_edges += src.size
        self._max_id = max(self._max_id, hi)

    def close(self) -> EdgeStream:
        """Finish the file and its sidecar; returns the :class:`EdgeStream` over it."""
        if self._file is None:
            raise ValueError(f"EdgeStreamWriter({self.path}) is already closed")
        self._file.close()
        self._file = None
        nv = self._max_id + 1 if self.num_vertices is None else self.num_vertices
        os.replace(self._tmp, self.path)
        write_json_atomic(sidecar_path(self.path), {"num_vertices": nv, "num_edges": self.num_edges,
                                                     "dtype": self.dtype})
        return EdgeStream(self.path)

    def abort(self) -> None:
        """Discard the records written so far."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._file is None:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_edge_stream(path: str | Path, src, dst, dtype: str = "int32", num_vertices: int | None = None,
                      *, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> EdgeStream:
    """Write records ``src[i] -> dst[i]`` as an edge stream with its sidecar (atomically).

    Args:
        path: the stream file.
        src, dst: integer arrays or tensors of equal length.
        dtype: ``int32`` or ``int64``.
        num_vertices: declared vertex count; default max id + 1.
        chunk_edges: records converted per step (bounds the extra memory).
    """
    src, dst = _as_numpy(src).reshape(-1), _as_numpy(dst).reshape(-1)
    with EdgeStreamWriter(path, dtype, num_vertices) as writer:
        if src.shape != dst.shape:
            raise ValueError(f"write_edge_stream({path}): src and dst differ in length ({src.size} vs {dst.size})")
        for start in range(0, src.size, chunk_edges):
            writer.append(src[start: start + chunk_edges], dst[start: start + chunk_edges])
        return writer.close()


class EdgeStream:
    """Read-only view of an edge stream file, read in chunks.

    Args:
        path: the stream file.
        dtype: ``int32`` / ``int64``; default from the sidecar, else the extension (``.e32``/``.e64``).
        num_vertices: vertex count; default from the sidecar, else max id + 1 (one streaming pass, on first use).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the dtype cannot be determined or disagrees with the sidecar, or the file size is not a
            whole number of pairs.
    """

    def __init__(self, path: str | Path, dtype: str | None = None, num_vertices: int | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"edge stream {self.path} does not exist (expected a binary file of "
                                    "(src, dst) int32/int64 pairs, with an optional sidecar FILE.json)")
        side = self._read_sidecar()
        for key, given in (("dtype", dtype), ("num_vertices", num_vertices)):
            if given is not None and key in side and side[key] != given:
                raise ValueError(f"edge stream {self.path}: {key}={given!r} disagrees with "
                                 f"{sidecar_path(self.path)} ({key}={side[key]!r})")
        dtype = dtype or side.get("dtype") or EDGE_EXTENSIONS.get(self.path.suffix)
        if dtype is None:
            raise ValueError(f"edge stream {self.path}: cannot tell its dtype; pass dtype='int32' or 'int64', "
                             f"name the file .e32/.e64, or provide {sidecar_path(self.path)}")
        self.dtype = dtype
        self.np_dtype = _check_edge_dtype(dtype, f"edge stream {self.path}")
        pair = 2 * self.np_dtype.itemsize
        size = self.path.stat().st_size
        if size % pair:
            raise ValueError(f"edge stream {self.path}: size {size} bytes is not a multiple of the {pair}-byte "
                             f"(src, dst) pair of dtype {dtype}; the file is truncated or has another dtype")
        self.num_edges = size // pair
        if "num_edges" in side and side["num_edges"] != self.num_edges:
            raise ValueError(f"edge stream {self.path} holds {self.num_edges} edges but "
                             f"{sidecar_path(self.path)} says {side['num_edges']}")
        declared = num_vertices if num_vertices is not None else side.get("num_vertices")
        if declared is not None and (not isinstance(declared, int) or declared < 0):
            raise ValueError(f"edge stream {self.path}: num_vertices must be a non-negative integer, got {declared!r}")
        self._num_vertices = declared

    def _read_sidecar(self) -> dict:
        side_file = sidecar_path(self.path)
        if not side_file.is_file():
            return {}
        try:
            side = json.loads(side_file.read_text())
        except ValueError as err:
            raise ValueError(f"{side_file} is not valid JSON: {err}") from None
        if not isinstance(side, dict) or not {"num_vertices", "num_edges", "dtype"} <= set(side):
            raise ValueError(f"{side_file} must be an object with num_vertices, num_edges and dtype")
        return side

    @property
    def num_vertices(self) -> int:
        """Declared vertex count, or max id + 1 found by one streaming pass (cached)."""
        if self._num_vertices is None:
            top = -1
            for src, dst in self.chunks():
                if src.size:
                    top = max(top, int(src.max()), int(dst.max()))
            self._num_vertices = top + 1
        return self._num_vertices

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES, start: int = 0,
               stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(src, dst)`` arrays of at most ``chunk_edges`` records from edge ``start`` to ``stop``.

        Arrays are contiguous, native-endian, of the stream's dtype. Every chunk
        is checked: a negative id, or one ``>= num_vertices`` when the count is
        known, raises a ValueError naming the file and the edge index.
        """
        if chunk_edges < 1:
            raise ValueError(f"chunk_edges must be >= 1, got {chunk_edges}")
        stop = self.num_edges if stop is None else min(stop, self.num_edges)
        if not 0 <= start <= stop:
            raise ValueError(f"edge stream {self.path}: bad edge range [{start}, {stop}) of {self.num_edges}")
        native = self.np_dtype.newbyteorder("=")
        with open(self.path, "rb") as f:
            f.seek(start * 2 * self.np_dtype.itemsize)
            for index, first in enumerate(range(start, stop, chunk_edges)):
                n = min(chunk_edges, stop - first)
                buf = np.fromfile(f, dtype=self.np_dtype, count=2 * n)
                if buf.size != 2 * n:
                    raise ValueError(f"edge stream {self.path} ended early at edge {first + buf.size // 2}")
                pairs = buf.reshape(n, 2).astype(native, copy=False)
                src, dst = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
                self._check_chunk(src, dst, first, index)
                yield src, dst

    def _check_chunk(self, src: np.ndarray, dst: np.ndarray, first: int, index: int) -> None:
        if not src.size:
            return
        bound = self._num_vertices
        lo, hi = min(src.min(), dst.min()), max(src.max(), dst.max())
        if lo >= 0 and (bound is None or hi < bound):
            return
        bad = (src < 0) | (dst < 0)
        if bound is not None:
            bad |= (src >= bound) | (dst >= bound)
        i = int(np.argmax(bad))
        raise ValueError(f"edge stream {self.path}: edge {first + i} (in chunk {index} starting at edge {first}) "
                         f"is ({src[i]}, {dst[i]}); vertex ids must lie in "
                         f"[0, {'max id + 1' if bound is None else bound})")

    def degrees(self, which: str = "dst", chunk_edges: int = DEFAULT_CHUNK_EDGES) -> np.ndarray:
        """Count records per vertex in one streaming pass.

        Args:
            which: ``dst`` (in-degree), ``src`` (out-degree) or ``both`` (their sum).
            chunk_edges: records per chunk.

        Returns:
            int64 ``[num_vertices]``.
        """
        if which not in ("dst", "src", "both"):
            raise ValueError(f"degrees: which must be 'dst', 'src' or 'both', got {which!r}")
        n = self.num_vertices
        deg = np.zeros(n, dtype=np.int64)
        for src, dst in self.chunks(chunk_edges):
            if which in ("dst", "both"):
                deg += np.bincount(dst, minlength=n)
            if which in ("src", "both"):
                deg += np.bincount(src, minlength=n)
        return deg

    def __repr__(self) -> str:
        nv = self._num_vertices if self._num_vertices is not None else "?"
        return f"EdgeStream({str(self.path)!r}, dtype={self.dtype}, num_edges={self.num_edges}, num_vertices={nv})"


def graph_to_edge_stream(graph: Graph, path: str | Path, dtype: str | None = None,
                         *, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> EdgeStream:
    """Write every edge of ``graph`` as a record ``src -> dst``, in CSR (destination) order.

    Args:
        graph: the graph (may be memory-mapped; it is read in chunks of edges).
        path: the stream file.
        dtype: ``int32``/``int64``; default ``int32`` when ``N <= 2**31``, else ``int64``.
        chunk_edges: records per chunk.
    """
    n = graph.num_nodes
    dtype = dtype or ("int32" if n <= 2**31 else "int64")
    indptr, indices = graph.indptr.numpy(), graph.indices.numpy()
    with EdgeStreamWriter(path, dtype, n) as writer:
        for first in range(0, graph.num_edges, chunk_edges):
            last = min(first + chunk_edges, graph.num_edges)
            dst = np.searchsorted(indptr, np.arange(first, last), side="right") - 1
            writer.append(indices[first:last], dst)
        return writer.close()


def _sort_rows(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Sort the sources within every CSR row (vectorised: one sort of ``row * N + src`` keys)."""
    n = indptr.size - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    if n and n > (np.iinfo(np.int64).max // n):
        return indices[np.lexsort((indices, rows))]
    keys = np.sort(rows * n + indices)
    return keys - rows * n


def edge_stream_to_graph(stream: EdgeStream | str | Path, *, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                         name: str | None = None) -> Graph:
    """Build a :class:`Graph` (topology only) from an edge stream, in two chunked passes.

    Every record becomes one edge (duplicates and self-loops are kept; call
    ``coalesce()`` / ``remove_self_loops()`` as needed); sources within a row are
    sorted, so the layout equals :func:`graphscale.data.graph.csr_from_edges`.
    Peak memory is the CSR plus one chunk.

    Args:
        stream: an :class:`EdgeStream` or the path of one.
        chunk_edges: records per chunk.
        name: graph name; default the file's stem.
    """
    if not isinstance(stream, EdgeStream):
        stream = EdgeStream(stream)
    n = stream.num_vertices
    counts = stream.degrees("dst", chunk_edges)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(stream.num_edges, dtype=np.int64)
    cursor = indptr[:-1].copy()
    for src, dst in stream.chunks(chunk_edges):
        if not dst.size:
            continue
        order = np.argsort(dst, kind="stable")
        dst_sorted = dst[order]
        first = np.flatnonzero(np.concatenate([[True], dst_sorted[1:] != dst_sorted[:-1]]))
        group = np.diff(np.append(first, dst.size))
        rank = np.arange(dst.size) - np.repeat(first, group)
        indices[cursor[dst_sorted] + rank] = src[order]
        cursor[dst_sorted[first]] += group
    indices = _sort_rows(indptr, indices)
    return Graph(torch.from_numpy(indptr), torch.from_numpy(indices), name=name or stream.path.stem,
                 meta={"source": f"edgestream:{stream.path}"})

"""The CSR of a graph read in chunks: the records ``u -> v`` in CSR order, or blocks of whole rows.

:class:`GraphEdges` reads an in-memory :class:`~graphscale.data.graph.Graph`
(by slicing) or a graph directory (:mod:`graphscale.data.formats`; its
``indptr.npy`` and ``indices.npy`` are read with ``pread``, so neither the
arrays nor the pages read pile up in the process's memory). Both give the same
chunks: every step that streams a graph (the edge-stream partitioners, the
vertex-stream partitioners, the store writer) holds one chunk of records and
one window of row pointers at a time, whatever the graph's size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.graph import Graph

#: row pointers read per window when locating the destinations of a chunk of records
ROW_WINDOW = 1 << 16


def chunk_reader(array) -> Callable[[int, int], np.ndarray]:
    """``read(first, n) -> array[first:first + n]`` for a 1-D array; a ``np.memmap`` is read with ``os.pread``.

    Reading a memory map by slicing leaves every touched page in the resident set; positioned reads keep
    memory bounded by one chunk.
    """
    if isinstance(array, np.memmap) and array.filename is not None and array.ndim == 1 \
            and array.flags.c_contiguous:
        path, offset, dtype = array.filename, array.offset, array.dtype

        def read(first: int, n: int) -> np.ndarray:
            n = max(0, min(n, array.size - first))
            with open(path, "rb") as f:
                raw = os.pread(f.fileno(), n * dtype.itemsize, offset + first * dtype.itemsize)
            if len(raw) != n * dtype.itemsize:
                raise ValueError(f"{path} ended early: it is shorter than its .npy header says (truncated?)")
            return np.frombuffer(raw, dtype)
        return read
    return lambda first, n: np.asarray(array[first:first + n])


class GraphEdges:
    """The records ``u -> v`` of a :class:`Graph` or a graph directory, in CSR (destination) order, in chunks.

    Ids come as ``int32`` when they fit (as :func:`~graphscale.data.edge_stream.graph_to_edge_stream`
    would write them), else ``int64``. Build it from a graph directory with :meth:`from_dir`: the CSR is then
    read from the files with positioned reads, one chunk at a time.

    Args:
        graph: the graph (may be memory-mapped).
        folder: the graph directory ``graph`` was loaded from; its CSR files are read instead of the tensors.
    """

    def __init__(self, graph: Graph, folder: str | Path | None = None) -> None:
        self.graph, self.folder = graph, None if folder is None else Path(folder)
        self.num_edges = graph.num_edges
        self._dtype = np.int32 if graph.num_nodes <= 2**31 - 1 else np.int64
        if self.folder is None:
            indptr, indices = graph.indptr.numpy(), graph.indices.numpy()
        else:
            indptr, indices = (np.load(self.folder / f"{k}.npy", mmap_mode="r") for k in ("indptr", "indices"))
            if indptr.shape != (graph.num_nodes + 1,) or indices.shape != (graph.num_edges,):
                raise ValueError(f"{self.folder}: indptr.npy / indices.npy changed since the graph was loaded")
        self._mapped = (indptr, indices)
        self._indptr, self._indices = chunk_reader(indptr), chunk_reader(indices)

    @classmethod
    def from_dir(cls, folder: str | Path) -> GraphEdges:
        """The records of the graph directory ``folder`` (opened and checked by
        :func:`~graphscale.data.formats.load_graph_dir`)."""
        from graphscale.data.formats import load_graph_dir

        return cls(load_graph_dir(folder, mmap=True), folder)

    @property
    def num_vertices(self) -> int:
        return self.graph.num_nodes

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, indices)`` for random access: the graph's arrays, or read-only maps of the directory's files
        (pages read are file-backed and reclaimable)."""
        return self._mapped

    def indptr(self, first: int, n: int) -> np.ndarray:
        """``indptr[first:first + n]`` (int64)."""
        return self._indptr(first, n)

    def indices(self, first: int, n: int) -> np.ndarray:
        """``indices[first:first + n]`` (int64)."""
        return self._indices(first, n)

    def chunks(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(src, dst)`` of ``chunk_edges`` records (the last chunk may be shorter)."""
        if chunk_edges < 1:
            raise ValueError(f"chunk_edges must be >= 1, got {chunk_edges}")
        n, row = self.num_vertices, 0
        for first in range(0, self.num_edges, chunk_edges):
            last = min(first + chunk_edges, self.num_edges)
            dst = np.empty(last - first, self._dtype)
            pos = first
            while pos < last:
                window = self._indptr(row, min(ROW_WINDOW, n - row) + 1)
                upto = min(last, int(window[-1]))
                step = np.searchsorted(window, np.arange(pos, upto), side="right") - 1
                dst[pos - first:upto - first] = row + step
                if upto < last:  # the chunk goes on past this window
                    row += window.size - 1
                else:  # the row holding record `last` (or the last row ending at it)
                    row += int(np.searchsorted(window, last, side="right")) - 1
                pos = upto
            yield np.ascontiguousarray(self._indices(first, last - first), dtype=self._dtype), dst

    def row_blocks(self, max_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Yield ``(first_row, indptr_block, indices_block)`` for consecutive blocks of whole rows.

        ``indptr_block`` holds the block's ``rows + 1`` row pointers rebased to 0, ``indices_block`` its records'
        sources (int64). A block holds at most ``max_edges`` records, except a single row longer than that.
        """
        if max_edges < 1:
            raise ValueError(f"max_edges must be >= 1, got {max_edges}")
        n, row = self.num_vertices, 0
        while row < n:
            window = self._indptr(row, min(ROW_WINDOW, n - row) + 1)
            base = int(window[0])
            rows = max(1, int(np.searchsorted(window, base + max_edges, side="right")) - 1)
            ptr = window[:rows + 1] - base
            yield row, ptr, self._indices(base, int(ptr[-1]))
            row += rows

    def in_degrees(self) -> np.ndarray:
        """In-degree (records per destination) of every vertex, int64 ``[N]``, from the row pointers."""
        n = self.num_vertices
        out = np.empty(n, np.int64)
        for row in range(0, n, ROW_WINDOW):
            window = self._indptr(row, min(ROW_WINDOW, n - row) + 1)
            out[row:row + window.size - 1] = np.diff(window)
        return out

    def __repr__(self) -> str:
        where = f", folder={str(self.folder)!r}" if self.folder is not None else ""
        return (f"GraphEdges({self.graph.name!r}, num_vertices={self.num_vertices}, num_edges={self.num_edges}"
                f"{where})")

"""The induced subgraph of a vertex set, read from the whole graph's CSR in blocks of rows, never built whole.

:class:`InducedEdges` serves a partitioner that streams rows
(:meth:`~graphscale.partition.csr_source.GraphEdges.row_blocks`, ``in_degrees``; the vertex-stream partitioners
LDG, Fennel and restream in natural order) the subgraph ``graph.subgraph(nodes)`` would give, for ascending
``nodes``: vertex ``nodes[k]`` is local vertex ``k``, a row keeps the in-neighbours inside ``nodes``, relabelled,
in the whole graph's order (ascending, as the rows of a :class:`~graphscale.data.graph.Graph` and of a graph
directory are, so the same CSR). Its state is an ``int64 [N]`` map from global to local ids, two ``[len(nodes)]`` arrays (the rows'
parent pointers and kept counts) and one block of rows at a time; the whole graph's arrays may be memory-mapped
(the rows are gathered from them, so the pages read are file-backed and reclaimable).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.graph import Graph


def gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, sources)``: the CSR rows ``rows`` of ``(indptr, indices)``, concatenated in that order."""
    starts = np.asarray(indptr[rows], dtype=np.int64)
    counts = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    total = int(counts.sum())
    if total == 0:
        return counts, np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(ends - counts - starts, counts)
    return counts, np.asarray(indices[offsets], dtype=np.int64)


def row_ranges(degree: np.ndarray, max_edges: int) -> Iterator[tuple[int, int]]:
    """``(first, last)`` consecutive ranges of rows whose ``degree`` sums to at most ``max_edges`` (at least one row
    each): blocks of rows to gather at a time."""
    if max_edges < 1:
        raise ValueError(f"max_edges must be >= 1, got {max_edges}")
    ends = np.cumsum(degree)
    first = 0
    while first < degree.size:
        base = int(ends[first - 1]) if first else 0
        last = max(first + 1, int(np.searchsorted(ends, base + max_edges, side="right")))
        yield first, last
        first = last


class InducedEdges:
    """The CSR of ``graph.subgraph(nodes)`` (``nodes`` ascending) in blocks of rows (see the module docstring).

    Args:
        graph: the whole graph (its ``indptr`` / ``indices`` may be memory-mapped).
        nodes: ascending global ids.
        local: an ``int64 [N]`` array of ``-1`` to use as the global-to-local map (restored to ``-1`` by
            :meth:`close`), so that a caller cutting several vertex sets allocates it once.
        block_edges: parent records gathered per block while counting.
    """

    def __init__(self, graph: Graph, nodes: np.ndarray, local: np.ndarray | None = None,
                 block_edges: int = DEFAULT_CHUNK_EDGES) -> None:
        self.graph = graph
        self.nodes = np.asarray(nodes, dtype=np.int64)
        if self.nodes.size > 1 and not bool((self.nodes[1:] > self.nodes[:-1]).all()):
            raise ValueError("InducedEdges: nodes must be ascending and distinct")
        self._indptr, self._indices = graph.indptr.numpy(), graph.indices.numpy()
        self._local = np.full(graph.num_nodes, -1, np.int64) if local is None else local
        self._local[self.nodes] = np.arange(self.nodes.size)
        self._parent_degree = np.asarray(self._indptr[self.nodes + 1], np.int64) - np.asarray(self._indptr[self.nodes],
                                                                                               np.int64)
        self._degree = np.zeros(self.nodes.size, np.int64)
        for first, last in self._blocks(block_edges):
            _, sources = gather_rows(self._indptr, self._indices, self.nodes[first:last])
            row = np.repeat(np.arange(last - first), self._parent_degree[first:last])
            kept = self._local[sources] >= 0
            self._degree[first:last] = np.bincount(row[kept], minlength=last - first)
        self.num_edges = int(self._degree.sum())

    @property
    def num_vertices(self) -> int:
        return int(self.nodes.size)

    def _blocks(self, max_edges: int) -> Iterator[tuple[int, int]]:
        """``(first, last)`` local row ranges of at most ``max_edges`` parent records (at least one row)."""
        return row_ranges(self._parent_degree, max_edges)

    def in_degrees(self) -> np.ndarray:
        """Kept records per local vertex, int64 ``[len(nodes)]``."""
        return self._degree.copy()

    def row_blocks(self, max_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first_row, indptr_block, indices_block)`` as :meth:`GraphEdges.row_blocks` gives them for the induced
        subgraph (a row's sources in the whole graph's order); a block gathers at most ``max_edges`` parent records
        (except a single longer row)."""
        for first, last in self._blocks(max_edges):
            src = self._local[gather_rows(self._indptr, self._indices, self.nodes[first:last])[1]]
            ptr = np.zeros(last - first + 1, np.int64)
            np.cumsum(self._degree[first:last], out=ptr[1:])
            yield first, ptr, src[src >= 0]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole induced CSR ``(indptr, indices)`` in memory (random-order streaming reads rows anywhere)."""
        ptr = np.zeros(self.nodes.size + 1, np.int64)
        np.cumsum(self._degree, out=ptr[1:])
        indices = np.empty(int(ptr[-1]), np.int64)
        for first, block_ptr, block in self.row_blocks():
            indices[ptr[first]:ptr[first] + block.size] = block
        return ptr, indices

    def close(self) -> None:
        """Restore the global-to-local map to ``-1``."""
        self._local[self.nodes] = -1

    def __repr__(self) -> str:
        return f"InducedEdges({self.graph.name!r}, num_vertices={self.num_vertices}, num_edges={self.num_edges})"

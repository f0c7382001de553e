"""The planner's per-chunk kernels: a chunk's block in one pass, a neighbour set's new members.

The offload planner builds one block per chunk and worker (:func:`~graphscale.strategies.offload.plan.batch_plans`),
``M K`` of them per layout. :class:`ChunkBlocks` builds each in time linear in the chunk's edges (a numba loop over
its destinations' CSR rows, a sort of its halo) with one ``int64 [N]`` position map allocated once and reset after
every chunk, instead of per-chunk binary searches and unique passes: the very same block (destinations first, then
the halo in ascending global id; local source rows; the given degrees of the sources; a weighted graph's edge
weights), which the tests compare with :meth:`Block.from_nodes`.

:func:`mark_new` collects a chunk's neighbour set as its members are first marked
(:func:`~graphscale.strategies.offload.layout.write_group_sets`), so the set costs its gathered records, not a scan
of the ``bool [N]`` marks per chunk.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph


@numba.njit(nogil=True, cache=True)
def _chunk_rows(indptr, indices, nodes, position):  # pragma: no cover - numba
    """``(indptr, local sources, halo ascending, edge offsets)`` of ``nodes``' rows; ``position`` (``-1``
    everywhere on entry) is ``-1`` everywhere again on return."""
    d = nodes.size
    ptr = np.zeros(d + 1, np.int64)
    for i in range(d):
        v = nodes[i]
        ptr[i + 1] = ptr[i] + indptr[v + 1] - indptr[v]
        position[v] = i
    e = ptr[d]
    offsets = np.empty(e, np.int64)
    halo = np.empty(e, np.int64)
    h = 0
    for i in range(d):
        v = nodes[i]
        first = indptr[v]
        for t in range(indptr[v + 1] - first):
            offsets[ptr[i] + t] = first + t
            u = indices[first + t]
            if position[u] == -1:
                position[u] = -2  # a halo row, counted once
                halo[h] = u
                h += 1
    halo = np.sort(halo[:h])
    for q in range(h):
        position[halo[q]] = d + q
    local = np.empty(e, np.int64)
    for t in range(e):
        local[t] = position[indices[offsets[t]]]
    for i in range(d):
        position[nodes[i]] = -1
    for q in range(h):
        position[halo[q]] = -1
    return ptr, local, halo, offsets


@numba.njit(nogil=True, cache=True)
def _mark_new(sources, mark):  # pragma: no cover - numba
    out = np.empty(sources.size, np.int64)
    h = 0
    for t in range(sources.size):
        u = sources[t]
        if not mark[u]:
            mark[u] = True
            out[h] = u
            h += 1
    return out[:h]


def mark_new(sources: np.ndarray, mark: np.ndarray) -> np.ndarray:
    """The distinct ``sources`` not yet set in ``mark`` (``bool [N]``), in order of first appearance, now set."""
    return _mark_new(np.ascontiguousarray(sources), mark)


class ChunkBlocks:
    """Blocks of distinct destination sets of ``graph`` (the module docstring); ``degrees``: the global degrees
    the blocks carry (:meth:`Graph.gcn_degrees`)."""

    def __init__(self, graph: Graph, degrees: torch.Tensor) -> None:
        self.indptr = graph.indptr.numpy()
        self.indices = graph.indices.numpy()
        self.weight = graph.edge_weight
        self.degrees = degrees
        self.position = np.full(graph.num_nodes, -1, np.int64)

    def block(self, nodes: torch.Tensor) -> Block:
        """The block of destinations ``nodes`` (distinct global ids, in that order) with all their in-edges."""
        nodes = torch.as_tensor(nodes, dtype=torch.int64)
        ptr, local, halo, offsets = _chunk_rows(self.indptr, self.indices, nodes.numpy(), self.position)
        src_ids = torch.cat([nodes, torch.from_numpy(halo)])
        weight = None if self.weight is None else self.weight[torch.from_numpy(offsets)]
        return Block(torch.from_numpy(ptr), torch.from_numpy(local), src_ids, self.degrees[src_ids], weight)

"""Vertex partitioners and the helpers every partitioner shares.

A vertex partitioner maps each vertex to a part: ``partition(graph, num_parts,
seed) -> owner`` (int64 ``[N]``, values in ``[0, num_parts)``). It is a pure
function of its inputs: the same graph, part count and seed give the same
owner array on every worker. Scoring functions (:func:`partition_sizes`,
:func:`edge_cut`, :func:`halo_sizes`, :func:`replication_factor`) take an owner
array from any partitioner.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod

import torch

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.graph import Graph


def validate_num_parts(num_parts: int, num_nodes: int) -> None:
    """Raise ``TypeError`` unless ``num_parts`` is an int, ``ValueError`` unless ``1 <= num_parts <= num_nodes``."""
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise TypeError(f"num_parts must be an integer, got {num_parts!r}")
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    if num_parts > num_nodes:
        raise ValueError(f"num_parts={num_parts} exceeds the number of vertices ({num_nodes}); "
                         "every part needs at least one vertex")


def validate_owner(owner: torch.Tensor, num_nodes: int, num_parts: int) -> torch.Tensor:
    """Check an owner array (int64 ``[num_nodes]``, values in ``[0, num_parts)``) and return it as int64."""
    owner = torch.as_tensor(owner)
    if owner.dtype.is_floating_point or owner.dtype == torch.bool:
        raise ValueError(f"owner must be an integer array, got dtype {owner.dtype}")
    owner = owner.to(torch.int64)
    if owner.shape != (num_nodes,):
        raise ValueError(f"owner must have shape ({num_nodes},), got {tuple(owner.shape)}")
    if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise ValueError(f"owner values must lie in [0, {num_parts}), got [{int(owner.min())}, {int(owner.max())}]")
    return owner


class VertexPartitioner(ABC):
    """Assigns every vertex to one of ``num_parts`` parts.

    Subclasses implement :meth:`_partition`; :meth:`partition` validates the
    arguments and the result.
    """

    #: registry name
    name: str = ""
    #: host memory budget (bytes, or a ``--host-memory`` value; ``None``: what the machine can spare when the
    #: partition starts) that a partitioner needing more than O(|V|) memory (METIS) checks its estimate against
    host_memory: int | str | None = None

    def partition(self, graph: Graph, num_parts: int, seed: int = 0) -> torch.Tensor:
        """Owner of every vertex.

        Args:
            graph: the graph (its edge direction is ignored by symmetric partitioners).
            num_parts: number of parts, ``1 <= num_parts <= graph.num_nodes``.
            seed: makes randomised partitioners deterministic.

        Returns:
            int64 ``[N]`` with values in ``[0, num_parts)``.

        Raises:
            TypeError: ``num_parts`` is not an int.
            ValueError: ``num_parts`` is out of range.
        """
        validate_num_parts(num_parts, graph.num_nodes)
        if num_parts == 1:
            return torch.zeros(graph.num_nodes, dtype=torch.int64)
        if graph.weighted:  # a vertex partition reads the topology only (edge weights do not weigh the cut)
            graph = dataclasses.replace(graph, edge_weight=None)
        owner = self._partition(graph, num_parts, seed)
        return validate_owner(owner, graph.num_nodes, num_parts)

    def partition_csr(self, csr, num_parts: int, seed: int = 0,
                      chunk_edges: int = DEFAULT_CHUNK_EDGES) -> torch.Tensor:
        """Owner of every vertex of a graph given as a CSR source
        (:class:`~graphscale.partition.csr_source.GraphEdges`, e.g. ``GraphEdges.from_dir(DIR)``).

        The streaming partitioners (LDG, Fennel, restream and the edge-stream partitioners) override it to read the
        CSR in chunks of about ``chunk_edges`` records, in O(|V|) memory; the others partition ``csr.graph`` whole
        (its arrays may be memory-mapped: ``random`` touches none of them, METIS checks its memory estimate against
        :attr:`host_memory` first).
        """
        return self.partition(csr.graph, num_parts, seed)

    @abstractmethod
    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        """Compute the owner array; arguments are already validated and ``num_parts >= 2``."""


def partition_sizes(owner: torch.Tensor, num_parts: int) -> torch.Tensor:
    """Vertices per part, int64 ``[num_parts]``."""
    return torch.bincount(torch.as_tensor(owner, dtype=torch.int64), minlength=num_parts)


def edge_cut(graph: Graph, owner: torch.Tensor) -> int:
    """Number of stored edges ``u -> v`` whose endpoints lie in different parts.

    A symmetric graph stores both directions, so each undirected cut edge counts twice.
    """
    owner = torch.as_tensor(owner, dtype=torch.int64)
    return int((owner[graph.indices] != owner[graph.dst_of_edges()]).sum())


def halo_sizes(graph: Graph, owner: torch.Tensor, num_parts: int) -> torch.Tensor:
    """``|B_i|`` per part: distinct vertices outside part ``i`` with an edge into part ``i``.

    These are the rows part ``i`` receives in a halo exchange (the non-destination
    sources of ``Block.from_nodes(graph, part_i)``). Self-loops never contribute.

    Returns:
        int64 ``[num_parts]``.
    """
    owner = torch.as_tensor(owner, dtype=torch.int64)
    src, dst_part = graph.indices, owner[graph.dst_of_edges()]
    cross = owner[src] != dst_part
    n = max(graph.num_nodes, 1)
    pairs = torch.unique(dst_part[cross] * n + src[cross])
    return torch.bincount(pairs // n, minlength=num_parts)


def replication_factor(graph: Graph, owner: torch.Tensor, num_parts: int) -> float:
    """``rho = sum_i |B_i| / N`` (GNNPipe's replication factor)."""
    return float(halo_sizes(graph, owner, num_parts).sum()) / max(graph.num_nodes, 1)

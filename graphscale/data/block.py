"""Blocks: the bipartite graph pieces every GNN layer runs on.

A block has ``num_dst`` destination rows and ``num_src`` source rows, stored as
CSR by destination (``indptr[num_dst+1]``, ``indices[nnz]`` are *local* source
row numbers). The first ``num_dst`` source rows are the destinations themselves
(DGL's convention), so ``x_src[:num_dst]`` is the destinations' own input.

Every block carries the *global* ids of its source rows (``src_ids``) and their
*global* in-degrees (``src_deg``: in-degree as stored in the graph; datasets are
loaded without self-loops, and GCN adds its implicit self-loop on top; for a weighted graph, the float64 sum of
the in-edge weights, :meth:`Graph.gcn_degrees`). A weighted graph's blocks carry their edges' weights
(``edge_weight``, CSR order). Global quantities are
computed once on the whole graph and carried in, never recomputed per piece:
GCN's normalisation uses them, and recomputed dropout masks are keyed by the
global ids.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from graphscale.data.graph import Graph


def csr_rows(graph: Graph, nodes: torch.Tensor, weights: bool = False):
    """The CSR rows of ``nodes`` (in that order): ``(indptr [len(nodes)+1], sources [nnz])``, sources as graph ids,
    and with ``weights`` their edges' weights as a third element (``None`` for an unweighted graph).

    Only those rows of ``graph.indptr`` / ``graph.indices`` are read (a memory-mapped graph stays on disk).
    """
    starts, ends = graph.indptr[nodes], graph.indptr[nodes + 1]
    counts = ends - starts
    indptr = torch.zeros(nodes.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=indptr[1:])
    offsets = torch.arange(int(indptr[-1])) - torch.repeat_interleave(indptr[:-1] - starts, counts)
    if weights:
        return indptr, graph.indices[offsets], None if graph.edge_weight is None else graph.edge_weight[offsets]
    return indptr, graph.indices[offsets]


@dataclass
class Block:
    """A bipartite ``dst x src`` CSR piece of a graph.

    Attributes:
        indptr: int64 ``[num_dst+1]``.
        indices: int64 ``[nnz]``, local source rows in ``[0, num_src)``.
        src_ids: int64 ``[num_src]`` global vertex ids; ``src_ids[:num_dst]`` are the destinations.
        src_deg: int64 ``[num_src]`` global in-degree of every source row (as stored in the graph); float64 weighted
            in-degree for a weighted graph (:meth:`Graph.gcn_degrees`).
        edge_weight: float64 ``[nnz]`` weights of a weighted graph's edges, else ``None``.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    src_ids: torch.Tensor
    src_deg: torch.Tensor
    edge_weight: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.src_ids.numel() < self.num_dst:
            raise ValueError(f"Block has {self.num_dst} destinations but only {self.src_ids.numel()} source rows; "
                             "destinations must be the first source rows")
        if self.src_deg.numel() != self.src_ids.numel():
            raise ValueError("Block.src_deg must have one entry per source row")

    @property
    def num_dst(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_src(self) -> int:
        return self.src_ids.numel()

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def dst_ids(self) -> torch.Tensor:
        return self.src_ids[: self.num_dst]

    @property
    def halo_ids(self) -> torch.Tensor:
        """Global ids of the source rows that are not destinations."""
        return self.src_ids[self.num_dst:]

    def dst_of_edges(self) -> torch.Tensor:
        """Local destination row of every edge, shape ``[nnz]``."""
        return torch.repeat_interleave(torch.arange(self.num_dst, device=self.indptr.device),
                                       self.indptr[1:] - self.indptr[:-1])

    def to(self, device) -> Block:
        def move(t):
            return None if t is None else t.to(device, non_blocking=True)
        return replace(self, indptr=move(self.indptr), indices=move(self.indices), src_ids=move(self.src_ids),
                       src_deg=move(self.src_deg), edge_weight=move(self.edge_weight))

    def select_edges(self, keep: torch.Tensor) -> Block:
        """The block with only the edges where ``keep`` (bool ``[nnz]``, CSR order) is true.

        Destinations and their order stay; halo rows that lose every edge are dropped, the others keep their
        order; degrees stay the global ones (a masked operator normalises like the whole graph).
        """
        if keep.dtype != torch.bool or keep.shape != self.indices.shape:
            raise ValueError(f"Block.select_edges: keep must be bool [{self.num_edges}], got {keep.dtype} "
                             f"{tuple(keep.shape)}")
        counts = torch.zeros(self.num_dst, dtype=torch.int64, device=self.indptr.device)
        counts.index_add_(0, self.dst_of_edges()[keep], torch.ones_like(self.indices[keep]))
        indptr = torch.zeros_like(self.indptr)
        torch.cumsum(counts, 0, out=indptr[1:])
        indices = self.indices[keep]
        used = torch.zeros(self.num_src, dtype=torch.bool, device=indices.device)
        used[: self.num_dst] = True
        used[indices] = True
        new_row = torch.cumsum(used, 0) - 1
        return Block(indptr, new_row[indices], self.src_ids[used], self.src_deg[used],
                     None if self.edge_weight is None else self.edge_weight[keep])

    # ------------------------------------------------------------ builders
    @classmethod
    def full(cls, graph: Graph) -> Block:
        """The whole graph as one block (``dst = src = V``)."""
        n = graph.num_nodes
        return cls(graph.indptr, graph.indices, torch.arange(n), graph.gcn_degrees(), graph.edge_weight)

    @classmethod
    def from_nodes(cls, graph: Graph, nodes: torch.Tensor, degrees: torch.Tensor | None = None) -> Block:
        """Destinations ``nodes`` with all their in-edges; sources = nodes, then the 1-hop halo.

        The halo (in-neighbours that are not in ``nodes``) is ordered by ascending global id.

        Args:
            graph: the whole graph (its CSR rows are read for ``nodes`` only).
            nodes: int64 global ids of the destinations, in the order the rows should have.
            degrees: global in-degrees ``[N]`` (:meth:`Graph.gcn_degrees`); by default the sources' rows of
                ``graph.indptr`` give them (for a weighted graph, :meth:`Graph.gcn_degrees`).

        Ascending ``nodes`` (the common case) are mapped by binary search, so no ``[N]`` array is allocated
        and a memory-mapped graph is read only where the block is.
        """
        nodes = torch.as_tensor(nodes, dtype=torch.int64)
        indptr, global_src, weight = csr_rows(graph, nodes, weights=True)
        if bool((nodes[1:] > nodes[:-1]).all()):
            pos = torch.searchsorted(nodes, global_src).clamp_(max=max(nodes.numel() - 1, 0))
            inner = nodes[pos] == global_src if nodes.numel() else torch.zeros(0, dtype=torch.bool)
            halo = torch.unique(global_src[~inner])
            local = torch.where(inner, pos, nodes.numel() + torch.searchsorted(halo, global_src))
        else:
            is_dst = torch.zeros(graph.num_nodes, dtype=torch.bool)
            is_dst[nodes] = True
            halo = torch.unique(global_src[~is_dst[global_src]])
            lut = torch.full((graph.num_nodes,), -1, dtype=torch.int64)
            lut[torch.cat([nodes, halo])] = torch.arange(nodes.numel() + halo.numel())
            local = lut[global_src]
        src_ids = torch.cat([nodes, halo])
        if degrees is None and graph.weighted:
            degrees = graph.gcn_degrees()
        src_deg = graph.indptr[src_ids + 1] - graph.indptr[src_ids] if degrees is None else degrees[src_ids]
        return cls(indptr, local, src_ids, src_deg, weight)

"""The in-memory graph: CSR topology by destination plus node data.

Edge direction is explicit: ``indptr``/``indices`` store, for every destination
vertex ``v``, the sources ``u`` of its in-edges ``u -> v``
(``indices[indptr[v]:indptr[v+1]]``). GNN aggregation is over in-neighbours,
so a row of the CSR is exactly what one output row needs.

An optional per-edge weight ``edge_weight`` (float64, aligned with ``indices``) is what a PyG conv's
``edge_weight`` receives; GCN normalises a weighted graph by its weighted in-degrees (:meth:`Graph.gcn_degrees`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch


def csr_from_edges(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Build a destination-major CSR from edge lists.

    Within a row, sources are sorted ascending so the layout is canonical
    (two graphs with the same edge set have identical arrays).

    Args:
        src: int64 source ids, shape ``[E]``.
        dst: int64 destination ids, shape ``[E]``.
        num_nodes: number of vertices ``N``.

    Returns:
        ``(indptr [N+1], indices [E])``, both int64.
    """
    indptr, indices, _ = csr_order(src, dst, num_nodes)
    return indptr, indices


def csr_order(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`csr_from_edges` and the permutation it applied: ``(indptr, indices, order)``, ``indices =
    src[order]`` (how per-edge values follow the edges into CSR order)."""
    src = torch.as_tensor(src, dtype=torch.int64)
    dst = torch.as_tensor(dst, dtype=torch.int64)
    if src.shape != dst.shape or src.dim() != 1:
        raise ValueError(f"src and dst must be 1-D and equally long, got {tuple(src.shape)} and {tuple(dst.shape)}")
    if src.numel() and (int(src.min()) < 0 or int(dst.min()) < 0 or int(src.max()) >= num_nodes or int(dst.max()) >= num_nodes):
        raise ValueError(f"edge endpoints must lie in [0, {num_nodes}); got range "
                         f"[{int(torch.minimum(src.min(), dst.min()))}, {int(torch.maximum(src.max(), dst.max()))}]")
    key = dst * max(num_nodes, 1) + src
    order = torch.argsort(key, stable=True)
    indices = src[order].contiguous()
    counts = torch.bincount(dst, minlength=num_nodes)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=indptr[1:])
    return indptr, indices, order


@dataclass
class Graph:
    """A graph with CSR-by-destination topology and optional node data.

    Attributes:
        indptr: int64 ``[N+1]`` row pointers (rows are destinations).
        indices: int64 ``[E]`` source vertex of each in-edge.
        x: node features ``[N, F]`` or ``None``.
        y: int64 labels ``[N]`` (``-1`` = unlabelled), a uint8 0/1 multi-label matrix ``[N, C]``
            (see :attr:`multilabel`), or ``None``.
        train_mask, val_mask, test_mask: bool ``[N]`` or ``None``.
        name: a human-readable name used in reports.
        edge_weight: float64 ``[E]`` weight of every in-edge (aligned with ``indices``), or ``None``.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    train_mask: torch.Tensor | None = None
    val_mask: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    name: str = "graph"
    meta: dict = field(default_factory=dict)
    edge_weight: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.indptr = torch.as_tensor(self.indptr, dtype=torch.int64)
        self.indices = torch.as_tensor(self.indices, dtype=torch.int64)
        if self.indptr.dim() != 1 or self.indptr.numel() < 1:
            raise ValueError("Graph.indptr must be a 1-D tensor of length N+1 >= 1")
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != self.indices.numel():
            raise ValueError(f"Graph.indptr must start at 0 and end at len(indices)={self.indices.numel()}, "
                             f"got {int(self.indptr[0])}..{int(self.indptr[-1])}")
        if self.edge_weight is not None:
            self.edge_weight = torch.as_tensor(self.edge_weight)
            if self.edge_weight.shape != self.indices.shape or not self.edge_weight.is_floating_point():
                raise ValueError(f"Graph.edge_weight must be a float [{self.num_edges}] tensor (one weight per edge), "
                                 f"got {self.edge_weight.dtype} {tuple(self.edge_weight.shape)}")
            self.edge_weight = self.edge_weight.to(torch.float64)
        n = self.num_nodes
        for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
            value = getattr(self, name)
            if value is not None and value.shape[0] != n:
                raise ValueError(f"Graph.{name} has {value.shape[0]} rows, expected num_nodes={n}")
        if self.y is not None and self.y.dim() not in (1, 2):
            raise ValueError(f"Graph.y must be [N] class ids or an [N, C] multi-label matrix, got shape "
                             f"{tuple(self.y.shape)}")

    # ----------------------------------------------------------------- basics
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int, edge_weight=None, **data) -> Graph:
        """Build a graph from edge lists ``src -> dst`` (see :func:`csr_from_edges`), with the edges' weights
        ``edge_weight [E]`` (in the lists' order) when given."""
        indptr, indices, order = csr_order(src, dst, num_nodes)
        weight = None if edge_weight is None else torch.as_tensor(edge_weight)[order]
        return cls(indptr, indices, edge_weight=weight, **data)

    @property
    def weighted(self) -> bool:
        """Whether the edges carry weights (:attr:`edge_weight`)."""
        return self.edge_weight is not None

    def gcn_degrees(self) -> torch.Tensor:
        """The degrees GCN normalises by: in-degrees (int64 ``[N]``), or for a weighted graph the sum of every
        vertex's in-edge weights (float64 ``[N]``, PyG's ``gcn_norm`` before its self-loop)."""
        if self.edge_weight is None:
            return self.in_degrees()
        return torch.zeros(self.num_nodes, dtype=torch.float64).index_add_(0, self.dst_of_edges(), self.edge_weight)

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def multilabel(self) -> bool:
        """Whether ``y`` is an ``[N, C]`` 0/1 matrix (a node may have several classes, or none) rather
        than one class id per node."""
        return self.y is not None and self.y.dim() == 2

    @property
    def num_classes(self) -> int:
        if "num_classes" in self.meta:
            return int(self.meta["num_classes"])
        if self.multilabel:
            return int(self.y.shape[1])
        return 0 if self.y is None or self.y.numel() == 0 else int(self.y.max()) + 1

    def dst_of_edges(self) -> torch.Tensor:
        """Destination id of every edge in CSR order, shape ``[E]``."""
        return torch.repeat_interleave(torch.arange(self.num_nodes), self.in_degrees())

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` tensor ``(src, dst)`` in CSR order (PyG convention)."""
        return torch.stack([self.indices, self.dst_of_edges()])

    def in_degrees(self) -> torch.Tensor:
        """In-degree of every vertex (int64 ``[N]``)."""
        return self.indptr[1:] - self.indptr[:-1]

    def out_degrees(self) -> torch.Tensor:
        """Out-degree of every vertex (int64 ``[N]``)."""
        return torch.bincount(self.indices, minlength=self.num_nodes)

    def is_symmetric(self) -> bool:
        return self.symmetrize().num_edges == self.coalesce().num_edges

    def has_self_loops(self) -> bool:
        return bool((self.indices == self.dst_of_edges()).any())

    # ----------------------------------------------------------- transforms
    def _with_topology(self, src: torch.Tensor, dst: torch.Tensor) -> Graph:
        if self.edge_weight is not None:
            raise ValueError("this graph has edge weights (edge_weight), which changing its edges (coalesce, "
                             "symmetrize, self-loops) would not keep; change the edges before weighting them")
        indptr, indices = csr_from_edges(src, dst, self.num_nodes)
        return replace(self, indptr=indptr, indices=indices, meta=dict(self.meta))

    def coalesce(self) -> Graph:
        """Drop duplicate edges."""
        n = max(self.num_nodes, 1)
        key = torch.unique(self.dst_of_edges() * n + self.indices)
        return self._with_topology(key % n, key // n)

    def symmetrize(self) -> Graph:
        """Add the reverse of every edge and drop duplicates."""
        src, dst = self.indices, self.dst_of_edges()
        n = max(self.num_nodes, 1)
        key = torch.unique(torch.cat([dst * n + src, src * n + dst]))
        return self._with_topology(key % n, key // n)

    def remove_self_loops(self) -> Graph:
        src, dst = self.indices, self.dst_of_edges()
        keep = src != dst
        return self._with_topology(src[keep], dst[keep])

    def add_self_loops(self) -> Graph:
        """Add one self-loop per vertex (existing self-loops are replaced)."""
        g = self.remove_self_loops()
        loops = torch.arange(self.num_nodes)
        return g._with_topology(torch.cat([g.indices, loops]), torch.cat([g.dst_of_edges(), loops]))

    def subgraph(self, nodes: torch.Tensor) -> Graph:
        """Induced subgraph on ``nodes``, relabelled ``0..len(nodes)-1`` in the given order.

        Node data rows are taken in the same order; ``meta['global_ids']`` holds ``nodes``.
        """
        nodes = torch.as_tensor(nodes, dtype=torch.int64)
        local = torch.full((self.num_nodes,), -1, dtype=torch.int64)
        local[nodes] = torch.arange(nodes.numel())
        src, dst = local[self.indices], local[self.dst_of_edges()]
        keep = (src >= 0) & (dst >= 0)
        data = {k: (None if getattr(self, k) is None else getattr(self, k)[nodes])
                for k in ("x", "y", "train_mask", "val_mask", "test_mask")}
        meta = dict(self.meta, global_ids=nodes)
        weight = None if self.edge_weight is None else self.edge_weight[keep]
        return Graph.from_edges(src[keep], dst[keep], nodes.numel(), weight, name=self.name, meta=meta, **data)

    def relabel(self, perm: torch.Tensor) -> Graph:
        """Renumber vertices: old vertex ``perm[i]`` becomes new vertex ``i``."""
        perm = torch.as_tensor(perm, dtype=torch.int64)
        if perm.numel() != self.num_nodes or not torch.equal(torch.sort(perm).values, torch.arange(self.num_nodes)):
            raise ValueError(f"relabel needs a permutation of 0..{self.num_nodes - 1}")
        g = self.subgraph(perm)
        g.meta.pop("global_ids", None)
        return g

    def to_scipy(self):
        """Adjacency as ``scipy.sparse.csr_matrix`` with rows = destinations."""
        import scipy.sparse as sp
        data = np.ones(self.num_edges, dtype=np.float32) if self.edge_weight is None else self.edge_weight.numpy()
        return sp.csr_matrix((data, self.indices.numpy(), self.indptr.numpy()), shape=(self.num_nodes, self.num_nodes))

    def summary(self) -> dict:
        """Counts for reports: nodes, edges, features, classes, split sizes, and whether labels are multi-label."""
        def count(mask):
            return 0 if mask is None else int(mask.sum())
        return {"name": self.name, "nodes": self.num_nodes, "edges": self.num_edges,
                "features": self.num_features, "classes": self.num_classes,
                "train": count(self.train_mask), "val": count(self.val_mask), "test": count(self.test_mask),
                "multilabel": self.multilabel, **({"weighted": True} if self.weighted else {})}

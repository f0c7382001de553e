"""PartitionBook: where every vertex lives, by contiguous relabelling.

Three id spaces:

* **original** ids: the graph's vertex ids as given.
* **global** ids: a relabelling in which part 0's vertices come first, then
  part 1's, ...; within a part the original order is kept (stable). Part ``p``
  owns the contiguous range ``[boundaries[p], boundaries[p+1])``, so the owner
  of a global id is one ``searchsorted`` over ``boundaries``: no ``[N]`` lookup
  table is needed once the graph is stored relabelled.
* **local** ids: the offset of a global id within its part's range.

``graph.relabel(book.perm)`` renumbers a graph into global ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.graph import Graph
from graphscale.partition.base import validate_owner


@dataclass
class PartitionBook:
    """Contiguous relabelling of a vertex partition.

    Attributes:
        num_parts: number of parts.
        perm: int64 ``[N]``; global id ``i`` is original vertex ``perm[i]``.
        inv_perm: int64 ``[N]``; original vertex ``v`` has global id ``inv_perm[v]``.
        boundaries: int64 ``[num_parts+1]``; part ``p`` owns global ids ``[boundaries[p], boundaries[p+1])``.
    """

    num_parts: int
    perm: torch.Tensor
    inv_perm: torch.Tensor
    boundaries: torch.Tensor

    @classmethod
    def from_owner(cls, owner: torch.Tensor, num_parts: int | None = None) -> PartitionBook:
        """Build the book of an owner array.

        Args:
            owner: int ``[N]``, the part of every original vertex.
            num_parts: number of parts (default ``owner.max() + 1``); trailing parts may be empty.

        Raises:
            ValueError: ``owner`` is not a 1-D integer array with values in ``[0, num_parts)``.
        """
        owner = torch.as_tensor(owner)
        if owner.dim() != 1:
            raise ValueError(f"PartitionBook.from_owner: owner must be 1-D, got shape {tuple(owner.shape)}")
        if num_parts is None:
            num_parts = int(owner.max()) + 1 if owner.numel() else 1
        owner = validate_owner(owner, owner.numel(), num_parts)
        perm = torch.argsort(owner, stable=True)
        inv_perm = torch.empty_like(perm)
        inv_perm[perm] = torch.arange(perm.numel())
        boundaries = torch.zeros(num_parts + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(owner, minlength=num_parts), 0, out=boundaries[1:])
        return cls(num_parts, perm, inv_perm, boundaries)

    # --------------------------------------------------------------- sizes
    @property
    def num_nodes(self) -> int:
        return self.perm.numel()

    def sizes(self) -> torch.Tensor:
        """Vertices per part, int64 ``[num_parts]``."""
        return self.boundaries[1:] - self.boundaries[:-1]

    def owner(self) -> torch.Tensor:
        """Part of every *original* vertex, int64 ``[N]``."""
        return self.owner_of(self.inv_perm)

    # ------------------------------------------------------------ lookups
    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.num_parts:
            raise ValueError(f"part {part} is out of range [0, {self.num_parts})")

    def owner_of(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Part owning each *global* id (``searchsorted`` over the boundaries)."""
        global_ids = torch.as_tensor(global_ids, dtype=torch.int64)
        if global_ids.numel() and (int(global_ids.min()) < 0 or int(global_ids.max()) >= self.num_nodes):
            raise ValueError(f"global ids must lie in [0, {self.num_nodes})")
        return torch.searchsorted(self.boundaries, global_ids, right=True) - 1

    def part_range(self, part: int) -> tuple[int, int]:
        """``(start, end)`` of the global ids part ``part`` owns."""
        self._check_part(part)
        return int(self.boundaries[part]), int(self.boundaries[part + 1])

    def inner_global(self, part: int) -> torch.Tensor:
        """Global ids of part ``part``'s vertices (a contiguous range)."""
        start, end = self.part_range(part)
        return torch.arange(start, end, dtype=torch.int64)

    def inner_original(self, part: int) -> torch.Tensor:
        """Original ids of part ``part``'s vertices, ascending."""
        start, end = self.part_range(part)
        return self.perm[start:end]

    def halo_original(self, graph: Graph, part: int) -> torch.Tensor:
        """Original ids, ascending, of the vertices outside ``part`` with an edge into it.

        Args:
            graph: the graph in *original* ids.
        """
        if graph.num_nodes != self.num_nodes:
            raise ValueError(f"halo_original: graph has {graph.num_nodes} vertices, the book {self.num_nodes}")
        start, end = self.part_range(part)
        inside = (self.inv_perm >= start) & (self.inv_perm < end)
        src = graph.indices[inside[graph.dst_of_edges()]]
        return torch.unique(src[~inside[src]])

    # ------------------------------------------------------- conversions
    def to_global(self, original_ids: torch.Tensor) -> torch.Tensor:
        """Original ids -> global ids."""
        return self.inv_perm[torch.as_tensor(original_ids, dtype=torch.int64)]

    def to_original(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Global ids -> original ids."""
        return self.perm[torch.as_tensor(global_ids, dtype=torch.int64)]

    def to_local(self, global_ids: torch.Tensor, part: int | None = None) -> torch.Tensor:
        """Global ids -> offsets within their owning part.

        Args:
            global_ids: int64 global ids.
            part: when given, every id must belong to this part.

        Raises:
            ValueError: an id is not owned by ``part``.
        """
        global_ids = torch.as_tensor(global_ids, dtype=torch.int64)
        owners = self.owner_of(global_ids)
        if part is not None:
            self._check_part(part)
            if bool((owners != part).any()):
                raise ValueError(f"to_local: some ids are not owned by part {part}")
        return global_ids - self.boundaries[owners]

    def local_to_global(self, local_ids: torch.Tensor, part: int) -> torch.Tensor:
        """Offsets within part ``part`` -> global ids."""
        start, end = self.part_range(part)
        local_ids = torch.as_tensor(local_ids, dtype=torch.int64)
        if local_ids.numel() and (int(local_ids.min()) < 0 or int(local_ids.max()) >= end - start):
            raise ValueError(f"local ids of part {part} must lie in [0, {end - start})")
        return local_ids + start

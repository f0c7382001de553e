"""Graph-parallel's overlap plan: a partition's block cut into interior rows (local in-neighbours only) and
boundary rows (at least one halo in-neighbour), so the halo exchange runs while the interior rows are computed
(:class:`~graphscale.strategies.graph_parallel.GraphParallel` with ``overlap=True``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.block import Block


def _csr_rows(indptr: torch.Tensor, indices: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CSR rows ``rows`` (in that order, each row's entries in stored order): ``(indptr, indices)``."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    out = torch.zeros(rows.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=out[1:])
    offsets = torch.arange(int(out[-1])) - torch.repeat_interleave(out[:-1] - starts, counts)
    return out, indices[offsets]


@dataclass
class OverlapPlan:
    """A partition's block cut for overlapping the halo exchange with computation.

    An *interior* row has local in-neighbours only, a *boundary* row at least one halo in-neighbour.
    ``interior`` (destinations: the interior rows; sources: the interior rows, then the boundary rows they read)
    is computed while the halo rows travel, ``boundary`` (destinations: the boundary rows; sources: the boundary
    rows, the interior rows they read, then the halo in the stored order) once they arrived. Every row keeps its
    in-edges in stored order, so each aggregated row is summed exactly as in the unsplit block. Rows are stored
    local ids (the worker's features, labels and outputs stay in the store's order: nothing is copied at setup).

    Attributes:
        interior: the interior block.
        boundary: the boundary block.
        interior_src: int64 local rows of ``interior``'s sources (its destinations first).
        boundary_src: int64 local rows of ``boundary``'s local sources (its destinations first).
        inverse: int64 ``[n_local]``: ``cat(interior rows' outputs, boundary rows' outputs)[inverse]`` is in
            local row order.
    """

    interior: Block
    boundary: Block
    interior_src: torch.Tensor
    boundary_src: torch.Tensor
    inverse: torch.Tensor

    @property
    def num_interior(self) -> int:
        return self.interior.num_dst

    @classmethod
    def build(cls, block: Block) -> OverlapPlan:
        """Cut ``block`` (destinations: the local rows, sources: the local rows then the halo)."""
        n = block.num_dst
        indptr, indices = block.indptr, block.indices
        # rows with a halo in-neighbour, from the halo edges' positions (no per-edge row array)
        halo_edges = torch.nonzero(indices >= n).flatten()
        has_halo = torch.zeros(n, dtype=torch.bool)
        has_halo[torch.searchsorted(indptr, halo_edges, right=True) - 1] = True
        del halo_edges
        interior_rows = torch.nonzero(~has_halo).flatten()
        boundary_rows = torch.nonzero(has_halo).flatten()
        i_ptr, i_idx = _csr_rows(indptr, indices, interior_rows)
        read_by_interior = torch.zeros(n, dtype=torch.bool)
        read_by_interior[i_idx] = True  # interior rows read local rows only
        interior_src = torch.cat([interior_rows, torch.nonzero(has_halo & read_by_interior).flatten()])
        del read_by_interior
        lut = torch.full((n,), -1, dtype=torch.int64)
        lut[interior_src] = torch.arange(interior_src.numel())
        interior = Block(i_ptr, lut[i_idx], block.src_ids[interior_src], block.src_deg[interior_src])
        del i_idx
        b_ptr, b_idx = _csr_rows(indptr, indices, boundary_rows)
        local = b_idx < n
        reads_interior = local.clone()
        reads_interior[local] = ~has_halo[b_idx[local]]
        interior_read = torch.unique(b_idx[reads_interior])
        del reads_interior
        boundary_src = torch.cat([boundary_rows, interior_read])
        lut.fill_(-1)
        lut[boundary_src] = torch.arange(boundary_src.numel())
        b_idx -= n - boundary_src.numel()  # halo rows follow the local sources, in stored order
        b_idx[local] = lut[b_idx[local] + (n - boundary_src.numel())]
        del local, lut
        sources = torch.cat([boundary_src, torch.arange(n, block.num_src)])
        boundary = Block(b_ptr, b_idx, block.src_ids[sources], block.src_deg[sources])
        inverse = torch.empty(n, dtype=torch.int64)
        inverse[torch.cat([interior_rows, boundary_rows])] = torch.arange(n)
        return cls(interior, boundary, interior_src, boundary_src, inverse)

    def to(self, device) -> OverlapPlan:
        return OverlapPlan(self.interior.to(device), self.boundary.to(device), self.interior_src.to(device),
                           self.boundary_src.to(device), self.inverse.to(device))

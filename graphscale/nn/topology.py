"""A block's topology: its validated CSR, the transpose the backward needs, and the device backend's operators.

:func:`topology` returns a :class:`Topology` stored on the block object itself (``block.__dict__``) and rebuilt if
the block's ``indptr``/``indices`` tensors are replaced; it validates the CSR once and builds the transpose lazily
on the first backward pass (a CSR that is its own transpose, a symmetric graph's full block, is used as is).

The device backend (:mod:`graphscale.nn.backend`) multiplies by a normalised operator rather than by the bare
CSR: :meth:`Topology.operator` builds, once per normalisation and dtype, the CSR of ``diag(r) A diag(c) + diag(s)``
(edge weights, column, row and self scales folded into its values, the diagonal stored as one more entry at the end
of each row, 32-bit indices where they fit, as cuSPARSE prefers) and, on the first backward, its transpose (the
operator itself where it is symmetric). Each aggregation is then one sparse-dense product per direction.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from graphscale.nn.kernels import _k_is_own_transpose, _k_transpose

_CACHE_ATTR = "_graphscale_topology"
#: ``(edge_weight, col_scale, row_scale, self_scale)`` of a normalisation (any may be ``None``)
Scales = tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None]


def csr_tensor(indptr: Tensor, indices: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """A ``torch.sparse_csr_tensor`` without the beta-state warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(indptr, indices, values, shape, check_invariants=False)


class Operator:
    """A normalised sparse operator ``M = diag(r) A diag(c) + diag(s)`` of one block, as torch sparse CSR.

    ``matrix`` is ``M`` (``[D, S]``); :meth:`adjoint` is ``M^T`` (``[S, D]``), built on first use and ``matrix``
    itself when ``M`` is symmetric. Built by :meth:`Topology.operator`.
    """

    def __init__(self, matrix: Tensor, symmetric: bool) -> None:
        self.matrix = matrix
        self._adjoint = matrix if symmetric else None

    def adjoint(self) -> Tensor:
        """``M^T`` as sparse CSR ``[S, D]``."""
        if self._adjoint is None:
            self._adjoint = _transpose_csr(self.matrix)
        return self._adjoint

    def tensors(self) -> list[Tensor]:
        """The index and value tensors it holds (the adjoint's once built, unless it is ``matrix``)."""
        out = [self.matrix.crow_indices(), self.matrix.col_indices(), self.matrix.values()]
        if self._adjoint is not None and self._adjoint is not self.matrix:
            out += [self._adjoint.crow_indices(), self._adjoint.col_indices(), self._adjoint.values()]
        return out


def _transpose_csr(matrix: Tensor) -> Tensor:
    """The transpose of a sparse CSR matrix as sparse CSR (a stable counting sort by column: each row of the result
    lists its entries in ascending source row)."""
    crow, col, val = matrix.crow_indices(), matrix.col_indices(), matrix.values()
    rows, cols = matrix.shape
    entry_row = torch.repeat_interleave(torch.arange(rows, device=crow.device, dtype=col.dtype),
                                        (crow[1:] - crow[:-1]).long())
    perm = torch.argsort(col, stable=True)
    t_crow = torch.zeros(cols + 1, dtype=crow.dtype, device=crow.device)
    torch.cumsum(torch.bincount(col, minlength=cols), 0, out=t_crow[1:])
    return csr_tensor(t_crow, entry_row[perm], val[perm], (cols, rows))


def _build_operator(topo: Topology, scales: Scales, dtype: torch.dtype, symmetric: bool) -> Operator:
    """The operator of :meth:`Topology.operator` (see there)."""
    ew, cs, rs, ss = scales
    n, nnz, dev = topo.num_dst, topo.num_edges, topo.device
    k = 0 if ss is None else ss.numel()
    index_dtype = torch.int32 if nnz + k < 2**31 and topo.num_src < 2**31 else torch.int64
    row = topo._edge_dst if topo._edge_dst is not None else torch.repeat_interleave(
        torch.arange(n, device=dev), topo.indptr[1:] - topo.indptr[:-1])  # not cached: the operator replaces it
    values = torch.ones(nnz, dtype=dtype, device=dev) if ew is None else ew.to(dtype).clone()
    if cs is not None:
        values *= cs.to(dtype)[topo.indices]
    if rs is not None:
        values *= rs.to(dtype)[row]
    if not k:
        matrix = csr_tensor(topo.indptr.to(index_dtype), topo.indices.to(index_dtype), values, (n, topo.num_src))
        return Operator(matrix, symmetric)
    crow = topo.indptr + torch.arange(n + 1, device=dev).clamp_(max=k)  # k diagonal entries, one per row r < k
    col = torch.empty(nnz + k, dtype=index_dtype, device=dev)
    val = torch.empty(nnz + k, dtype=dtype, device=dev)
    edge_pos = torch.arange(nnz, device=dev) + row.clamp(max=k)
    col[edge_pos], val[edge_pos] = topo.indices.to(index_dtype), values
    del edge_pos, values
    diag = torch.arange(k, device=dev)
    diag_pos = topo.indptr[1:k + 1] + diag
    col[diag_pos], val[diag_pos] = diag.to(index_dtype), ss.to(dtype)
    return Operator(csr_tensor(crow.to(index_dtype), col, val, (n, topo.num_src)), symmetric)


class Topology:
    """A validated CSR-by-destination topology with its lazily built transpose.

    Args:
        indptr: int64 ``[D+1]`` row pointers.
        indices: int64 ``[nnz]`` source rows in ``[0, num_src)``.
        num_src: number of source rows ``S`` (columns).

    Raises:
        ValueError: if the arrays are not a valid CSR over ``num_src`` columns.
    """

    def __init__(self, indptr: Tensor, indices: Tensor, num_src: int) -> None:
        if indptr.dim() != 1 or indptr.numel() < 1 or indices.dim() != 1:
            raise ValueError("Topology: indptr must be 1-D with >= 1 entry and indices 1-D")
        if indptr.dtype != torch.int64 or indices.dtype != torch.int64:
            raise ValueError(f"Topology: indptr/indices must be int64, got {indptr.dtype}/{indices.dtype}")
        if int(indptr[0]) != 0 or int(indptr[-1]) != indices.numel():
            raise ValueError(f"Topology: indptr must run from 0 to nnz={indices.numel()}, "
                             f"got {int(indptr[0])}..{int(indptr[-1])}")
        if indptr.numel() > 1 and bool((indptr[1:] < indptr[:-1]).any()):
            raise ValueError("Topology: indptr must be non-decreasing")
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= num_src):
            raise ValueError(f"Topology: indices must lie in [0, num_src={num_src}), "
                             f"got [{int(indices.min())}, {int(indices.max())}]")
        self.indptr = indptr.contiguous()
        self.indices = indices.contiguous()
        self.num_src = int(num_src)
        self._transpose: tuple[Tensor, Tensor] | None = None
        self._perm: Tensor | None = None
        self._edge_dst: Tensor | None = None
        self._operators: dict[tuple, Operator] = {}
        self._derived: dict[str, Tensor] = {}

    @property
    def num_dst(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    def transpose(self) -> tuple[Tensor, Tensor]:
        """The CSC of the block: ``(t_indptr [S+1], t_indices [nnz])``; row ``u`` of the transpose lists the
        destinations ``v`` of ``u``'s out-edges (ascending).

        A CSR that is its own transpose (a symmetric graph's full block with ascending rows: the usual full-graph
        case) is returned itself, so the backward holds no second copy of the graph (on CPU; checked without
        building the copy).
        """
        if self._transpose is None:
            if self.device.type == "cpu":
                indptr, indices = self.indptr.numpy(), self.indices.numpy()
                if _k_is_own_transpose(indptr, indices, self.num_src):
                    self._transpose = (self.indptr, self.indices)
                else:
                    t_indptr, t_indices, _ = _k_transpose(indptr, indices, self.num_src, True, False)
                    self._transpose = (torch.from_numpy(t_indptr), torch.from_numpy(t_indices))
            else:
                t_indices = self.edge_dst()[self.transpose_perm()]
                t_indptr = torch.zeros(self.num_src + 1, dtype=torch.int64, device=self.device)
                torch.cumsum(torch.bincount(self.indices, minlength=self.num_src), 0, out=t_indptr[1:])
                self._transpose = (t_indptr, t_indices)
        return self._transpose

    def transpose_perm(self) -> Tensor:
        """``perm [nnz]``: ``perm[k]`` is the CSR position of the ``k``-th CSC entry (how per-edge weights are read
        in the transpose); built on first use, since only edge-weighted products need it."""
        if self._perm is None:
            if self.device.type == "cpu":
                _, _, perm = _k_transpose(self.indptr.numpy(), self.indices.numpy(), self.num_src, False, True)
                self._perm = torch.from_numpy(perm)
            else:
                self._perm = torch.argsort(self.indices, stable=True)
        return self._perm

    def tensors(self) -> list[Tensor]:
        """Every tensor this topology holds: the CSR, and the transpose, its permutation and the edge destinations
        once built."""
        built = [*(self._transpose or ()), self._perm, self._edge_dst]
        out = [self.indptr, self.indices]
        out += [t for t in built if t is not None and all(t is not u for u in out)]  # an own transpose: once
        for op in self._operators.values():
            out += op.tensors()
        return out + list(self._derived.values())

    def derived(self, name: str, build: Callable[[], Tensor]) -> Tensor:
        """A tensor derived from this topology (such as PyG's ``edge_index``, :mod:`graphscale.nn.pyg_convs`),
        built by ``build()`` on first use and kept here, where :meth:`tensors` counts it."""
        if name not in self._derived:
            self._derived[name] = build()
        return self._derived[name]

    def operator(self, name: str, dtype: torch.dtype, scales: Callable[[], Scales], symmetric: bool = False
                 ) -> Operator:
        """The device backend's normalised operator ``diag(r) A diag(c) + diag(s)`` (with edge weights ``w``)
        named ``name`` in ``dtype``, built from ``scales()`` on first use and cached here.

        Args:
            name: the normalisation (``"gcn"``, ``"mean"``): one operator per name and dtype.
            dtype: the values' dtype.
            scales: returns ``(w [nnz], c [S], r [D], s [k])`` (any ``None``); the self term ``s`` applies to the
                first ``k`` rows. Called once.
            symmetric: the caller knows ``M`` is symmetric (the adjoint is ``M`` itself); checked against the
                structure: ``M`` counts as symmetric only where the CSR is its own transpose.

        Returns:
            The :class:`Operator` (its CSR on this topology's device).
        """
        key = (name, dtype)
        if key not in self._operators:
            symmetric = symmetric and self.num_src == self.num_dst and self.is_own_transpose()
            self._operators[key] = _build_operator(self, scales(), dtype, symmetric)
        return self._operators[key]

    def is_own_transpose(self) -> bool:
        """Whether the CSR equals its transpose (a symmetric graph's full block with ascending rows)."""
        if self.device.type == "cpu":
            return bool(_k_is_own_transpose(self.indptr.numpy(), self.indices.numpy(), self.num_src))
        if self._transpose is not None:
            return self._transpose[0] is self.indptr
        counts = torch.bincount(self.indices, minlength=self.num_src)  # a transient transpose, not cached
        if not torch.equal(counts, self.indptr[1:] - self.indptr[:-1]):
            return False
        row = torch.repeat_interleave(torch.arange(self.num_dst, device=self.device), counts)
        return torch.equal(row[torch.argsort(self.indices, stable=True)], self.indices)

    def edge_dst(self) -> Tensor:
        """Destination row of every edge in CSR order, int64 ``[nnz]``."""
        if self._edge_dst is None:
            counts = self.indptr[1:] - self.indptr[:-1]
            self._edge_dst = torch.repeat_interleave(torch.arange(self.num_dst, device=self.device), counts)
        return self._edge_dst


def topology(block) -> Topology:
    """The cached :class:`Topology` of a block (or ``block`` itself if it is one).

    The cache lives on the block object and is rebuilt when its ``indptr`` or
    ``indices`` tensors are replaced. In-place edits of those tensors are not
    detected: build a new block instead.
    """
    if isinstance(block, Topology):
        return block
    store = getattr(block, "__dict__", None)  # no cache on objects without an instance dict
    cached = None if store is None else store.get(_CACHE_ATTR)
    if cached is not None and cached[0] is block.indptr and cached[1] is block.indices \
            and cached[2].num_src == block.num_src:
        return cached[2]
    topo = Topology(block.indptr, block.indices, block.num_src)
    if store is not None:
        store[_CACHE_ATTR] = (block.indptr, block.indices, topo)
    return topo

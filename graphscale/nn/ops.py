"""Sparse products for GNN layers on blocks: SpMM, named propagations, multi-head SpMM, SDDMM, segment softmax.

Every product here runs over a block's CSR-by-destination topology (:mod:`graphscale.nn.topology`) and has a
hand-written backward that uses the *transposed* CSR (CSC) of the same block, so no per-edge ``[E, F]`` message
tensor is ever materialised, in the forward or the backward pass.

Backends (:mod:`graphscale.nn.backend` decides, per call). The CPU backend runs the numba kernels of
:mod:`graphscale.nn.kernels` on row ranges in threads, with a keyed dropout of the source rows applied as the
kernel reads them (packed keep bits) and outputs from :mod:`graphscale.nn.buffers`. The device backend runs
whole-tensor torch operations: a named propagation (:func:`propagate`: GCN's and the mean's normalisations) is one
sparse-dense product per direction with the normalised operator cached on the topology
(:meth:`~graphscale.nn.topology.Topology.operator`; cuSPARSE through torch sparse CSR on CUDA), its fused dropout
one :mod:`graphscale.nn.fused` op; attention products take one sparse product per head. Results agree with the
CPU kernels to float rounding, and the dropout masks bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from graphscale.nn import buffers, fused
from graphscale.nn.backend import uses_numba
from graphscale.nn.kernels import (
    _k_sddmm_heads,
    _k_softmax,
    _k_softmax_bwd,
    _k_spmm,
    _k_spmm_heads,
    _np,
    _run_rows,
    keep_bytes,
)
from graphscale.nn.topology import Scales, Topology, csr_tensor, topology

__all__ = [
    "Topology",
    "gcn_norm_scales",
    "keep_bytes",
    "propagate",
    "propagate_transpose",
    "segment_softmax",
    "spmm",
    "spmm_heads",
    "spmm_transpose",
    "topology",
]


# =====================================================================================
# SpMM with scalar edge weights and row / column / self scales
# =====================================================================================
def _unpack_keep(bits: Tensor, num_cols: int, dtype: torch.dtype) -> Tensor:
    """Packed keep bits (8 columns a byte) as a 0/1 ``[rows, num_cols]`` tensor of ``dtype``."""
    shifts = torch.arange(8, device=bits.device, dtype=torch.uint8)
    keep = (bits[:, :, None] >> shifts) & 1
    return keep.reshape(bits.shape[0], -1)[:, :num_cols].to(dtype)


def _words(bits: Tensor) -> np.ndarray:
    """Packed keep bits (uint8 ``[rows, keep_bytes(F)]``) as the uint64 words the kernels read."""
    return bits.contiguous().numpy().view(np.uint64)


def _spmm_forward(indptr: Tensor, indices: Tensor, eperm: Tensor | None, ew: Tensor | None, cs: Tensor | None,
                  rs: Tensor | None, ss: Tensor | None, x: Tensor, edge_dst: Tensor | None,
                  in_bits: Tensor | None = None, out_bits: Tensor | None = None, scale: float = 1.0) -> Tensor:
    """One scaled CSR product (see :func:`spmm`); ``edge_dst`` is only used off the numba path.

    ``in_bits`` / ``out_bits``: packed keep bits of a dropout (scale ``scale``) applied to the input rows as they
    are read / to the output rows as they are written (:func:`_k_spmm`).
    """
    n = indptr.numel() - 1
    if uses_numba(x):
        out = buffers.empty((n, x.shape[1]), x.dtype)
        no_bits = np.empty((0, 1), np.uint64)
        _run_rows(_k_spmm, indptr.numpy(), (indices.numel() + n) * x.shape[1], indptr.numpy(), indices.numpy(),
                  _np(eperm, torch.int64), _np(ew, x.dtype), _np(cs, x.dtype), _np(rs, x.dtype), _np(ss, x.dtype),
                  x.detach().contiguous().numpy(), no_bits if in_bits is None else _words(in_bits),
                  no_bits if out_bits is None else _words(out_bits), float(scale), out.numpy())
        return out
    x = x.detach()
    if in_bits is not None:  # the dropped copy keyed_dropout makes off the numba path
        x = x * _unpack_keep(in_bits, x.shape[1], x.dtype) * scale
    values = torch.ones(indices.numel(), dtype=x.dtype, device=x.device)
    if ew is not None:
        values = values * (ew if eperm is None else ew[eperm]).to(x.dtype)
    if cs is not None:
        values = values * cs.to(x.dtype)[indices]
    if rs is not None:
        values = values * rs.to(x.dtype)[edge_dst]
    adj = csr_tensor(indptr, indices, values, (n, x.shape[0]))
    out = (adj @ x) if indices.numel() else torch.zeros(n, x.shape[1], dtype=x.dtype, device=x.device)
    if ss is not None and ss.numel():
        k = ss.numel()
        out[:k] += ss.to(x.dtype)[:, None] * x[:k]
    if out_bits is not None:
        out = out * _unpack_keep(out_bits, out.shape[1], out.dtype) * scale
    return out


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, topo, ew, cs, rs, ss, keep_bits=None, keep_scale=1.0):
        ctx.topo = topo
        ctx.keep_scale = keep_scale
        ctx.save_for_backward(ew, cs, rs, ss, keep_bits)
        edge_dst = None if uses_numba(x) or rs is None else topo.edge_dst()
        return _spmm_forward(topo.indptr, topo.indices, None, ew, cs, rs, ss, x, edge_dst, keep_bits, None,
                             keep_scale)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        ew, cs, rs, ss, keep_bits = ctx.saved_tensors
        gx = _spmm_adjoint(ctx.topo, grad, ew, cs, rs, ss, keep_bits, ctx.keep_scale)
        return gx, None, None, None, None, None, None, None


def _spmm_adjoint(topo: Topology, grad: Tensor, ew: Tensor | None, cs: Tensor | None, rs: Tensor | None,
                  ss: Tensor | None, keep_bits: Tensor | None = None, keep_scale: float = 1.0) -> Tensor:
    """``grad_x`` of :func:`spmm` for the output gradient ``grad``: the same kernel on the cached transpose (with
    a fused dropout's keep bits applied on write)."""
    t_indptr, t_indices = topo.transpose()
    perm = topo.transpose_perm() if ew is not None else None
    # transpose: grad_x[u] = cs[u] * sum_{v: u->v} ew * rs[v] * g[v] + ss[u] * g[u]
    t_dst = None
    if not uses_numba(grad) and cs is not None:
        t_dst = torch.repeat_interleave(torch.arange(topo.num_src, device=grad.device),
                                        t_indptr[1:] - t_indptr[:-1])
    return _spmm_forward(t_indptr, t_indices, perm, ew, rs, cs, ss,
                         grad.contiguous(), t_dst, None, keep_bits, keep_scale)


def spmm(block, x: Tensor, *, edge_weight: Tensor | None = None, col_scale: Tensor | None = None,
         row_scale: Tensor | None = None, self_scale: Tensor | None = None, src_dropout=None) -> Tensor:
    r"""Scaled sparse-dense product over a block's in-edges.

    .. math::
        \text{out}_v = r_v \sum_{e = (u \to v)} w_e\, c_u\, x_u \;+\; s_v\, x_v

    Missing ``w``, ``c``, ``r`` default to 1 and a missing ``s`` to 0. The self
    term applies to the first ``len(self_scale)`` rows (destination ``v`` is
    source row ``v``). Differentiable in ``x`` only; the backward is the same
    kernel on the cached transpose (no ``[E, F]`` tensor).

    Args:
        block: a :class:`~graphscale.data.block.Block` or :class:`Topology`.
        x: source features.
        edge_weight: per-edge weights ``w`` in CSR order.
        col_scale: per-source scale ``c``.
        row_scale: per-destination scale ``r``.
        self_scale: per-destination self-loop weight ``s`` (at most ``min(D, S)`` rows).
        src_dropout: a dropout of the source rows fused into the product, an object with ``bits()`` (packed keep
            bits, uint8 ``[S, keep_bytes(F)]``) and ``scale`` (:class:`graphscale.nn.dropout.RowKeep`): the result
            is ``spmm(block, keyed_dropout(x, ...))`` bit for bit, without the dropped ``[S, F]`` copy; the
            backward applies the same bits to the gradient rows as it writes them.

    Returns:
        Destination features.

    Shapes:
        x ``[S, F]``, edge_weight ``[nnz]``, col_scale ``[S]``, row_scale ``[D]``,
        self_scale ``[<= D]`` -> out ``[D, F]``.
    """
    topo = topology(block)
    if x.dim() != 2 or x.shape[0] != topo.num_src:
        raise ValueError(f"spmm: x must be [num_src={topo.num_src}, F], got {tuple(x.shape)}")
    for name, t, n in (("edge_weight", edge_weight, topo.num_edges), ("col_scale", col_scale, topo.num_src),
                       ("row_scale", row_scale, topo.num_dst)):
        if t is not None and (t.dim() != 1 or t.numel() != n):
            raise ValueError(f"spmm: {name} must have shape [{n}], got {tuple(t.shape)}")
        if t is not None and t.requires_grad:
            raise ValueError(f"spmm: gradients w.r.t. {name} are not supported; pass a detached tensor")
    if self_scale is not None:
        if self_scale.dim() != 1 or self_scale.numel() > min(topo.num_dst, topo.num_src):
            raise ValueError(f"spmm: self_scale must be 1-D with at most {min(topo.num_dst, topo.num_src)} entries")
        if self_scale.requires_grad:
            raise ValueError("spmm: gradients w.r.t. self_scale are not supported; pass a detached tensor")
    if src_dropout is None:
        return _SpMM.apply(x, topo, edge_weight, col_scale, row_scale, self_scale)
    bits = src_dropout.bits()
    cols = getattr(src_dropout, "num_cols", x.shape[1])
    if bits.dtype != torch.uint8 or bits.shape != (topo.num_src, keep_bytes(x.shape[1])) or cols != x.shape[1]:
        raise ValueError(f"spmm: src_dropout bits must be uint8 [{topo.num_src}, {keep_bytes(x.shape[1])}] for "
                         f"{x.shape[1]} columns, got {bits.dtype} {tuple(bits.shape)} for {cols} columns")
    return _SpMM.apply(x, topo, edge_weight, col_scale, row_scale, self_scale, bits.to(x.device),
                       float(src_dropout.scale))


def spmm_transpose(block, grad: Tensor, *, edge_weight: Tensor | None = None, col_scale: Tensor | None = None,
                   row_scale: Tensor | None = None, self_scale: Tensor | None = None) -> Tensor:
    r"""The adjoint of :func:`spmm` with the same arguments: ``grad_x`` for an output gradient ``grad``.

    :func:`spmm` is linear in ``x``, so its input gradient needs only the topology and the scales, never ``x``:
    a strategy can run a propagation's backward without having kept its input (NeutronTask's P-backward).
    Exactly what autograd computes through :func:`spmm` (the same kernel on the cached transpose).

    Shapes:
        grad ``[D, F]`` -> ``[S, F]``.
    """
    topo = topology(block)
    if grad.dim() != 2 or grad.shape[0] != topo.num_dst:
        raise ValueError(f"spmm_transpose: grad must be [num_dst={topo.num_dst}, F], got {tuple(grad.shape)}")
    return _spmm_adjoint(topo, grad, edge_weight, col_scale, row_scale, self_scale)


class _Propagate(torch.autograd.Function):
    """``M keep(x)`` with a cached operator ``M`` (the device backend's :func:`propagate`); backward ``keep(M^T g)``."""

    @staticmethod
    def forward(ctx, x, operator, keep):
        ctx.operator, ctx.keep = operator, keep
        if keep is not None:
            x = fused.keyed_dropout(x, keep.ids.to(x.device), keep.p, keep.h_site)
        return torch.mm(operator.matrix, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        gx = torch.mm(ctx.operator.adjoint(), grad)
        keep = ctx.keep
        if keep is not None:
            fused.keyed_dropout_(gx, keep.ids.to(gx.device), keep.p, keep.h_site)
        return gx, None, None


def _check_propagated(x: Tensor, rows: int, who: str) -> None:
    if x.dim() != 2 or x.shape[0] != rows:
        raise ValueError(f"{who}: x must be [{rows}, F], got {tuple(x.shape)}")


def propagate(block, x: Tensor, norm: str, scales: Callable[[], Scales], *, symmetric: bool = False,
              src_dropout=None) -> Tensor:
    r"""A named normalised propagation: ``spmm(block, x, edge_weight=w, col_scale=c, row_scale=r, self_scale=s,
    src_dropout=...)`` for ``(w, c, r, s) = scales()``.

    On the device backend the operator ``diag(r) A diag(c) + diag(s)`` is built from ``scales()`` once and cached
    on the block's topology under ``(norm, dtype)`` (:meth:`~graphscale.nn.topology.Topology.operator`): the
    propagation is one sparse-dense product, its backward one more with the cached transpose (the operator itself
    when ``symmetric`` and the CSR is its own transpose), and a fused source dropout one keyed-dropout op each way.
    On the CPU backend it is :func:`spmm` with ``scales()`` (the numba kernel applies the dropout as it reads).

    Args:
        block: a :class:`~graphscale.data.block.Block` or :class:`Topology`.
        x: source features.
        norm: the normalisation's name (one operator per name and dtype on a topology: the scales of a name must
            not change for a block).
        scales: returns ``(edge_weight, col_scale, row_scale, self_scale)`` (any ``None``).
        symmetric: ``M[u, v] = M[v, u]`` wherever the CSR is symmetric (GCN's normalisation on a whole graph).
        src_dropout: a :class:`~graphscale.nn.dropout.RowKeep` of the source rows, or ``None``.

    Shapes:
        x ``[S, F]`` -> ``[D, F]``.
    """
    topo = topology(block)
    if uses_numba(x):
        ew, cs, rs, ss = scales()
        return spmm(topo, x, edge_weight=ew, col_scale=cs, row_scale=rs, self_scale=ss, src_dropout=src_dropout)
    _check_propagated(x, topo.num_src, "propagate")
    if x.dtype == torch.bfloat16:
        x = x.float()
    return _Propagate.apply(x, topo.operator(norm, x.dtype, scales, symmetric), src_dropout)


def propagate_transpose(block, grad: Tensor, norm: str, scales: Callable[[], Scales], *,
                        symmetric: bool = False) -> Tensor:
    """The adjoint of :func:`propagate` (without dropout): the sources' gradient for the destinations' ``grad``,
    needing only the topology and the scales (:func:`spmm_transpose`; on the device backend one product with the
    cached operator's transpose).

    Shapes:
        grad ``[D, F]`` -> ``[S, F]``.
    """
    topo = topology(block)
    if uses_numba(grad):
        ew, cs, rs, ss = scales()
        return spmm_transpose(topo, grad, edge_weight=ew, col_scale=cs, row_scale=rs, self_scale=ss)
    _check_propagated(grad, topo.num_dst, "propagate_transpose")
    return torch.mm(topo.operator(norm, grad.dtype, scales, symmetric).adjoint(), grad.contiguous())


# =====================================================================================
# multi-head SpMM (attention) with its SDDMM backward
# =====================================================================================
def _heads_forward(indptr: Tensor, indices: Tensor, eperm: Tensor | None, w: Tensor, ws: Tensor | None,
                   x: Tensor) -> Tensor:
    n = indptr.numel() - 1
    nh, f = x.shape[1], x.shape[2]
    if uses_numba(x):
        out = buffers.empty((n, nh, f), x.dtype)
        _run_rows(_k_spmm_heads, indptr.numpy(), (indices.numel() + n) * nh * f, indptr.numpy(), indices.numpy(),
                  _np(eperm, torch.int64), _np(w, x.dtype), _np(ws, x.dtype).reshape(-1, nh),
                  x.detach().contiguous().numpy(), out.numpy())
        return out
    out = torch.zeros(n, nh, f, dtype=x.dtype, device=x.device)
    w = w if eperm is None else w[eperm]
    if indices.numel():
        for h in range(nh):
            adj = csr_tensor(indptr, indices, w[:, h].contiguous(), (n, x.shape[0]))
            out[:, h] = adj @ x[:, h].contiguous()
    if ws is not None and ws.numel():
        k = ws.shape[0]
        out[:k] += ws[:, :, None] * x[:k]
    return out


def _sddmm(topo: Topology, g: Tensor, x: Tensor, n_self: int) -> tuple[Tensor, Tensor]:
    """Per-edge and per-self-loop head-wise dot products of ``g[dst]`` and ``x[src]``."""
    nh = x.shape[1]
    gw = torch.empty(topo.num_edges, nh, dtype=x.dtype, device=x.device)
    gws = torch.empty(n_self, nh, dtype=x.dtype, device=x.device)
    if uses_numba(x):
        _run_rows(_k_sddmm_heads, topo.indptr.numpy(), (topo.num_edges + n_self) * nh * x.shape[2],
                  topo.indptr.numpy(), topo.indices.numpy(), g.contiguous().numpy(), x.detach().contiguous().numpy(),
                  gw.numpy(), gws.numpy())
        return gw, gws
    pattern = topo.operator("pattern", x.dtype, lambda: (torch.zeros(topo.num_edges, dtype=x.dtype,
                                                                      device=x.device), None, None, None)).matrix
    for h in range(nh):  # per head: the dot products on the CSR's pattern (no [E, H, F] tensor)
        gw[:, h] = torch.sparse.sampled_addmm(pattern, g[:, h], x[:, h].t(), beta=0.0).values()
    if n_self:
        gws.copy_((g[:n_self] * x[:n_self]).sum(-1))
    return gw, gws


class _SpMMHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, ws, topo):
        ctx.topo = topo
        ctx.has_ws = ws is not None
        ctx.save_for_backward(x, w, ws)
        return _heads_forward(topo.indptr, topo.indices, None, w, ws, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, w, ws = ctx.saved_tensors
        topo = ctx.topo
        grad = grad.contiguous()
        gx = gw = gws = None
        if ctx.needs_input_grad[0]:
            t_indptr, t_indices = topo.transpose()
            gx = _heads_forward(t_indptr, t_indices, topo.transpose_perm(), w, ws, grad)
        if ctx.needs_input_grad[1] or (ctx.has_ws and ctx.needs_input_grad[2]):
            gw, gws = _sddmm(topo, grad, x, ws.shape[0] if ctx.has_ws else 0)
            if not ctx.has_ws:
                gws = None
        return gx, gw, gws, None


def spmm_heads(block, x: Tensor, edge_weight: Tensor, self_weight: Tensor | None = None) -> Tensor:
    r"""Multi-head weighted aggregation (attention), differentiable in all tensors.

    .. math::
        \text{out}_{v,h} = \sum_{e = (u \to v)} \alpha_{e,h}\, x_{u,h} \;+\; \alpha^{\text{self}}_{v,h}\, x_{v,h}

    The backward computes ``dx`` with the transposed kernel and ``d alpha`` with a
    per-edge dot product (SDDMM); neither materialises ``[E, H, F]``.

    Args:
        block: a :class:`~graphscale.data.block.Block` or :class:`Topology`.
        x: per-head source features.
        edge_weight: per-edge, per-head weights ``alpha`` in CSR order.
        self_weight: per-destination self-loop weights, or ``None`` for no self term.

    Returns:
        Per-head destination features.

    Shapes:
        x ``[S, H, F]``, edge_weight ``[nnz, H]``, self_weight ``[<= D, H]`` -> ``[D, H, F]``.
    """
    topo = topology(block)
    if x.dim() != 3 or x.shape[0] != topo.num_src:
        raise ValueError(f"spmm_heads: x must be [num_src={topo.num_src}, H, F], got {tuple(x.shape)}")
    nh = x.shape[1]
    if edge_weight.shape != (topo.num_edges, nh):
        raise ValueError(f"spmm_heads: edge_weight must be [{topo.num_edges}, {nh}], got {tuple(edge_weight.shape)}")
    if self_weight is not None and (self_weight.dim() != 2 or self_weight.shape[1] != nh
                                    or self_weight.shape[0] > min(topo.num_dst, topo.num_src)):
        raise ValueError(f"spmm_heads: self_weight must be [<= {min(topo.num_dst, topo.num_src)}, {nh}], "
                         f"got {tuple(self_weight.shape)}")
    edge_weight = edge_weight.to(x.dtype).contiguous()
    if self_weight is not None:
        self_weight = self_weight.to(x.dtype).contiguous()
    return _SpMMHeads.apply(x, edge_weight, self_weight, topo)


# =====================================================================================
# segment softmax over CSR rows (+ optional self entry)
# =====================================================================================
class _SegmentSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, self_scores, topo):
        nh = scores.shape[1]
        ss = self_scores if self_scores is not None else scores.new_empty(0, nh)
        if uses_numba(scores):
            a = buffers.empty(scores.shape, scores.dtype)
            a_self = buffers.empty(ss.shape, ss.dtype)
            _run_rows(_k_softmax, topo.indptr.numpy(), 4 * (topo.num_edges + topo.num_dst) * nh,
                      topo.indptr.numpy(), scores.detach().contiguous().numpy(), ss.detach().contiguous().numpy(),
                      a.numpy(), a_self.numpy())
        else:
            a, a_self = _softmax_torch(topo, scores.detach(), ss.detach())
        ctx.topo = topo
        ctx.has_self = self_scores is not None
        ctx.save_for_backward(a, a_self)
        if self_scores is None:
            ctx.mark_non_differentiable(a_self)
        return a, a_self

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g, g_self):
        a, a_self = ctx.saved_tensors
        topo = ctx.topo
        g = torch.zeros_like(a) if g is None else g.contiguous()
        g_self = torch.zeros_like(a_self) if g_self is None else g_self.contiguous()
        if uses_numba(a):
            gs, gs_self = buffers.empty(a.shape, a.dtype), buffers.empty(a_self.shape, a_self.dtype)
            _run_rows(_k_softmax_bwd, topo.indptr.numpy(), 2 * (topo.num_edges + topo.num_dst) * a.shape[1],
                      topo.indptr.numpy(), a.numpy(), a_self.numpy(), g.numpy(), g_self.numpy(), gs.numpy(),
                      gs_self.numpy())
        else:
            dst = topo.edge_dst()
            dot = torch.zeros(topo.num_dst, a.shape[1], dtype=a.dtype, device=a.device)
            dot.index_add_(0, dst, a * g)
            k = a_self.shape[0]
            dot[:k] += a_self * g_self
            gs = a * (g - dot[dst])
            gs_self = a_self * (g_self - dot[:k])
        return gs, (gs_self if ctx.has_self else None), None


def _softmax_torch(topo: Topology, s: Tensor, ss: Tensor) -> tuple[Tensor, Tensor]:
    dst = topo.edge_dst()
    nh = s.shape[1]
    k = ss.shape[0]
    m = torch.full((topo.num_dst, nh), float("-inf"), dtype=s.dtype, device=s.device)
    if s.numel():
        m = m.scatter_reduce(0, dst[:, None].expand(-1, nh), s, "amax", include_self=True)
    m[:k] = torch.maximum(m[:k], ss)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m[dst])
    e_self = torch.exp(ss - m[:k])
    z = torch.zeros(topo.num_dst, nh, dtype=s.dtype, device=s.device).index_add_(0, dst, e)
    z[:k] += e_self
    z = torch.where(z == 0, torch.ones_like(z), z)
    return e / z[dst], e_self / z[:k]


def segment_softmax(block, scores: Tensor, self_scores: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    r"""Softmax over each destination's in-edges (and its self entry), per head.

    .. math::
        \alpha_{e,h} = \frac{\exp s_{e,h}}{\sum_{e' \in \text{in}(v)} \exp s_{e',h} + \exp s^{\text{self}}_{v,h}}

    Rows are contiguous CSR segments, so no scatter is needed; the backward
    saves only the output and computes ``alpha * (g - sum(alpha * g))`` per segment.

    Args:
        block: a :class:`~graphscale.data.block.Block` or :class:`Topology`.
        scores: per-edge scores in CSR order.
        self_scores: per-destination self-loop scores (first ``k <= D`` rows) or ``None``.

    Returns:
        ``(alpha, alpha_self)``; ``alpha_self`` is ``None`` when ``self_scores`` is.

    Shapes:
        scores ``[nnz, H]``, self_scores ``[k, H]`` -> ``[nnz, H]``, ``[k, H]``.
    """
    topo = topology(block)
    if scores.dim() != 2 or scores.shape[0] != topo.num_edges:
        raise ValueError(f"segment_softmax: scores must be [{topo.num_edges}, H], got {tuple(scores.shape)}")
    if self_scores is not None and (self_scores.dim() != 2 or self_scores.shape[1] != scores.shape[1]
                                    or self_scores.shape[0] > topo.num_dst):
        raise ValueError(f"segment_softmax: self_scores must be [<= {topo.num_dst}, {scores.shape[1]}], "
                         f"got {tuple(self_scores.shape)}")
    if self_scores is not None:
        self_scores = self_scores.to(scores.dtype)
    alpha, alpha_self = _SegmentSoftmax.apply(scores, self_scores, topo)
    return alpha, (alpha_self if self_scores is not None else None)


def gcn_norm_scales(src_deg: Tensor, num_dst: int, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    r"""GCN symmetric normalisation with an implicit self-loop, from global degrees.

    .. math::
        c_u = (d_u + 1)^{-1/2}, \qquad \hat A x_v = c_v \sum_{u \in N(v)} c_u x_u + c_v^2 x_v

    Args:
        src_deg: global in-degrees (self-loops excluded) of the source rows.
        num_dst: number of destination rows (a prefix of the sources).
        dtype: floating dtype of the scales.

    Returns:
        ``(col_scale [S], row_scale [D], self_scale [D])`` for :func:`spmm`.
    """
    c = (src_deg.to(dtype) + 1).rsqrt()
    c_dst = c[:num_dst]
    return c, c_dst, c_dst * c_dst
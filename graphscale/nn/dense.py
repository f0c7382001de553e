"""Fused dense products of the layers: linear + ReLU, linear + ReLU + dropout + linear, dropout + linear.

Each product's backward holds less than autograd's composition of the same operations would:

* :func:`linear_relu` applies ReLU's backward inside the product's backward (no ``[N, out]`` pre-activation
  gradient);
* :func:`linear_relu_linear` runs a hidden layer's dense product and ReLU and the next layer's dropped product
  together, keeping the dropped hidden rows (all the backward needs: no dropout mask recomputed);
* :func:`dropped_linear` keeps its input, not a dropped copy of it (the mask is recomputed from the ids).

Two backends (:mod:`graphscale.nn.backend`). The CPU backend runs them one row block of :data:`LINEAR_BLOCK_BYTES`
at a time (a block's temporaries stay in cache, and the hidden rows' ``[N, width]`` gradient of
:func:`linear_relu_linear` never exists whole). The device backend runs each on whole tensors, a fixed number of
operations whatever ``N`` (cuBLAS's fused bias + ReLU epilogue through ``torch._addmm_activation``, ReLU's backward
in place through ``threshold_backward``'s out variant, keyed dropout as one :mod:`graphscale.nn.fused` op): a row
block per launch would cost a dozen launches per 4 MiB on a GPU.
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import torch
from torch import Tensor

from graphscale.nn import buffers, fused
from graphscale.nn.backend import uses_numba

#: Bytes of a row block that a blocked dense product holds at a time on the CPU backend (:func:`dropped_linear`'s
#: dropped rows, :func:`linear_relu`'s masked gradient rows).
LINEAR_BLOCK_BYTES = 4 << 20


#: Row chunks of the device backend's backward of :func:`linear_relu_linear`: a fixed number, so the operations per
#: layer do not depend on ``N``, while the hidden rows' gradient exists a quarter at a time (the backward's peak is
#: then the saved input and dropped hidden rows plus a quarter, not three whole ``[N, width]`` tensors).
DEVICE_ROW_CHUNKS = 4


def row_chunks(rows: int, chunks: int = DEVICE_ROW_CHUNKS) -> list[slice]:
    """``rows`` rows in ``chunks`` near-equal slices (fewer when there are fewer rows)."""
    bounds = sorted({rows * i // chunks for i in range(chunks + 1)})
    return [slice(lo, hi) for lo, hi in pairwise(bounds)] or [slice(0, 0)]


def row_blocks(rows: int, cols: int, dtype: torch.dtype) -> list[slice]:
    """``rows`` rows of ``cols`` columns of ``dtype`` in blocks of at most :data:`LINEAR_BLOCK_BYTES` (at least one
    row each), as slices."""
    step = max(1, LINEAR_BLOCK_BYTES // max(1, cols * dtype.itemsize))
    return [slice(lo, lo + step) for lo in range(0, rows, step)]


def _relu_backward(grad: Tensor, out: Tensor, into: Tensor | None = None) -> Tensor:
    """ReLU's backward from its output: ``grad`` where ``out > 0``, else 0 (autograd's own kernel for it; 6x faster
    than ``torch.where(out <= 0, 0, grad)`` on one thread), into ``into`` when given (``grad`` itself: in place)."""
    if into is None:
        return torch.ops.aten.threshold_backward(grad, out, 0)
    return torch.ops.aten.threshold_backward.grad_input(grad, out, 0, grad_input=into)


def _linear_relu_rows(x: Tensor, weight: Tensor, bias: Tensor | None, rows: slice, out: Tensor | None = None) -> Tensor:
    """``relu(x[rows] @ weight.T + bias)`` (``F.linear``'s own product; into ``out`` when given), no autograd."""
    y = torch.mm(x[rows], weight.t(), out=out) if bias is None else torch.addmm(bias, x[rows], weight.t(), out=out)
    return y.relu_()


def _linear_relu_whole(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``relu(x @ weight.T + bias)`` in one operation where there is a bias (the GEMM's ReLU epilogue), no autograd."""
    if bias is None:
        return torch.mm(x, weight.t()).relu_()
    return torch._addmm_activation(bias, x, weight.t())


def _linear_grads(x: Tensor, weight: Tensor, has_bias: bool, needed) -> tuple[Tensor | None, ...]:
    """Buffers for the gradients of ``F.linear(x, weight, bias)``'s inputs that ``needed`` (three flags) asks for:
    ``x``'s (written block by block), the weight's and the bias's (zeros, accumulated)."""
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device) if needed[0] else None,
            torch.zeros_like(weight) if needed[1] else None,
            torch.zeros_like(weight[:, 0]) if has_bias and needed[2] else None)


def _add_linear_grads(g: Tensor, x: Tensor, weight: Tensor, rows: slice, grad_x, grad_w, grad_b) -> None:
    """The contribution of the output gradient rows ``g`` (rows ``rows``) to ``F.linear``'s input gradients."""
    if grad_x is not None:
        torch.mm(g, weight, out=grad_x[rows])
    if grad_w is not None:
        grad_w.addmm_(g.t(), x[rows])
    if grad_b is not None:
        grad_b += g.sum(0)


def _whole_linear_grads(g: Tensor, x: Tensor, weight: Tensor, has_bias: bool, needed) -> tuple[Tensor | None, ...]:
    """``F.linear``'s input gradients for the whole output gradient ``g`` (the device backend)."""
    return (torch.mm(g, weight) if needed[0] else None, torch.mm(g.t(), x) if needed[1] else None,
            g.sum(0) if has_bias and needed[2] else None)


class _LinearReLU(torch.autograd.Function):
    """``relu(x @ weight.T + bias)`` with the ReLU's backward applied inside the product's (:func:`linear_relu`)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        if uses_numba(x):
            y = buffers.empty((x.shape[0], weight.shape[0]), weight.dtype, x.device)
            _linear_relu_rows(x, weight, bias, slice(None), out=y)
        else:
            y = _linear_relu_whole(x, weight, bias)
        ctx.save_for_backward(x, weight, y)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight, y = ctx.saved_tensors
        grad = grad.contiguous()
        if not uses_numba(grad):
            return _whole_linear_grads(_relu_backward(grad, y), x, weight, ctx.has_bias, ctx.needs_input_grad[:3])
        grads = _linear_grads(x, weight, ctx.has_bias, ctx.needs_input_grad[:3])
        for rows in row_blocks(grad.shape[0], grad.shape[1], grad.dtype):
            _add_linear_grads(_relu_backward(grad[rows], y[rows]), x, weight, rows, *grads)  # one block
        return grads


def linear_relu(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``relu(F.linear(x, weight, bias))`` whose backward never holds the pre-activation's ``[N, out]`` gradient
    (on the CPU backend it masks the incoming gradient one block of :data:`LINEAR_BLOCK_BYTES` at a time; on the
    device backend in one ``threshold_backward``). The same values as ReLU then ``F.linear`` up to float summation
    order (tested). Autograd keeps ``x`` and the output, as ``F.linear`` and ReLU do.

    Shapes:
        x ``[N, in]``, weight ``[out, in]``, bias ``[out]`` -> ``[N, out]``.
    """
    return _LinearReLU.apply(x, weight, bias)


class DeferredLinearReLU(NamedTuple):
    """``linear_relu(x, weight, bias)`` not computed yet: what a layer ending in :func:`linear_relu` returns when
    asked to defer it (``defer_relu=True``), so that a next layer starting with a dense product of these rows
    (``takes_deferred``) runs both products together (:func:`linear_relu_linear`) and the hidden rows'
    gradient never exists whole. :meth:`compute` gives the tensor to a layer that needs it."""

    x: Tensor
    weight: Tensor
    bias: Tensor | None

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.x.shape[0], self.weight.shape[0]))

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    @property
    def requires_grad(self) -> bool:
        return any(t is not None and t.requires_grad for t in self)

    @property
    def device(self) -> torch.device:
        return self.x.device

    def compute(self) -> Tensor:
        """The rows themselves: ``linear_relu(x, weight, bias)``."""
        return linear_relu(self.x, self.weight, self.bias)


def _linear_relu_linear_forward(x, w0, b0, w1, keep, dropped: Tensor | None) -> Tensor:
    """``keep(relu(x @ w0.T + b0)) @ w1.T`` one row block at a time (the dropout in place on each hidden block),
    writing the dropped hidden rows into ``dropped`` when given (the backward needs them)."""
    z = buffers.empty((x.shape[0], w1.shape[0]), w1.dtype, x.device)
    for rows in row_blocks(x.shape[0], max(x.shape[1], w0.shape[0]), w0.dtype):
        h = _linear_relu_rows(x, w0, b0, rows, None if dropped is None else dropped[rows])
        if keep is not None:
            keep.apply_rows(h, rows, out=h)
        torch.mm(h, w1.t(), out=z[rows])
    return z


def _dropped_hidden_whole(x, w0, b0, keep) -> Tensor:
    """``keep(relu(x @ w0.T + b0))`` on whole tensors (the device backend), the dropout in place."""
    d = _linear_relu_whole(x, w0, b0)
    if keep is not None:
        fused.keyed_dropout_(d, keep.ids.to(d.device), keep.p, keep.h_site)
    return d


class _LinearReLULinear(torch.autograd.Function):
    """``keep(relu(x @ w0.T + b0)) @ w1.T`` with both backward products together (:func:`linear_relu_linear`).

    It keeps the dropped hidden rows ``d = keep(h)``, which are all the backward needs: ``w1``'s gradient is
    ``g_z^T d``, and the hidden pre-activation's gradient ``[h > 0] * keep(g_z w1)`` is ``[d > 0] * (g_z (s w1))``
    with ``s`` the dropout's scale, since a dropped element's gradient is 0 whatever ``h`` is and a kept one has
    ``d > 0`` exactly where ``h > 0``. So the backward applies no mask and hashes nothing."""

    @staticmethod
    def forward(ctx, x, w0, b0, w1, keep):
        if uses_numba(x):
            dropped = buffers.empty((x.shape[0], w0.shape[0]), w0.dtype, x.device)
            z = _linear_relu_linear_forward(x, w0, b0, w1, keep, dropped)
        else:
            dropped = _dropped_hidden_whole(x, w0, b0, keep)
            z = torch.mm(dropped, w1.t())
        ctx.save_for_backward(x, w0, w1, dropped)
        ctx.scale, ctx.has_bias = 1.0 if keep is None else keep.scale, b0 is not None
        return z

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, w0, w1, dropped = ctx.saved_tensors
        grad = grad.contiguous()
        needed = ctx.needs_input_grad[:3]
        w1_scaled = w1 * ctx.scale  # the dropout's backward scale, on the [out, width] weight instead of the rows
        grads = _linear_grads(x, w0, ctx.has_bias, needed)
        grad_w1 = torch.zeros_like(w1) if ctx.needs_input_grad[3] else None
        hidden_grad = any(t is not None for t in grads)
        if not uses_numba(grad):  # DEVICE_ROW_CHUNKS chunks; the hidden gradient masked in place
            if grad_w1 is not None:
                torch.mm(grad.t(), dropped, out=grad_w1)
            for rows in row_chunks(x.shape[0]) if hidden_grad else ():
                g = torch.mm(grad[rows], w1_scaled)
                _add_linear_grads(_relu_backward(g, dropped[rows], into=g), x, w0, rows, *grads)
                del g  # before the next chunk's product: one chunk alive at a time
            return *grads, grad_w1, None
        for rows in row_blocks(x.shape[0], max(x.shape[1], w0.shape[0]), w0.dtype):
            d = dropped[rows]
            if grad_w1 is not None:
                grad_w1.addmm_(grad[rows].t(), d)
            if hidden_grad:  # the hidden block's pre-activation gradient
                _add_linear_grads(_relu_backward(torch.mm(grad[rows], w1_scaled), d), x, w0, rows, *grads)
        return *grads, grad_w1, None


def linear_relu_linear(hidden: DeferredLinearReLU, keep, weight: Tensor) -> Tensor:
    """``keep.apply(hidden.compute()) @ weight.T`` (``keep``: a :class:`~graphscale.nn.dropout.RowKeep` or
    ``None``): autograd keeps ``hidden.x`` and the dropped hidden rows (which both products' weight gradients
    need); the backward recomputes no dropout mask. On the CPU backend both products run one row block of
    :data:`LINEAR_BLOCK_BYTES` at a time, forward and backward, so the hidden rows' ``[N, width]`` gradient is never
    held whole (and without autograd the hidden rows are not held either). The same values as computing the hidden
    rows first, up to float summation order (tested).

    Shapes:
        hidden ``[N, width]`` (deferred), weight ``[out, width]`` -> ``[N, out]``.
    """
    if keep is not None:
        keep.check(hidden, "linear_relu_linear")
    x, w0, b0 = hidden
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearReLULinear.apply(x, w0, b0, weight, keep)
    if not uses_numba(x):
        return torch.mm(_dropped_hidden_whole(x, w0, b0, keep), weight.t())
    return _linear_relu_linear_forward(x, w0, b0, weight, keep, None)


class _DroppedLinear(torch.autograd.Function):
    """``keyed_dropout(x) @ weight.T`` (:func:`dropped_linear`)."""

    @staticmethod
    def forward(ctx, x, weight, ids, p, h_site):
        x = x.detach()
        weight_t = weight.detach().t()
        if uses_numba(x):
            out = buffers.empty((x.shape[0], weight.shape[0]), weight.dtype, x.device)
            for rows in row_blocks(x.shape[0], x.shape[1], weight.dtype):  # dropped rows in the weight's dtype
                torch.mm(fused.node_dropout_into(x[rows], ids[rows], p, h_site), weight_t, out=out[rows])
        else:
            out = torch.mm(fused.keyed_dropout(x, ids, p, h_site), weight_t)
        ctx.save_for_backward(x, weight, ids)
        ctx.p, ctx.h_site = p, h_site
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight, ids = ctx.saved_tensors
        p, h_site = ctx.p, ctx.h_site
        grad = grad.contiguous()
        if not uses_numba(grad):  # the dropout's backward is the same mask on the gradient
            grad_x = grad_w = None
            if ctx.needs_input_grad[0]:
                grad_x = torch.mm(grad, weight)
                fused.keyed_dropout_(grad_x, ids, p, h_site)
            if ctx.needs_input_grad[1]:
                grad_w = torch.mm(grad.t(), fused.keyed_dropout(x, ids, p, h_site))
            return grad_x, grad_w, None, None, None
        grad_x = buffers.empty(x.shape, weight.dtype, x.device) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        for rows in row_blocks(x.shape[0], x.shape[1], weight.dtype):
            if grad_x is not None:
                block = torch.mm(grad[rows], weight, out=grad_x[rows])
                fused.node_dropout_into(block, ids[rows], p, h_site, out=block)
            if grad_w is not None:
                grad_w.addmm_(grad[rows].t(), fused.node_dropout_into(x[rows], ids[rows], p, h_site))
        return grad_x, grad_w, None, None, None


def dropped_linear(x: Tensor, weight: Tensor, ids: Tensor, p: float, h_site: int) -> Tensor:
    """``keyed_dropout(x) @ weight.T`` (rows keyed by ``ids`` at the site with state ``h_site``) without keeping a
    dropped copy of ``x``: the dropped rows exist one block of :data:`LINEAR_BLOCK_BYTES` at a time on the CPU
    backend (whole, and only during the product, on the device backend), in the forward and again in the backward
    (recomputed from the ids), so autograd keeps ``x`` (which the layer before holds anyway) and not a second
    ``[N, F]`` tensor. Differentiable in ``x`` and ``weight``: ``[N, F]`` x ``[O, F]`` -> ``[N, O]``."""
    return _DroppedLinear.apply(x, weight, ids, p, h_site)

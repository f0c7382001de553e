"""Keyed dropout as fused kernels, registered as ``torch.library`` custom ops (one op per tensor on every device).

``graphscale::edge_keep(dst_ids, src_ids, heads, p, h_site)`` gives an attention dropout's keep decisions per edge
and head. ``graphscale::keyed_dropout(x, ids, p, h_site)`` returns ``x * keep / (1 - p)`` with the keep mask of row
``ids[i]``, column ``j`` recomputed from the hash of :mod:`graphscale.data.hashing` (the state ``h_site`` of
``(seed, epoch, site)`` folded with the row id, then with the column's state); its backward is the same op on the
gradient. ``graphscale::keyed_dropout_`` does the same in place (no autograd: for the fused products' own
backward passes). Rows stored in bfloat16 come out in float32 (the dropout of their exact upcast).

Registered as custom ops, each is one unit to autograd, ``torch.compile`` and the dispatch-mode op counts on every
device. Implementations:

* CPU: the numba kernel :func:`_k_node_dropout` (the hash inlined per element, which vectorises), on row ranges in
  the kernel threads;
* any other device: one elementwise chain (row states, column states, hash, compare, scale) compiled by
  ``torch.compile`` into one kernel on first use (a Triton kernel on CUDA), falling back to the eager chain, with a
  warning, where compilation is unavailable. Both give the same bits as the CPU kernel (tested on CPU, where the
  compiled chain can run too).

The mask is never materialised or packed: the kernel computes each keep decision where it scales the element.
"""

from __future__ import annotations

import warnings

import numba as nb
import numpy as np
import torch
from torch import Tensor

from graphscale.data.hashing import _COL_SALT, _HEAD_SALT, _M32, _fold_nb, _fold_t, _hash_t, _threshold
from graphscale.nn import buffers
from graphscale.nn.kernels import _run_rows


@nb.njit(nogil=True, cache=True)
def _k_node_dropout(lo, hi, x, ids, h_col, h_site, thr, scale, out):  # pragma: no cover - compiled
    f = x.shape[1]
    row_scale = np.empty(f, x.dtype)
    for i in range(lo, hi):
        h_row = _fold_nb(h_site, ids[i])
        for j in range(f):  # the hash inlined here vectorises; a call would not
            v = h_row ^ h_col[j]
            v ^= v >> 16
            v = (v * 0x7FEB352D) & 0xFFFFFFFF
            v ^= v >> 15
            v = (v * 0x846CA68B) & 0xFFFFFFFF
            v ^= v >> 16
            row_scale[j] = scale if v >= thr else 0
        for j in range(f):
            out[i, j] = x[i, j] * row_scale[j]


def column_states(num_cols: int, device: torch.device) -> Tensor:
    """The hash state of every column (int64 ``[F]``), the second half of every element's key."""
    return _hash_t((torch.arange(num_cols, device=device) ^ _COL_SALT) & _M32)


def dropout_chain(x: Tensor, ids: Tensor, h_site: int, thr: int, scale: float, out: Tensor) -> Tensor:
    """The whole-tensor keyed dropout as one elementwise chain (what :func:`torch.compile` fuses into one kernel):
    ``out = x * keep * scale``, ``x * 1 * scale`` or ``x * 0`` exactly as the CPU kernel computes it."""
    keep = _hash_t(_fold_t(h_site, ids)[:, None] ^ column_states(x.shape[1], x.device)[None, :]) >= thr
    return out.copy_(x * keep.to(x.dtype) * scale)


def edge_keep_chain(dst_ids: Tensor, src_ids: Tensor, h_site: int, thr: int, num_heads: int) -> Tensor:
    """The keep decisions of an edge-keyed (attention) dropout as one elementwise chain: bool ``[E, H]``, edge
    ``(dst_ids[e], src_ids[e])``, head ``h``."""
    h_head = _hash_t((torch.arange(num_heads, device=dst_ids.device) ^ _HEAD_SALT) & _M32)
    return _hash_t(_fold_t(_fold_t(h_site, dst_ids), src_ids)[:, None] ^ h_head[None, :]) >= thr


_compiled: dict[object, object] = {}


def _run_compiled(chain, *args):
    """``chain(*args)`` compiled by :func:`torch.compile` (once per process and chain; dynamic shapes, so one
    compilation serves every size), or eager where compilation is unavailable (warned once)."""
    fn = _compiled.get(chain)
    if fn is None:
        try:
            fn = torch.compile(chain, dynamic=True, fullgraph=True)
        except Exception as err:  # noqa: BLE001 - no compiler for this device: the eager chain, same bits
            warnings.warn(f"{chain.__name__} runs uncompiled ({type(err).__name__}: {err})", stacklevel=2)
            fn = chain
        _compiled[chain] = fn
    if fn is chain:
        return chain(*args)
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - compilation failed on first call (no Triton, no C++ compiler)
        warnings.warn(f"{chain.__name__} runs uncompiled ({type(err).__name__}: {str(err).splitlines()[0]})",
                      stacklevel=2)
        _compiled[chain] = chain
        return chain(*args)


def node_dropout_into(x: Tensor, ids: Tensor, p: float, h_site: int, out: Tensor | None = None) -> Tensor:
    """``x * keep / (1 - p)`` with the keep mask recomputed from ``ids``, into ``out`` when given (a contiguous
    tensor of ``x``'s shape; ``x`` itself for in place). No autograd: the implementation behind both ops and the
    CPU backend's blocked products.

    Rows stored in bfloat16 (``--feature-dtype``) come out in float32: they are upcast (exactly) into the float32
    output, which the mask then scales in place (no other float32 copy of them)."""
    n, f = x.shape
    thr, scale = _threshold(p), 1.0 / (1.0 - p)
    if x.dtype == torch.bfloat16:
        x = out = x.to(torch.float32) if out is None else out.copy_(x)
    if out is None:
        out = buffers.empty(x.shape, x.dtype, x.device)
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        indptr = np.arange(0, n + 1, dtype=np.int64) * max(f, 1)  # balance rows evenly
        _run_rows(_k_node_dropout, indptr, n * f, x.detach().contiguous().numpy(), ids.contiguous().numpy(),
                  column_states(f, x.device).numpy(), h_site, thr, scale, out.numpy())
        return out
    if x.device.type == "cpu":  # a dtype numba does not handle: the eager chain
        return dropout_chain(x.detach(), ids, h_site, thr, scale, out)
    return _run_compiled(dropout_chain, x.detach(), ids, h_site, thr, scale, out)


def _out_dtype(x: Tensor) -> torch.dtype:
    return torch.float32 if x.dtype == torch.bfloat16 else x.dtype


@torch.library.custom_op("graphscale::keyed_dropout", mutates_args=())
def keyed_dropout(x: Tensor, ids: Tensor, p: float, h_site: int) -> Tensor:
    """Keyed dropout of the rows ``x`` (global ids ``ids``) at the site whose state is ``h_site``: ``[N, F]`` ->
    ``[N, F]`` (float32 for bfloat16 rows); differentiable in ``x``."""
    return node_dropout_into(x, ids, p, h_site)


@keyed_dropout.register_fake
def _(x, ids, p, h_site):
    return x.new_empty(x.shape, dtype=_out_dtype(x))


def _setup(ctx, inputs, output) -> None:
    _, ids, p, h_site = inputs
    ctx.save_for_backward(ids)
    ctx.p, ctx.h_site = p, h_site


def _backward(ctx, grad):
    (ids,) = ctx.saved_tensors
    return keyed_dropout(grad.contiguous(), ids, ctx.p, ctx.h_site), None, None, None


keyed_dropout.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("graphscale::keyed_dropout_", mutates_args=("x",))
def keyed_dropout_(x: Tensor, ids: Tensor, p: float, h_site: int) -> None:
    """:func:`keyed_dropout` of ``x`` in place (float32 / float64 rows; no autograd)."""
    node_dropout_into(x, ids, p, h_site, out=x)


@torch.library.custom_op("graphscale::edge_keep", mutates_args=())
def edge_keep(dst_ids: Tensor, src_ids: Tensor, num_heads: int, p: float, h_site: int) -> Tensor:
    """The keep decisions (bool ``[E, H]``) of an edge-keyed dropout of the edges ``(dst_ids[e], src_ids[e])``
    (global ids) at the site whose state is ``h_site``."""
    thr = _threshold(p)
    if dst_ids.device.type == "cpu":
        return edge_keep_chain(dst_ids, src_ids, h_site, thr, num_heads)
    return _run_compiled(edge_keep_chain, dst_ids, src_ids, h_site, thr, num_heads)


@edge_keep.register_fake
def _(dst_ids, src_ids, num_heads, p, h_site):
    return dst_ids.new_empty((dst_ids.shape[0], num_heads), dtype=torch.bool)

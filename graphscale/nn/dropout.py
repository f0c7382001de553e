"""Dropout whose masks are pure functions of global ids, so recomputed rows get identical masks.

The keep decision for feature ``col`` of the row of global vertex ``gid`` at
dropout site ``site`` is a counter-based hash of
``(seed, epoch, site, gid, col)``; for attention dropout it is a hash of
``(seed, epoch, site, dst gid, src gid, head)``. A row computed on worker A of a
partition, in chunk 3 of HongTu, or in the full graph therefore sees the same
mask, whatever the row order or subset.

Hash. ``lowbias32`` (Wellons) on 32-bit lanes held in int64:
``x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16``
(mod 2^32). Every 32x32-bit product is split into 16-bit halves so all
intermediates stay below 2^49 in the torch version (no signed overflow on any
device); the numba version multiplies directly (LLVM's wrapping int64 product
has exact low 32 bits). Both give identical bits (tested). A key is
folded in 32-bit words, ``h <- hash(h ^ word)``; the hash is a bijection, so
distinct row ids give distinct row states. An element is kept iff its 32-bit
hash is ``>= round(p * 2^32)`` (integer comparison: keep probability
``1 - p`` up to 2^-32), and kept values are scaled by ``1 / (1 - p)``.

The backward pass recomputes the node mask from the ids instead of saving it,
so node dropout keeps no ``[N, F]`` tensor alive for autograd.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import torch
from torch import Tensor

from graphscale.data.hashing import (
    _COL_SALT,
    _EDGE_STREAM,
    _HEAD_SALT,
    _M32,
    _NODE_STREAM,
    _check_ids,
    _fold_nb,
    _fold_t,
    _hash_nb,
    _hash_t,
    _threshold,
    site_state,
)
from graphscale.nn import fused
from graphscale.nn.backend import uses_numba
from graphscale.nn.dense import dropped_linear
from graphscale.nn.fused import column_states, node_dropout_into
from graphscale.nn.kernels import _run_rows, keep_bytes
from graphscale.nn.topology import Topology, topology


# ----------------------------------------------------------------- node (row, col) masks
def node_keep_mask(ids: Tensor, num_cols: int, p: float, seed: int, epoch: int, site: int) -> Tensor:
    """Boolean keep mask of a row-keyed dropout (vectorised torch; any device).

    Args:
        ids: int64 global vertex ids of the rows, ``[N]`` (non-negative).
        num_cols: feature columns ``F``.
        p: drop probability.
        seed, epoch, site: the rest of the key.

    Returns:
        bool ``[N, F]``: ``True`` where the element is kept.
    """
    _check_ids(ids, ids.numel(), "node_keep_mask")
    h_site = site_state(seed, epoch, site, _NODE_STREAM)
    h_row = _fold_t(h_site, ids)
    h_col = _hash_t((torch.arange(num_cols, device=ids.device) ^ _COL_SALT) & _M32)
    return _hash_t(h_row[:, None] ^ h_col[None, :]) >= _threshold(p)


@nb.njit(nogil=True, cache=True)
def _k_keep_bits(lo, hi, ids, h_col, h_site, thr, words):  # pragma: no cover - compiled
    """The same keep decisions as :func:`_k_node_dropout`, packed into uint64 words (bit ``j % 64`` of word
    ``j // 64``); a word is OR-ed together from its 64 columns' hashes, which vectorises (setting one bit at a
    time did not: 0.70 s against 0.05 s for 1M rows of 128 columns)."""
    f = h_col.shape[0]
    for i in range(lo, hi):
        h_row = _fold_nb(h_site, ids[i])
        for q in range(words.shape[1]):
            base = 64 * q
            word = np.uint64(0)
            for k in range(min(64, f - base)):
                v = h_row ^ h_col[base + k]  # the hash inlined, as in _k_node_dropout
                v ^= v >> 16
                v = (v * 0x7FEB352D) & 0xFFFFFFFF
                v ^= v >> 15
                v = (v * 0x846CA68B) & 0xFFFFFFFF
                v ^= v >> 16
                word |= np.uint64(v >= thr) << np.uint64(k)
            words[i, q] = word


class RowKeep:
    """The keep decisions of one row-keyed dropout over given rows, for kernels that apply it as they read.

    Element ``(i, j)`` is kept iff :func:`node_keep_mask` says so for ``(ids[i], j)``, and kept values are
    scaled by ``1 / (1 - p)`` (the same ``x * scale`` in ``x``'s dtype as :func:`keyed_dropout`, so a fused
    kernel reproduces ``keyed_dropout`` bit for bit). :meth:`bits` packs the decisions 8 columns a byte
    (uint8 ``[N, keep_bytes(F)]``: about 1/32 of a float32 copy), the only thing a fused kernel needs.

    Args:
        ids: int64 global vertex ids of the rows.
        num_cols: feature columns ``F``.
        p: drop probability in ``(0, 1)``.
        h_site: :func:`site_state` of ``(seed, epoch, site)``.
    """

    def __init__(self, ids: Tensor, num_cols: int, p: float, h_site: int) -> None:
        _check_ids(ids, ids.numel(), "RowKeep")
        self.ids, self.num_cols, self.p, self.h_site = ids, int(num_cols), float(p), int(h_site)
        self.scale = 1.0 / (1.0 - self.p)
        self._bits: Tensor | None = None

    def bits(self) -> Tensor:
        """Packed keep bits: bit ``j % 8`` of byte ``[i, j // 8]`` (uint8 ``[N, keep_bytes(F)]``: rows padded with
        zero bytes to whole 64-bit words, which the kernels read)."""
        if self._bits is None:
            n, f = self.ids.numel(), self.num_cols
            h_col = column_states(f, self.ids.device)
            if uses_numba(self.ids):
                bits = torch.empty(n, keep_bytes(f), dtype=torch.uint8)
                indptr = np.arange(0, n + 1, dtype=np.int64) * max(f, 1)
                _run_rows(_k_keep_bits, indptr, n * f, self.ids.contiguous().numpy(), h_col.numpy(), self.h_site,
                          _threshold(self.p), bits.numpy().view(np.uint64))
            else:
                keep = _hash_t(_fold_t(self.h_site, self.ids)[:, None] ^ h_col[None, :]) >= _threshold(self.p)
                pad = torch.zeros(n, 8 * keep_bytes(f) - f, dtype=torch.bool, device=keep.device)
                weights = (1 << torch.arange(8, device=keep.device)).to(torch.uint8)
                bits = (torch.cat([keep, pad], 1).view(n, -1, 8).to(torch.uint8) * weights).sum(-1)
                bits = bits.to(torch.uint8)
            self._bits = bits
        return self._bits

    def rows(self, k: int) -> RowKeep:
        """The same dropout over the first ``k`` rows."""
        return RowKeep(self.ids[:k], self.num_cols, self.p, self.h_site)

    def apply(self, x: Tensor) -> Tensor:
        """``keyed_dropout`` of ``x`` (one row per id), differentiable: ``[N, F]`` -> ``[N, F]``."""
        self.check(x, "apply")
        return fused.keyed_dropout(x, self.ids.to(x.device), self.p, self.h_site)

    def apply_rows(self, x: Tensor, rows: slice, out: Tensor | None = None) -> Tensor:
        """``keyed_dropout`` of ``x``, the rows ``rows`` of this dropout's rows (a block of a blocked product; no
        autograd), into ``out`` when given (``x`` itself for in place): ``[len(rows), F]`` -> ``[len(rows), F]``."""
        return node_dropout_into(x, self.ids[rows], self.p, self.h_site, out=out)

    def linear(self, x: Tensor, weight: Tensor) -> Tensor:
        """``apply(x) @ weight.T`` without a dropped copy of ``x``: the dropped rows exist one block of
        :data:`LINEAR_BLOCK_BYTES` at a time, in the forward and again in the backward (recomputed from the ids,
        as :meth:`apply`'s backward does), so autograd keeps ``x`` (which the layer before holds anyway) and not
        a second ``[N, F]`` tensor. Differentiable in ``x`` and ``weight``: ``[N, F]`` x ``[O, F]`` -> ``[N, O]``."""
        self.check(x, "linear")
        return dropped_linear(x, weight, self.ids.to(x.device), self.p, self.h_site)

    def check(self, x: Tensor, what: str) -> None:
        """Raise a ValueError naming ``what`` unless ``x`` has one row per id and :attr:`num_cols` columns."""
        if x.shape != (self.ids.numel(), self.num_cols):
            raise ValueError(f"RowKeep.{what}: x must be [{self.ids.numel()}, {self.num_cols}], got {tuple(x.shape)}")


def keyed_dropout_keep(ids: Tensor, num_cols: int, p: float, seed: int, epoch: int, site: int,
                       training: bool = True) -> RowKeep | None:
    """The :class:`RowKeep` of ``keyed_dropout(x, ids, p, seed, epoch, site, training)`` for a kernel to apply
    as it reads ``x``; ``None`` where that dropout is the identity (not training, or ``p == 0``).

    Raises:
        ValueError: ``p`` outside ``[0, 1)`` (``p == 1`` zeroes everything: use :func:`keyed_dropout`).
    """
    _threshold(p)
    if not training or p == 0.0:
        return None
    if p >= 1.0:
        raise ValueError("keyed_dropout_keep: p == 1 drops everything; use keyed_dropout")
    return RowKeep(ids, num_cols, float(p), site_state(seed, epoch, site, _NODE_STREAM))


def keyed_dropout(x: Tensor, ids: Tensor, p: float, seed: int, epoch: int, site: int,
                  training: bool = True) -> Tensor:
    r"""Row-keyed dropout: the mask of ``x[i, j]`` depends only on ``(seed, epoch, site, ids[i], j)``.

    .. math::
        y_{ij} = x_{ij} \cdot \mathbb{1}[\text{hash}(\text{seed}, \text{epoch}, \text{site}, \text{id}_i, j) \ge p\,2^{32}] / (1 - p)

    Args:
        x: features, one row per id.
        ids: int64 global vertex ids of the rows (non-negative).
        p: drop probability in ``[0, 1]``.
        seed, epoch, site: the rest of the key (site tells dropout calls apart).
        training: identity when ``False``.

    Returns:
        The dropped-out features (``x`` itself when inactive); bfloat16 rows (stored features, ``--feature-dtype``)
        come out in float32, the dropout of their exact upcast.

    Shapes:
        x ``[N, F]``, ids ``[N]`` -> ``[N, F]``.
    """
    _threshold(p)
    if not training or p == 0.0:
        return x
    if x.dim() != 2:
        raise ValueError(f"keyed_dropout: x must be 2-D [N, F], got {tuple(x.shape)}")
    _check_ids(ids, x.shape[0], "keyed_dropout")
    if p == 1.0:
        return x * 0
    return fused.keyed_dropout(x, ids.to(x.device), float(p), site_state(seed, epoch, site, _NODE_STREAM))


# ----------------------------------------------------------------- edge (attention) masks
def edge_keep_mask(dst_ids: Tensor, src_ids: Tensor, heads: int, p: float, seed: int, epoch: int,
                   site: int) -> Tensor:
    """Boolean keep mask of an edge-keyed dropout (vectorised torch; any device).

    Args:
        dst_ids, src_ids: int64 global ids of each edge's endpoints, ``[E]``.
        heads: attention heads ``H``.
        p: drop probability.
        seed, epoch, site: the rest of the key.

    Returns:
        bool ``[E, H]``: ``True`` where the attention coefficient is kept.
    """
    _check_ids(dst_ids, dst_ids.numel(), "edge_keep_mask")
    _check_ids(src_ids, dst_ids.numel(), "edge_keep_mask")
    return fused.edge_keep(dst_ids, src_ids, heads, float(p), site_state(seed, epoch, site, _EDGE_STREAM))


@nb.njit(nogil=True, cache=True)
def _k_edge_keep(lo, hi, indptr, indices, gids, h_head, h_site, thr, n_self, keep, keep_self):  # pragma: no cover
    nh = h_head.shape[0]
    for r in range(lo, hi):
        h_dst = _fold_nb(h_site, gids[r])
        for e in range(indptr[r], indptr[r + 1]):
            h_e = _fold_nb(h_dst, gids[indices[e]])
            for h in range(nh):
                keep[e, h] = _hash_nb(h_e ^ h_head[h]) >= thr
        if r < n_self:
            h_e = _fold_nb(h_dst, gids[r])
            for h in range(nh):
                keep_self[r, h] = _hash_nb(h_e ^ h_head[h]) >= thr


def block_edge_keep_mask(block, src_ids: Tensor, heads: int, p: float, seed: int, epoch: int, site: int,
                         num_self: int = 0) -> tuple[Tensor, Tensor]:
    """Edge-keyed keep masks for a block's in-edges and its first ``num_self`` self-loops.

    Equal to :func:`edge_keep_mask` on ``(src_ids[dst_e], src_ids[src_e])`` (and
    ``(v, v)`` for self-loops), computed without per-edge id tensors on CPU.

    Args:
        block: a :class:`~graphscale.data.block.Block` or :class:`~graphscale.nn.ops.Topology`.
        src_ids: int64 global ids of the block's source rows ``[S]``.
        heads: attention heads ``H``.
        p, seed, epoch, site: the key.
        num_self: number of destination rows with a self-loop entry.

    Returns:
        ``(keep [nnz, H], keep_self [num_self, H])`` bool.
    """
    topo: Topology = topology(block)
    _check_ids(src_ids, topo.num_src, "block_edge_keep_mask")
    thr = _threshold(p)
    h_site = site_state(seed, epoch, site, _EDGE_STREAM)
    if uses_numba(topo.indptr, src_ids):
        h_head = _hash_t((torch.arange(heads, device=src_ids.device) ^ _HEAD_SALT) & _M32)
        keep = torch.empty(topo.num_edges, heads, dtype=torch.bool)
        keep_self = torch.empty(num_self, heads, dtype=torch.bool)
        _run_rows(_k_edge_keep, topo.indptr.numpy(), 8 * (topo.num_edges + topo.num_dst) * heads,
                  topo.indptr.numpy(), topo.indices.numpy(), src_ids.contiguous().numpy(), h_head.numpy(), h_site,
                  thr, num_self, keep.numpy(), keep_self.numpy())
        return keep, keep_self
    loops = src_ids[:num_self]
    keep = fused.edge_keep(src_ids[topo.edge_dst()], src_ids[topo.indices], heads, float(p), h_site)
    return keep, fused.edge_keep(loops, loops, heads, float(p), h_site)


# ----------------------------------------------------------------- modules
class KeyedDropout(torch.nn.Module):
    """Row-keyed dropout as a module; the model sets ``epoch`` through :meth:`set_epoch`.

    Args:
        p: drop probability.
        site: dropout site number (distinct per dropout call in a model).
        seed: dropout seed.
    """

    def __init__(self, p: float, site: int, seed: int = 0) -> None:
        super().__init__()
        _threshold(p)
        self.p, self.site, self.seed, self.epoch = float(p), int(site), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        """Apply the mask of rows ``ids``. Shapes: x ``[N, F]``, ids ``[N]`` -> ``[N, F]``."""
        return keyed_dropout(x, ids, self.p, self.seed, self.epoch, self.site, self.training)

    def keep(self, ids: Tensor, num_cols: int) -> RowKeep | None:
        """This dropout's decisions over rows ``ids`` for a fused kernel (:func:`keyed_dropout_keep`); ``None``
        when it is the identity. ``p == 1`` is not fused (``None`` too; apply the module instead)."""
        if self.p >= 1.0:
            return None
        return keyed_dropout_keep(ids, num_cols, self.p, self.seed, self.epoch, self.site, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, site={self.site}"


class EdgeDropout(torch.nn.Module):
    """Edge-keyed (attention) dropout over a block's in-edges and self-loops.

    Args:
        p: drop probability.
        site: dropout site number.
        seed: dropout seed.
    """

    def __init__(self, p: float, site: int, seed: int = 0) -> None:
        super().__init__()
        _threshold(p)
        self.p, self.site, self.seed, self.epoch = float(p), int(site), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def forward(self, block, alpha: Tensor, alpha_self: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Drop attention coefficients keyed by ``(dst gid, src gid, head)``.

        Shapes: alpha ``[nnz, H]``, alpha_self ``[k, H]`` -> same.
        """
        if not self.training or self.p == 0.0:
            return alpha, alpha_self
        if self.p == 1.0:
            return alpha * 0, (None if alpha_self is None else alpha_self * 0)
        k = 0 if alpha_self is None else alpha_self.shape[0]
        keep, keep_self = block_edge_keep_mask(block, block.src_ids, alpha.shape[1], self.p, self.seed, self.epoch,
                                               self.site, k)
        scale = 1.0 / (1.0 - self.p)
        alpha = alpha * (keep.to(alpha.dtype) * scale)
        if alpha_self is not None:
            alpha_self = alpha_self * (keep_self.to(alpha_self.dtype) * scale)
        return alpha, alpha_self

    def extra_repr(self) -> str:
        return f"p={self.p}, site={self.site}"

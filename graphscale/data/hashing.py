"""The counter-based hash behind keyed dropout, three ways (Python ints, torch int64 tensors, numba), bit-identical.

``lowbias32`` (Wellons) on 32-bit lanes held in int64:
``x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16`` (mod 2^32). Every 32x32-bit product
is split into 16-bit halves so all intermediates stay below 2^49 in the torch version (no signed overflow on any
device, nor in a compiled kernel); the numba version multiplies directly (LLVM's wrapping int64 product has exact low
32 bits). A key is folded in 32-bit words, ``h <- hash(h ^ word)``; the hash is a bijection, so distinct row ids give
distinct row states. An element is kept iff its 32-bit hash is ``>= round(p * 2^32)``. :func:`keyed_uniform`
maps the same hash to uniform values keyed by ``(seed, stream, row id, column)`` (computed features' random rows).
"""

from __future__ import annotations

import numba as nb
import torch
from torch import Tensor

_M32 = 0xFFFFFFFF
_NODE_STREAM = 0x3C6EF372
_EDGE_STREAM = 0xA54FF53A
_COL_SALT = 0x68E31DA4
_HEAD_SALT = 0x1B56C4E9


# ----------------------------------------------------------------- the hash, three ways
def _hash_int(x: int) -> int:
    """lowbias32 on a Python int in ``[0, 2^32)``."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def _hash_t(x: Tensor) -> Tensor:
    """lowbias32 on an int64 tensor of values in ``[0, 2^32)``, overflow-free."""
    x = x ^ (x >> 16)
    x = ((((x * 0x7FEB) & 0xFFFF) << 16) + x * 0x352D) & _M32
    x = x ^ (x >> 15)
    x = ((((x * 0x846C) & 0xFFFF) << 16) + x * 0xA68B) & _M32
    return x ^ (x >> 16)


@nb.njit(nogil=True, cache=True)
def _hash_nb(x):  # pragma: no cover - compiled
    # int64 products wrap modulo 2^64 in LLVM (no nsw flag), so the low 32 bits are exact.
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _fold_int(h: int, value: int) -> int:
    value &= (1 << 64) - 1
    h = _hash_int(h ^ (value & _M32))
    return _hash_int(h ^ (value >> 32))


def _fold_t(h: Tensor | int, value: Tensor) -> Tensor:
    """Fold non-negative int64 ``value`` (two 32-bit words) into state ``h``."""
    h = _hash_t(h ^ (value & _M32))
    return _hash_t(h ^ ((value >> 32) & _M32))


@nb.njit(nogil=True, cache=True)
def _fold_nb(h, value):  # pragma: no cover - compiled
    h = _hash_nb(h ^ (value & 0xFFFFFFFF))
    return _hash_nb(h ^ ((value >> 32) & 0xFFFFFFFF))


def site_state(seed: int, epoch: int, site: int, stream: int = _NODE_STREAM) -> int:
    """The 32-bit hash state of ``(stream, seed, epoch, site)``; every mask at that site starts from it."""
    h = _hash_int(stream)
    for value in (seed, epoch, site):
        h = _fold_int(h, int(value))
    return h


def _threshold(p: float) -> int:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1], got {p}")
    return min(round(p * 2.0**32), 1 << 32)


def _check_ids(ids: Tensor, n: int, what: str) -> None:
    if ids.dim() != 1 or ids.numel() != n:
        raise ValueError(f"{what}: ids must be 1-D with one entry per row ({n}), got {tuple(ids.shape)}")
    if ids.dtype != torch.int64:
        raise ValueError(f"{what}: ids must be int64, got {ids.dtype}")


def keyed_uniform(ids: torch.Tensor, dim: int, seed: int, stream: int, salt: int = 0) -> torch.Tensor:
    """Uniform float64 ``[len(ids), dim]`` in ``(0, 1)`` (never 0 or 1): element ``(i, c)`` a pure function of
    ``(seed, stream, ids[i], c, salt)`` (salt 0 or 1), so any row subset or order gets the same rows."""
    ids = torch.as_tensor(ids, dtype=torch.int64).cpu()
    h = _hash_int(stream & _M32)
    h = _hash_t(torch.tensor(h ^ (int(seed) & _M32), dtype=torch.int64))
    rows = _fold_t(h, ids)[:, None]
    cols = torch.arange(dim, dtype=torch.int64)[None, :]
    bits = _hash_t(_hash_t(rows ^ ((cols * 2 + salt) & _M32)))
    return (bits.double() + 0.5) / 2.0**32

"""The CPU backend's numba kernels and the threads that run them (:mod:`graphscale.nn.backend` picks them).

Every kernel is compiled with ``nogil=True`` and runs over a row range ``[lo, hi)``; :func:`_run_rows` splits the
rows into ranges balanced by work (``edges + rows``) and runs them on ``torch.get_num_threads()`` threads of one
pool kept across calls. Plain threads rather than numba's ``parallel=True`` keep the kernels fork-safe (numba's
OpenMP layer terminates a forked child that used it) and thread-safe, and honour ``torch.set_num_threads``.

Determinism. Each output row is summed by one thread in CSR order, so a row's value does not depend on the thread
count, and a partition block whose rows list the same in-edges in the same order (``Block.from_nodes``) reproduces
the full-graph rows bit for bit.

Memory latency. A source row is a random read, so the products prefetch the rows :data:`PREFETCH_DISTANCE` edges
ahead.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from torch import Tensor

#: Below this many scalar multiply-adds a kernel runs in the calling thread only (a few milliseconds of work: handing
#: it to threads that torch's OpenMP workers compete with for the cores cost more than it saved).
_MIN_PARALLEL_WORK = 1 << 22
#: Chunks per thread (small over-decomposition absorbs uneven row costs and busy cores).
_CHUNKS_PER_THREAD = 4

# =====================================================================================
# numba kernels (serial over a row range [lo, hi); parallelism comes from _run_rows)
# =====================================================================================
@nb.njit(nogil=True, cache=True)
def _k_bounds(indptr, num_chunks):  # pragma: no cover - compiled
    """Row boundaries splitting rows into chunks of roughly equal ``edges + rows``."""
    n = indptr.shape[0] - 1
    total = indptr[n] + n
    bounds = np.empty(num_chunks + 1, np.int64)
    bounds[0] = 0
    for k in range(1, num_chunks):
        target = (total * k) // num_chunks
        lo, hi = bounds[k - 1], n
        while lo < hi:  # first row r with indptr[r] + r >= target
            mid = (lo + hi) // 2
            if indptr[mid] + mid < target:
                lo = mid + 1
            else:
                hi = mid
        bounds[k] = lo
    bounds[num_chunks] = n
    return bounds


@nb.njit(nogil=True, cache=True)
def _k_transpose(indptr, indices, num_cols, with_indices, with_perm):  # pragma: no cover - compiled
    """Counting-sort transpose of a CSR: (t_indptr, t_indices, perm); t_indices / perm are empty unless asked for."""
    n = indptr.shape[0] - 1
    nnz = indices.shape[0]
    t_indptr = np.zeros(num_cols + 1, np.int64)
    for e in range(nnz):
        t_indptr[indices[e] + 1] += 1
    for c in range(num_cols):
        t_indptr[c + 1] += t_indptr[c]
    pos = t_indptr[:num_cols].copy()
    t_indices = np.empty(nnz if with_indices else 0, np.int64)
    perm = np.empty(nnz if with_perm else 0, np.int64)
    for r in range(n):
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            p = pos[c]
            if with_indices:
                t_indices[p] = r
            if with_perm:
                perm[p] = e
            pos[c] = p + 1
    return t_indptr, t_indices, perm


@nb.njit(nogil=True, cache=True)
def _k_is_own_transpose(indptr, indices, num_cols):  # pragma: no cover - compiled
    """Whether the CSR equals its transpose (:func:`_k_transpose`'s t_indptr and t_indices): a square CSR whose
    in-degrees equal its row lengths and whose every entry sits where the counting sort would put it (so a
    symmetric graph with ascending rows). Needs two length-``n`` temporaries only."""
    n = indptr.shape[0] - 1
    if num_cols != n:
        return False
    in_deg = np.zeros(n, np.int64)
    for e in range(indices.shape[0]):
        in_deg[indices[e]] += 1
    for r in range(n):
        if in_deg[r] != indptr[r + 1] - indptr[r]:
            return False
    pos = indptr[:n].copy()
    for r in range(n):
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            if indices[pos[c]] != r:
                return False
            pos[c] += 1
    return True


def keep_bytes(num_cols: int) -> int:
    """Bytes of one row's packed keep bits: 8 columns a byte, in whole 64-bit words (the kernels read a word and
    select its 64 columns from it, which vectorises; unpacking byte by byte cost more than the product)."""
    return 8 * ((num_cols + 63) // 64)


#: Edges ahead whose source row the CSR kernels prefetch: a source row is a random access (a cache miss on any
#: graph larger than the cache), and its latency, not arithmetic, bounds a product; measured on a 1M-vertex SBM,
#: 3 to 16 ahead all cut a 128-wide product by 20-30% (8 is in the middle).
PREFETCH_DISTANCE = 8


@intrinsic
def _prefetch_row(typingctx, a, i):  # pragma: no cover - compiled
    """Hint the CPU to load every cache line of row ``i`` of C-contiguous array ``a`` (``strides[0]`` bytes from
    ``a[i]``); no effect on results. An index past the end prefetches nothing useful but faults nothing
    (prefetches never fault)."""

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zeros = [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], *zeros], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        base = builder.bitcast(ptr, i8p)
        row_bytes = cgutils.unpack_tuple(builder, ary.strides, aryty.ndim)[0]
        step = context.get_constant(types.intp, 64)
        with cgutils.for_range_slice(builder, context.get_constant(types.intp, 0), row_bytes, step) as (off, _):
            # read access, maximal temporal locality, data cache
            builder.call(fn, [builder.gep(base, [off]), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(a, i), codegen


@nb.njit(nogil=True, cache=True)
def _k_spmm(lo, hi, indptr, indices, eperm, ew, cs, rs, ss, x, in_bits, out_bits, scale,
            out):  # pragma: no cover - compiled
    """out[r] = rs[r] * sum_e ew[eperm[e]] * cs[c_e] * x[c_e] + ss[r] * x[r] (absent arrays have length 0),
    optionally with a dropout applied as it reads or writes, from packed keep bits (uint64 words, 64 columns
    each: bit ``j % 64`` of word ``j // 64``; :func:`keep_bytes`).

    ``in_bits`` (``[S, ceil(F/64)]`` or empty): every read ``x[c, j]`` becomes ``x[c, j] * m`` with ``m`` =
    ``scale`` (in x's dtype) where bit ``(c, j)`` is set, else 0: exactly the dropped copy ``keyed_dropout``
    would have written. ``out_bits`` (``[D, ceil(F/64)]`` or empty): every output ``out[r, j]`` is multiplied by
    the same ``m`` of ``(r, j)`` (the dropout's backward applied to a transposed product). An edge without a
    weight or column scale adds ``1 * x[c]``, which is ``x[c]`` exactly.
    """
    f = x.shape[1]
    nnz = indices.shape[0]
    has_perm = eperm.shape[0] > 0
    has_ew = ew.shape[0] > 0
    has_cs = cs.shape[0] > 0
    has_rs = rs.shape[0] > 0
    has_in = in_bits.shape[0] > 0
    n_self = ss.shape[0]
    acc = np.empty(f, out.dtype)
    typed = np.empty(2, x.dtype)
    typed[0], typed[1] = scale, 1
    keep, unit = typed[0], typed[1]
    drop = keep - keep  # m of a kept / dropped element, in x's dtype
    one = np.uint64(1)
    for r in range(lo, hi):
        acc[:] = 0
        end = indptr[r + 1]
        for e in range(indptr[r], end + (1 if r < n_self else 0)):
            # edge e, or (e == end) the self-loop: acc += w * x[c], of x[c] * m when dropped on read (the loops
            # are written out here: called as a helper they did not vectorise)
            if e < end:
                if e + PREFETCH_DISTANCE < nnz:
                    ahead = indices[e + PREFETCH_DISTANCE]
                    _prefetch_row(x, ahead)
                    if has_in:
                        _prefetch_row(in_bits, ahead)
                c = indices[e]
                w = unit
                if has_ew:
                    w = ew[eperm[e]] if has_perm else ew[e]
                    if has_cs:
                        w = w * cs[c]
                elif has_cs:
                    w = cs[c]
            else:
                if has_rs:
                    s = rs[r]
                    for j in range(f):
                        acc[j] *= s
                c = r
                w = ss[r]
            if has_in:
                for q in range(in_bits.shape[1]):
                    word, base = in_bits[c, q], 64 * q
                    for k in range(min(64, f - base)):
                        m = keep if (word >> np.uint64(k)) & one else drop
                        acc[base + k] += w * (x[c, base + k] * m)
            else:
                for j in range(f):
                    acc[j] += w * x[c, j]
        if has_rs and r >= n_self:
            s = rs[r]
            for j in range(f):
                acc[j] *= s
        if out_bits.shape[0] > 0:
            for q in range(out_bits.shape[1]):
                word, base = out_bits[r, q], 64 * q
                for k in range(min(64, f - base)):
                    m = keep if (word >> np.uint64(k)) & one else drop
                    out[r, base + k] = acc[base + k] * m
        else:
            for j in range(f):
                out[r, j] = acc[j]


@nb.njit(nogil=True, cache=True)
def _k_spmm_heads(lo, hi, indptr, indices, eperm, w, ws, x, out):  # pragma: no cover - compiled
    """out[r, h] = sum_e w[eperm[e], h] * x[c_e, h] + ws[r, h] * x[r, h]."""
    nh = x.shape[1]
    f = x.shape[2]
    has_perm = eperm.shape[0] > 0
    n_self = ws.shape[0]
    nnz = indices.shape[0]
    acc = np.empty((nh, f), out.dtype)
    for r in range(lo, hi):
        acc[:, :] = 0
        for e in range(indptr[r], indptr[r + 1]):
            if e + PREFETCH_DISTANCE < nnz:
                _prefetch_row(x, indices[e + PREFETCH_DISTANCE])
            c = indices[e]
            k = eperm[e] if has_perm else e
            for h in range(nh):
                a = w[k, h]
                for j in range(f):
                    acc[h, j] += a * x[c, h, j]
        if r < n_self:
            for h in range(nh):
                a = ws[r, h]
                for j in range(f):
                    acc[h, j] += a * x[r, h, j]
        for h in range(nh):
            for j in range(f):
                out[r, h, j] = acc[h, j]


@nb.njit(nogil=True, cache=True)
def _k_sddmm_heads(lo, hi, indptr, indices, g, x, gw, gws):  # pragma: no cover - compiled
    """gw[e, h] = <g[r_e, h], x[c_e, h]>;  gws[r, h] = <g[r, h], x[r, h]> for r < len(gws)."""
    nh = x.shape[1]
    f = x.shape[2]
    n_self = gws.shape[0]
    nnz = indices.shape[0]
    for r in range(lo, hi):
        for e in range(indptr[r], indptr[r + 1]):
            if e + PREFETCH_DISTANCE < nnz:
                _prefetch_row(x, indices[e + PREFETCH_DISTANCE])
            c = indices[e]
            for h in range(nh):
                s = 0.0
                for j in range(f):
                    s += g[r, h, j] * x[c, h, j]
                gw[e, h] = s
        if r < n_self:
            for h in range(nh):
                s = 0.0
                for j in range(f):
                    s += g[r, h, j] * x[r, h, j]
                gws[r, h] = s


@nb.njit(nogil=True, cache=True)
def _k_softmax(lo, hi, indptr, s, ss, a, a_self):  # pragma: no cover - compiled
    """Row-segment softmax over the row's edges plus (optionally) one self entry per row."""
    nh = s.shape[1]
    n_self = ss.shape[0]
    for r in range(lo, hi):
        b, t = indptr[r], indptr[r + 1]
        for h in range(nh):
            has_self = r < n_self
            if b == t and not has_self:
                continue
            m = ss[r, h] if has_self else s[b, h]
            for e in range(b, t):
                m = max(m, s[e, h])
            z = m * 0
            for e in range(b, t):
                v = np.exp(s[e, h] - m)
                a[e, h] = v
                z += v
            if has_self:
                v = np.exp(ss[r, h] - m)
                a_self[r, h] = v
                z += v
            for e in range(b, t):
                a[e, h] /= z
            if has_self:
                a_self[r, h] /= z


@nb.njit(nogil=True, cache=True)
def _k_softmax_bwd(lo, hi, indptr, a, a_self, g, g_self, gs, gs_self):  # pragma: no cover - compiled
    """Softmax backward per segment: gs = a * (g - sum(a * g))."""
    nh = a.shape[1]
    n_self = a_self.shape[0]
    for r in range(lo, hi):
        b, t = indptr[r], indptr[r + 1]
        has_self = r < n_self
        for h in range(nh):
            d = 0.0
            for e in range(b, t):
                d += a[e, h] * g[e, h]
            if has_self:
                d += a_self[r, h] * g_self[r, h]
            for e in range(b, t):
                gs[e, h] = a[e, h] * (g[e, h] - d)
            if has_self:
                gs_self[r, h] = a_self[r, h] * (g_self[r, h] - d)


# =====================================================================================
# running kernels on balanced row chunks in threads
# =====================================================================================
def _run_rows(kernel, indptr: np.ndarray, work: int, *args) -> None:
    """Run ``kernel(lo, hi, *args)`` over all CSR rows, split across threads when worth it.

    Args:
        kernel: a nogil numba kernel taking a row range first.
        indptr: the CSR row pointer the rows are balanced by.
        work: approximate number of scalar multiply-adds (decides whether to thread).
        *args: the kernel's remaining arguments.
    """
    n = indptr.shape[0] - 1
    threads = max(1, torch.get_num_threads())
    if threads == 1 or work < _MIN_PARALLEL_WORK or n < 2:
        kernel(0, n, *args)
        return
    bounds = _k_bounds(indptr, min(n, threads * _CHUNKS_PER_THREAD))
    ranges = [(int(bounds[i]), int(bounds[i + 1])) for i in range(len(bounds) - 1) if bounds[i + 1] > bounds[i]]
    pool = _kernel_pool(threads)
    for future in [pool.submit(kernel, lo, hi, *args) for lo, hi in ranges]:
        future.result()


_pool: ThreadPoolExecutor | None = None
_pool_threads = 0
_pool_lock = threading.Lock()


def _kernel_pool(threads: int) -> ThreadPoolExecutor:
    """The kernels' worker threads, kept across calls (starting a pool per call cost more than the kernel on
    small calls: 740 thread starts, 0.8 s, in a 1M-vertex epoch's dropped linear at 2 threads); remade when the
    thread count changes, and dropped in a forked child (its threads do not exist there)."""
    global _pool, _pool_threads
    with _pool_lock:
        if _pool is None or _pool_threads != threads:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="graphscale-kernel")
            _pool_threads = threads
        return _pool


def _forget_pool() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _np(t: Tensor | None, dtype: torch.dtype | None = None) -> np.ndarray:
    """A contiguous CPU numpy view (length-0 array standing in for ``None``)."""
    if t is None:
        return np.empty(0, dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return t.detach().contiguous().numpy()



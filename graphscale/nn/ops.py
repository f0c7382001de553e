"""Sparse kernels for GNN layers on blocks: SpMM, multi-head SpMM, SDDMM, segment softmax.

Every product here runs over a block's CSR-by-destination topology and has a
hand-written backward that uses the *transposed* CSR (CSC) of the same block,
so no per-edge ``[E, F]`` message tensor is ever materialised, in the forward
or the backward pass.

Backends. On CPU the kernels are numba functions compiled with ``nogil=True``
and run on row ranges balanced by work (``edges + rows``) in
``torch.get_num_threads()`` Python threads. Plain threads rather than numba's
``parallel=True`` keeps the kernels fork-safe (numba's OpenMP layer terminates a
forked child that used it) and thread-safe, and honours
``torch.set_num_threads``. On every other device (or for dtypes numba does not
handle) the same products run through ``torch.sparse_csr_tensor`` matmuls and
``index_add_``; results agree with the CPU kernels to float rounding.

Determinism. Each output row is summed by one thread in CSR order, so a row's
value does not depend on the thread count, and a partition block whose rows
list the same in-edges in the same order (``Block.from_nodes``) reproduces the
full-graph rows bit for bit.

Output buffers. The CPU kernels take their outputs from :mod:`graphscale.nn.buffers`, which (on by default) keeps
them across calls and hands a buffer out again only when no tensor refers to it any more (so never one autograd
saved).

Memory latency. A source row is a random read, so the products prefetch the rows :data:`PREFETCH_DISTANCE` edges
ahead; threads come from one pool kept across calls (:func:`_kernel_pool`).

Topology caching. :func:`topology` returns a :class:`Topology` stored on the
block object itself (``block.__dict__``) and rebuilt if the block's
``indptr``/``indices`` tensors are replaced; it validates the CSR once and
builds the transpose lazily on the first backward pass.
"""

from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from torch import Tensor

from graphscale.nn import buffers

#: Below this many scalar multiply-adds a kernel runs in the calling thread only (a few milliseconds of work: handing
#: it to threads that torch's OpenMP workers compete with for the cores cost more than it saved).
_MIN_PARALLEL_WORK = 1 << 22
#: Chunks per thread (small over-decomposition absorbs uneven row costs and busy cores).
_CHUNKS_PER_THREAD = 4
_NUMBA_DTYPES = (torch.float32, torch.float64)
_CACHE_ATTR = "_graphscale_topology"


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


def _csr_tensor(indptr: Tensor, indices: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """A ``torch.sparse_csr_tensor`` without the beta-state warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(indptr, indices, values, shape, check_invariants=False)


def _use_numba(*tensors: Tensor) -> bool:
    """Whether the numba kernels handle these tensors (CPU; float32/float64 or integer)."""
    return all(t.device.type == "cpu" and (t.dtype in _NUMBA_DTYPES or not t.is_floating_point()) for t in tensors)


# =====================================================================================
# topology: validated CSR + lazily built transpose, cached on the block
# =====================================================================================
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
        return out

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
    if _use_numba(x):
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
    adj = _csr_tensor(indptr, indices, values, (n, x.shape[0]))
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
        edge_dst = None if _use_numba(x) or rs is None else topo.edge_dst()
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
    if not _use_numba(grad) and cs is not None:
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


# =====================================================================================
# multi-head SpMM (attention) with its SDDMM backward
# =====================================================================================
def _heads_forward(indptr: Tensor, indices: Tensor, eperm: Tensor | None, w: Tensor, ws: Tensor | None,
                   x: Tensor) -> Tensor:
    n = indptr.numel() - 1
    nh, f = x.shape[1], x.shape[2]
    if _use_numba(x):
        out = buffers.empty((n, nh, f), x.dtype)
        _run_rows(_k_spmm_heads, indptr.numpy(), (indices.numel() + n) * nh * f, indptr.numpy(), indices.numpy(),
                  _np(eperm, torch.int64), _np(w, x.dtype), _np(ws, x.dtype).reshape(-1, nh),
                  x.detach().contiguous().numpy(), out.numpy())
        return out
    out = torch.zeros(n, nh, f, dtype=x.dtype, device=x.device)
    w = w if eperm is None else w[eperm]
    if indices.numel():
        for h in range(nh):
            adj = _csr_tensor(indptr, indices, w[:, h].contiguous(), (n, x.shape[0]))
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
    if _use_numba(x):
        _run_rows(_k_sddmm_heads, topo.indptr.numpy(), (topo.num_edges + n_self) * nh * x.shape[2],
                  topo.indptr.numpy(), topo.indices.numpy(), g.contiguous().numpy(), x.detach().contiguous().numpy(),
                  gw.numpy(), gws.numpy())
        return gw, gws
    dst = topo.edge_dst()
    step = max(1, (1 << 24) // max(1, nh * x.shape[2]))  # bound the [chunk, H, F] temporary
    for lo in range(0, topo.num_edges, step):
        hi = min(topo.num_edges, lo + step)
        gw[lo:hi] = (g[dst[lo:hi]] * x[topo.indices[lo:hi]]).sum(-1)
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
        if _use_numba(scores):
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
        if _use_numba(a):
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

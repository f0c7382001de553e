"""Sparse kernels and id-keyed dropout against dense / pure-Python references."""

from __future__ import annotations

import pytest
import torch

from graphscale.data import hashing
from graphscale.data.block import Block
from graphscale.nn import dense, ops
from graphscale.nn import dropout as gd
from graphscale.testing.graphs import random_graph

F64 = torch.float64


def _blocks(num_nodes: int = 60, seed: int = 0) -> dict[str, Block]:
    g = random_graph(num_nodes, 5.0, seed=seed, isolated=3, symmetric=seed % 2 == 0)
    part = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))[: num_nodes // 3]
    return {"full": Block.full(g), "part": Block.from_nodes(g, part)}


def _dense(block: Block, values: torch.Tensor) -> torch.Tensor:
    """Dense [D, S] (or [H, D, S]) adjacency with the given per-edge values."""
    dst = block.dst_of_edges()
    if values.dim() == 1:
        a = torch.zeros(block.num_dst, block.num_src, dtype=values.dtype)
        a.index_put_((dst, block.indices), values, accumulate=True)
        return a
    a = torch.zeros(values.shape[1], block.num_dst, block.num_src, dtype=values.dtype)
    for h in range(values.shape[1]):
        a[h].index_put_((dst, block.indices), values[:, h], accumulate=True)
    return a


@pytest.fixture(params=["numba", "torch"])
def backend(request, monkeypatch):
    """Run a test on the numba kernels and on the torch fallback (the path non-CPU devices take)."""
    if request.param == "torch":
        monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    return request.param


# ----------------------------------------------------------------------------- spmm
@pytest.mark.parametrize("kind", ["full", "part"])
@pytest.mark.parametrize("scales", [(), ("ew",), ("cs", "rs", "ss"), ("ew", "cs", "rs", "ss"), ("rs",), ("ss",)])
def test_spmm_matches_dense(kind, scales, backend):
    b = _blocks()[kind]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(b.num_src, 7, dtype=F64, generator=gen, requires_grad=True)
    ew = torch.rand(b.num_edges, dtype=F64, generator=gen) if "ew" in scales else None
    cs = torch.rand(b.num_src, dtype=F64, generator=gen) + 0.5 if "cs" in scales else None
    rs = torch.rand(b.num_dst, dtype=F64, generator=gen) + 0.5 if "rs" in scales else None
    ss = torch.rand(b.num_dst, dtype=F64, generator=gen) if "ss" in scales else None
    out = ops.spmm(b, x, edge_weight=ew, col_scale=cs, row_scale=rs, self_scale=ss)

    dst = b.dst_of_edges()
    values = torch.ones(b.num_edges, dtype=F64)
    values = values * (ew if ew is not None else 1) * (cs[b.indices] if cs is not None else 1)
    values = values * (rs[dst] if rs is not None else 1)
    a = _dense(b, values)
    if ss is not None:
        a[torch.arange(b.num_dst), torch.arange(b.num_dst)] += ss
    ref = a @ x
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    grad = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, grad)
    (gref,) = torch.autograd.grad(ref, x, grad)
    torch.testing.assert_close(gx, gref, atol=1e-12, rtol=0)


def test_spmm_float32_and_threads_are_deterministic():
    g = random_graph(3000, 8.0, seed=3, num_features=96)
    b = Block.full(g)
    cs, rs, ss = ops.gcn_norm_scales(b.src_deg, b.num_dst, torch.float32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.spmm(b, g.x, col_scale=cs, row_scale=rs, self_scale=ss)
        torch.set_num_threads(3)  # more chunks than rows per thread on some splits
        many = ops.spmm(b, g.x, col_scale=cs, row_scale=rs, self_scale=ss)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)
    ref = _dense(b, cs[b.indices] * rs[b.dst_of_edges()]).double() @ g.x.double() + (ss[:, None] * g.x).double()
    torch.testing.assert_close(one.double(), ref, atol=1e-5, rtol=1e-5)


def test_partition_rows_are_bitwise_equal_to_full_rows():
    g = random_graph(500, 6.0, seed=4, num_features=16)
    full, nodes = Block.full(g), torch.arange(100, 300)
    part = Block.from_nodes(g, nodes)
    cs, rs, ss = ops.gcn_norm_scales(full.src_deg, full.num_dst, torch.float32)
    pcs, prs, pss = ops.gcn_norm_scales(part.src_deg, part.num_dst, torch.float32)
    a = ops.spmm(full, g.x, col_scale=cs, row_scale=rs, self_scale=ss)[nodes]
    b = ops.spmm(part, g.x[part.src_ids], col_scale=pcs, row_scale=prs, self_scale=pss)
    assert torch.equal(a, b)


def test_spmm_rejects_bad_input():
    b = _blocks()["full"]
    with pytest.raises(ValueError, match="num_src"):
        ops.spmm(b, torch.randn(b.num_src + 1, 3))
    with pytest.raises(ValueError, match="row_scale"):
        ops.spmm(b, torch.randn(b.num_src, 3), row_scale=torch.ones(b.num_dst + 2))
    with pytest.raises(ValueError, match="not supported"):
        ops.spmm(b, torch.randn(b.num_src, 3), col_scale=torch.ones(b.num_src, requires_grad=True))
    bad = Block(torch.tensor([0, 2]), torch.tensor([0, 5]), torch.arange(3), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="indices must lie"):
        ops.spmm(bad, torch.randn(3, 2))


def test_topology_cache_and_transpose():
    b = _blocks()["part"]
    topo = ops.topology(b)
    assert ops.topology(b) is topo
    t_indptr, t_indices = topo.transpose()
    perm = topo.transpose_perm()
    assert t_indptr.numel() == b.num_src + 1 and int(t_indptr[-1]) == b.num_edges
    src_of_t = torch.repeat_interleave(torch.arange(b.num_src), t_indptr[1:] - t_indptr[:-1])
    assert torch.equal(b.indices[perm], src_of_t)
    assert torch.equal(b.dst_of_edges()[perm], t_indices)
    # a new indptr / indices tensor invalidates the cache
    b.indices = b.indices.clone()
    assert ops.topology(b) is not topo


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_symmetric_csr_is_its_own_transpose(symmetric):
    """A full block of a symmetric graph (ascending rows) is its own CSC: ``transpose`` returns the block's own
    arrays (no second copy); any other CSR gets a built one. Both equal a transpose made by sorting."""
    g = random_graph(80, 5.0, num_features=2, seed=4, symmetric=symmetric)
    topo = ops.topology(Block.full(g))
    t_indptr, t_indices = topo.transpose()
    assert (t_indices is topo.indices) == symmetric and (t_indptr is topo.indptr) == symmetric
    perm = torch.argsort(topo.indices, stable=True)
    assert torch.equal(t_indices, topo.edge_dst()[perm]) and torch.equal(topo.transpose_perm(), perm)
    assert torch.equal(t_indptr[1:] - t_indptr[:-1], torch.bincount(topo.indices, minlength=topo.num_src))
    assert len(topo.tensors()) == len({t.data_ptr() for t in topo.tensors()})


# ----------------------------------------------------------------------------- heads + softmax
@pytest.mark.parametrize("kind", ["full", "part"])
@pytest.mark.parametrize("with_self", [True, False])
def test_spmm_heads_matches_dense(kind, with_self, backend):
    b = _blocks(seed=1)[kind]
    gen = torch.Generator().manual_seed(2)
    nh = 3
    x = torch.randn(b.num_src, nh, 4, dtype=F64, generator=gen, requires_grad=True)
    w = torch.rand(b.num_edges, nh, dtype=F64, generator=gen, requires_grad=True)
    ws = torch.rand(b.num_dst, nh, dtype=F64, generator=gen, requires_grad=True) if with_self else None
    out = ops.spmm_heads(b, x, w, ws)
    a = _dense(b, w)
    if with_self:
        idx = torch.arange(b.num_dst)
        a = a.index_put((torch.arange(nh)[:, None], idx[None, :], idx[None, :]), ws.t(), accumulate=True)
    ref = torch.einsum("hds,shf->dhf", a, x)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    grad = torch.randn_like(out)
    inputs = [x, w] + ([ws] if with_self else [])
    for got, want in zip(torch.autograd.grad(out, inputs, grad), torch.autograd.grad(ref, inputs, grad)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def _softmax_reference(b: Block, s: torch.Tensor, ss: torch.Tensor | None):
    alpha, alpha_self = torch.empty_like(s), None if ss is None else torch.empty_like(ss)
    for v in range(b.num_dst):
        lo, hi = int(b.indptr[v]), int(b.indptr[v + 1])
        seg = s[lo:hi] if ss is None else torch.cat([s[lo:hi], ss[v:v + 1]])
        if seg.numel() == 0:
            continue
        sm = torch.softmax(seg, 0)
        alpha = alpha.index_copy(0, torch.arange(lo, hi), sm[: hi - lo])
        if ss is not None:
            alpha_self = alpha_self.index_copy(0, torch.tensor([v]), sm[hi - lo:])
    return alpha, alpha_self


@pytest.mark.parametrize("with_self", [True, False])
def test_segment_softmax(with_self, backend):
    b = _blocks(seed=2)["part"]
    gen = torch.Generator().manual_seed(3)
    s = (5 * torch.randn(b.num_edges, 2, dtype=F64, generator=gen)).requires_grad_()
    ss = (5 * torch.randn(b.num_dst, 2, dtype=F64, generator=gen)).requires_grad_() if with_self else None
    a, a_self = ops.segment_softmax(b, s, ss)
    ra, ra_self = _softmax_reference(b, s, ss)
    torch.testing.assert_close(a, ra, atol=1e-12, rtol=0)
    inputs = [s] + ([ss] if with_self else [])
    outs, refs = [a] + ([a_self] if with_self else []), [ra] + ([ra_self] if with_self else [])
    grads = [torch.randn_like(o) for o in outs]
    for got, want in zip(torch.autograd.grad(outs, inputs, grads), torch.autograd.grad(refs, inputs, grads)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    if not with_self:
        assert a_self is None


# ----------------------------------------------------------------------------- dropout
def test_hash_matches_python_reference():
    values = torch.cat([torch.randint(0, 2**32, (2000,)), torch.tensor([0, 1, 2**32 - 1, 2**31, 2**31 - 1])])
    want = torch.tensor([hashing._hash_int(int(v)) for v in values])
    assert torch.equal(hashing._hash_t(values), want)
    assert all(0 <= int(v) < 2**32 for v in want)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_node_mask_keep_rate_and_order_invariance(p):
    ids = torch.randperm(50_000)[:20_000] * 7919 + 2**33  # ids above 2^32 use the high word
    keep = gd.node_keep_mask(ids, 16, p, seed=3, epoch=2, site=1)
    assert abs(keep.double().mean().item() - (1 - p)) < 0.01
    perm = torch.randperm(ids.numel())
    assert torch.equal(gd.node_keep_mask(ids[perm], 16, p, 3, 2, 1), keep[perm])
    sub = perm[:500]
    assert torch.equal(gd.node_keep_mask(ids[sub], 16, p, 3, 2, 1), keep[sub])
    for seed, epoch, site in [(4, 2, 1), (3, 3, 1), (3, 2, 2)]:
        assert not torch.equal(gd.node_keep_mask(ids, 16, p, seed, epoch, site), keep)
    # columns are not copies of each other
    assert (keep[:, 0] != keep[:, 1]).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keyed_dropout_forward_backward(dtype, backend):
    gen = torch.Generator().manual_seed(5)
    ids = torch.randperm(3000, generator=gen)[:800]
    x = torch.randn(800, 40, dtype=dtype, generator=gen, requires_grad=True)
    p = 0.3
    y = gd.keyed_dropout(x, ids, p, seed=1, epoch=4, site=2)
    keep = gd.node_keep_mask(ids, 40, p, 1, 4, 2)
    torch.testing.assert_close(y, x * keep / (1 - p), atol=0, rtol=1e-6)
    (gx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    torch.testing.assert_close(gx, keep.to(dtype) / (1 - p), atol=0, rtol=1e-6)
    # rows keep their mask in any subset / order
    sub = torch.tensor([5, 3, 700, 11])
    torch.testing.assert_close(gd.keyed_dropout(x[sub], ids[sub], p, 1, 4, 2), y[sub], atol=0, rtol=0)


def test_keyed_dropout_inactive_and_invalid():
    x = torch.randn(10, 3)
    ids = torch.arange(10)
    assert gd.keyed_dropout(x, ids, 0.5, 0, 0, 0, training=False) is x
    assert gd.keyed_dropout(x, ids, 0.0, 0, 0, 0) is x
    assert torch.equal(gd.keyed_dropout(x, ids, 1.0, 0, 0, 0), torch.zeros_like(x))
    module = gd.KeyedDropout(0.5, site=0).eval()
    assert module(x, ids) is x
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        gd.keyed_dropout(x, ids, 1.5, 0, 0, 0)
    with pytest.raises(ValueError, match="one entry per row"):
        gd.keyed_dropout(x, ids[:5], 0.5, 0, 0, 0)


def test_edge_masks_agree_and_are_keyed_by_ids(backend):
    g = random_graph(80, 5.0, seed=6)
    full = Block.full(g)
    nodes = torch.tensor([70, 3, 41, 12, 55])
    part = Block.from_nodes(g, nodes)
    keep, keep_self = gd.block_edge_keep_mask(full, full.src_ids, 4, 0.4, 2, 1, 0, num_self=full.num_dst)
    want = gd.edge_keep_mask(full.dst_of_edges(), full.indices, 4, 0.4, 2, 1, 0)
    assert torch.equal(keep, want)
    loops = torch.arange(full.num_dst)
    assert torch.equal(keep_self, gd.edge_keep_mask(loops, loops, 4, 0.4, 2, 1, 0))
    pkeep, pself = gd.block_edge_keep_mask(part, part.src_ids, 4, 0.4, 2, 1, 0, num_self=part.num_dst)
    rows = torch.cat([torch.arange(int(g.indptr[v]), int(g.indptr[v + 1])) for v in nodes])
    assert torch.equal(pkeep, keep[rows])
    assert torch.equal(pself, keep_self[nodes])
    rate = gd.edge_keep_mask(torch.arange(40_000), torch.arange(40_000) + 1, 2, 0.4, 0, 0, 0).double().mean()
    assert abs(rate.item() - 0.6) < 0.01


# ----------------------------------------------------------------------------- dropout fused into spmm
@pytest.mark.parametrize("kind", ["full", "part"])
@pytest.mark.parametrize("scales", [(), ("ew",), ("cs", "rs", "ss"), ("ew", "cs", "rs", "ss")])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("num_cols", [21, 100])  # one partial 64-bit word; a full word and a partial one
def test_fused_dropout_spmm_equals_dropout_then_spmm(kind, scales, dtype, num_cols, backend):
    """Forward and gradient equal the unfused keyed dropout + spmm: bit for bit on the numba kernels."""
    block = _blocks(90, seed=3)[kind]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(block.num_src, num_cols, dtype=dtype, generator=gen, requires_grad=True)
    kw = {"ew": ("edge_weight", block.num_edges), "cs": ("col_scale", block.num_src),
          "rs": ("row_scale", block.num_dst), "ss": ("self_scale", block.num_dst)}
    args = {kw[s][0]: torch.rand(kw[s][1], dtype=dtype, generator=gen) + 0.5 for s in scales}
    ids = block.src_ids
    keep = gd.keyed_dropout_keep(ids, num_cols, 0.4, seed=3, epoch=2, site=1)
    assert torch.equal(ops._unpack_keep(keep.bits(), num_cols, torch.bool), gd.node_keep_mask(ids, num_cols, 0.4,
                                                                                              3, 2, 1))
    weights = torch.randn(block.num_dst, num_cols, dtype=dtype, generator=gen)
    ref = ops.spmm(block, gd.keyed_dropout(x, ids, 0.4, 3, 2, 1), **args)
    (g_ref,) = torch.autograd.grad((ref * weights).sum(), x)
    out = ops.spmm(block, x, **args, src_dropout=keep)
    (g_out,) = torch.autograd.grad((out * weights).sum(), x)
    if backend == "numba":
        assert torch.equal(out, ref) and torch.equal(g_out, g_ref)
    else:
        torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-5)
        torch.testing.assert_close(g_out, g_ref, atol=1e-12, rtol=1e-5)
    assert gd.keyed_dropout_keep(ids, num_cols, 0.4, 3, 2, 1, training=False) is None
    assert gd.keyed_dropout_keep(ids, num_cols, 0.0, 3, 2, 1) is None
    with pytest.raises(ValueError, match="bits must be uint8"):
        ops.spmm(block, x[:, :8], **args, src_dropout=keep)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("block_bytes", [4 << 20, 7 * 21 * 4, None])  # one block; blocks of 7 (float64: 3) rows, the
# last partial; None: the device backend (whole tensors)
def test_dropped_linear_equals_dropout_then_linear(dtype, block_bytes, monkeypatch):
    """``RowKeep.linear`` (dropped rows one block at a time, recomputed in the backward) gives the forward and
    both gradients of ``keyed_dropout`` then ``x @ W.T``; autograd keeps no dropped copy of ``x``."""
    if block_bytes is None:
        monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    else:
        monkeypatch.setattr(dense, "LINEAR_BLOCK_BYTES", block_bytes)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randperm(200, generator=gen)[:45] * 3
    x = torch.randn(45, 21, dtype=dtype, generator=gen, requires_grad=True)
    w = torch.randn(6, 21, dtype=dtype, generator=gen, requires_grad=True)
    g = torch.randn(45, 6, dtype=dtype, generator=gen)
    ref = gd.keyed_dropout(x, ids, 0.4, 3, 2, 1) @ w.t()
    ref_grads = torch.autograd.grad(ref, (x, w), g)
    keep = gd.keyed_dropout_keep(ids, 21, 0.4, seed=3, epoch=2, site=1)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = keep.linear(x, w)
    assert all(t.data_ptr() in (x.data_ptr(), w.data_ptr(), ids.data_ptr()) for t in saved)
    grads = torch.autograd.grad(out, (x, w), g)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out, ref, **tol)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, **tol)
    with pytest.raises(ValueError, match=r"RowKeep.linear: x must be \[45, 21\]"):
        keep.linear(x[:, :20], w[:, :20])

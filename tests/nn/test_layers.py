"""Block layers against torch_geometric (float64, 1e-10), halves == whole, partition rows == full rows."""

from __future__ import annotations

import pytest
import torch

from graphscale.data.block import Block
from graphscale.nn.layers import GATLayer, GCNIILayer, GCNLayer, ResGCNPlusLayer, SAGELayer
from graphscale.testing.graphs import random_graph

pyg_nn = pytest.importorskip("torch_geometric.nn")

F64 = torch.float64
TOL = {"atol": 1e-10, "rtol": 1e-10}


def _graph(seed: int = 0, num_features: int = 12, symmetric: bool = True):
    return random_graph(70, 4.0, num_features=num_features, seed=seed, dtype=F64, isolated=4, symmetric=symmetric)


def _compare(ours_fn, theirs_fn, x, ours_params, theirs_params):
    """Forward equal and gradients equal w.r.t. x and matched parameters."""
    xa = x.clone().requires_grad_()
    xb = x.clone().requires_grad_()
    out_a, out_b = ours_fn(xa), theirs_fn(xb)
    torch.testing.assert_close(out_a, out_b, **TOL)
    grad = torch.randn_like(out_a)
    ga = torch.autograd.grad(out_a, [xa, *ours_params], grad)
    gb = torch.autograd.grad(out_b, [xb, *theirs_params], grad)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("dims", [(12, 5), (12, 30), (12, 12)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_gcn_equals_pyg(dims, symmetric):
    g = _graph(1, dims[0], symmetric)
    ours = GCNLayer(*dims).double()
    theirs = pyg_nn.GCNConv(*dims).double()
    with torch.no_grad():
        theirs.lin.weight.copy_(ours.lin.weight)
        ours.bias.normal_()
        theirs.bias.copy_(ours.bias)
    b, ei = Block.full(g), g.edge_index()
    _compare(lambda x: ours(b, x), lambda x: theirs(x, ei), g.x, [ours.lin.weight, ours.bias],
             [theirs.lin.weight, theirs.bias])


@pytest.mark.parametrize("dims", [(12, 5), (12, 30)])
def test_sage_equals_pyg(dims):
    g = _graph(2, dims[0], symmetric=False)
    ours = SAGELayer(*dims).double()
    theirs = pyg_nn.SAGEConv(*dims, aggr="mean").double()
    with torch.no_grad():
        theirs.lin_l.weight.copy_(ours.lin_l.weight)
        theirs.lin_l.bias.copy_(ours.lin_l.bias)
        theirs.lin_r.weight.copy_(ours.lin_r.weight)
    b, ei = Block.full(g), g.edge_index()
    params = lambda m: [m.lin_l.weight, m.lin_l.bias, m.lin_r.weight]
    _compare(lambda x: ours(b, x), lambda x: theirs(x, ei), g.x, params(ours), params(theirs))


@pytest.mark.parametrize("heads,concat", [(1, True), (4, True), (4, False), (1, False)])
def test_gat_equals_pyg(heads, concat):
    g = _graph(3, 12, symmetric=False)
    ours = GATLayer(12, 6, heads=heads, concat=concat).double()
    theirs = pyg_nn.GATConv(12, 6, heads=heads, concat=concat, dropout=0.0).double()
    with torch.no_grad():
        theirs.lin.weight.copy_(ours.lin.weight)
        theirs.att_src.copy_(ours.att_src)
        theirs.att_dst.copy_(ours.att_dst)
        ours.bias.normal_()
        theirs.bias.copy_(ours.bias)
    b, ei = Block.full(g), g.edge_index()
    params = lambda m: [m.lin.weight, m.att_src, m.att_dst, m.bias]
    _compare(lambda x: ours(b, x), lambda x: theirs(x, ei), g.x, params(ours), params(theirs))


@pytest.mark.parametrize("layer", [1, 3])
def test_gcnii_equals_pyg(layer):
    g = _graph(4, 10)
    ours = GCNIILayer(10, alpha=0.2, theta=0.7, layer=layer).double()
    theirs = pyg_nn.GCN2Conv(10, alpha=0.2, theta=0.7, layer=layer, shared_weights=True).double()
    with torch.no_grad():
        theirs.weight1.copy_(ours.weight)
    h0 = torch.randn(g.num_nodes, 10, dtype=F64, requires_grad=True)
    b, ei = Block.full(g), g.edge_index()
    _compare(lambda x: ours(b, x, h0), lambda x: theirs(x, h0, ei), g.x, [ours.weight, h0], [theirs.weight1, h0])


def _dense_gcn(g) -> torch.Tensor:
    a = torch.zeros(g.num_nodes, g.num_nodes, dtype=F64)
    a[g.dst_of_edges(), g.indices] = 1.0
    a += torch.eye(g.num_nodes, dtype=F64)
    c = (g.in_degrees().to(F64) + 1).rsqrt()
    return c[:, None] * a * c[None, :]


def test_resgcn_plus_equals_dense_reference():
    g = _graph(5, 9)
    layer = ResGCNPlusLayer(9, dropout=0.0).double()
    with torch.no_grad():
        layer.norm.weight.normal_()
        layer.norm.bias.normal_()
        layer.conv.bias.normal_()
    a = _dense_gcn(g)
    norm = torch.nn.functional.layer_norm

    def reference(x):
        z = torch.relu(norm(x, (9,), layer.norm.weight, layer.norm.bias))
        return x + (a @ z) @ layer.conv.lin.weight.t() + layer.conv.bias

    params = [layer.norm.weight, layer.norm.bias, layer.conv.lin.weight, layer.conv.bias]
    _compare(lambda x: layer(Block.full(g), x), reference, g.x, params, params)


# ----------------------------------------------------------------------------- halves and partitions
def _layers(in_dim: int):
    return {
        "gcn_small": (GCNLayer(in_dim, 3), False),
        "gcn_wide": (GCNLayer(in_dim, 40), False),
        "sage_small": (SAGELayer(in_dim, 3), False),
        "sage_wide": (SAGELayer(in_dim, 40), False),
        "gat": (GATLayer(in_dim, 5, heads=3, attn_dropout=0.3, site=1, seed=7), False),
        "gat_mean": (GATLayer(in_dim, 5, heads=2, concat=False), False),
        "gcnii": (GCNIILayer(in_dim, 0.1, 0.5, layer=2), True),
        "resgcn": (ResGCNPlusLayer(in_dim, dropout=0.4, site=3, seed=2), False),
    }


def _run(layer, needs_h0, block, x, h0):
    return layer(block, x, h0[: block.num_dst]) if needs_h0 else layer(block, x)


def _halves(layer, needs_h0, block, x, h0):
    agg = layer.aggregate(block, x)
    if needs_h0:
        return layer.update(agg, x[: block.num_dst], h0[: block.num_dst])
    return layer.update(agg, x[: block.num_dst])


@pytest.mark.parametrize("name", list(_layers(8)))
@pytest.mark.parametrize("x_grad", [False, True])
def test_halves_equal_whole(name, x_grad):
    g = _graph(6, 8)
    layer, needs_h0 = _layers(8)[name]
    layer = layer.double().train()
    b = Block.full(g)
    h0 = torch.randn(g.num_nodes, 8, dtype=F64)
    xa, xb = g.x.clone().requires_grad_(x_grad), g.x.clone().requires_grad_(x_grad)
    whole, halves = _run(layer, needs_h0, b, xa, h0), _halves(layer, needs_h0, b, xb, h0)
    torch.testing.assert_close(whole, halves, **TOL)
    grad = torch.randn_like(whole)
    params = list(layer.parameters())
    ga = torch.autograd.grad(whole, params + ([xa] if x_grad else []), grad)
    gb = torch.autograd.grad(halves, params + ([xb] if x_grad else []), grad)
    for a, b_ in zip(ga, gb):
        torch.testing.assert_close(a, b_, **TOL)


@pytest.mark.parametrize("name", list(_layers(8)))
@pytest.mark.parametrize("train", [False, True])
def test_partition_block_gives_full_rows(name, train):
    g = _graph(7, 8)
    layer, needs_h0 = _layers(8)[name]
    layer = layer.double().train(train)
    h0 = torch.randn(g.num_nodes, 8, dtype=F64)
    full = _run(layer, needs_h0, Block.full(g), g.x, h0)
    nodes = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(0))[:25]
    part = Block.from_nodes(g, nodes)
    got = _run(layer, needs_h0, part, g.x[part.src_ids], h0[part.src_ids])
    torch.testing.assert_close(got, full[nodes], **TOL)
    # gradients w.r.t. the weights: sum of partition contributions == full-graph gradient
    rest = torch.tensor(sorted(set(range(g.num_nodes)) - set(nodes.tolist())))
    grad = torch.randn_like(full)
    params = list(layer.parameters())
    want = torch.autograd.grad(_run(layer, needs_h0, Block.full(g), g.x, h0), params, grad)
    total = [torch.zeros_like(p) for p in params]
    for piece in (nodes, rest):
        blk = Block.from_nodes(g, piece)
        out = _run(layer, needs_h0, blk, g.x[blk.src_ids], h0[blk.src_ids])
        for t, gp in zip(total, torch.autograd.grad(out, params, grad[piece])):
            t += gp
    for a, b in zip(total, want):
        torch.testing.assert_close(a, b, **TOL)


def test_layer_input_errors():
    g = _graph(8, 8)
    with pytest.raises(ValueError, match="x_src must be"):
        GCNLayer(8, 4)(Block.full(g), torch.randn(g.num_nodes, 7))
    with pytest.raises(ValueError, match="h0_dst"):
        GCNIILayer(8, 0.1, 0.5, 1)(Block.full(g), g.x.float(), None)
    with pytest.raises(ValueError, match="1-based"):
        GCNIILayer(8, 0.1, 0.5, 0)


def _halo_block(num_dst: int, num_src: int, degree: int) -> Block:
    gen = torch.Generator().manual_seed(0)
    indices = torch.randint(0, num_src, (num_dst * degree,), generator=gen)
    indptr = torch.arange(0, num_dst * degree + 1, degree)
    return Block(indptr, indices, torch.arange(num_src), torch.full((num_src,), degree))


def test_layer_order_prices_sparse_work_above_dense():
    """A partition block with a large halo (sources 1.5x its rows), 128 features narrowed to 16: equal flops
    would aggregate the 128-wide rows first, but a gathered multiply-add costs ~20 dense ones, so the cost model
    transforms first; a narrow-to-wide layer still aggregates first. Both orders give the same values."""
    from graphscale.nn.order import transform_first

    block = _halo_block(num_dst=2000, num_src=3000, degree=10)
    w = torch.zeros(16, 128, requires_grad=True)
    x = torch.randn(3000, 128)
    assert transform_first(block, x, 128, 16, w)
    assert not transform_first(block, torch.randn(3000, 16), 16, 128, torch.zeros(128, 16, requires_grad=True))
    layer = GCNLayer(128, 16).double()
    xd = x.double()
    with torch.no_grad():
        out = layer(block, xd)
        agg_first = layer.update(layer.aggregate(block, xd))
    torch.testing.assert_close(out, agg_first, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("block_bytes", [4 << 20, 7 * 6 * 8, None])  # one block; blocks of 7 / 14 rows, the last
# partial; None: the device backend (whole tensors)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_relu_equals_relu_of_linear(dtype, block_bytes, bias, monkeypatch):
    """``linear_relu`` (the ReLU's backward one block at a time inside the product's backward) gives the forward
    and every gradient of ``relu(F.linear(...))``, zero pre-activations included; autograd keeps only ``x``, the
    weight and the output (no pre-activation, no ``[N, out]`` gradient)."""
    import graphscale.nn.dense as dense_module
    import graphscale.nn.layers as layers_module

    _kernels(monkeypatch, dense_module, block_bytes)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(45, 21, dtype=dtype, generator=gen)
    x[:5] = 0  # rows whose pre-activation is exactly the bias (0 without one): ReLU's gradient there is 0
    x.requires_grad_(True)
    w = torch.randn(6, 21, dtype=dtype, generator=gen, requires_grad=True)
    b = torch.randn(6, dtype=dtype, generator=gen, requires_grad=True) if bias else None
    g = torch.randn(45, 6, dtype=dtype, generator=gen)
    inputs = (x, w) + ((b,) if bias else ())
    ref = torch.relu(torch.nn.functional.linear(x, w, b))
    ref_grads = torch.autograd.grad(ref, inputs, g)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = layers_module.linear_relu(x, w, b)
    assert {t.data_ptr() for t in saved} == {x.data_ptr(), w.data_ptr(), out.data_ptr()}
    grads = torch.autograd.grad(out, inputs, g)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out, ref, **tol)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("block_bytes", [4 << 20, 7 * 6 * 8, None])  # one block; blocks of 7 / 14 rows, the last
# partial; None: the device backend (whole tensors)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dropout", [True, False])
@pytest.mark.parametrize("x_grad", [True, False])
def test_linear_relu_linear_equals_the_two_products_apart(dtype, block_bytes, bias, dropout, x_grad, monkeypatch):
    """``linear_relu_linear`` (a deferred ``linear_relu`` fused into the next dropped product, both backward products
    one block at a time, no mask recomputed) gives the forward and every gradient of
    ``keep.linear(linear_relu(...), w1)``, zero pre-activations included; autograd keeps the input, both weights
    and the dropped hidden rows only, and without autograd it keeps nothing."""
    import graphscale.nn.dense as dense_module
    import graphscale.nn.dropout as dropout_module
    import graphscale.nn.layers as layers_module

    _kernels(monkeypatch, dense_module, block_bytes)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(45, 5, dtype=dtype, generator=gen)
    x[:5] = 0  # zero pre-activations (0 without a bias): ReLU's gradient there is 0
    x.requires_grad_(x_grad)
    w0 = torch.randn(6, 5, dtype=dtype, generator=gen, requires_grad=True)
    b0 = torch.randn(6, dtype=dtype, generator=gen, requires_grad=True) if bias else None
    w1 = torch.randn(3, 6, dtype=dtype, generator=gen, requires_grad=True)
    keep = dropout_module.keyed_dropout_keep(torch.arange(100, 145), 6, 0.4, seed=3, epoch=2, site=1) if dropout else None
    g = torch.randn(45, 3, dtype=dtype, generator=gen)
    inputs = ((x,) if x_grad else ()) + (w0,) + ((b0,) if bias else ()) + (w1,)
    hidden = layers_module.linear_relu(x, w0, b0)
    ref = hidden @ w1.t() if keep is None else keep.linear(hidden, w1)
    ref_grads = torch.autograd.grad(ref, inputs, g)
    deferred = layers_module.DeferredLinearReLU(x, w0, b0)
    assert deferred.shape == (45, 6) and deferred.requires_grad
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = layers_module.linear_relu_linear(deferred, keep, w1)
    assert {t.data_ptr() for t in saved} == {x.data_ptr(), w0.data_ptr(), w1.data_ptr(), _hidden_ptr(saved, 45, 6)}
    grads = torch.autograd.grad(out, inputs, g)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out, ref, **tol)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, **tol)
    with torch.no_grad():
        plain = layers_module.linear_relu_linear(deferred, keep, w1)
    assert plain.grad_fn is None
    torch.testing.assert_close(plain, ref.detach(), **tol)


def _kernels(monkeypatch, dense_module, block_bytes: int | None) -> None:
    """The CPU backend with row blocks of ``block_bytes``, or (``None``) the device backend on CPU tensors."""
    if block_bytes is None:
        monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    else:
        monkeypatch.setattr(dense_module, "LINEAR_BLOCK_BYTES", block_bytes)


def _hidden_ptr(saved, rows, cols):
    """The address of the one saved ``[rows, cols]`` tensor (the dropped hidden rows)."""
    (ptr,) = [t.data_ptr() for t in saved if t.shape == (rows, cols)]
    return ptr


def test_a_deferred_relu_is_computed_where_the_next_layer_aggregates_first():
    """A layer that aggregates first takes a deferred ``linear_relu`` as the rows it stands for."""
    from graphscale.nn.layers import DeferredLinearReLU, linear_relu

    g = _graph(2, 12)
    block = Block.full(g)
    gen = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(g.num_nodes, 12, dtype=F64, generator=gen), torch.randn(30, 12, dtype=F64, generator=gen),
               torch.randn(30, dtype=F64, generator=gen))
    layer = GCNLayer(30, 40).double()  # widening: aggregate first
    torch.testing.assert_close(layer(block, DeferredLinearReLU(x, w, b)), layer(block, linear_relu(x, w, b)), **TOL)

"""The model contract: deterministic build, step-wise == whole, partitions reproduce full rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.nn.models import GNN, build_model
from graphscale.registry import MODELS
from graphscale.testing.graphs import random_graph

F64 = torch.float64
TOL = {"atol": 1e-10, "rtol": 1e-10}
NAMES = ["gcn", "sage", "gat", "gcnii", "resgcn"]


def _cfg(name: str, layers: int = 2, dropout: float = 0.5) -> ModelConfig:
    return ModelConfig(name=name, hidden=6, layers=layers, dropout=dropout, heads=3, alpha=0.1, theta=0.5)


def _graph(seed: int = 0):
    return random_graph(60, 4.0, num_features=7, num_classes=4, seed=seed, dtype=F64, isolated=3)


def _chain(g, nodes: torch.Tensor, num_layers: int) -> list[Block]:
    """Partition blocks for an L-layer model whose last block has destinations ``nodes``."""
    blocks, dst = [], nodes
    for _ in range(num_layers):
        blocks.insert(0, Block.from_nodes(g, dst))
        dst = blocks[0].src_ids
    return blocks


def test_registry_lists_all_models():
    assert set(NAMES) <= set(MODELS.names())


@pytest.mark.parametrize("name", NAMES)
def test_build_is_deterministic(name):
    a = build_model(_cfg(name), 7, 4, seed=3)
    b = build_model(_cfg(name), 7, 4, seed=3)
    c = build_model(_cfg(name), 7, 4, seed=4)
    pa, pb, pc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert any(not torch.equal(pa[k], pc[k]) for k in pa if pa[k].numel() > 1)
    assert isinstance(a, GNN) and a.num_layers == 2
    assert a.needs_h0 == (name == "gcnii")
    # the caller's RNG is untouched
    torch.manual_seed(0)
    r1 = torch.rand(1)
    torch.manual_seed(0)
    build_model(_cfg(name), 7, 4, seed=3)
    assert torch.equal(torch.rand(1), r1)


@pytest.mark.parametrize("name", NAMES)
def test_layer_widths(name):
    model = build_model(_cfg(name, layers=3), 7, 4)
    widths = {"gcn": [7, 6, 6], "sage": [7, 6, 6], "gat": [7, 18, 18], "gcnii": [6, 6, 6], "resgcn": [6, 6, 6]}
    assert model.layer_widths() == widths[name]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("train", [False, True])
def test_forward_equals_steps_and_halves(name, train):
    g = _graph(1)
    model = build_model(_cfg(name, layers=3), 7, 4, seed=1, dtype=F64).train(train)
    model.set_epoch(2)
    b = Block.full(g)
    out = model(b, g.x)
    ids = b.src_ids
    h = model.input_map(g.x, ids)
    h0 = h if model.needs_h0 else None
    hs = h
    for l in range(model.num_layers):
        h = model.step(l, b, h, h0)
        hs = model.update(l, model.aggregate(l, b, hs), hs[: b.num_dst], b.dst_ids, h0)
        torch.testing.assert_close(h, hs, **TOL)
    torch.testing.assert_close(model.output_map(h, ids), out, **TOL)
    assert out.shape == (g.num_nodes, 4)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("train", [False, True])
def test_partition_blocks_reproduce_full_rows(name, train):
    g = _graph(2)
    model = build_model(_cfg(name), 7, 4, seed=2, dtype=F64).train(train)
    model.set_epoch(5)
    full = model(Block.full(g), g.x)
    perm = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(1))
    grad = torch.randn_like(full)
    params = [p for p in model.parameters()]
    want = torch.autograd.grad(full, params, grad)
    total = [torch.zeros_like(p) for p in params]
    for nodes in (perm[:20], perm[20:45], perm[45:]):
        blocks = _chain(g, nodes, model.num_layers)
        out = model(blocks, g.x[blocks[0].src_ids])
        torch.testing.assert_close(out, full[nodes], **TOL)
        for t, gp in zip(total, torch.autograd.grad(out, params, grad[nodes], allow_unused=True)):
            if gp is not None:
                t += gp
    for a, b in zip(total, want):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("name", NAMES)
def test_dropout_masks_follow_epoch_and_mode(name):
    g = _graph(3)
    model = build_model(_cfg(name), 7, 4, seed=0, dtype=F64)
    b = Block.full(g)
    model.set_epoch(1)
    a1, a2 = model(b, g.x), model(b, g.x)
    model.set_epoch(2)
    a3 = model(b, g.x)
    torch.testing.assert_close(a1, a2, atol=0, rtol=0)
    assert not torch.allclose(a1, a3)
    model.eval()
    e1 = model(b, g.x)
    model.set_epoch(7)
    torch.testing.assert_close(model(b, g.x), e1, atol=0, rtol=0)


@pytest.mark.parametrize("name", ["gcnii", "resgcn"])
def test_deep_models_run_and_backprop(name):
    g = random_graph(200, 5.0, num_features=16, num_classes=5, seed=4)
    model = build_model(ModelConfig(name=name, hidden=32, layers=10, dropout=0.3), 16, 5, seed=0)
    model.set_epoch(0)
    out = model(Block.full(g), g.x)
    loss = torch.nn.functional.cross_entropy(out[g.train_mask], g.y[g.train_mask])
    loss.backward()
    assert torch.isfinite(loss)
    for p in model.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    assert any(float(p.grad.abs().sum()) > 0 for p in model.layers[0].parameters())


def test_model_errors():
    g = _graph(4)
    b = Block.full(g)
    model = build_model(_cfg("gcn", layers=2), 7, 4, dtype=F64)
    with pytest.raises(ValueError, match="3 blocks"):
        model([b, b, b], g.x)
    with pytest.raises(ValueError, match="rows"):
        model(b, g.x[:10])
    gcnii = build_model(_cfg("gcnii"), 7, 4, dtype=F64)
    with pytest.raises(ValueError, match="needs h0_dst"):
        gcnii.step(0, b, torch.randn(g.num_nodes, 6, dtype=F64))
    with pytest.raises(KeyError, match="unknown model"):
        build_model(_cfg("nope"), 7, 4)
    with pytest.raises(ValueError, match="layers"):
        build_model(_cfg("gcn", layers=0), 7, 4)


@pytest.mark.parametrize("name", NAMES)
def test_torch_fallback_path_matches_numba_kernels(name, monkeypatch):
    """The path non-CPU devices take (torch sparse / index ops) gives the same model, forward and backward."""
    g = _graph(5)
    model = build_model(_cfg(name), 7, 4, seed=1, dtype=F64)
    model.set_epoch(3)
    b = Block.full(g)
    params = list(model.parameters())

    def run():
        out = model(Block(b.indptr, b.indices, b.src_ids, b.src_deg), g.x)  # fresh block: no shared cache
        return out, torch.autograd.grad(out, params, torch.ones_like(out), allow_unused=True)

    out_nb, grads_nb = run()
    monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    out_t, grads_t = run()
    torch.testing.assert_close(out_t, out_nb, **TOL)
    for a, c in zip(grads_t, grads_nb):
        if a is not None or c is not None:
            torch.testing.assert_close(a, c, **TOL)


@pytest.mark.parametrize("in_dim", [3, 12])  # hidden 6: aggregate first (ReLU in the dense product) / transform first
def test_fused_hidden_relu_equals_relu_after_the_layer(in_dim, monkeypatch):
    """GCN's hidden layers apply their ReLU inside the layer (``fuses_relu``); outputs and every gradient equal
    the model applying ``post``'s ReLU after the layer, on both layer orders."""
    g = random_graph(60, 4.0, num_features=in_dim, num_classes=4, seed=1, dtype=F64, isolated=3)
    block = Block.full(g)

    def run(fused: bool):
        model = build_model(_cfg("gcn", layers=3), in_dim, 4, seed=2).to(F64)
        monkeypatch.setattr(GNN, "_fuses_relu", lambda self, l: fused and l < self.num_layers - 1)
        return _output_and_grads(model, block, g.x)

    _assert_same_output_and_grads(run(True), run(False))


def _output_and_grads(model, block, x):
    """The model's output at epoch 1 and the gradients of a fixed weighting of it w.r.t. every parameter."""
    model.set_epoch(1)
    out = model(block, x)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return out, torch.autograd.grad((out * weights).sum(), list(model.parameters()))


def _assert_same_output_and_grads(got, want):
    torch.testing.assert_close(got[0], want[0], **TOL)
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("training", [True, False])
def test_deferred_relu_fused_into_the_next_layer_equals_layer_by_layer(layers, training, monkeypatch):
    """``forward`` hands a hidden layer's dense product and ReLU to the next layer unevaluated where that layer
    transforms first (``takes_deferred``: the hidden rows' gradient is never held whole); outputs and every
    gradient equal running the layers one by one, in training (dropout fused) and in evaluation."""
    import graphscale.nn.layers as layers_module

    g = random_graph(60, 4.0, num_features=12, num_classes=4, seed=1, dtype=F64, isolated=3)
    block = Block.full(g)
    fused = []
    takes_deferred = GNN.takes_deferred
    real = layers_module.linear_relu_linear
    monkeypatch.setattr(layers_module, "linear_relu_linear", lambda *a: fused.append(1) or real(*a))

    def run(defer: bool):
        model = build_model(_cfg("gcn", layers=layers), 12, 4, seed=2).to(F64)
        model.train(training)
        monkeypatch.setattr(GNN, "takes_deferred", lambda self, l: defer and takes_deferred(self, l))
        return _output_and_grads(model, block, g.x)

    deferred = run(True)
    assert fused == [1]  # the last layer (6 -> 4) transforms first
    layer_by_layer = run(False)
    assert fused == [1]
    _assert_same_output_and_grads(deferred, layer_by_layer)


# A GCN epoch in a fresh interpreter, deferral on or off, printing the OS-measured peak growth of its first epoch.
_DEFER_SCRIPT = """
import json, sys
import torch
import torch.nn.functional as F
from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.data.synthetic import generate
from graphscale.metrics.memory import os_memory, reset_peak_rss
from graphscale.nn.models import GNN, build_model

torch.set_num_threads(1)
if sys.argv[1] == "off":
    GNN.takes_deferred = lambda self, l: False

def epoch(spec):
    g = generate(spec)
    block, x = Block.full(g), g.x.float()
    model = build_model(ModelConfig(name="gcn", hidden=128, layers=2, dropout=0.5), g.num_features, g.num_classes)
    base = os_memory().rss
    exact = reset_peak_rss()
    F.cross_entropy(model(block, x), g.y).backward()
    return os_memory().peak_rss - base, exact

epoch("sbm:nodes=2000,degree=10,features=32")  # loads the compiled kernels: code, not data
print(json.dumps(epoch("sbm:nodes=200000,degree=10,features=32")))
"""


@pytest.mark.perf  # OS-measured peak resident memory: the serial perf tier
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs is Linux only")
def test_deferral_saves_the_hidden_gradient_as_the_os_measures_it(record_property):
    """The OS confirms what deferral is for: a 2-layer GCN epoch (200k vertices, hidden 128) peaks lower with it than
    layer by layer by about one ``[N, 128]`` float32 tensor, the hidden rows' gradient (97.7 MiB). Measured on the
    2-core development machine: 96-104 MiB less; over 10 perf-tier runs on the idle 2-core CI machine (`python -m graphscale.testing.perf_spread --runs 10`, `d291b51`): 0.92x to 1.08x of it (mean
    1.04x). The bound asks for 3/4 of it; without deferral the difference is none."""
    growth = {}
    for mode in ("on", "off"):
        out = subprocess.run([sys.executable, "-c", _DEFER_SCRIPT, mode], capture_output=True, text=True, timeout=300,
                             check=False)
        assert out.returncode == 0, out.stderr
        growth[mode], exact = json.loads(out.stdout.strip().splitlines()[-1])
        if not exact:
            pytest.skip("this kernel refuses to reset the peak resident set (/proc/self/clear_refs)")
    record_property("saved_over_hidden_gradient", (growth["off"] - growth["on"]) / (200_000 * 128 * 4))
    assert growth["off"] - growth["on"] >= 0.75 * 200_000 * 128 * 4, growth

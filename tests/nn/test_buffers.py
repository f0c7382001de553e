"""Reused kernel output buffers: never a live tensor's storage, results bit-identical with and without reuse."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.nn import buffers, ops
from graphscale.nn import dropout as gd
from graphscale.nn.models import build_model
from graphscale.testing.graphs import random_graph


@pytest.fixture
def pool():
    previous = buffers.set_enabled(True)
    buffers.clear()
    yield buffers
    buffers.clear()
    buffers.set_enabled(previous)


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_buffer_is_handed_out_again_only_when_nothing_holds_it(pool):
    a = pool.empty((1024, 512), torch.float32)
    b = pool.empty((1024, 512), torch.float32)
    assert _ptr(a) != _ptr(b)  # a is alive
    view = a[10:20]
    del a
    c = pool.empty((512, 1024), torch.float32)  # same bytes, other shape
    assert _ptr(c) not in (_ptr(view), _ptr(b))  # the view keeps a's storage alive
    array = c.numpy()
    del c
    assert _ptr(pool.empty((1024, 512), torch.float32)) != array.__array_interface__["data"][0]
    del view
    d = pool.empty((2048, 256), torch.float32)
    assert _ptr(d) not in (_ptr(b),) and pool.held_bytes()[0] >= 3 * (2 << 20)
    small = pool.empty((10, 10), torch.float32)  # below MIN_BYTES: plain allocation, never pooled
    assert small.shape == (10, 10)


def test_saved_tensors_are_never_reused(pool):
    """An output autograd saved (here by a linear layer) keeps its buffer until the backward has run."""
    g = random_graph(3000, 6.0, num_features=96, num_classes=4, seed=1)
    block = Block.full(g)
    x = g.x.clone().requires_grad_(True)
    agg = ops.spmm(block, x)  # a pooled [3000, 96] float32 output (> 1 MiB)
    w = torch.randn(96, 8, requires_grad=True)
    out = agg @ w  # saves agg for w's gradient
    kept = agg.detach().clone()
    ptr = _ptr(agg)
    del agg
    other = ops.spmm(block, g.x * 2)  # same size: must not take agg's buffer (autograd still holds it)
    assert _ptr(other) != ptr
    out.sum().backward()
    assert torch.equal(w.grad, kept.t() @ torch.ones(3000, 8))


def _train(graph, model_name: str, epochs: int, dtype=torch.float32) -> tuple[list[float], list[torch.Tensor]]:
    block = Block.full(graph)
    cfg = ModelConfig(name=model_name, hidden=64, layers=2, dropout=0.5)
    model = build_model(cfg, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = graph.x.to(dtype)
    losses = []
    for epoch in range(epochs):
        model.train()
        model.set_epoch(epoch)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(block, x)[graph.train_mask], graph.y[graph.train_mask])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("model_name", ["gcn", "sage", "gat", "gcnii", "resgcn"])
def test_training_is_bit_identical_with_and_without_reuse(pool, model_name):
    g = random_graph(4000, 8.0, num_features=128, num_classes=5, seed=3)  # [4000, 128] float32 = 2 MiB: pooled
    with buffers.disabled():
        ref_losses, ref_params = _train(g, model_name, 4)
    losses, params = _train(g, model_name, 4)
    assert pool.held_bytes()[0] + pool.held_bytes()[1] > 0  # the pool was used
    assert losses == ref_losses
    for p, q in zip(params, ref_params):
        assert torch.equal(p, q)


@pytest.mark.parametrize("model_name", ["gcn", "sage", "gcnii"])
def test_fused_dropout_training_is_bit_identical_to_unfused(pool, model_name, monkeypatch):
    g = random_graph(1500, 8.0, num_features=40, num_classes=5, seed=4)
    monkeypatch.setattr("graphscale.nn.models.GNN.fuse_dropout", False)
    ref_losses, ref_params = _train(g, model_name, 3, torch.float64)
    monkeypatch.setattr("graphscale.nn.models.GNN.fuse_dropout", True)
    fused = []
    bits = gd.RowKeep.bits
    monkeypatch.setattr(gd.RowKeep, "bits", lambda self: fused.append(1) or bits(self))
    losses, params = _train(g, model_name, 3, torch.float64)
    assert fused  # the fused path ran
    assert losses == ref_losses
    for p, q in zip(params, ref_params):
        assert torch.equal(p, q)

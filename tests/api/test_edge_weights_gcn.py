"""graphscale's own ``gcn`` on a weighted graph: its normalisation takes the edge weights and the weighted degrees
as PyG's ``GCNConv`` does (``gcn_norm`` with ``edge_weight``), layer by layer (forward and gradients, aggregate-
and transform-first) and in training (``single`` and ``graph-parallel`` x2 against PyG's loop with the weights)."""

from __future__ import annotations

import pytest
import torch

import graphscale as gs
from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.data.convert import to_graph
from graphscale.nn.layers import GCNLayer
from graphscale.nn.models import build_model

pytest.importorskip("torch_geometric")
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN

from tests.api.test_edge_weights import OPTIONS, pyg_loop, weighted_data


@pytest.mark.parametrize("dims", [(6, 3), (6, 12)])
def test_gcn_layer_equals_gcnconv_with_the_weights(dims):
    d = weighted_data()
    block = Block.full(to_graph(d))
    ours = GCNLayer(*dims).double()
    theirs = GCNConv(*dims).double()
    with torch.no_grad():
        theirs.lin.weight.copy_(ours.lin.weight)
        ours.bias.normal_()
        theirs.bias.copy_(ours.bias)
    xa, xb = d.x.clone().requires_grad_(), d.x.clone().requires_grad_()
    out_a, out_b = ours(block, xa), theirs(xb, d.edge_index, d.edge_weight)
    torch.testing.assert_close(out_a, out_b, rtol=1e-10, atol=1e-12)
    unweighted = GCNConv(*dims).double()
    unweighted.load_state_dict(theirs.state_dict())
    assert not torch.allclose(out_a, unweighted(d.x, d.edge_index), rtol=1e-6)  # the weights matter
    grad = torch.randn_like(out_a)
    ga = torch.autograd.grad(out_a, [xa, ours.lin.weight, ours.bias], grad)
    gb = torch.autograd.grad(out_b, [xb, theirs.lin.weight, theirs.bias], grad)
    for a, b in zip(ga, gb, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("strategy", "workers"), [("single", 1), ("graph-parallel", 2)])
def test_graphscale_gcn_trains_as_pygs_gcn_with_the_weights(strategy, workers):
    """``gs.train("gcn", ...)`` (dropout 0) on the weighted graph: every epoch's loss equals PyG's ``GCN`` from the
    same initial parameters trained by PyG's own loop with the weights."""
    d = weighted_data()
    ours = build_model(ModelConfig(name="gcn", hidden=8, layers=2, dropout=0.0), 6, 3, seed=0, dtype=torch.float64)
    theirs = GCN(6, 8, 2, 3).double()
    with torch.no_grad():
        for layer, conv in zip(ours.layers, theirs.convs, strict=True):
            conv.lin.weight.copy_(layer.lin.weight)
            conv.bias.copy_(layer.bias)
    report = gs.train("gcn", d, strategy=strategy, workers=workers, hidden=8, layers=2, dropout=0.0, **OPTIONS)
    expected = pyg_loop(theirs, d)
    assert all(abs(a.loss - b) <= 1e-10 * abs(b) for a, b in zip(report.epochs, expected, strict=True))

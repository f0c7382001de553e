"""A step split at its projection (``GNN.project`` on some rows, ``GNN.step_projected`` on a block) equals the step.

Rows are projected in two groups, as two graph-parallel workers would project their own rows, and the step's keyed
dropout is active: values and every parameter's gradient equal ``GNN.step`` on the whole block (float64).
"""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.nn.models import build_model
from graphscale.testing import assert_close_rel, random_graph


def _model(name: str):
    cfg = ModelConfig(name=name, hidden=3, layers=2, dropout=0.5, heads=2)
    return build_model(cfg, 7, 4, seed=0, dtype=torch.float64)


def _grads(model) -> list[torch.Tensor]:
    """Layer 0's parameter gradients (the step's), cleared."""
    out = [p.grad.clone() for p in model.layers[0].parameters()]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("name", ["gcn", "sage", "gat"])
def test_projected_step_equals_step(name):
    graph = random_graph(50, avg_degree=4.0, num_features=7, num_classes=4, seed=1, dtype=torch.float64, isolated=2)
    block = Block.full(graph)
    model = _model(name)
    model.train()
    model.set_epoch(3)
    x = graph.x.clone().requires_grad_(True)
    ref = model.step(0, block, x)
    ref.square().sum().backward()
    ref_grads, ref_x = _grads(model), x.grad.clone()
    x.grad = None

    assert model.projected_width(0) == {"gcn": 3, "sage": 3, "gat": 6}[name]
    cut = 20  # two owners' rows, each projected on its own (pre keyed by the rows' global ids)
    parts = [model.project(0, x[rows], block.src_ids[rows]) for rows in (slice(0, cut), slice(cut, None))]
    z = torch.cat([p[0] for p in parts])
    local = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
    assert (local is not None) == (name == "sage")
    out = model.step_projected(0, block, z, local)
    out.square().sum().backward()
    assert_close_rel(out, ref, torch.float64, what=f"{name} output")
    assert_close_rel(x.grad, ref_x, torch.float64, what=f"{name} input gradient")
    for (pname, _), g, g_ref in zip(model.layers[0].named_parameters(), _grads(model), ref_grads, strict=True):
        assert_close_rel(g, g_ref, torch.float64, what=f"{name} grad {pname}")


def test_projection_refused_where_the_step_is_not_linear_then_aggregate():
    model = build_model(ModelConfig(name="gcnii", hidden=7, layers=2, dropout=0.5), 7, 4, seed=0)
    assert model.projected_width(0) is None
    with pytest.raises(ValueError, match="does not run split at a projection"):
        model.project(0, torch.zeros(3, 7), torch.arange(3))

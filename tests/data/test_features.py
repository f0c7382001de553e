"""--features: the modes' shapes, values and determinism, and their errors (graphscale.data.features)."""

import pytest
import torch

from graphscale.data.features import (
    ONEHOT_MAX_NODES,
    apply_features,
    compute_features,
    effective_norm,
    input_width,
    keyed_normal,
    parse_features,
)
from graphscale.nn.embedding import LearnableInput
from graphscale.testing.graphs import random_graph


def test_parse_features():
    assert parse_features("") == ("", 0) and parse_features("degree") == ("degree", 0)
    assert parse_features("random:8") == ("random", 8) and parse_features("learnable:64") == ("learnable", 64)
    for bad, message in (("degrees", "must be one of fastrp:D, spectral:D, degree, onehot"), ("random", "needs a width"),
                         ("learnable:0", "needs a width"), ("random:x", "needs a width"),
                         ("onehot:3", "takes no width")):
        with pytest.raises(ValueError, match=message):
            parse_features(bad)
    assert input_width("learnable:12", 0) == 12 and input_width("degree", 1) == 1 and input_width("", 7) == 7
    assert effective_norm("degree", "auto") == "none" and effective_norm("", "auto") == "auto"
    assert effective_norm("onehot", "row") == "row"


def test_computed_modes_shapes_values_determinism():
    g = random_graph(30, seed=1)
    deg = compute_features(g, "degree")
    assert deg.shape == (30, 1) and deg.dtype == torch.float32
    assert torch.allclose(deg[:, 0], torch.log1p(g.in_degrees().float()))
    one = compute_features(g, "onehot")
    assert torch.equal(one, torch.eye(30))
    rnd = compute_features(g, "random:5", seed=3)
    assert rnd.shape == (30, 5) and torch.equal(rnd, compute_features(g, "random:5", seed=3))
    assert not torch.equal(rnd, compute_features(g, "random:5", seed=4))
    assert abs(float(rnd.mean())) < 0.5 and 0.6 < float(rnd.std()) < 1.4
    apply_features(g, "random:5", seed=3)
    assert torch.equal(g.x, rnd) and g.meta["features"] == "random:5"
    apply_features(g, "learnable:4")
    assert g.x is None


def test_onehot_refused_on_large_graphs():
    g = random_graph(ONEHOT_MAX_NODES + 1, avg_degree=1.0, num_features=1)
    with pytest.raises(ValueError, match=r"--features onehot would make a dense .* use --features learnable:D"):
        compute_features(g, "onehot")


def test_keyed_values_depend_on_the_vertex_only():
    """A row is a function of (seed, vertex id, column): any subset, order or width prefix gives the same rows."""
    full = keyed_normal(torch.arange(50), 6, seed=2, stream=7)
    ids = torch.tensor([41, 3, 17])
    assert torch.equal(keyed_normal(ids, 6, seed=2, stream=7), full[ids])
    assert torch.equal(keyed_normal(ids, 4, seed=2, stream=7), full[ids, :4])
    assert torch.isfinite(full).all()
    table = LearnableInput(ids, 6, seed=2, dtype=torch.float64)
    assert table.weight.requires_grad and table.weight.shape == (3, 6)
    assert torch.equal(table.weight.detach(), LearnableInput(torch.arange(50), 6, seed=2, dtype=torch.float64)
                       .weight.detach()[ids])

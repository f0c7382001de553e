"""Edge weights under the strategies beyond ``single`` and ``graph-parallel``, each held to the reference its
unweighted runs are tested against (float64, dropout 0, PyG's ``GCN`` on a weighted graph): ``split-parallel`` x2
against ``single --minibatch``; ``data-parallel`` x2 against one single-process step per iteration over its
micro-batches' sampled blocks; ``offload`` x2, ``pipeline`` and ``model-averaging`` with one partition against PyG's
own full-graph loop with the weights; what model-averaging cannot weight is refused in one line."""

from __future__ import annotations

import pytest
import torch

import graphscale as gs
from graphscale.testing import assert_close_rel

pytest.importorskip("torch_geometric")
from torch_geometric.nn.models import GCN

from tests.api.test_edge_weights import EPOCHS, OPTIONS, pyg_loop, weighted_data

MINIBATCH = {"fanouts": [3, 3], "batch_size": 8}


def losses(strategy: str, workers: int, **extra) -> list[float]:
    torch.manual_seed(0)
    report = gs.train(GCN(6, 8, 2, 3).double(), weighted_data(), strategy=strategy, workers=workers, **OPTIONS,
                      **extra)
    return [e.loss for e in report.epochs]


def pyg_losses() -> list[float]:
    torch.manual_seed(0)
    return pyg_loop(GCN(6, 8, 2, 3).double(), weighted_data())


def assert_losses(got: list[float], expected: list[float], what: str) -> None:
    assert len(got) == len(expected) == EPOCHS, what
    assert_close_rel(torch.tensor(got), torch.tensor(expected), torch.float64, what=what)


def test_split_parallel_equals_single_minibatch_with_the_weights():
    single = losses("single", 1, minibatch=True, **MINIBATCH)
    assert_losses(losses("split-parallel", 2, **MINIBATCH), single, "split-parallel x2 vs single --minibatch")


def test_data_parallel_equals_single_steps_on_the_same_weighted_blocks():
    from graphscale.config import OptimConfig
    from graphscale.data.convert import to_graph
    from graphscale.nn.pyg import as_gnn
    from graphscale.strategies.base import make_optimizer
    from graphscale.testing.data_parallel_reference import data_parallel_reference_losses

    got = losses("data-parallel", 2, **MINIBATCH)
    graph = to_graph(weighted_data())
    torch.manual_seed(0)
    model = as_gnn(GCN(6, 8, 2, 3).double(), 6)
    optimizer = make_optimizer(model, OptimConfig(lr=OPTIONS["lr"], weight_decay=OPTIONS["weight_decay"]))
    expected = data_parallel_reference_losses(model, optimizer, graph, MINIBATCH["batch_size"], MINIBATCH["fanouts"],
                                              EPOCHS)
    assert_losses(got, expected, "data-parallel x2 vs single steps")


@pytest.mark.parametrize(("strategy", "workers", "extra"), [
    ("offload", 2, {"chunks": 2}), ("pipeline", 1, {"chunks": 1}),
    ("model-averaging", 1, {"halo_hops": 2})])
def test_full_graph_strategies_equal_pygs_loop_with_the_weights(strategy, workers, extra):
    """``offload`` x2 (2 chunks each), ``pipeline`` (its chunk blocks) and ``model-averaging`` on one partition
    (its partition's block): PyG's own loop with the weights, which differs from the unweighted loop
    (``test_edge_weights``)."""
    assert_losses(losses(strategy, workers, **extra), pyg_losses(), f"{strategy} x{workers} vs PyG")


@pytest.fixture
def no_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("workers started")

    monkeypatch.setattr("graphscale.run.launch", refuse)


@pytest.mark.parametrize(("extra", "match"), [
    ({}, r"fetches --evaluation exact's rows beyond a 1-hop halo without their edge weights; use --halo-hops 2"),
    ({"halo_hops": 2, "correction_steps": 1}, r"samples --correction-steps' neighbourhoods across partitions")])
def test_model_averaging_refuses_what_carries_no_weights(no_run, extra, match):
    with pytest.raises(ValueError, match=r"^the graph has edge weights \(edge_weight\), which strategy "
                                         r"'model-averaging' " + match) as err:
        losses("model-averaging", 2, **extra)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("strategy", "extra"), [("offload", {"chunks": 2}), ("pipeline", {"chunks": 2})])
def test_predict_under_offload_and_pipeline_uses_the_weights(strategy, extra):
    """``gs.predict`` of PyG's ``GCN`` on the weighted graph: the model's own outputs with the weights."""
    d = weighted_data()
    torch.manual_seed(0)
    model = GCN(6, 8, 2, 3).double().eval()
    with torch.no_grad():
        outputs = model(d.x, d.edge_index, d.edge_weight)
    out = gs.predict(model, d, strategy=strategy, workers=1, dtype="float64", **extra)
    assert torch.allclose(out, outputs, rtol=1e-10, atol=1e-12)

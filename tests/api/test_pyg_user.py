"""A PyG user's script with :func:`graphscale.train`: the options a PyG model reads (``pyg_dropout=``), edge inputs
(edge features) refused rather than dropped, in-memory features kept as given, and the trained model handed back
(``report.model``, :func:`graphscale.load_model`, :func:`graphscale.predict`), each against PyG's own loop."""

from __future__ import annotations

import pytest
import torch

import graphscale as gs
from graphscale.testing import random_graph
from graphscale.testing.pyg_loop import pyg_loop_losses

pytest.importorskip("torch_geometric")
from torch_geometric.data import Data
from torch_geometric.nn.models import GAT, GCN

EPOCHS = 3
OPTIONS = {"epochs": EPOCHS, "dtype": "float64", "progress": False, "lr": 0.01, "weight_decay": 5e-4}


def make_gat():
    """PyG's GAT with attention dropout inside its convs (only ``pyg_dropout="torch"`` trains it)."""
    return GAT(6, 8, 2, 3, heads=2, dropout=0.5)


def make_gcn():
    return GCN(6, 8, 2, 3)


def data(nonnegative: bool = False) -> Data:
    g = random_graph(40, num_features=6, num_classes=3, seed=2, dtype=torch.float64)
    x = g.x.abs() if nonnegative else g.x
    return Data(x=x, edge_index=g.edge_index(), y=g.y, train_mask=g.train_mask, val_mask=g.val_mask,
                test_mask=g.test_mask)


def pyg_loop(model, d: Data, epochs: int = EPOCHS) -> list[float]:
    """The user's own full-graph loop: Adam, cross-entropy over the training vertices."""
    return pyg_loop_losses(model, d, epochs, OPTIONS["lr"], OPTIONS["weight_decay"])


@pytest.fixture
def no_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a run started")

    monkeypatch.setattr("graphscale.run.run", refuse)


def test_pyg_dropout_torch_trains_model_objects_and_factories():
    """``pyg_dropout="torch"`` is the command line's ``--pyg-dropout torch``: PyG's GAT (dropout inside its convs,
    refused by the default keyed dropout) trains from Python, as a factory and as an object."""
    torch.manual_seed(0)
    for model in (make_gat, make_gat()):
        report = gs.train(model, data(), pyg_dropout="torch", **OPTIONS)
        assert report.config["model"]["pyg_dropout"] == "torch" and len(report.epochs) == EPOCHS
    with pytest.raises(ValueError, match="dropout"):  # keyed (the default) cannot key a conv's own dropout
        gs.train(make_gat, data(), **OPTIONS)
    with pytest.raises(ValueError, match=r"^--pyg-dropout is not used by model 'gcn'"):  # a name: no PyG model
        gs.train("gcn", data(), pyg_dropout="torch", **OPTIONS)


def test_edge_features_are_refused_naming_the_field(no_run):
    """``edge_attr`` is refused (``edge_weight`` is honoured: tests/api/test_edge_weights.py)."""
    field = "edge_attr"
    d = data()
    d.edge_attr = torch.rand(d.edge_index.shape[1], 4)
    with pytest.raises(ValueError, match=rf"^data\.{field} is set, but graphscale trains on the graph's edges "
                                         rf"without .*; delete it \(del data\.{field}\)") as err:
        gs.train(make_gcn, d, **OPTIONS)
    assert "\n" not in str(err.value)


def test_in_memory_features_are_used_as_given():
    """Non-negative features of a ``Data`` are not row-normalised unless asked (``feature_norm="row"``): the run
    is the user's own loop on the same features."""
    d = data(nonnegative=True)
    torch.manual_seed(0)
    model = make_gcn().double()
    report = gs.train(model, d, **OPTIONS)
    assert report.config["data"]["feature_norm"] == "none"
    expected = pyg_loop(model, d)
    assert all(abs(a.loss - b) <= 1e-10 for a, b in zip(report.epochs, expected))
    row = gs.train(model, d, feature_norm="row", **OPTIONS)
    assert row.config["data"]["feature_norm"] == "row" and row.epochs[0].loss != report.epochs[0].loss


def test_report_model_is_the_users_module_with_the_trained_parameters(tmp_path):
    """``report.model`` / ``report.last_model`` are the user's class with the best / last epoch's parameters (the
    last equals PyG's own loop's after as many steps); ``load_model`` maps a checkpoint onto a new instance;
    ``predict`` under single, graph-parallel x2, offload and pipeline x2 returns the model's own outputs."""
    d = data()
    torch.manual_seed(0)
    model = make_gcn().double()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = gs.train(model, d, checkpoint=str(tmp_path / "ckpt.pt"), **OPTIONS)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the argument is not trained
    assert type(report.model) is GCN and type(report.last_model) is GCN and not report.model.training
    pyg_loop(model, d)
    for (name, mine), theirs in zip(report.last_model.state_dict().items(), model.state_dict().values()):
        assert torch.allclose(mine, theirs, rtol=1e-10, atol=1e-12), name
    best = gs.load_model(tmp_path / "ckpt.pt", make_gcn().double())
    last = gs.load_model(tmp_path / "ckpt.pt", make_gcn().double(), which="last")
    for loaded, kept in ((best, report.model), (last, report.last_model)):
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), kept.state_dict().values()))
    with pytest.raises(ValueError, match=r"^load_model: checkpoint .* holds the parameters of model .*, not of this "
                                         r"GAT \(missing "):
        gs.load_model(tmp_path / "ckpt.pt", make_gat().double())
    with torch.no_grad():
        expected = report.model(d.x, d.edge_index)
    for strategy, workers in (("single", 1), ("graph-parallel", 2), ("offload", 1), ("pipeline", 2)):
        out = gs.predict(report.model, d, strategy=strategy, workers=workers, dtype="float64")
        assert out.shape == expected.shape and torch.allclose(out, expected, rtol=1e-10, atol=1e-12), strategy
    with pytest.raises(ValueError, match=r"^predict: strategy='data-parallel' cannot predict \(it keeps no "):
        gs.predict(report.model, d, strategy="data-parallel", workers=2)


class TutorialGCNConv(__import__("torch_geometric").nn.MessagePassing):
    """PyG's tutorial GCN layer ("Creating message passing networks"): degree normalisation inside the conv."""

    def __init__(self, in_channels, out_channels):
        super().__init__(aggr="add")
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        from torch_geometric.utils import add_self_loops, degree

        edge_index, _ = add_self_loops(edge_index, num_nodes=x.size(0))
        x = self.lin(x)
        row, col = edge_index
        deg = degree(col, x.size(0), dtype=x.dtype)
        norm = deg.pow(-0.5)[row] * deg.pow(-0.5)[col]
        return self.propagate(edge_index, x=x, norm=norm)

    def message(self, x_j, norm):
        return norm.view(-1, 1) * x_j


class TwoTutorialConvs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = TutorialGCNConv(6, 8), TutorialGCNConv(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def test_refusals_name_the_real_cause():
    """A conv normalising by degrees it computes itself is refused naming that (not "code between the convs mixes
    rows"), in a stack and in a model with its own forward; GINEConv and convs with edge_dim name edge_attr."""
    from torch_geometric.nn import GATConv, GINEConv, Sequential

    from graphscale.nn.pyg import as_gnn

    cause = r"computes a vertex's output from more than its in-edges .*degree normalisation inside the conv"
    stack = Sequential("x, edge_index", [(TutorialGCNConv(6, 8), "x, edge_index -> x"), torch.nn.ReLU(),
                                         (TutorialGCNConv(8, 3), "x, edge_index -> x")])
    for model, where in ((stack, r"TutorialGCNConv \(layer 0\)"), (TwoTutorialConvs(), r"TutorialGCNConv \(conv call 0\)")):
        with pytest.raises(ValueError, match=where + " " + cause) as err:
            as_gnn(model, 6, 3)
        assert "\n" not in str(err.value)
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    for conv, what in ((GINEConv(mlp), "in every message"), (GATConv(6, 3, edge_dim=4), "edge_dim=4")):
        with pytest.raises(ValueError, match=rf"cannot run on a graphscale block: it uses edge features \(edge_attr, "
                                             rf"{what}\)"):
            as_gnn(Sequential("x, edge_index", [(conv, "x, edge_index -> x")]), 6, 3)


def _sage():
    from graphscale.testing import pyg_models

    return pyg_models.sage()


@pytest.mark.slow
def test_every_train_option_reads_the_same_for_every_model_kind(tmp_path, monkeypatch):
    """Walk ``graphscale train``'s options: each, given to ``gs.train`` with a PyG module object, a factory and the
    ``module.path:factory`` name the command line takes, is accepted into the same configuration field for all
    three, or refused for all three in one line."""
    import argparse

    from test_api import _sample

    from graphscale import api, cli
    from graphscale.api.training import configure
    from graphscale.testing import pyg_models

    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    cli.add_train_arguments(parser)
    fields = api.keyword_fields()
    kinds = {"object": pyg_models.sage(), "factory": _sage, "name": "graphscale.testing.pyg_models:sage"}
    checked = 0
    for action in parser._actions:
        if action.dest in ("help", *api.EXTRA_KEYWORDS):
            continue
        value = _sample(action)
        outcomes = {}
        for kind, model in kinds.items():
            try:
                config, _ = configure(model, pyg_models.DATASET, {action.dest: value})
                path = fields[action.dest]
                target = config
                for part in path:
                    target = getattr(target, part)
                outcomes[kind] = ("ok", target)
            except (ValueError, TypeError, KeyError) as err:
                assert "\n" not in str(err), (action.dest, kind, str(err))
                outcomes[kind] = ("refused",)
        assert len({repr(o) for o in outcomes.values()}) == 1, (action.dest, outcomes)
        checked += 1
    assert checked > 40

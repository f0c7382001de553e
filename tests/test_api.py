"""The Python API ``graphscale.train``: model and data kinds, the keywords against the command line, the report, and
bad input (one line, before any worker starts)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import torch

import graphscale as gs
from graphscale import api, cli
from graphscale.config import ModelConfig
from graphscale.data.formats import save_graph_dir
from graphscale.nn.models import GNN, build_model
from graphscale.options.task import float_list
from graphscale.testing import random_graph

EPOCHS = 3
#: a small run: dropout 0 and float64, so different routes to the same model give the same losses to 1e-10
SMALL = {"epochs": EPOCHS, "hidden": 8, "dropout": 0.0, "dtype": "float64", "progress": False}


def tiny_graph():
    return random_graph(40, num_features=6, num_classes=3, seed=2, dtype=torch.float64)


def make_sage() -> GNN:
    """A module-level factory of the graphscale model ``sage`` as ``SMALL`` builds it for ``tiny_graph``."""
    return build_model(ModelConfig(name="sage", hidden=8, dropout=0.0), 6, 3, seed=0, dtype=torch.float64)


def make_pyg_sage():
    from torch_geometric.nn.models import GraphSAGE

    return GraphSAGE(6, 8, 2, 3)


def losses(report) -> list[float]:
    return [e.loss for e in report.epochs]


def assert_losses(a, b, tol=1e-10):
    assert len(a) == len(b) == EPOCHS
    for x, y in zip(a, b):
        assert abs(x - y) <= tol * max(1.0, abs(y)), (a, b)


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a run starts (bad input must be refused before)."""
    def refuse(config):
        raise AssertionError("a run started")

    monkeypatch.setattr("graphscale.run.run", refuse)


# ------------------------------------------------------------ keywords = the command line's options
def _sample(action: argparse.Action):
    """A value of the option's type, as the parser would produce it."""
    if action.choices:
        return list(action.choices)[-1]
    if action.type is cli.int_list:
        return [4, 2]
    if action.type is float_list:
        return [0.5, 0.25, 0.25]
    if action.type in (int, float, cli.integer):
        return action.type(3)
    if action.nargs == 0:  # store_const / store_true / BooleanOptionalAction
        return True
    return "some-value"


def test_every_cli_option_is_a_keyword():
    """Walk ``graphscale train``'s options: each is a keyword that sets the same configuration field to the same
    value (the keywords are read from the config dataclasses, the command line from its table: they must agree)."""
    parser = argparse.ArgumentParser()
    cli.add_train_arguments(parser)
    fields = api.keyword_fields()
    seen = set()
    for action in parser._actions:
        if action.dest == "help":
            continue
        if action.dest in api.EXTRA_KEYWORDS:  # --config FILE, --repeat N: train()'s own keywords
            seen.add(action.dest)
            continue
        assert action.dest in fields, f"--{action.dest} has no keyword"
        value = _sample(action)
        expected = cli.overrides_from_args(argparse.Namespace(**{action.dest: value}))
        assert api.keyword_overrides({action.dest: value}) == expected, action.dest
        seen.add(action.dest)
    assert set(cli.TRAIN_OPTIONS) <= seen and set(api.EXTRA_KEYWORDS) <= seen


def test_keyword_values_typed():
    assert api.keyword_overrides({"fanouts": (5, 3), "lr": 1, "json": __import__("pathlib").Path("r.json")}) == {
        "strategy": {"fanouts": [5, 3]}, "optim": {"lr": 1.0}, "json": "r.json"}
    for options, message in (({"epochs": "3"}, "epochs= expects int, got '3' (str)"),
                             ({"epochs": True}, "epochs= expects int, got True (bool)"),
                             ({"fanouts": "10,10"}, "fanouts= expects a list of int, got '10,10' (str)"),
                             ({"chunks": 2.5}, "chunks= expects int or None, got 2.5 (float)"),
                             ({"minibatch": 1}, "minibatch= expects bool, got 1 (int)")):
        with pytest.raises(TypeError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            api.keyword_overrides(options)


def test_unknown_keyword_names_the_closest(no_run):
    with pytest.raises(TypeError, match=r"^train\(\) got an unknown keyword batchsize=; did you mean batch_size=\?$"):
        gs.train("gcn", "cora", batchsize=4)
    with pytest.raises(TypeError, match=r"^train\(\) got an unknown keyword zzz=; the keywords are graphscale "):
        gs.train("gcn", "cora", zzz=4)


def test_config_file_then_keywords(tmp_path):
    """``config=FILE`` reads a TOML file first and the keywords override it (as --config and flags); with a model
    object a [model] table option of the file conflicts with it like the keyword would."""
    toml = tmp_path / "run.toml"
    toml.write_text('seed = 3\n[optim]\nepochs = 5\n[model]\nhidden = 4\n')
    report = gs.train("gcn", tiny_graph(), config=toml, epochs=2, dtype="float64", progress=False)
    assert len(report.epochs) == 2 and report.config["seed"] == 3 and report.config["model"]["hidden"] == 4
    with pytest.raises(ValueError, match=r"run\.toml: \[model\] hidden conflicts with the model argument"):
        gs.train(make_sage, tiny_graph(), config=toml)


# ------------------------------------------------------------ equal to the command line
def test_train_equals_the_command_line(tmp_path):
    """``gs.train`` on a Graph object and ``graphscale train --dataset graphdir:DIR`` on the same graph with the same
    options: the same per-epoch losses and scores (mini-batch single, so fanouts and batch size are read)."""
    graph = tiny_graph()
    save_graph_dir(graph, tmp_path / "g")
    options = {**SMALL, "minibatch": True, "fanouts": [3, 2], "batch_size": 8, "seed": 4}
    report = gs.train("sage", graph, **options)
    argv = ["train", "--dataset", f"graphdir:{tmp_path / 'g'}", "--model", "sage", "--epochs", str(EPOCHS),
            "--hidden", "8", "--dropout", "0", "--dtype", "float64", "--no-progress", "--minibatch", "--fanouts",
            "3,2", "--batch-size", "8", "--seed", "4", "--json", str(tmp_path / "cli.json")]
    assert cli.main(argv) == 0
    expected = json.loads((tmp_path / "cli.json").read_text())
    assert [e["loss"] for e in expected["epochs"]] == losses(report)
    assert [e["val_acc"] for e in expected["epochs"]] == [e.val_acc for e in report.epochs]
    assert expected["final"]["test_acc"] == report.final.test_acc
    assert report.config["data"]["dataset"].startswith("graphdir:")
    assert {k: v for k, v in report.config.items() if k != "data"} == \
        {k: v for k, v in expected["config"].items() if k not in ("data", "json")} | {"json": None}


# ------------------------------------------------------------ model kinds
def test_model_kinds_equal(tmp_path):
    """A model name, a graphscale GNN instance, a factory of one: the same model, the same losses; the instance
    passed is not trained (workers train a copy)."""
    graph = tiny_graph()
    by_name = gs.train("sage", graph, **SMALL)
    instance = make_sage()
    before = [p.detach().clone() for p in instance.parameters()]
    small = {k: v for k, v in SMALL.items() if k not in ("hidden", "dropout")}
    assert_losses(losses(gs.train(instance, graph, **small)), losses(by_name))
    assert all(torch.equal(a, b) for a, b in zip(before, instance.parameters()))
    report = gs.train(make_sage, graph, **small)
    assert_losses(losses(report), losses(by_name))
    assert report.config["model"]["name"].endswith("test_api:make_sage")  # the --model module.path:attr form


def test_pyg_factory_equals_its_instance():
    """A PyG model factory is called in the worker with the RNG seeded by ``seed``: the same model as the instance
    built so, the same losses."""
    pytest.importorskip("torch_geometric")
    small = {k: v for k, v in SMALL.items() if k not in ("hidden", "dropout")}
    with torch.random.fork_rng():
        torch.manual_seed(7)
        instance = make_pyg_sage()
    by_factory = gs.train(make_pyg_sage, tiny_graph(), seed=7, **small)
    assert_losses(losses(gs.train(instance, tiny_graph(), seed=7, **small)), losses(by_factory))
    assert by_factory.config["model"]["factory"].endswith("make_pyg_sage")


def test_module_path_string_equals_the_callable():
    """``"module.path:factory"`` (``--model``'s form) and the callable itself: the same model, the same losses."""
    pytest.importorskip("torch_geometric")
    from graphscale.testing import pyg_models

    options = {"epochs": EPOCHS, "dtype": "float64", "progress": False}
    by_string = gs.train("graphscale.testing.pyg_models:sage", pyg_models.DATASET, **options)
    assert_losses(losses(by_string), losses(gs.train(pyg_models.sage, pyg_models.DATASET, **options)))


def test_instance_and_pyg_model_on_two_workers():
    """A module instance is sent to spawned workers as a copy: graph-parallel on 2 workers equals single (a graphscale
    GNN and a PyG GraphSAGE)."""
    pytest.importorskip("torch_geometric")
    graph = tiny_graph()
    small = {k: v for k, v in SMALL.items() if k not in ("hidden", "dropout")}
    for model in (make_sage(), make_pyg_sage()):
        single = gs.train(model, graph, **small)
        parallel = gs.train(model, graph, strategy="graph-parallel", workers=2, **small)
        assert_losses(losses(parallel), losses(single))
        assert len(parallel.epochs[-1].bytes_per_worker) == 2 and parallel.epochs[-1].bytes["halo"] > 0


# ------------------------------------------------------------ data kinds
def test_data_kinds_equal(tmp_path):
    """A spec string, a Graph, a PyG Data and an OGB-shaped dataset object holding the same graph train the same;
    the in-memory data is written once into the cache directory (cache_dir=; one directory per content and name)
    and reused."""
    from test_api_data import OgbShaped
    from torch_geometric.data import Data

    graph = tiny_graph()
    save_graph_dir(graph, tmp_path / "g")
    expected = losses(gs.train("sage", f"graphdir:{tmp_path / 'g'}", **SMALL))
    cache = tmp_path / "cache"
    cache.mkdir()
    data = Data(x=graph.x, edge_index=graph.edge_index(), y=graph.y, train_mask=graph.train_mask,
                val_mask=graph.val_mask, test_mask=graph.test_mask)
    split = {key: torch.nonzero(getattr(graph, f"{s}_mask")).flatten()
             for key, s in (("train", "train"), ("valid", "val"), ("test", "test"))}
    ogb = OgbShaped(Data(x=graph.x, edge_index=graph.edge_index(), y=graph.y.unsqueeze(1)), split, num_classes=3)
    specs = []
    for obj in (graph, data, ogb):
        report = gs.train("sage", obj, cache_dir=str(cache), **SMALL)
        assert_losses(losses(report), expected)
        specs.append(report.config["data"]["dataset"])
    assert all(s.startswith(f"graphdir:{cache}/inputs/") for s in specs)
    again = gs.train("sage", graph, cache_dir=str(cache), **SMALL)
    assert again.config["data"]["dataset"] == specs[0] and len(list((cache / "inputs").iterdir())) == 3


def test_directed_pyg_data_graph_parallel_equals_single():
    """A directed PyG Data (edges as stored) trains the same under graph-parallel on 2 workers as under single."""
    from torch_geometric.data import Data

    g = random_graph(40, num_features=6, num_classes=3, seed=5, symmetric=False, dtype=torch.float64)
    data = Data(x=g.x, edge_index=g.edge_index(), y=g.y, train_idx=torch.nonzero(g.train_mask).flatten(),
                val_idx=torch.nonzero(g.val_mask).flatten())
    single = gs.train("gcn", data, **SMALL)
    parallel = gs.train("gcn", data, strategy="graph-parallel", workers=2, **SMALL)
    assert single.graph["edges"] == g.num_edges  # not symmetrised
    assert_losses(losses(parallel), losses(single))


def test_featureless_and_multilabel_data():
    """A Data without x trains with features=...; a 0/1 [N, C] y trains as multi-label (metric micro-F1), without a
    split taking the seeded one as a multi-label dataset does."""
    from torch_geometric.data import Data

    g = tiny_graph()
    report = gs.train("gcn", Data(edge_index=g.edge_index(), y=g.y, train_mask=g.train_mask, num_nodes=40),
                      features="degree", epochs=2, progress=False)
    assert report.graph["features"] == 1 and report.config["data"]["features"] == "degree"  # log(1 + degree)
    multi = torch.zeros(40, 4, dtype=torch.long)
    multi[torch.arange(40), g.y] = 1
    multi[torch.arange(0, 40, 3), 3] = 1
    report = gs.train("gcn", Data(x=g.x, edge_index=g.edge_index(), y=multi), epochs=2, progress=False)
    assert report.metric == "micro-f1" and report.graph["multilabel"] and report.graph["train"] > 0


# ------------------------------------------------------------ the report
def test_report_json_plot_and_load(tmp_path):
    report = gs.train("gcn", tiny_graph(), json=str(tmp_path / "run.json"), **SMALL)
    assert isinstance(report, gs.Report) and isinstance(report.final, gs.Final)
    assert isinstance(report.epochs[-1], gs.EpochRecord) and len(report.epochs) == EPOCHS
    assert report.final.test_acc == report.raw["final"]["test_acc"] and report.metric == "accuracy"
    assert report.final.best_epoch in range(EPOCHS) and report.graph["nodes"] == 40
    assert report.epochs[-1].bytes == report.raw["epochs"][-1]["bytes"]
    report.to_json(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "run.json").read_bytes()  # what --json writes
    loaded = gs.Report.load(tmp_path / "run.json")
    assert losses(loaded) == losses(report) and loaded.final == report.final
    assert report.plot(tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match=r"^Report\.to_json: path .*missing.*: directory .* does not exist"):
        report.to_json(tmp_path / "missing" / "r.json")


# ------------------------------------------------------------ bad input, before any worker starts
def _local_factory():
    def make():
        return make_sage()
    return make


def _local_instance():
    class Local(torch.nn.Module):
        pass
    return Local()


@pytest.mark.parametrize(("model", "message"), [
    (lambda: make_sage(), (r"^model: factory <lambda> cannot be sent to the worker processes \(a lambda has no name "
                          r"to import it by\); pass a zero-argument factory defined at the top level")),
    (_local_factory(), (r"^model: factory _local_factory.<locals>.make cannot be sent to the worker processes \(it "
                       r"is defined inside a function\)")),
    (_local_instance(), (r"^model: this _local_instance.<locals>.Local instance cannot be sent to the worker "
                        r"processes \(its class is defined inside a function")),
])
@pytest.mark.parametrize("workers", [1, 2])
def test_unsendable_model_refused_for_any_worker_count(no_run, model, message, workers):
    with pytest.raises(ValueError, match=message) as err:
        gs.train(model, tiny_graph(), strategy="graph-parallel" if workers > 1 else "single", workers=workers)
    assert "\n" not in str(err.value)


def test_bad_input_one_line(no_run):
    from torch_geometric.data import Data

    g = tiny_graph()
    cases = [
        (ValueError, lambda: gs.train("gcn", "cora", model="sage"), r"^model= conflicts with the model argument"),
        (ValueError, lambda: gs.train("gcn", g, dataset="cora"), r"^dataset= conflicts with the data argument"),
        (ValueError, lambda: gs.train(make_sage, g, hidden=64), r"^hidden= conflicts with the model argument"),
        (TypeError, lambda: gs.train(3, g), r"^model: expected a graphscale model name \(str\), a torch.nn.Module"),
        (TypeError, lambda: gs.train("gcn", 3), r"^data: expected a dataset spec string, a graphscale Graph"),
        (ValueError, lambda: gs.train("gcn", Data(x=g.x, edge_index=g.edge_index(), train_mask=g.train_mask)),
         r"^data\.y is missing: node classification needs labels"),
        (ValueError, lambda: gs.train("gcn", Data(x=g.x, edge_index=g.edge_index(), y=g.y)),
         r"^data: the training split is missing"),
        (TypeError, lambda: gs.train("gcn", g, epochs="5"), r"^epochs= expects int, got '5'"),
        (ValueError, lambda: gs.train("gcn", g, cache="pagraph"), r"^--cache is not used by strategy 'single'"),
        (ValueError, lambda: gs.train("gcn", g, repeat=3), r"^repeat=3: train\(\) runs one seed"),
        (ValueError, lambda: gs.train(build_model(ModelConfig(name="gcn"), 6, 3), g, strategy="auto"),
         r"^strategy='auto' predicts for graphscale's own models"),
        (ValueError, lambda: gs.train("gcn", g, workers=0), r"^--workers must be >= 1"),
        (ValueError, lambda: gs.train("gcn", g, workers=2), r"^strategy 'single' runs on one worker"),
    ]
    for kind, call, message in cases:
        with pytest.raises(kind, match=message) as err:
            call()
        assert "\n" not in str(err.value), message


def test_user_model_misfit_refused_before_workers(monkeypatch):
    """A model that cannot train on the data (widths, no message-passing layer) fails in the parent, before any
    worker starts (validation.check_user_model builds it there), one line."""
    pytest.importorskip("torch_geometric")

    def no_launch(*args, **kwargs):
        raise AssertionError("workers started")

    monkeypatch.setattr("graphscale.run.launch", no_launch)
    from torch_geometric.nn.models import GraphSAGE

    for model, message in ((GraphSAGE(7, 8, 2, 3), r"GraphSAGE instance: layer 0 \(SAGEConv\) takes 6 input features"),
                           (torch.nn.Linear(6, 3), r"Linear instance")):
        with pytest.raises(ValueError, match=message) as err:
            gs.train(model, tiny_graph(), strategy="graph-parallel", workers=2, epochs=1, progress=False)
        assert "\n" not in str(err.value)


def test_strategy_auto_runs_the_recommendation_and_records_it(tmp_path):
    """``strategy="auto"`` with in-memory data: the data is written once, ``graphscale advise`` ranks the
    strategies on it (a synthetic machine profile, so nothing is measured here), and the report holds the prediction
    next to the measurement, as ``graphscale train --strategy auto`` does."""
    from graphscale.advise.profile import profile_path, save_profile
    from graphscale.cost.machine import synthetic

    cache = tmp_path / "cache"
    save_profile(synthetic(), profile_path(cache, "cpu"))
    report = gs.train("gcn", tiny_graph(), strategy="auto", workers=2, hidden=8, epochs=2, cache_dir=str(cache),
                      progress=False, json=str(tmp_path / "run.json"))
    advice = report.raw["advise"]
    written = json.loads((tmp_path / "run.json").read_text())["advise"]  # the file as --json writes it
    assert written["predicted"]["strategy"] == advice["predicted"]["strategy"] and "measured" in written
    assert report.config["strategy"]["name"] == advice["predicted"]["strategy"]
    assert advice["predicted"]["fits"] and advice["measured"]["seconds"] > 0
    assert len(list((cache / "inputs").iterdir())) == 1


def test_import_stays_light():
    """``import graphscale`` does not import torch (the API is loaded on first use)."""
    code = "import sys, graphscale; assert 'torch' not in sys.modules; graphscale.train; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

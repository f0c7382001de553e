"""A PyG model with its own forward (skip connection, jumping knowledge) through the Python API and the command line:
``gs.train(model, data, ...)`` with the module itself, and ``graphscale train --model module.path:factory``."""

from __future__ import annotations

import json

import pytest
import torch

import graphscale as gs
from graphscale.cli import main
from graphscale.testing import pyg_models

EPOCHS = 2
OPTIONS = {"epochs": EPOCHS, "dtype": "float64", "progress": False, "feature_norm": "none"}


def losses(report) -> list[float]:
    return [e.loss for e in report.epochs]


def assert_losses(a, b, tol=1e-10):
    assert len(a) == len(b) == EPOCHS
    for x, y in zip(a, b):
        assert abs(x - y) <= tol * max(1.0, abs(y)), (a, b)


def test_gs_train_a_forward_model_instance_graph_parallel_equals_single():
    """The module (a copy, pickled to the workers) under graph-parallel x2 equals single; the report names it."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = pyg_models.skip_jk()
    single = gs.train(model, pyg_models.DATASET, **OPTIONS)
    parallel = gs.train(model, pyg_models.DATASET, strategy="graph-parallel", workers=2, oversubscribe=True,
                        **OPTIONS)
    assert_losses(losses(parallel), losses(single))
    assert parallel.epochs[-1].bytes["halo"] > 0 and single.config["model"]["layers"] == 2


def test_gs_train_refuses_a_forward_model_for_pipeline_before_any_worker(monkeypatch):
    monkeypatch.setattr("graphscale.run.launch", lambda *a, **k: pytest.fail("a worker started"))
    with pytest.raises(ValueError, match="strategy 'pipeline' trains layer-sequential PyG models only"):
        gs.train(pyg_models.sage_jk_cat, pyg_models.DATASET, strategy="pipeline", **OPTIONS)


def test_cli_trains_a_forward_model_factory_split_parallel_equal_to_single_minibatch(tmp_path, capsys):
    spec = "graphscale.testing.pyg_models:skip_jk"
    common = ["train", "--model", spec, "--dataset", pyg_models.DATASET, "--epochs", str(EPOCHS), "--no-progress",
              "--dtype", "float64", "--feature-norm", "none", "--fanouts", "3,3", "--batch-size", "8"]
    got = {}
    for name, extra in (("split", ["--strategy", "split-parallel", "--workers", "2", "--oversubscribe"]),
                        ("single", ["--strategy", "single", "--minibatch"])):
        out = tmp_path / f"{name}.json"
        assert main([*common, *extra, "--json", str(out)]) == 0
        got[name] = [e["loss"] for e in json.loads(out.read_text())["epochs"]]
    assert_losses(got["split"], got["single"])
    capsys.readouterr()
    assert main(["train", "--model", spec, "--dataset", pyg_models.DATASET, "--strategy", "offload", "--epochs", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "strategy 'offload' trains layer-sequential PyG models only" in err and err.count("\n") == 1

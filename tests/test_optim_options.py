"""``--optimizer``, ``--momentum``, ``--lr-schedule``, ``--lr-step-size``, ``--lr-gamma``: command-line options, TOML
keys and ``gs.train`` keywords; bad values refused in one line; a resumed run continues the schedule bit for bit and
a checkpoint of another optimiser (or another cosine length) is refused; the report shows the optimiser."""

from __future__ import annotations

import json

import pytest
import torch

import graphscale as gs
from graphscale.checkpoint import check_resume, read_checkpoint
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.strategies.optimizers import LRSchedule
from graphscale.testing import random_graph
from graphscale.validation import validate


def graph():
    return random_graph(40, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=torch.float64)


def config(**optim):
    return build_config({"optim": optim, "progress": False})


@pytest.mark.parametrize("optim, message", [
    ({"optimizer": "rmsprop"}, "--optimizer must be one of adam, adamw, sgd, got 'rmsprop'"),
    ({"lr_schedule": "linear"}, "--lr-schedule must be one of none, cosine, step, got 'linear'"),
    ({"momentum": 0.9}, "--momentum is read by --optimizer sgd only, not adam"),
    ({"optimizer": "adamw", "momentum": 0.5}, "--momentum is read by --optimizer sgd only, not adamw"),
    ({"optimizer": "sgd", "momentum": -0.1}, "--momentum must be >= 0, got -0.1"),
    ({"optimizer": "sgd", "momentum": 1.0}, r"--momentum must be in \[0, 1\), got 1.0"),
    ({"weight_decay": -1.0}, "--weight-decay must be >= 0, got -1.0"),
    ({"lr": -0.1}, "--lr must be > 0, got -0.1"),
    ({"lr_schedule": "step"}, "--lr-schedule step needs --lr-step-size N"),
    ({"lr_schedule": "step", "lr_step_size": 0}, "--lr-step-size must be an integer >= 1, got 0"),
    ({"lr_schedule": "step", "lr_step_size": 2, "lr_gamma": -0.5}, "--lr-gamma must be > 0, got -0.5"),
    ({"lr_schedule": "step", "lr_step_size": 2, "lr_gamma": 2.0}, r"--lr-gamma must be in \(0, 1\] \(a decay\)"),
    ({"lr_step_size": 3}, "--lr-step-size is read by --lr-schedule step only, not none"),
    ({"lr_schedule": "cosine", "lr_gamma": 0.5}, "--lr-gamma is read by --lr-schedule step only, not cosine"),
])
def test_bad_optimiser_options_are_refused_in_one_line(optim, message):
    with pytest.raises(ValueError, match=message) as err:
        validate(config(**optim))
    assert "\n" not in str(err.value)


def test_the_options_are_flags_toml_keys_and_keywords(tmp_path, capsys):
    toml = tmp_path / "run.toml"
    toml.write_text('[optim]\noptimizer = "sgd"\nmomentum = 0.5\nlr_schedule = "step"\nlr_step_size = 2\n'
                    'lr_gamma = 0.5\n')
    built = build_config({}, toml)
    assert (built.optim.optimizer, built.optim.momentum, built.optim.lr_schedule, built.optim.lr_step_size,
            built.optim.lr_gamma) == ("sgd", 0.5, "step", 2, 0.5)
    validate(built)
    assert main(["train", "--optimizer", "sgd", "--momentum", "1.5", "--epochs", "1", "--no-progress"]) == 2
    assert "--momentum must be in [0, 1), got 1.5" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--lr-schedule step needs --lr-step-size N"):
        gs.train("gcn", graph(), lr_schedule="step", epochs=1, progress=False)
    with pytest.raises(TypeError, match="momentum= expects float or None"):
        gs.train("gcn", graph(), optimizer="sgd", momentum="high", epochs=1, progress=False)


@pytest.mark.slow
def test_resumed_schedule_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    """sgd with a cosine schedule and adamw with a step schedule: a 6-epoch run interrupted after epoch 3 (its
    checkpoint of then) and resumed equals the uninterrupted run (losses and parameters, float64, bit for bit); the
    checkpoint records the optimiser and the schedule's state; the report's config shows them."""
    import shutil

    import graphscale.trainer

    written = graphscale.trainer.write_checkpoint

    def keep_epoch_2(path, payload):  # the checkpoint a run interrupted during epoch 3 leaves
        written(path, payload)
        if payload["epoch"] == 2:
            shutil.copy(path, str(path) + ".epoch2")

    monkeypatch.setattr(graphscale.trainer, "write_checkpoint", keep_epoch_2)
    g = graph()
    for i, optim in enumerate(({"optimizer": "sgd", "lr_schedule": "cosine", "lr": 0.2},
                               {"optimizer": "adamw", "lr_schedule": "step", "lr_step_size": 2, "lr_gamma": 0.5})):
        common = {"dtype": "float64", "progress": False, "hidden": 4, "epochs": 6, **optim}
        ckpt = tmp_path / f"ckpt{i}.pt"
        straight = gs.train("gcn", g, checkpoint=str(ckpt), **common)
        shutil.copy(str(ckpt) + ".epoch2", ckpt)
        saved = read_checkpoint(ckpt)
        assert saved["identity"]["optimizer"] == optim["optimizer"]
        assert saved["schedule"]["kind"] == optim["lr_schedule"] and saved["schedule"]["next_epoch"] == 3
        resumed = gs.train("gcn", g, checkpoint=str(ckpt), resume=True, **common)
        assert [e.loss for e in resumed.epochs] == [e.loss for e in straight.epochs]
        for (name, p), q in zip(straight.last_model.state_dict().items(), resumed.last_model.state_dict().values()):
            assert torch.equal(p, q), (optim, name)
        assert straight.config["optim"]["optimizer"] == optim["optimizer"]
        assert straight.config["optim"]["lr_schedule"] == optim["lr_schedule"]
        rates = [LRSchedule(build_config({"optim": {k: v for k, v in common.items() if k in OPTIM}}).optim).lr(e)
                 for e in range(6)]
        assert len(set(rates)) > 1  # the schedule changes the rate


OPTIM = ("optimizer", "lr", "lr_schedule", "lr_step_size", "lr_gamma", "epochs")


def test_a_checkpoint_of_another_optimiser_or_cosine_length_is_refused_in_one_line(tmp_path):
    ckpt = str(tmp_path / "ckpt.pt")
    g = graph()
    gs.train("gcn", g, epochs=2, checkpoint=ckpt, progress=False, lr_schedule="cosine")
    saved = read_checkpoint(ckpt)
    run = build_config({"optim": {"epochs": 2, "optimizer": "sgd", "lr_schedule": "cosine"}, "checkpoint": ckpt})
    with pytest.raises(ValueError, match=r"--optimizer 'adam' \(checkpoint\) vs 'sgd'") as err:
        check_resume(run, saved)
    assert "\n" not in str(err.value)
    run = build_config({"optim": {"epochs": 4, "lr_schedule": "cosine"}, "checkpoint": ckpt})
    with pytest.raises(ValueError, match=r"--epochs 2 \(checkpoint\) vs 4 \(--lr-schedule cosine anneals"):
        check_resume(run, saved)
    run = build_config({"optim": {"epochs": 2}, "checkpoint": ckpt})
    with pytest.raises(ValueError, match=r"--lr-schedule 'cosine' \(checkpoint\) vs 'none'"):
        check_resume(run, saved)
    with pytest.raises(ValueError, match=r"--optimizer 'adam' \(checkpoint\) vs 'adamw'"):
        gs.train("gcn", g, epochs=3, checkpoint=ckpt, resume=True, progress=False, optimizer="adamw",
                 lr_schedule="cosine")


@pytest.mark.slow
def test_the_run_summary_and_advise_show_the_optimiser(tmp_path, capsys):
    """The printed summary names the optimiser and schedule; ``graphscale advise --optimizer sgd`` predicts with
    SGD's momentum state (less memory than Adam's two moments) and its ``run it`` line and JSON carry the option."""
    from graphscale.strategies.optimizers import describe

    assert describe(build_config({"optim": {"optimizer": "sgd", "lr": 0.1, "lr_schedule": "cosine",
                                            "epochs": 7}}).optim) == \
        "optimizer sgd (momentum 0.9), lr 0.1, cosine schedule over 7 epochs"
    assert describe(build_config({"optim": {"lr_schedule": "step", "lr_step_size": 3}}).optim) == \
        "optimizer adam, lr 0.01, step schedule (x0.1 every 3 epochs)"
    sbm = "sbm:nodes=60,degree=4,features=6,seed=1"
    assert main(["train", "--dataset", sbm, "--epochs", "2", "--optimizer", "adamw", "--no-progress"]) == 0
    assert "2 epochs, optimizer adamw, lr 0.01, metric: accuracy" in capsys.readouterr().out
    memory = {}
    for optimizer in ("adam", "sgd"):
        out = tmp_path / f"{optimizer}.json"
        assert main(["advise", "--dataset", sbm, "--workers", "2", "--synthetic-profile", "--cache-dir",
                     str(tmp_path / "cache"), "--optimizer", optimizer, "--json", str(out)]) == 0
        printed = capsys.readouterr().out
        assert ("--optimizer sgd" in printed) == (optimizer == "sgd")
        predictions = json.loads(out.read_text())["predictions"]
        memory[optimizer] = {p["strategy"]: p["memory"] for p in predictions}
        assert all(("--optimizer sgd" in p["command"]) == (optimizer == "sgd") for p in predictions)
    assert all(memory["sgd"][s] < memory["adam"][s] for s in memory["adam"] if memory["adam"][s])

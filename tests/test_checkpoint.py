"""Checkpoints: one per seed with --repeat, the recorded configuration checked before a resume (model, data,
optimiser; exact strategies resume each other's), damaged files named in one line, strict JSON reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import graphscale.run
from graphscale.checkpoint import check_resume, read_checkpoint, seed_path
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.run import run


def cora(epochs, seed=0, **strategy):
    return build_config({"optim": {"epochs": epochs}, "seed": seed, "strategy": strategy, "progress": False})


def _refuse_constant(token: str):
    raise ValueError(f"not strict JSON: {token}")


def test_seed_path_puts_the_seed_before_the_extension():
    assert seed_path("runs/ckpt.pt", 3) == "runs/ckpt.seed3.pt"
    assert seed_path("ckpt", 0) == "ckpt.seed0"


def test_repeat_keeps_one_checkpoint_per_seed_and_resumes_each_from_its_own(tmp_path, capsys):
    ckpt, out = tmp_path / "ckpt.pt", tmp_path / "report.json"
    common = ["train", "--no-progress", "--repeat", "2", "--seed", "5", "--checkpoint", str(ckpt)]
    assert main([*common, "--epochs", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.seed5.pt", "ckpt.seed6.pt"]
    for seed in (5, 6):
        saved = read_checkpoint(tmp_path / f"ckpt.seed{seed}.pt")
        assert saved["identity"]["seed"] == seed and saved["epoch"] == 1
    assert main([*common, "--epochs", "4", "--resume", "--json", str(out)]) == 0
    capsys.readouterr()
    runs = json.loads(out.read_text(), parse_constant=_refuse_constant)["runs"]
    for seed, resumed in zip((5, 6), runs):
        straight = run(cora(4, seed=seed))
        assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in straight["epochs"]]
        assert resumed["final"]["test_acc"] == straight["final"]["test_acc"]
    assert runs[0]["epochs"][0]["loss"] != runs[1]["epochs"][0]["loss"]  # two seeds, two runs


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A 2-epoch checkpoint of the default run (gcn on Cora, single, seed 0)."""
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.pt"
    config = cora(2)
    config.checkpoint = str(path)
    run(config)
    return path


@pytest.fixture
def nothing_starts(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the run went on although the checkpoint does not fit")

    monkeypatch.setattr(graphscale.run, "prepare_data", refuse)
    monkeypatch.setattr(graphscale.run, "launch", refuse)


@pytest.mark.parametrize("argv, message", [
    (["--hidden", "32"], "--hidden 16 (checkpoint) vs 32"),
    (["--dropout", "0.2"], "--dropout 0.5 (checkpoint) vs 0.2"),
    (["--lr", "0.05"], "--lr 0.01 (checkpoint) vs 0.05"),
    (["--weight-decay", "0"], "--weight-decay 0.0005 (checkpoint) vs 0.0"),
    (["--seed", "1"], "--seed 0 (checkpoint) vs 1"),
    (["--dtype", "float64"], "--dtype 'float32' (checkpoint) vs 'float64'"),
    (["--feature-norm", "none"], "--feature-norm 'auto' (checkpoint) vs 'none'"),
    (["--dataset", "sbm:nodes=300,classes=3,features=8"], "--dataset 'cora' (checkpoint) vs 'sbm:"),
    (["--model", "gat"], "--model 'gcn' (checkpoint) vs 'gat'; --hidden 16 (checkpoint) vs 8; --dropout"),
    (["--strategy", "model-averaging", "--workers", "2"],
     "--strategy 'single' (checkpoint) vs 'model-averaging' (only exact strategies"),
])
def test_resume_into_another_configuration_is_refused_before_anything_starts(checkpoint, nothing_starts, capsys,
                                                                             argv, message):
    assert main(["train", "--epochs", "4", "--no-progress", "--checkpoint", str(checkpoint), "--resume", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"checkpoint {checkpoint} was trained with another configuration" in err
    assert message in err


def test_resume_checks_the_graph_counts(checkpoint):
    config = cora(4)
    config.data.dataset, config.checkpoint = "cora", str(checkpoint)
    saved = read_checkpoint(checkpoint)
    check_resume(config, saved, {"nodes": 2708, "edges": 10556, "features": 1433, "classes": 7})
    with pytest.raises(ValueError, match=r"graph nodes 2708 \(checkpoint\) vs 2000; graph edges 10556"):
        check_resume(config, saved, {"nodes": 2000, "edges": 9000, "features": 1433, "classes": 7})


def test_an_exact_strategy_resumes_another_exact_strategys_checkpoint(tmp_path):
    """single for 2 epochs, then graph-parallel on 2 workers: the losses of a straight single run (float64)."""
    ckpt = str(tmp_path / "ckpt.pt")
    first = cora(2)
    first.dtype, first.checkpoint = "float64", ckpt
    run(first)
    second = cora(4, name="graph-parallel", workers=2, partitioner="random")
    second.dtype, second.checkpoint, second.resume = "float64", ckpt, True
    resumed = run(second)
    straight = cora(4)
    straight.dtype = "float64"
    expected = [e["loss"] for e in run(straight)["epochs"]]
    assert [e["loss"] for e in resumed["epochs"]] == pytest.approx(expected, rel=1e-10, abs=0)


@pytest.mark.parametrize("damage, message", [
    ("garbage", "cannot be read (damaged or not a graphscale checkpoint: "),
    ("truncated", "cannot be read (damaged or not a graphscale checkpoint: "),
    ("foreign", "is not a graphscale checkpoint of this version"),
])
def test_damaged_checkpoint_gives_one_line_naming_the_file(checkpoint, tmp_path, nothing_starts, capsys, damage,
                                                           message):
    bad = tmp_path / "bad.pt"
    if damage == "garbage":
        bad.write_bytes(b"this is not a checkpoint\n" * 10)
    elif damage == "truncated":
        data = checkpoint.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        torch.save({"model": {}}, bad)
    assert main(["train", "--epochs", "4", "--no-progress", "--checkpoint", str(bad), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--resume: checkpoint {bad} " in err and message in err


def test_repeat_resume_checks_every_seeds_checkpoint_before_the_first_run(checkpoint, tmp_path, nothing_starts,
                                                                          capsys):
    (tmp_path / "c.seed0.pt").write_bytes(checkpoint.read_bytes())  # seed 1's is missing
    argv = ["train", "--epochs", "4", "--no-progress", "--repeat", "2", "--checkpoint", str(tmp_path / "c.pt"),
            "--resume"]
    assert main(argv) == 2
    assert f"--resume: checkpoint {tmp_path / 'c.seed1.pt'} does not exist" in capsys.readouterr().err


def test_reports_hold_no_nan_tokens(tmp_path, capsys):
    """Undefined numbers (here: the scores of empty validation and test splits) are written as null, in a single
    and a combined --repeat report. (A diverging run no longer writes a report: it stops with an error.)"""
    from graphscale.testing.graphs import tiny_npz

    spec = f"npz:{tiny_npz(tmp_path / 'g.npz', [0, 1, 2], 15)}"
    for repeat in ("1", "2"):
        out = tmp_path / f"report{repeat}.json"
        assert main(["train", "--dataset", spec, "--epochs", "2", "--no-progress", "--repeat", repeat,
                     "--json", str(out)]) == 0
        text = out.read_text()
        assert "NaN" not in text and "Infinity" not in text
        report = json.loads(text, parse_constant=_refuse_constant)
        epochs = report["runs"][0]["epochs"] if repeat == "2" else report["epochs"]
        assert epochs[-1]["val_acc"] is None and epochs[-1]["test_acc"] is None
        if repeat == "2":
            assert report["test_acc_mean"] is None and report["test_acc_std"] is None
    capsys.readouterr()

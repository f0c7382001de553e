"""End to end: the trainer and the `graphscale train` command on the bundled Cora dataset."""

import json
import statistics

import pytest
import torch

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.run import run


def cora(model="gcn", epochs=200, seed=0, **strategy):
    return build_config({"model": {"name": model}, "optim": {"epochs": epochs}, "seed": seed,
                         "strategy": strategy, "progress": False})


@pytest.fixture
def one_thread():
    """Cora is too small to gain from threads; one thread keeps these long tests steady on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("model, bar", [("gcn", 0.80), ("gat", 0.81)])
def test_cora_accuracy_over_5_seeds(model, bar, one_thread):
    """The issue's bars: GCN >= 80%, GAT >= 81% test accuracy on Cora (at the best validation epoch), averaged over
    5 seeds, reached in 100 epochs (half the default 200: the suite's longest test otherwise).

    Measured (seeds 0-9, one thread; an epoch-E run is the first E epochs of the 200-epoch run, so both columns
    come from the same runs): GCN, 100 epochs: 0.811 0.815 0.831 0.818 0.811 0.823 0.798 0.818 0.819 0.811, mean
    of seeds 0-4 0.817, of any 5 consecutive seeds at least 0.814 (200 epochs: 0.819 and 0.816). GAT, 100 epochs:
    0.837 0.820 0.831 0.814 0.825 0.814 0.806 0.815 0.817 0.820, mean of seeds 0-4 0.825, of any 5 consecutive
    seeds at least 0.814 (200 epochs: 0.833 and 0.822). The bars stay the issue's (at 50 epochs GCN's would fail:
    0.772 over seeds 0-4)."""
    accs = [run(cora(model, epochs=100, seed=s))["final"]["test_acc"] for s in range(5)]
    assert statistics.mean(accs) >= bar, accs


def test_minibatch_sage_learns_cora():
    report = run(cora("sage", epochs=15, minibatch=True, fanouts=[10, 10], batch_size=32))
    assert report["final"]["test_acc"] >= 0.70
    losses = [e["loss"] for e in report["epochs"]]
    assert losses[-1] < losses[0]


def test_resume_continues_exactly(tmp_path):
    ckpt = str(tmp_path / "ckpt.pt")
    straight = run(cora("gcn", epochs=6))
    first = cora("gcn", epochs=3)
    first.checkpoint = ckpt
    run(first)
    second = cora("gcn", epochs=6)
    second.checkpoint, second.resume = ckpt, True
    resumed = run(second)
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in straight["epochs"]]
    for key in ("best_epoch", "val_acc", "test_acc"):
        assert resumed["final"][key] == straight["final"][key]


def _refuse(token: str):
    raise ValueError(f"not strict JSON: {token}")


def test_cli_train_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["train", "--epochs", "5", "--no-progress", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "test acc" in printed and "cora" in printed and "final loss" in printed
    report = json.loads(out.read_text(), parse_constant=_refuse)
    assert f"{report['epochs'][-1]['loss']:.3f}" in printed  # the final-loss column
    assert len(report["epochs"]) == 5
    epoch = report["epochs"][0]
    for key in ("loss", "train_acc", "val_acc", "test_acc", "seconds", "bytes", "peak_memory_per_worker"):
        assert key in epoch
    assert epoch["peak_memory_per_worker"][0] > 0
    assert 0 <= report["final"]["test_acc"] <= 1 and report["final"]["best_epoch"] >= 0


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "nosuch"], "nosuch"),
    (["--model", "transformer"], "unknown model 'transformer'"),
    (["--strategy", "magic"], "unknown strategy 'magic'"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--strategy", "graph-parallel", "--minibatch"], "--minibatch is not used by strategy 'graph-parallel'"),
])
def test_cli_bad_options_give_clear_errors(argv, message, capsys):
    assert main(["train", "--epochs", "1", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1

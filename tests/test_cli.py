"""The `graphscale` command line: one-line errors before anything starts, help that explains every option,
negative fanouts, progress when redirected, wrapped dataset lines, a light `info`."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import graphscale.run
from graphscale.cli import TRAIN_OPTIONS, add_train_arguments, build_parser, main
from graphscale.config import build_config
from graphscale.distributed.launch import cpu_count
from graphscale.progress import EpochProgress
from graphscale.registry import MODELS, PARTITIONERS, STRATEGIES
from graphscale.testing.graphs import tiny_npz
from graphscale.validation import validate


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test if a run gets as far as loading data or starting a worker."""
    def refuse(*args, **kwargs):
        raise AssertionError("the run started although its options are bad")

    monkeypatch.setattr(graphscale.run, "prepare_data", refuse)
    monkeypatch.setattr(graphscale.run, "launch", refuse)


def bad_cases(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    return {
        "unused option": (["--chunks", "4", "--strategy", "single"], "--chunks is not used by strategy 'single'"),
        "chunks": (["--strategy", "offload", "--workers", "2", "--chunks", "0"], "--chunks must be >= 1, got 0"),
        "cache fraction": (["--strategy", "data-parallel", "--workers", "2", "--cache", "pagraph",
                            "--cache-fraction", "2"], r"--cache-fraction must lie in [0, 1], got 2.0"),
        "partitioner": (["--strategy", "graph-parallel", "--workers", "2", "--partitioner", "foo"],
                        "unknown partitioner 'foo'; choose one of: 2ps-l"),
        "partitioner option": (["--strategy", "graph-parallel", "--workers", "2", "--partitioner", "metis:foo=1"],
                               "metis has no option foo"),
        "balance": (["--strategy", "graph-parallel", "--workers", "2", "--partitioner", "random", "--balance", "edges"],
                    "random has no option balance"),
        "memory budget": (["--strategy", "offload", "--workers", "2", "--memory-budget", "lots"],
                          "--memory-budget: cannot parse 'lots'"),
        "single worker": (["--workers", "2"], "strategy 'single' runs on one worker, got --workers 2"),
        "cores": (["--strategy", "graph-parallel", "--workers", str(cpu_count() + 1)],
                  f"--workers {cpu_count() + 1} exceeds the {cpu_count()} CPU core(s) available"),
        "fanouts per layer": (["--model", "gcnii", "--strategy", "data-parallel", "--workers", "2"],
                              "--fanouts gives 2 value(s) but model 'gcnii' has 16 layers"),
        "fanout value": (["--minibatch", "--fanouts", "0,5"], "--fanouts value 0 must be a positive integer or -1"),
        "batch size": (["--minibatch", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        "lr": (["--lr", "0"], "--lr must be > 0"),
        "weight decay": (["--weight-decay", "-1"], "--weight-decay must be >= 0"),
        "dropout": (["--dropout", "1.5"], r"--dropout must be in [0, 1)"),
        "hidden": (["--hidden", "0"], "--hidden must be >= 1"),
        "heads": (["--model", "gat", "--heads", "0"], "--heads must be >= 1"),
        "alpha": (["--model", "gcnii", "--alpha", "2"], r"--alpha must lie in [0, 1]"),
        "seed": (["--seed", "-1"], "--seed must be >= 0"),
        "epochs": (["--epochs", "0"], "--epochs must be >= 1"),
        "json dir": (["--json", str(tmp_path / "missing" / "r.json")],
                     f"--json {tmp_path / 'missing' / 'r.json'}: directory {tmp_path / 'missing'} does not exist"),
        "json is dir": (["--json", str(tmp_path)], f"--json {tmp_path} is a directory"),
        "checkpoint dir": (["--checkpoint", str(blocker / "ckpt.pt")], f"directory {blocker} does not exist"),
        "resume": (["--checkpoint", str(tmp_path / "none.pt"), "--resume"],
                   f"--resume: checkpoint {tmp_path / 'none.pt'} does not exist"),
    }


CASES = ["unused option", "chunks", "cache fraction", "partitioner", "partitioner option", "balance", "memory budget",
         "single worker", "cores", "fanouts per layer", "fanout value", "batch size", "lr", "weight decay", "dropout",
         "hidden", "heads", "alpha", "seed", "epochs", "json dir", "json is dir", "checkpoint dir", "resume"]


@pytest.mark.parametrize("case", CASES)
def test_bad_options_are_one_line_exit_2_before_anything_starts(case, tmp_path, capsys, nothing_starts):
    argv, message = bad_cases(tmp_path)[case]
    assert main(["train", "--epochs", "1", "--no-progress", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("graphscale: error: ")
    assert message in captured.err
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # no directory or file was created


def test_bad_toml_values_are_checked_too(tmp_path, capsys, nothing_starts):
    toml = tmp_path / "run.toml"
    toml.write_text('dtype = "float16"\n')
    assert main(["train", "--config", str(toml)]) == 2
    assert "--dtype must be one of float32, float64, got 'float16'" in capsys.readouterr().err
    toml.write_text('[strategy]\nname = "offload"\nrecompute = "sometimes"\n')
    assert main(["train", "--config", str(toml), "--workers", "2"]) == 2
    assert "--recompute must be one of auto, hybrid, recompute, none" in capsys.readouterr().err


def test_oversubscribe_allows_more_workers_than_cores():
    config = build_config({"strategy": {"name": "graph-parallel", "workers": cpu_count() + 1}, "oversubscribe": True})
    validate(config)  # no error
    args = build_parser().parse_args(["train", "--oversubscribe"])
    assert args.oversubscribe is True


@pytest.mark.parametrize("argv", [["--fanouts", "-1,5"], ["--fanouts=-1,5"], ["--minibatch", "--fanouts", "-1,5"]])
def test_negative_fanouts_parse(argv):
    assert build_parser().parse_args(["train", *argv]).fanouts == [-1, 5]


def test_minibatch_run_with_all_neighbours_and_progress_lines(capsys):
    """``--fanouts -1,5`` end to end; stderr is not a terminal here, so progress is one line per epoch of 3."""
    assert main(["train", "--epochs", "3", "--minibatch", "--fanouts", "-1,5", "--batch-size", "256",
                 "--progress"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    # a mini-batch run reads a graph directory, which its first run writes (setup lines, then one line per epoch)
    lines = [line for line in lines if not line.startswith("graphscale: setup:")]
    assert [line.split(":")[0] for line in lines] == [f"single/gcn epoch {e}/3" for e in (1, 2, 3)]
    assert all("loss" in line and "val" in line and "s/epoch" in line for line in lines)


def test_progress_lines_when_redirected_and_a_bar_on_a_terminal():
    out = io.StringIO()
    progress = EpochProgress(0, 25, "single/gcn", stream=out)
    for epoch in range(25):
        progress.update(epoch, 1.0 / (epoch + 1), 0.5, 0.5)
    progress.close()
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == \
        [f"single/gcn epoch {e}/25" for e in (3, 6, 9, 12, 15, 18, 21, 24, 25)]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    progress = EpochProgress(0, 4, "single/gcn", stream=term)
    assert progress.bar is not None
    for epoch in range(4):
        progress.update(epoch, 0.5, 0.5, 0.5)
    progress.close()
    assert "4/4" in term.getvalue() and "\r" in term.getvalue()
    silent = io.StringIO()
    EpochProgress(0, 4, "x", enabled=False, stream=silent).update(3, 0.1, 0.2, 0.3)
    assert silent.getvalue() == ""


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # unwrapped


def test_train_help_explains_every_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = _help(["train", "--help"], capsys)
    for name in STRATEGIES.names() + MODELS.names() + PARTITIONERS.names():
        assert name in text, name

    class Recorder(argparse.ArgumentParser):
        def __init__(self) -> None:
            self.recorded: list[argparse.Action] = []
            super().__init__(add_help=False)

        def add_argument(self, *args, **kwargs):
            self.recorded.append(super().add_argument(*args, **kwargs))
            return self.recorded[-1]

    train = Recorder()
    add_train_arguments(train)
    for action in train.recorded:
        assert action.help, f"{action.option_strings} has no description"
        assert action.option_strings[0] in text
    for snippet in ("--lr LR learning rate (with --lr-schedule: the first epoch's) (default: 0.01 (gat 0.005, resgcn 0.005))",
                    "--epochs EPOCHS training epochs", "(default: 200)", "--dropout DROPOUT dropout probability",
                    "--seed SEED seed of", "--batch-size BATCH_SIZE training vertices per mini-batch",
                    "--weight-decay WEIGHT_DECAY weight decay: an L2 penalty added to the gradient",
                    "(read by offload, pipeline, task-parallel)", "(read by pipeline; default: 10)",
                    "read by data-parallel, model-averaging, single, split-parallel; default: 10,10", "(read by gat; default: 8)",
                    ("one of: data-parallel, graph-parallel, model-averaging, offload, pipeline, single, "
                     "split-parallel, task-parallel; default: single"),
                    "(read by gat, gcn; default: auto)",
                    "--progress, --no-progress", "--oversubscribe"):
        assert snippet in text, snippet
    assert sorted(a.dest for a in train.recorded if a.dest in TRAIN_OPTIONS) == sorted(TRAIN_OPTIONS)


def test_partition_help_lists_every_partitioner(capsys):
    text = _help(["partition", "--help"], capsys)
    assert f"one of: {', '.join(PARTITIONERS.names())}" in text


def test_datasets_lines_fit_the_terminal(capsys, monkeypatch):
    for columns in (100, 70):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert main(["datasets"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert max(len(line) for line in lines) <= columns and any("planetoid:DIR" in line for line in lines)
        assert "rest test" in " ".join(" ".join(lines).split())  # wrapped, not cut


def _info_in_subprocess(*argv: str) -> tuple[str, list[str]]:
    """What ``graphscale info ARGV`` prints, and which of torch / torch_geometric / numba it imported."""
    code = ("import sys, contextlib, io, json\nfrom graphscale.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as out: main(['info', *{list(argv)!r}])\n"
            "print(json.dumps([out.getvalue(), [m for m in ('torch', 'torch_geometric', 'numba') if m in sys.modules]]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    printed, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    return printed, imported


def test_info_reads_versions_without_importing_the_packages():
    """On a CPU build `info` imports none of torch, torch_geometric, numba (torch alone takes 1.5-2 s here): the
    versions come from package metadata and torch/version.py, and no bench module is imported to build the parser."""
    import torch

    printed, imported = _info_in_subprocess()
    assert imported == []
    assert torch.__version__ in printed and "torch_geometric" in printed and "strategies" in printed
    assert ("CPU only" if torch.version.cuda is None else f"cuda {torch.version.cuda}") in printed
    printed, imported = _info_in_subprocess("--devices")
    assert imported == ["torch"]
    assert re.search(r"torch threads +[1-9]", printed) and "gloo available" in printed


# ------------------------------------------------------------------ issue 29: nothing a user types destroys files
SAFETY_CASES = {
    "lr inf": (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    "lr nan": (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    "weight decay inf": (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0, got inf"),
    "timeout inf": (["--timeout", "inf"], "--timeout must be a finite number > 0, got inf"),
    "timeout too short": (["--timeout", "0.05"], "--timeout must be at least 1 second(s)"),
    "timeout too long": (["--timeout", "1e12"], "--timeout must be at most 31536000 seconds"),
    "partitioner option type": (["--strategy", "graph-parallel", "--workers", "2", "--partitioner",
                                 "metis:ufactor=abc"], "metis option ufactor must be an integer, got 'abc'"),
    "shm dir": (["--strategy", "offload", "--workers", "2", "--shm-dir", "/nonexistent"],
                "--shm-dir /nonexistent is not a writable directory"),
}


@pytest.mark.parametrize("case", sorted(SAFETY_CASES))
def test_non_finite_and_mistyped_values_are_refused_up_front(case, tmp_path, capsys, nothing_starts):
    argv, message = SAFETY_CASES[case]
    assert main(["train", "--epochs", "1", "--no-progress", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("graphscale: error: ")
    assert message in captured.err, captured.err
    assert list(tmp_path.iterdir()) == []


def _refused(argv, capsys, message) -> str:
    assert main(["train", "--epochs", "1", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphscale: error: ") and message in err, err
    return err


def test_outputs_never_overwrite_each_other_or_an_input(tmp_path, capsys, nothing_starts):
    """``--json`` at the checkpoint's path, inside a partition store, at the dataset file or the TOML file, inside
    the cache's stores or the TensorBoard directory: refused before anything runs, the inputs untouched."""
    same = tmp_path / "same.out"
    _refused(["--json", str(same), "--checkpoint", str(same)], capsys,
             f"--json and --checkpoint name the same path {same}")
    assert not same.exists()
    store = tmp_path / "ps"
    store.mkdir()
    (store / "meta.json").write_text('{"format": "graphscale-partitions"}')
    _refused(["--strategy", "graph-parallel", "--workers", "2", "--partitions", str(store),
              "--json", str(store / "meta.json")], capsys,
             f"--json {store / 'meta.json'} lies inside --partitions {store}")
    assert (store / "meta.json").read_text() == '{"format": "graphscale-partitions"}'
    data = tmp_path / "g.npz"
    data.write_bytes(b"PK\x03\x04 not read")
    _refused(["--dataset", f"npz:{data}", "--checkpoint", str(data)], capsys,
             f"--checkpoint {data} is the --dataset input the run reads")
    assert data.read_bytes() == b"PK\x03\x04 not read"
    toml = tmp_path / "run.toml"
    toml.write_text("seed = 1\n")
    _refused(["--config", str(toml), "--json", str(toml)], capsys, f"--json {toml} is the --config input")
    assert toml.read_text() == "seed = 1\n"
    cache = tmp_path / "cache"
    _refused(["--cache-dir", str(cache), "--json", str(cache / "stores" / "r.json")], capsys,
             "lies inside --cache-dir (its partition stores)")
    _refused(["--tensorboard", str(tmp_path / "tb"), "--json", str(tmp_path / "tb" / "r.json")], capsys,
             f"--json {tmp_path / 'tb' / 'r.json'} lies inside the --tensorboard directory")
    _refused(["--repeat", "2", "--checkpoint", str(tmp_path / "c.pt"), "--json", str(tmp_path / "c.seed1.pt")],
             capsys, "name the same path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "ps", "run.toml"]


def test_missing_output_directories_are_refused_alike(tmp_path, capsys, nothing_starts):
    """One policy: an output file or directory is created, the directories above it never (--cache-dir as --json)."""
    _refused(["--cache-dir", str(tmp_path / "no" / "cache")], capsys,
             f"--cache-dir {tmp_path / 'no' / 'cache'}: directory {tmp_path / 'no'} does not exist")
    assert list(tmp_path.iterdir()) == []


def test_config_that_is_a_directory_or_binary_is_one_line(tmp_path, capsys, nothing_starts):
    _refused(["--config", str(tmp_path)], capsys, f"--config {tmp_path} is a directory; give a TOML file")
    binary = tmp_path / "run.toml"
    binary.write_bytes(b"\x00\xff\xfe\x01")
    _refused(["--config", str(binary)], capsys, f"--config: {binary} is not a TOML file (not UTF-8 text")


def test_empty_fanout_fields_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--minibatch", "--fanouts", "10,,10"])
    assert info.value.code == 2
    assert "expected comma-separated integers, got '10,,10' (an empty field)" in capsys.readouterr().err


def test_version(capsys):
    from graphscale import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"graphscale {__version__}\n"


def test_parts_beyond_the_vertices_names_the_option(capsys, tmp_path):
    assert main(["train", "--strategy", "model-averaging", "--workers", "2", "--parts", "100000", "--epochs", "1",
                 "--no-progress", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "100000 parts (--parts, or --workers when --parts is not given) exceed the 2,708 "\
        "vertices of cora" in err and "num_parts" not in err


def test_store_with_out_of_range_neighbour_ids_is_refused_before_workers_start(tmp_path, capsys):
    import numpy as np

    store = tmp_path / "ps"
    assert main(["partition", "--dataset", "cora", "--method", "random", "--parts", "2", "--out", str(store)]) == 0
    capsys.readouterr()
    indices = np.load(store / "part-00001" / "indices.npy")
    indices[7] = 10 ** 6
    np.save(store / "part-00001" / "indices.npy", indices)

    def refuse(*args, **kwargs):
        raise AssertionError("workers started on a damaged store")

    for strategy in ("graph-parallel", "model-averaging"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(graphscale.run, "launch", refuse)
            assert main(["train", "--strategy", strategy, "--workers", "2", "--partitions", str(store),
                         "--epochs", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"partition store {store}, part 1: neighbour id 1000000 at edge 7 of indices.npy is out of range" in err


def _fails_on_rank1(env, *args):
    import torch.distributed as dist

    if env.rank == 1:
        raise IndexError("index 99 is out of bounds for dimension 0 with size 3")
    dist.barrier()  # fails (connection closed) or is stopped once rank 1 is gone
    return {}


def _reset_first_then_the_cause(env, *args):
    import time

    if env.rank == 0:  # a consequence reported first: the launcher must wait for the cause
        raise RuntimeError("[gloo] Read error: Connection reset by peer")
    time.sleep(1.0)
    raise ValueError("--frobnicate must be positive, got -1 (the primary failure)")


@pytest.mark.spawn
@pytest.mark.parametrize("body, expected", [
    (_fails_on_rank1, "worker 1: IndexError: index 99 is out of bounds for dimension 0 with size 3 (at test_cli.py:"),
    (_reset_first_then_the_cause, ("worker 1: --frobnicate must be positive, got -1 (the primary failure); 1 other "
                                  "worker(s) failed after it as a consequence")),
])
def test_a_worker_error_is_one_line_naming_the_primary_failure(body, expected, capsys, monkeypatch):
    """A worker's exception reaches the user as one ``graphscale: error:`` line (traceback in a log file, or
    printed with --debug); a connection reset that only follows from a peer's failure is not the reported cause."""
    from graphscale.distributed import launch as launch_module

    def workers_that_fail(fn, world_size, *args, **kwargs):
        return launch_module.launch(body, 2, device="cpu", timeout_s=30)

    monkeypatch.setattr(graphscale.run, "launch", workers_that_fail)
    argv = ["train", "--strategy", "graph-parallel", "--workers", "2", "--epochs", "1", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphscale: error: ") and expected in err, err
    log = re.search(r"traceback in (\S+); --debug prints it\)$", err.strip()).group(1)
    assert "Traceback (most recent call last)" in Path(log).read_text()
    import os

    os.unlink(log)
    assert main(["--debug", *argv]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("graphscale: error:")


def test_out_of_memory_is_one_line(capsys):
    assert main(["train", "--hidden", "100000000000", "--epochs", "1", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graphscale: error: out of memory (an allocation of" in err
    assert "--hidden" in err
    log = re.search(r"traceback in (\S+); --debug prints it\)$", err.strip()).group(1)
    assert "Traceback (most recent call last)" in Path(log).read_text()
    import os

    os.unlink(log)


def test_diverging_training_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    import torch

    ckpt, report = tmp_path / "c.pt", tmp_path / "r.json"
    assert main(["train", "--lr", "1e30", "--epochs", "6", "--no-progress", "--checkpoint", str(ckpt),
                 "--json", str(report)]) == 1
    err = capsys.readouterr().err
    found = re.fullmatch(r"graphscale: error: training diverged at epoch (\d+): the training loss is nan \(likely "
                         r"causes: too large a learning rate, --lr 1e\+30, .*\); checkpoint \S+ keeps epoch (\d+)\n",
                         err)
    assert found, err
    diverged, kept = int(found.group(1)), int(found.group(2))
    assert kept == diverged - 1 and torch.load(ckpt, weights_only=False)["epoch"] == kept - 1  # 0-based in the file
    assert not report.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_empty_splits_are_reported_as_missing_not_as_numbers(tmp_path, capsys):
    """Classes of 15 vertices are all training vertices (20 per class): no validation or test split. The report
    says null, the table '-', warnings name the splits, the best epoch is chosen by the training loss."""
    spec = f"npz:{tiny_npz(tmp_path / 'g.npz', [0, 1, 2], 15)}"
    out = tmp_path / "r.json"
    assert main(["train", "--dataset", spec, "--epochs", "4", "--no-progress", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(out.read_text())
    final = report["final"]
    assert final["val_acc"] is None and final["test_acc"] is None and final["best_by"] == "train_loss"
    losses = [e["loss"] for e in report["epochs"]]
    assert final["best_epoch"] == losses.index(min(losses))
    assert "graphscale: warning: the validation split is empty" in captured.err
    assert "graphscale: warning: the test split is empty" in captured.err
    assert "nan" not in captured.out and "-1.0" not in captured.out
    assert "no test accuracy: the test split is empty" in captured.out
    row = captured.out.splitlines()[3].split()
    assert row[3:5] == ["-", "-"]  # val acc, test acc


def test_resume_at_or_below_the_checkpoint_epoch_says_so(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    assert main(["train", "--epochs", "3", "--no-progress", "--checkpoint", str(ckpt)]) == 0
    capsys.readouterr()
    for epochs, header in (("3", ", 3 epochs, "), ("2", ", 3 epochs (the checkpoint's; --epochs 2), ")):
        out = tmp_path / f"r{epochs}.json"
        assert main(["train", "--epochs", epochs, "--no-progress", "--checkpoint", str(ckpt), "--resume",
                     "--json", str(out)]) == 0
        captured = capsys.readouterr()
        assert (f"graphscale: notice: checkpoint {ckpt} has trained 3 epoch(s) and --epochs is {epochs} (the total, "
                "not more epochs): nothing to train") in captured.err
        assert header in captured.out.splitlines()[0]
        assert len(json.loads(out.read_text())["epochs"]) == 3


def test_labels_are_never_misread(tmp_path, capsys):
    """A numeric first line of a labels file is data (an error with its line, not a skipped header); class ids
    with gaps are renumbered (class names kept), never trained as empty classes."""
    from graphscale.data.datasets import load_dataset

    edges, labels = tmp_path / "e.txt", tmp_path / "l.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    labels.write_text("0 1.5\n1 0\n2 1\n")
    with pytest.raises(ValueError, match=r"l.txt, line 1: expected two integers \(node ids and labels\), got '0 1.5'"):
        load_dataset(f"edgelist:{edges}:{labels}")
    labels.write_text("node label\n0 1\n1 0\n2 1\n")  # a real header is still skipped
    assert load_dataset(f"edgelist:{edges}:{labels}").num_classes == 2
    graph = load_dataset(f"npz:{tiny_npz(tmp_path / 'gaps.npz', [0, 1, 2, 3, 7], 4)}")
    assert graph.meta["num_classes"] == 5 and graph.meta["class_names"] == ["0", "1", "2", "3", "7"]
    assert sorted(graph.y.unique().tolist()) == [0, 1, 2, 3, 4]


def _multilabel_sbm(path, n=600, classes=12, seed=0):
    """A seeded multi-label SBM in a BlogCatalog-like .mat: ``classes`` communities (mean degree about 13), every
    vertex labelled with its community plus rare extra labels (about 1.3 labels per vertex), no features."""
    import numpy as np
    import scipy.io
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    community = rng.integers(0, classes, n)
    same = community[:, None] == community[None, :]
    src, dst = np.nonzero(np.triu(rng.random((n, n)) < np.where(same, 12 * classes / n, 1.5 / n), 1))
    network = sp.csc_matrix((np.ones(2 * src.size), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    group = np.zeros((n, classes))
    group[np.arange(n), community] = 1
    group[rng.random((n, classes)) < 0.4 / classes] = 1
    scipy.io.savemat(path, {"network": network, "group": sp.csc_matrix(group)})
    return path


#: how far micro-F1 on the multi-label SBM must beat the label-frequency baseline
MULTILABEL_MARGIN = 0.3


def test_multilabel_training_beats_the_label_frequency_baseline(tmp_path, capsys):
    """Rare labels drive BCE to all-negative logits; predicting each vertex's top class too keeps micro-F1 from
    collapsing to 0 (main predicted only positive logits: 0.21 here, the model had learned nothing usable)."""
    from graphscale.data.datasets import load_dataset, with_training_split

    spec = f"mat:{_multilabel_sbm(tmp_path / 'sbm.mat')}"
    out = tmp_path / "r.json"
    assert main(["train", "--dataset", spec, "--features", "learnable:32", "--epochs", "60", "--no-progress",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    graph = with_training_split(load_dataset(spec))
    y, train, test = graph.y.double(), graph.train_mask, graph.test_mask
    frequent = int(y[train].sum(0).argmax())  # the label-frequency baseline: the most frequent class for all
    tp = float(y[test][:, frequent].sum())
    baseline = 2 * tp / (2 * tp + (int(test.sum()) - tp) + (float(y[test].sum()) - tp))
    assert report["final"]["test_acc"] >= baseline + MULTILABEL_MARGIN, (report["final"], baseline)
    assert report["final"]["best_epoch"] > 0 and not report["warnings"]


def test_temporary_directories_of_dead_writers_are_removed_by_the_next_writer(tmp_path):
    """A writer SIGKILLed while writing leaves its ``.NAME.tmp-HOST-PID-*`` sibling; the next writer of NAME removes
    it (its PID is gone) and keeps a live writer's."""
    import os

    from graphscale.data.formats import _HOST, write_json_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)  # a process that has exited
    left = tmp_path / f".r.json.tmp-{_HOST}-{dead_pid}-0123abcd"
    left.mkdir()
    (left / "part").write_text("half written")
    live = tmp_path / f".r.json.tmp-{_HOST}-{os.getppid()}-0123abcd"
    live.write_text("a live writer's")
    write_json_atomic(tmp_path / "r.json", {"ok": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "r.json"])


def test_long_part_lists_are_shortened_and_metis_prints_nothing(capsys, tmp_path):
    import os

    from graphscale.partition.metis import c_stdout_captured
    from graphscale.training_store import short_list

    assert short_list(range(3)) == "[0, 1, 2]"
    assert short_list(range(800)) == "[0, 1, 2, 3, 4, 5, 6, 7, 8, ..., 799] (800 in all)"
    with c_stdout_captured() as captured:
        os.write(1, b"***Cannot bisect a graph with 0 vertices!\n")
    assert captured == ["***Cannot bisect a graph with 0 vertices!"]
    assert "Cannot bisect" not in capsys.readouterr().out


def test_setup_steps_print_progress_lines(tmp_path, capsys, monkeypatch):
    def stop(*args, **kwargs):
        raise KeyboardInterrupt  # the setup is what this test looks at

    monkeypatch.setattr(graphscale.run, "launch", stop)
    assert main(["train", "--strategy", "graph-parallel", "--workers", "2", "--epochs", "1", "--cache-dir",
                 str(tmp_path), "--partitioner", "random"]) == 130
    lines = capsys.readouterr().err.splitlines()
    assert lines[:6] == ["graphscale: setup: writing cora as a graph directory ...", lines[1],
                         "graphscale: setup: writing cora's training graph directory (features prepared) ...", lines[3],
                         ("graphscale: setup: partitioning 2,708 vertices into 2 parts (random) and writing the "
                         "partition store ..."), lines[5]]
    for i in (1, 3, 5):
        assert re.fullmatch(r"graphscale: setup: .*: done in \d+\.\d s", lines[i]), lines[i]


def test_train_help_shows_each_default_once(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.count("default") > 1]
    assert lines == [line for line in lines if line.lstrip().startswith("--chunks")], lines  # K has two defaults


def _marked_processes(marker: str) -> list[int]:
    """PIDs of this user's processes whose environment holds ``GRAPHSCALE_FAULT_MARK=marker``."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"GRAPHSCALE_FAULT_MARK={marker}".encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_killing_the_launcher_or_a_worker_at_seeded_points_leaves_nothing_behind(tmp_path):
    """Fault injection (seeded, 4 kills, about a minute): SIGKILL the launcher or a worker at a random moment of
    setup (store writing), training or checkpoint writing; afterwards no process of the run survives, its launch
    directory is gone, every output present is complete, and the next run removes the dead writers' temporaries."""
    import os
    import random
    import signal
    import time
    import uuid

    import torch

    rng = random.Random(29)
    marker = uuid.uuid4().hex
    out, cache, tmp = tmp_path / "out", tmp_path / "cache", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    argv = [sys.executable, "-m", "graphscale.cli", "train", "--strategy", "graph-parallel", "--workers", "2",
            "--epochs", "40", "--no-progress", "--checkpoint", str(out / "c.pt"), "--json", str(out / "r.json"),
            "--cache-dir", str(cache)]
    env = {**os.environ, "GRAPHSCALE_FAULT_MARK": marker, "TMPDIR": str(tmp)}

    def outputs_complete():
        if (out / "r.json").exists():
            json.loads((out / "r.json").read_text())
        if (out / "c.pt").exists():
            assert "identity" in torch.load(out / "c.pt", weights_only=False)

    for target in ("launcher", "worker", "launcher", "worker"):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(2.0, 7.0))
        if target == "launcher":
            proc.kill()
        else:
            workers = [pid for pid in _marked_processes(marker) if pid != proc.pid]
            if workers:
                os.kill(max(workers), signal.SIGKILL)  # the last started: a worker, else the janitor
        err = proc.communicate(timeout=120)[1]
        if target == "worker" and proc.returncode == 1:
            assert err.count("\n") == 1 and err.startswith("graphscale: error: worker"), err
        deadline = time.monotonic() + 15
        while _marked_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _marked_processes(marker) == []
        assert [p.name for p in tmp.iterdir() if p.name.startswith("graphscale-launch-")] == []
        outputs_complete()
    done = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outputs_complete()
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
    assert _marked_processes(marker) == []


def test_joining_the_group_names_the_timeout(tmp_path):
    """Rank 0 of 2 alone: init_process_group times out after --timeout; the error says so and names the option."""
    from datetime import timedelta

    from graphscale.distributed.launch import CollectiveTimeout, _join_group, summarize_exception

    with pytest.raises(CollectiveTimeout) as info:
        _join_group("gloo", 0, 2, timedelta(seconds=1), f"file://{tmp_path}/store")
    message = str(info.value)
    assert message.startswith("rank 0: the 2 workers did not all join the process group within the collective "
                              "timeout (1 s after ") and message.endswith("; --timeout raises it)")
    assert summarize_exception(info.value) == (message, False)  # a cause, never a consequence


def test_report_warnings_say_what_the_numbers_do_not():
    from graphscale.run import report_warnings

    nan = float("nan")
    flat = [{"epoch": e, "loss": 1.0, "val_acc": 0.5 - e / 100, "test_acc": 0.4, "train_acc": 0.0} for e in range(6)]
    warnings = report_warnings(flat, {"epoch": 0, "val_acc": 0.5, "by": "val_acc"}, "micro-f1")
    assert warnings == [("validation micro-f1 never improved after epoch 1 of 6 (last epoch: 0.4500): the reported "
                        "scores are those of a barely trained model; check --lr, --features and the labels"),
                        ("the model predicts no label for any training vertex at the last epoch (micro-f1 0): it has "
                        "collapsed to all-negative outputs")]
    improving = [{**e, "val_acc": 0.5 + e["epoch"] / 100, "train_acc": 0.6} for e in flat]
    assert report_warnings(improving, {"epoch": 5, "val_acc": 0.55, "by": "val_acc"}, "micro-f1") == []
    empty = [{**e, "val_acc": nan, "test_acc": nan} for e in improving]
    assert report_warnings(empty, {"epoch": 5, "val_acc": nan, "by": "train_loss"}, "accuracy") == [
        "the validation split is empty: no validation score; the best epoch is the one with the lowest training loss",
        "the test split is empty: no test score is reported"]


def test_resume_refusal_lists_only_real_differences():
    """A single checkpoint resumed as pipeline: the strategy is the difference, not pipeline's own options the
    checkpoint never recorded (listed first before, as '--chunks None (checkpoint) vs 4')."""
    from graphscale.checkpoint import check_resume, identity

    single = build_config({"data": {"dataset": "cora"}})
    saved = {"identity": identity(single), "graph": None}
    pipeline = build_config({"data": {"dataset": "cora"}, "strategy": {"name": "pipeline", "workers": 2}})
    with pytest.raises(ValueError) as info:
        check_resume(pipeline, saved)
    message = str(info.value)
    assert "another configuration: --strategy 'single' (checkpoint) vs 'pipeline' (only exact strategies resume " \
           "each other's checkpoints); resume with" in message
    assert "None (checkpoint)" not in message

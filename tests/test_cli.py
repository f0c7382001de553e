"""The `graphscale` command line: one-line errors before anything starts, help that explains every option,
negative fanouts, progress when redirected, wrapped dataset lines, a light `info`."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys

import pytest

import graphscale.run
from graphscale.cli import TRAIN_OPTIONS, add_train_arguments, build_parser, main
from graphscale.config import build_config
from graphscale.distributed.launch import cpu_count
from graphscale.progress import EpochProgress
from graphscale.registry import MODELS, PARTITIONERS, STRATEGIES
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
        "dropout": (["--dropout", "1.5"], r"--dropout must lie in [0, 1]"),
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
    for snippet in ("--lr LR Adam learning rate (default: 0.01 (gat 0.005, resgcn 0.005))",
                    "--epochs EPOCHS training epochs", "(default: 200)", "--dropout DROPOUT dropout probability",
                    "--seed SEED seed of", "--batch-size BATCH_SIZE training vertices per mini-batch",
                    "--weight-decay WEIGHT_DECAY Adam weight decay", "(read by offload, pipeline, task-parallel)", "(read by pipeline; default: 10)",
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

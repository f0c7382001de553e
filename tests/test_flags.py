"""Every subcommand's flag that is a declared option's is made from the declaration (:mod:`graphscale.flags`).

The built ``graphscale`` parser (every bench included) is walked: an action whose option string is a declared
option's flag (``--no-X`` of a toggle included) must come from :func:`~graphscale.flags.add_declared`, with the
declaration's dest, type, choices and help, or from :func:`~graphscale.flags.add_own`, listed in :data:`OWN` with
how it differs.
"""

from __future__ import annotations

import argparse

import pytest

from graphscale.cli import Parser, build_parser
from graphscale.flags import (
    NOT_GIVEN,
    add_declared,
    add_own,
    declaration,
    declared_default,
    declared_flags,
    value_kwargs,
)
from graphscale.options import int_list, integer

#: (command, flag) -> why the command's flag of a declared option's name is its own (the reply lists these)
OWN = {
    ("info", "--dataset"): "selects what info prints",
    ("partition", "--workers"): "workers the store is sized for, no processes",
    ("advise", "--device"): "a concrete device, no auto",
    ("bench peers", "--allocator"): "also tcmalloc / jemalloc",
    ("bench device", "--device"): "cuda:i",
    ("bench offload", "--device"): "cuda:i",
    ("bench offload", "--parts"): "HongTu subgraph counts of a closed form",
    ("bench partition", "--parts"): "partition counts a partitioner is scored at",
    ("bench task", "--parts"): "partition counts of the replication table",
    ("bench task", "--features"): "an int feature width of generated graphs",
    ("bench sampler", "--epochs"): "sampling passes, no training",
    ("bench minibatch", "--epochs"): "sampled inputs, no training",
    ("bench scaling", "--epochs"): "timed epochs, no evaluation",
    ("bench memory", "--timeout"): "a run's time limit",
    ("bench scale", "--timeout"): "a step's time limit",
    ("bench scale", "--features"): "the generated graphs' feature width",
    ("bench averaging", "--timeout"): "a run's time limit",
    ("bench advise", "--timeout"): "a run's time limit",
    ("bench task", "--timeout"): "a run's time limit",
    ("bench link", "--timeout"): "a run's time limit",
}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(command words, parser)`` of ``parser`` and every subparser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, path + (name,))


def flag_problems(parser: argparse.ArgumentParser) -> tuple[list[str], set[tuple[str, str]]]:
    """The actions of ``parser`` (and its subparsers) with a declared option's flag that were not made from the
    declaration, or differ from it; and the ``(command, flag)`` of those made with ``add_own``."""
    flags = declared_flags()
    problems, own = [], set()
    for path, sub in commands(parser):
        command = " ".join(path)
        for action in sub._actions:
            for flag in (f for f in action.option_strings if f in flags):
                if getattr(action, "own_flag", None):
                    own.add((command, flag))
                    continue
                name = flags[flag]
                where = f"{command or 'graphscale'} {flag}"
                if getattr(action, "declared_option", None) != name:
                    problems.append(f"{where}: hand-written; make it with graphscale.flags.add_declared (or "
                                    "add_own where it means something else)")
                    continue
                spec = declaration(name)
                expected = value_kwargs(spec, action.grid)
                if action.dest != name:
                    problems.append(f"{where}: dest {action.dest!r}, declared {name!r}")
                if action.type is not expected.get("type"):
                    problems.append(f"{where}: type {action.type!r}, declared {expected.get('type')!r}")
                if tuple(action.choices or ()) != tuple(expected.get("choices") or ()):
                    problems.append(f"{where}: choices {action.choices!r}, declared {expected.get('choices')!r}")
                if not (action.help or "").startswith(spec.metadata["help"]):
                    problems.append(f"{where}: help {action.help!r} is not the declared help")
    return problems, own


def test_every_flag_of_a_declared_option_is_made_from_its_declaration():
    problems, own = flag_problems(build_parser())
    assert problems == []
    assert own == set(OWN), "own flags sharing a declared option's name changed: list them in OWN with the reason"


def test_the_check_reports_a_hand_written_flag_and_a_changed_one():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers().add_parser("cmd")
    sub.add_argument("--hidden", type=int, default=128, help="hidden width")
    sub.add_argument("--no-shuffle", action="store_true")
    changed = add_declared(sub, "layers")
    changed.type = float
    add_declared(sub, "dropout").help = "another text"
    timeout = add_own(sub, "--timeout", type=float, help="seconds per run", differs="not the collective timeout")
    assert timeout.help == "seconds per run [unlike train's --timeout: not the collective timeout]"
    problems, own = flag_problems(parser)
    assert [p.split(":")[0] for p in problems] == ["cmd --hidden", "cmd --no-shuffle", "cmd --layers",
                                                   "cmd --dropout"]
    assert "hand-written" in problems[0] and "type" in problems[2] and "help" in problems[3]
    assert own == {("cmd", "--timeout")}


def test_a_declared_flag_takes_the_declaration():
    parser = argparse.ArgumentParser()
    hidden = add_declared(parser, "hidden")
    dtype = add_declared(parser, "dtype")
    fanouts = add_declared(parser, "fanouts")
    shuffle = add_declared(parser, "shuffle")
    assert hidden.default == declared_default(declaration("hidden")) == 16 and hidden.type is integer
    assert hidden.help == declaration("hidden").metadata["help"] + " (default: 16)"
    assert dtype.choices == ("float32", "float64") and fanouts.type is int_list and fanouts.default == [10, 10]
    assert shuffle.option_strings == ["--shuffle", "--no-shuffle"] and shuffle.default is True
    args = parser.parse_args(["--hidden", "8", "--dtype", "float64", "--fanouts", "5,3", "--no-shuffle"])
    assert (args.hidden, args.dtype, args.fanouts, args.shuffle) == (8, "float64", [5, 3], False)
    with pytest.raises(SystemExit):
        parser.parse_args(["--dtype", "float16"])


def test_a_command_default_needs_a_reason_and_shows_it():
    parser = argparse.ArgumentParser()
    with pytest.raises(ValueError, match=r"--hidden: the default 128 is not the declaration's \(16\); say why"):
        add_declared(parser, "hidden", default=128)
    action = add_declared(parser, "hidden", default=128, why="the paper's", note="here: of the GCN")
    assert action.help.endswith("; here: of the GCN (default 128: the paper's)")
    preset = add_declared(parser, "layers", default=None, why="the model's preset")
    assert preset.help.endswith("(default: the model's preset)") and preset.default is None
    assert add_declared(parser, "seed", default=0).help.endswith("(default: 0)")  # the declaration's: no reason
    given = add_declared(parser, "lr", default=NOT_GIVEN)
    assert given.default is None and given.help == declaration("lr").metadata["help"]


def test_grid_flags():
    parser = Parser()  # graphscale's parser: a comma list may start with -
    workers = add_declared(parser, "workers", grid=True, default=[1, 2], why="two cores")
    datasets = add_declared(parser, "dataset", grid=True, default=None, why="cora and an SBM")
    assert workers.type is int_list and workers.grid and "comma-separated" in workers.help
    assert datasets.help.endswith("repeat the flag (default: cora and an SBM)")
    args = parser.parse_args(["--workers", "1,2,4", "--dataset", "cora", "--dataset", "sbm:nodes=10"])
    assert args.workers == [1, 2, 4] and args.dataset == ["cora", "sbm:nodes=10"]
    assert parser.parse_args([]).workers == [1, 2] and parser.parse_args([]).dataset is None
    with pytest.raises(TypeError, match="no grid form"):
        add_declared(argparse.ArgumentParser(), "shuffle", grid=True)
    with pytest.raises(TypeError, match="no grid form"):
        add_declared(argparse.ArgumentParser(), "lr", grid=True)


def test_own_flags_and_unknown_names_are_refused_clearly():
    parser = argparse.ArgumentParser()
    with pytest.raises(ValueError, match="--timeout: say how it differs"):
        add_own(parser, "--timeout", type=float, differs="")
    with pytest.raises(ValueError, match="--plot is no declared option's flag"):
        add_own(parser, "--plot", differs="x")
    with pytest.raises(KeyError, match="no declared option has the flag --no-such"):
        add_declared(parser, "no_such")


@pytest.mark.parametrize("argv, expected", [
    (["partition", "--dataset", "cora", "--method", "metis", "--parts", "2", "--out", "o", "--no-progress"],
     {"progress": False, "parts": 2, "workers": None, "seed": 0, "halo_hops": 1, "json": None}),
    (["partition", "--dataset", "cora", "--method", "metis", "--workers", "2", "--device-memory", "1GiB",
      "--out", "o"], {"progress": True, "parts": None, "workers": 2, "device_memory": "1GiB"}),
    (["advise", "--device", "cuda", "--model", "sage", "--json", "p.json"],
     {"device": "cuda", "model": "sage", "json": "p.json", "workers": 2, "hidden": None, "dataset": ""}),
    (["bench", "sampler", "--fanouts", "-1,5", "--batch-size", "64"],
     {"fanouts": [-1, 5], "batch_size": 64, "epochs": 1, "dataset": "cora", "seed": 0}),
    (["bench", "averaging", "--parts", "2,4,8", "--workers", "1,2"],
     {"parts": [2, 4, 8], "workers": [1, 2], "correction_steps": [0, 1], "epochs": 200, "timeout": 900}),
    (["bench", "partition", "--dataset", "cora", "--dataset", "sbm:nodes=100", "--parts", "2,4"],
     {"dataset": ["cora", "sbm:nodes=100"], "parts": [2, 4], "seed": 0, "json": None}),
    (["bench", "scaling"], {"workers": [1, 2], "fanouts": [10, 10], "allocator": "", "hidden": None,
                            "dataset": "sbm:nodes=300000,degree=10,features=128"}),
    (["bench", "memory", "--device", "cpu"], {"device": "cpu", "workers": 4, "epochs": 2, "timeout": 900}),
    (["bench", "task", "--features", "64", "--chunks", "12"], {"features": 64, "chunks": 12, "workers": 4}),
])
def test_the_flags_commands_had_still_parse(argv, expected):
    args = build_parser(argv).parse_args(argv)
    assert {key: getattr(args, key) for key in expected} == expected


def test_every_command_prints_its_help():
    for path, parser in commands(build_parser()):
        text = parser.format_help()
        assert text.startswith("usage: graphscale"), path

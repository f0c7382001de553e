"""Each strategy declares its options (graphscale/options/); the config, the command line and the checks
read those declarations, and ``--chunks`` is an alias of the chosen strategy's own chunk count."""

from __future__ import annotations

import dataclasses
import re

import pytest

from graphscale.cli import TRAIN_OPTIONS, build_parser, main, overrides_from_args
from graphscale.config import StrategyConfig, build_config
from graphscale.options import declared, option_names
from graphscale.options.by_strategy import BY_STRATEGY
from graphscale.registry import STRATEGIES


def from_flags(*argv: str):
    return build_config(overrides_from_args(build_parser().parse_args(["train", *argv])))


def test_every_strategy_reads_what_it_declares():
    assert sorted(BY_STRATEGY) == STRATEGIES.names()
    for name, cls in BY_STRATEGY.items():
        assert STRATEGIES.get(name).options == option_names(cls), name


def test_a_name_has_one_declaration():
    """Two strategies read an option of one name only through one shared declaration (the same field)."""
    seen: dict[str, dataclasses.Field] = {}
    for cls in BY_STRATEGY.values():
        for f in dataclasses.fields(cls):
            assert seen.setdefault(f.name, f) is f, f"{f.name} is declared twice"
    assert {f.name for f in dataclasses.fields(StrategyConfig)} == {*seen, "name", "workers", "chunks", "timeout"}


def test_declarations_are_complete():
    for f in dataclasses.fields(StrategyConfig):
        assert f.metadata.get("help"), f"{f.name} has no help"
        choices = f.metadata.get("choices")
        if choices and f.default:
            assert f.default in choices, f.name
    flags = {dest for dest, (section, _) in TRAIN_OPTIONS.items() if section == "strategy"}
    assert {TRAIN_OPTIONS[d][1] for d in flags} == {f.name for f in dataclasses.fields(StrategyConfig)}


@pytest.mark.parametrize("strategy, own", [("offload", "chunks_per_part"), ("pipeline", "pipeline_chunks"),
                                           ("task-parallel", "task_chunks")])
def test_chunks_is_an_alias_of_the_strategy_own_count(strategy, own, tmp_path):
    extra = ["--workers", "2"]
    config = from_flags("--strategy", strategy, *extra, "--chunks", "3")
    assert (config.strategy.chunks, getattr(config.strategy, own)) == (3, 3)
    config = from_flags("--strategy", strategy, *extra, f"--{own.replace('_', '-')}", "5")
    assert (config.strategy.chunks, getattr(config.strategy, own)) == (5, 5)
    assert StrategyConfig(name=strategy, chunks=2).__dict__[own] == 2
    with pytest.raises(ValueError, match=f"--chunks 3 and --{own.replace('_', '-')} 4 disagree"):
        from_flags("--strategy", strategy, "--chunks", "3", f"--{own.replace('_', '-')}", "4")
    toml = tmp_path / "run.toml"
    toml.write_text(f'[strategy]\nname = "{strategy}"\n{own} = 6\n')
    assert build_config({}, toml).strategy.chunks == 6
    # the command line overrides the file's count under either name
    assert getattr(build_config({"strategy": {"chunks": 8}}, toml).strategy, own) == 8
    toml.write_text(f'[strategy]\nname = "{strategy}"\nchunks = 6\n')
    assert build_config({"strategy": {own: 7}}, toml).strategy.chunks == 7


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "offload", "--pipeline-chunks", "2"],
     "--pipeline-chunks is not used by strategy 'offload'; it is used by strategy pipeline"),
    (["--task-chunks", "2"], "--task-chunks is not used by strategy 'single'; it is used by strategy task-parallel"),
    (["--strategy", "offload", "--memory-budget", "1GiB", "--chunks-per-part", "2"],
     "--chunks-per-part is not used by strategy 'offload' with --memory-budget"),
])
def test_a_strategy_own_chunk_option_is_refused_elsewhere(argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        from_flags(*argv)


def test_chunks_errors_name_the_strategy_own_option(capsys, monkeypatch):
    import graphscale.run

    monkeypatch.setattr(graphscale.run, "launch", lambda *a, **k: pytest.fail("a worker started"))
    assert main(["train", "--strategy", "pipeline", "--workers", "2", "--pipeline-chunks", "0", "--no-progress"]) == 2
    assert ("--chunks must be >= 1, got 0 (--chunks is --pipeline-chunks for strategy 'pipeline')"
            in capsys.readouterr().err)


def test_declared_choices_are_checked_for_toml_values(tmp_path):
    from graphscale.validation import validate

    toml = tmp_path / "run.toml"
    toml.write_text('[strategy]\nname = "pipeline"\nworkers = 2\nhistory_grad = "diagonal"\n')
    with pytest.raises(ValueError, match="--history-grad must be one of zero, historical, got 'diagonal'"):
        validate(build_config({}, toml))


def test_help_has_one_group_per_strategy(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for name, cls in BY_STRATEGY.items():  # a group for every strategy with options of its own
        assert (f"\n{name} options:" in out) == bool(declared(cls)), name
    for flag in ("--chunks-per-part", "--pipeline-chunks", "--task-chunks"):
        assert flag in out

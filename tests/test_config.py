"""Run configuration: presets, TOML files, command-line overrides, clear errors, strict options."""

import re

import pytest

from graphscale.cli import build_parser, overrides_from_args
from graphscale.config import build_config
from graphscale.registry import MODELS, STRATEGIES


def test_preset_then_file_then_flags(tmp_path):
    cfg = build_config({"model": {"name": "gat"}})
    assert (cfg.model.hidden, cfg.model.heads, cfg.model.dropout, cfg.optim.lr) == (8, 8, 0.6, 0.005)
    toml = tmp_path / "run.toml"
    toml.write_text('seed = 3\n[model]\nname = "gat"\nhidden = 4\n[optim]\nlr = 1\n[strategy]\nminibatch = true\n'
                    'fanouts = [5, 5]\n')
    cfg = build_config({"model": {"hidden": 6}}, toml)
    assert (cfg.seed, cfg.model.name, cfg.model.hidden, cfg.optim.lr) == (3, "gat", 6, 1.0)
    assert cfg.strategy.fanouts == [5, 5] and cfg.model.heads == 8


def test_cli_flags_map_to_config_fields():
    args = build_parser().parse_args(["train", "--model", "sage", "--weight-decay", "0", "--fanouts", "4,3",
                                      "--workers", "2", "--no-progress", "--minibatch"])
    cfg = build_config(overrides_from_args(args))
    assert cfg.model.name == "sage" and cfg.optim.weight_decay == 0.0 and cfg.strategy.fanouts == [4, 3]
    assert cfg.strategy.workers == 2 and cfg.progress is False and cfg.strategy.minibatch is True
    assert cfg.optim.epochs == 200  # untouched default


@pytest.mark.parametrize("text, message", [
    ("[model]\nwidth = 3\n", "unknown option 'width'"),
    ("[model]\nhidden = 'x'\n", "option 'hidden' expects int"),
    ("model = 3\n", r"\[model\] must be a table"),
    ("[model\n", "not valid TOML"),
])
def test_bad_config_files_name_the_problem(tmp_path, text, message):
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(ValueError, match=message):
        build_config({}, toml)


def test_missing_config_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_config({}, tmp_path / "nope.toml")


def test_timeout_and_shm_dir_from_flags_and_file(tmp_path, monkeypatch):
    default = build_config({})
    assert default.strategy.timeout == 600.0 and default.strategy.shm_dir == "/dev/shm"
    args = build_parser().parse_args(["train", "--strategy", "offload", "--timeout", "5", "--shm-dir", str(tmp_path)])
    cfg = build_config(overrides_from_args(args))
    assert cfg.strategy.timeout == 5.0 and cfg.strategy.shm_dir == str(tmp_path)
    toml = tmp_path / "run.toml"
    toml.write_text("[strategy]\ntimeout = 30\n")
    assert build_config({}, toml).strategy.timeout == 30.0
    # run() hands the timeout to launch
    import graphscale.run

    seen = {}

    def fake_launch(fn, world_size, *args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(graphscale.run, "launch", fake_launch)
    with pytest.raises(RuntimeError, match="stop here"):
        graphscale.run.run(build_config({"strategy": {"timeout": 7}, "progress": False}))
    assert seen["timeout_s"] == 7.0


def from_flags(*argv: str):
    return build_config(overrides_from_args(build_parser().parse_args(["train", *argv])))


@pytest.mark.parametrize("argv, message", [
    (["--chunks", "4"], "--chunks is not used by strategy 'single'; it is used by strategies offload, pipeline"),
    (["--history-period", "2"], "--history-period is not used by strategy 'single'; it is used by strategy pipeline"),
    (["--strategy", "pipeline", "--chunks", "1", "--partitioner", "random"],
     "--partitioner is not used by strategy 'pipeline' with --chunks 1"),
    (["--strategy", "single", "--fanouts", "5,5"],
     ("--fanouts is not used by strategy 'single' without --minibatch; it is used by strategies data-parallel, "
      "model-averaging, single, split-parallel")),
    (["--batch-size", "8"], "--batch-size is not used by strategy 'single' without --minibatch"),
    (["--eval-fanouts", "5,5"], "--eval-fanouts is not used by strategy 'single' without --minibatch"),
    (["--strategy", "graph-parallel", "--eval-fanouts", "5,5"],
     ("--eval-fanouts is not used by strategy 'graph-parallel'; it is used by strategies data-parallel, single, "
      "split-parallel")),
    (["--strategy", "graph-parallel", "--minibatch"], "--minibatch is not used by strategy 'graph-parallel'"),
    (["--strategy", "offload", "--cache", "quiver"], "--cache is not used by strategy 'offload'"),
    (["--strategy", "split-parallel", "--cache", "none"], "it is used by strategy data-parallel"),
    (["--strategy", "data-parallel", "--cache-fraction", "0.1"],
     "--cache-fraction is not used by strategy 'data-parallel' with --cache none"),
    (["--strategy", "offload", "--memory-budget", "1GiB", "--chunks", "2"],
     "--chunks is not used by strategy 'offload' with --memory-budget"),
    (["--strategy", "graph-parallel", "--partitions", "p", "--partitioner", "random"],
     "--partitioner is not used by strategy 'graph-parallel' with --partitions"),
    (["--partitioner", "random"], "--partitioner is not used by strategy 'single'"),
    (["--balance", "edges"], "--balance is not used by strategy 'single'"),
    (["--partitions", "p", "--strategy", "offload"],
     "--partitions is not used by strategy 'offload'; it is used by strategies graph-parallel, model-averaging"),
    (["--dedup", "inter"], "--dedup is not used"), (["--recompute", "none"], "--recompute is not used"),
    (["--heads", "4"], "--heads is not used by model 'gcn'; it is used by model gat"),
    (["--model", "gat", "--alpha", "0.2"], "--alpha is not used by model 'gat'; it is used by model gcnii"),
    (["--model", "sage", "--theta", "1"], "--theta is not used by model 'sage'"),
])
def test_options_the_strategy_or_model_does_not_read_are_refused(argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        from_flags(*argv)


@pytest.mark.parametrize("argv", [
    ["--strategy", "single", "--minibatch", "--fanouts", "5,5", "--batch-size", "8", "--eval-fanouts", "-1,3"],
    ["--strategy", "offload", "--chunks", "2", "--dedup", "inter", "--recompute", "none", "--partitioner", "random"],
    ["--strategy", "offload", "--memory-budget", "1GiB"],
    ["--strategy", "data-parallel", "--cache", "pagraph", "--cache-fraction", "0.1", "--fanouts", "3,3"],
    ["--strategy", "split-parallel", "--cache-fraction", "0.1", "--partitioner", "metis", "--balance", "edges"],
    ["--strategy", "data-parallel", "--eval-fanouts", "3,-1"], ["--strategy", "split-parallel", "--eval-fanouts", "5,5"],
    ["--strategy", "graph-parallel", "--partitioner", "fennel"], ["--strategy", "graph-parallel", "--partitions", "p"],
    ["--model", "gat", "--heads", "2"], ["--model", "gcnii", "--alpha", "0.2", "--theta", "1"],
    ["--workers", "1", "--hidden", "8", "--layers", "3", "--dropout", "0"],
])
def test_options_the_strategy_reads_are_accepted(argv):
    from_flags(*argv)


def test_defaults_and_presets_never_count_as_given():
    for name in STRATEGIES.names():
        for model in MODELS.names():  # presets set hidden / heads / layers / dropout, never an unread option
            assert build_config({"model": {"name": model}, "strategy": {"name": name}}).strategy.name == name


def test_a_toml_file_with_an_unused_option_is_refused(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[strategy]\nname = "graph-parallel"\nchunks = 4\n')
    with pytest.raises(ValueError, match=r"run.toml: \[strategy\] chunks is not used by strategy 'graph-parallel'; "
                                         "it is used by strategies offload, pipeline"):
        build_config({}, toml)
    # the strategy the option fits may come from the command line, the option from the file
    assert build_config({"strategy": {"name": "offload"}}, toml).strategy.chunks == 4
    toml.write_text('[model]\nheads = 2\n')
    with pytest.raises(ValueError, match=r"\[model\] heads is not used by model 'gcn'"):
        build_config({}, toml)
    assert build_config({"model": {"name": "gat"}}, toml).model.heads == 2


def test_every_declared_option_is_a_config_field():
    from dataclasses import fields

    from graphscale.config import DataConfig, ModelConfig, StrategyConfig

    strategy_fields, model_fields = {f.name for f in fields(StrategyConfig)}, {f.name for f in fields(ModelConfig)}
    data_fields = {f.name for f in fields(DataConfig)}  # [data] options only some strategies read (feature_dtype)
    assert not data_fields & strategy_fields
    for name in STRATEGIES.names():
        assert STRATEGIES.get(name).options <= (strategy_fields - {"name", "workers"}) | data_fields, name
        assert set(STRATEGIES.get(name).unused_options(build_config({}))) <= STRATEGIES.get(name).options
    for name in MODELS.names():
        assert MODELS.get(name).options <= model_fields - {"name", "hidden", "layers", "dropout"}, name


@pytest.mark.parametrize("argv, message", [
    (["--eval-fanouts", "5"], "--eval-fanouts gives 1 value(s) but model 'gcn' has 2 layers (--layers)"),
    (["--eval-fanouts", "0,5"], "--eval-fanouts value 0"),
    (["--eval-fanouts", "5,5", "--task", "link"], "--eval-fanouts samples the evaluation of node classification"),
])
def test_bad_eval_fanouts_are_one_line_naming_the_option(argv, message):
    from graphscale.validation import validate

    with pytest.raises(ValueError, match=re.escape(message)) as err:
        validate(from_flags("--minibatch", *argv))
    assert "\n" not in str(err.value)

"""Run configuration: presets, TOML files, command-line overrides, clear errors."""

import pytest

from graphscale.cli import build_parser, overrides_from_args
from graphscale.config import build_config


def test_preset_then_file_then_flags(tmp_path):
    cfg = build_config({"model": {"name": "gat"}})
    assert (cfg.model.hidden, cfg.model.heads, cfg.model.dropout, cfg.optim.lr) == (8, 8, 0.6, 0.005)
    toml = tmp_path / "run.toml"
    toml.write_text('seed = 3\n[model]\nname = "gat"\nhidden = 4\n[optim]\nlr = 1\n[strategy]\nfanouts = [5, 5]\n')
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

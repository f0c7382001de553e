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


def test_timeout_and_shm_dir_from_flags_and_file(tmp_path, monkeypatch):
    default = build_config({})
    assert default.strategy.timeout == 600.0 and default.strategy.shm_dir == "/dev/shm"
    args = build_parser().parse_args(["train", "--timeout", "5", "--shm-dir", str(tmp_path)])
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

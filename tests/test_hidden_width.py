"""The default hidden width: a run that gives no ``--hidden`` trains the model's preset width, widened to the
smallest power of two at least the dataset's class count; resolved once in the parent, recorded like any option,
the same under every strategy; a width the user gives always wins; a checkpoint resumes with its own width."""

from __future__ import annotations

import json

import pytest

from graphscale.cli import main
from graphscale.config import auto_hidden, build_config, resolve_hidden
from graphscale.run import run

#: a tiny graph with more classes (20) than the gcn preset's 16 hidden units
MANY = "sbm:nodes=160,degree=6,classes=20,features=8,seed=0"
#: the same graph with Cora's 7 classes
FEW = "sbm:nodes=160,degree=6,classes=7,features=8,seed=0"


def test_the_preset_width_is_widened_to_the_smallest_power_of_two_at_least_the_classes():
    config = build_config({})
    assert (config.model.hidden, config.model.hidden_auto) == (16, True)
    assert [auto_hidden(config.model, c) for c in (2, 7, 16, 17, 32, 39, 40, 64, 65)] == \
        [16, 16, 16, 32, 32, 64, 64, 64, 128]
    resolve_hidden(config, 39)
    assert config.model.hidden == 64
    resolve_hidden(config, 39)  # once resolved, resolving again changes nothing
    assert config.model.hidden == 64
    gat = build_config({"model": {"name": "gat"}})  # 8 per head, 8 heads: 64 wide
    assert [auto_hidden(gat.model, c) for c in (39, 64, 65, 100)] == [8, 8, 16, 16]
    gcnii = build_config({"model": {"name": "gcnii"}})
    assert [auto_hidden(gcnii.model, c) for c in (39, 70)] == [64, 128]


def test_a_width_the_user_gives_is_never_changed(tmp_path):
    for given in (build_config({"model": {"hidden": 8}}), build_config({"model": {"hidden": 16}})):
        assert not given.model.hidden_auto
        resolve_hidden(given, 39)
        assert given.model.hidden in (8, 16)
    toml = tmp_path / "run.toml"
    toml.write_text("[model]\nhidden = 16\n")
    from_file = build_config({}, toml)
    resolve_hidden(from_file, 39)
    assert (from_file.model.hidden, from_file.model.hidden_auto) == (16, False)
    link = build_config({"task": "link"})  # link prediction's output is an embedding, not class scores
    resolve_hidden(link, 39)
    assert link.model.hidden == 16
    with pytest.raises(ValueError, match="unknown option 'hidden_auto'"):
        toml.write_text("[model]\nhidden_auto = false\n")
        build_config({}, toml)


def _widths(report: dict) -> tuple[int, tuple]:
    model = report["models"]["last"]
    return report["config"]["model"]["hidden"], tuple(p.shape for p in model.parameters())


@pytest.mark.parametrize("spec, width", [(MANY, 32), (FEW, 16)])
def test_every_strategy_trains_the_width_single_resolves(spec, width):
    options = {"data": {"dataset": spec}, "optim": {"epochs": 1}, "progress": False, "oversubscribe": True}
    single = run(build_config(options), write=False, keep_model=True)
    parallel = run(build_config({**options, "strategy": {"name": "graph-parallel", "workers": 2}}), write=False,
                   keep_model=True)
    assert _widths(single)[0] == width
    assert _widths(parallel) == _widths(single)
    assert width in _widths(single)[1][0]  # the first layer's weight is that wide


def test_a_host_shared_run_resolves_the_width_before_its_shared_plan(tmp_path):
    """Strategies whose workers map a graph directory (data-parallel, offload, task-parallel, ...) resolve the width
    when the parent maps it, before the strategy's shared plan, which may read the width, is written."""
    from graphscale.prepare import host_shared_data

    config = build_config({"data": {"dataset": MANY}, "cache_dir": str(tmp_path)})
    assert host_shared_data(config).num_classes == 20
    assert config.model.hidden == 32


def test_the_width_is_recorded_and_a_checkpoint_resumes_with_its_own(tmp_path, capsys):
    ckpt, out = tmp_path / "c.pt", tmp_path / "r.json"
    common = ["train", "--dataset", MANY, "--no-progress", "--cache-dir", str(tmp_path), "--checkpoint", str(ckpt),
              "--json", str(out)]
    # a checkpoint trained at 16 (the default before the width followed the classes)
    assert main([*common, "--epochs", "1", "--hidden", "16"]) == 0
    assert main([*common, "--epochs", "2", "--resume"]) == 0  # no --hidden: the checkpoint's 16
    report = json.loads(out.read_text())
    assert report["config"]["model"]["hidden"] == 16 and len(report["epochs"]) == 2
    assert main([*common, "--epochs", "3", "--resume", "--hidden", "32"]) == 2  # a width given differs: refused
    assert "--hidden 16 (checkpoint) vs 32" in capsys.readouterr().err
    assert main([*common, "--epochs", "1"]) == 0  # a fresh run: widened, and recorded so
    assert json.loads(out.read_text())["config"]["model"]["hidden"] == 32
    assert main([*common, "--epochs", "2", "--resume"]) == 0
    assert json.loads(out.read_text())["config"]["model"]["hidden"] == 32

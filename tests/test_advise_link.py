"""graphscale advise --task link: every link-capable strategy's predicted bytes equal the Ledger of a short real link
run (the scoring exchange's ``link`` and ``pair_rows`` categories included), its tracked-memory prediction bounds the
measured peak as the node-classification tests' do, the strategies that cannot train link prediction are listed with
the reason, and the calibration probes link runs of the link-capable strategies only."""

import copy
import json

import pytest

from graphscale.advise import calibrate
from graphscale.advise.configs import candidate_name, candidates, model_key, predict_config, refusal
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.cost.link import head_bytes, head_flops
from graphscale.cost.machine import synthetic
from graphscale.run import run

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"
#: (strategy, decoder): the decoders' parameters reach the gradient all-reduce, so each is run under one
RUNS = [("graph-parallel", "mlp"), ("offload", "distmult"), ("split-parallel", "dot"), ("single", "mlp"),
        ("data-parallel", "mlp"), ("model-averaging", "dot")]
#: predicted / tracked peak memory per worker on the 400-vertex SBM: the node tests' ranges (measured 1.0-1.1x for
#: the full-graph strategies, 1.2-2.1x for the mini-batch ones)
MEMORY_RANGE = {"full": (0.75, 1.4), "minibatch": (0.75, 5.0)}
MINIBATCH = ("data-parallel", "split-parallel")
#: the categories of the scoring exchange (:mod:`graphscale.strategies.link_scoring`, ``link_minibatch``)
LINK_CATEGORIES = {"graph-parallel": "link", "offload": "link", "split-parallel": "pair_rows"}


def _config(name: str, decoder: str, tmp_path):
    strategy = {"name": name, "workers": 1 if name == "single" else 2}
    if name == "model-averaging":
        strategy["parts"] = 2
    if name in MINIBATCH:
        strategy["batch_size"] = 64
    return build_config({"data": {"dataset": SBM}, "strategy": strategy, "model": {"hidden": 8}, "task": "link",
                         "decoder": decoder, "optim": {"epochs": 1}, "cache_dir": str(tmp_path / "cache"),
                         "progress": False})


@pytest.mark.parametrize("name,decoder", RUNS)
def test_predicted_link_bytes_equal_the_ledger_and_memory_is_bounded(name, decoder, tmp_path):
    config = _config(name, decoder, tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    report = run(config)
    assert prediction.bytes_epoch in (None, 0)  # the one epoch run
    ledger = {k: v for k, v in report["final"]["bytes_per_epoch"].items() if v}
    assert prediction.bytes == ledger
    if name in LINK_CATEGORIES:
        assert ledger[LINK_CATEGORIES[name]] > 0
    measured = max(report["final"]["peak_memory_per_worker"])
    low, high = MEMORY_RANGE["minibatch" if name in MINIBATCH else "full"]
    assert low <= prediction.memory / measured <= high, (prediction.memory, measured)


@pytest.mark.parametrize("name", ["graph-parallel", "offload", "split-parallel"])
def test_predicted_link_collectives_equal_the_runs(name, tmp_path):
    """The synchronising collectives a link prediction prices (the scoring exchange's included) are those a
    worker's training epoch issues."""
    from test_advise import _collectives_worker

    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(name, "dot", tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    node = copy.deepcopy(config)
    node.task = "node"
    assert prediction.collectives > predict_config(node, synthetic()).collectives
    counts = launch(_collectives_worker, 2, config, prepare_data(config), prediction.bytes_epoch or 0, device="cpu",
                    timeout_s=120)
    waits = prediction.waits or [0, 0]
    assert [tuple(c) for c in counts] == [(prediction.collectives, w) for w in waits]


def test_the_decoder_is_in_the_predictions_model(tmp_path):
    """The decoder's parameters reach the gradient all-reduce and the state, and its scoring the time: an ``mlp``
    decoder's prediction moves and holds more than a ``dot`` one's."""
    dot = predict_config(_config("graph-parallel", "dot", tmp_path), synthetic())
    mlp = predict_config(_config("graph-parallel", "mlp", tmp_path), synthetic())
    assert mlp.bytes["allreduce"] > dot.bytes["allreduce"]
    assert mlp.memory > dot.memory and mlp.seconds > dot.seconds
    assert mlp.bytes["link"] == dot.bytes["link"] > 0  # the same rows fetched


def test_the_scoring_costs_grow_with_the_decoder():
    assert head_bytes(10, 8, 4, "dot") < head_bytes(10, 8, 4, "distmult") < head_bytes(10, 8, 4, "mlp")
    assert head_bytes(10, 8, 4, "dot") == 10 * (16 + 2 * 8 * 4 + 2 * 4)
    assert head_bytes(10, 8, 4, "distmult", chunked=True) == 10 * (16 + 2 * 4)  # no gathered row saved
    assert head_flops(10, 8, "dot") == 0 and head_flops(10, 8, "mlp") == 10 * (2 * 64 + 16)
    with pytest.raises(ValueError, match="--decoder"):
        head_bytes(1, 8, 4, "bilinear")


def _advise(tmp_path, capsys, *extra):
    code = main(["advise", "--dataset", SBM, "--workers", "2", "--hidden", "8", "--synthetic-profile",
                 "--cache-dir", str(tmp_path / "cache"), "--task", "link", *extra])
    return code, capsys.readouterr()


def test_advise_task_link_lists_the_strategies_that_cannot_run_it(tmp_path, capsys):
    code, out = _advise(tmp_path, capsys, "--decoder", "mlp", "--json", str(tmp_path / "advice.json"))
    assert code == 0, out.err
    advice = json.loads((tmp_path / "advice.json").read_text())
    by_name = {p["strategy"]: p for p in advice["predictions"]}
    for name in ("pipeline", "task-parallel"):
        assert not by_name[name]["fits"] and by_name[name]["reason"].startswith("cannot run --task link: it ")
        assert by_name[name]["memory"] == 0 and not by_name[name]["bytes"]
        assert by_name[name]["reason"] in out.out  # the table's "why"
    for name in ("graph-parallel", "offload"):
        assert by_name[name]["fits"] and by_name[name]["bytes"]["link"] > 0
    assert by_name["split-parallel"]["bytes"]["pair_rows"] > 0
    best = advice["predictions"][advice["recommended"]]
    assert best["strategy"] not in ("pipeline", "task-parallel")
    assert "--task link" in best["command"] and "--decoder mlp" in best["command"]
    assert "--task link --decoder mlp" in out.out


def test_a_link_option_without_task_link_is_one_line(tmp_path, capsys):
    code = main(["advise", "--dataset", SBM, "--synthetic-profile", "--cache-dir", str(tmp_path), "--decoder", "mlp"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--decoder" in err and "--task link" in err


def test_calibration_probes_link_runs_of_the_strategies_that_run_them(tmp_path, monkeypatch):
    """A link configuration has its own calibration key, the probes run with the task, and the strategies that
    cannot train link prediction are never probed."""
    config = _config("single", "mlp", tmp_path)
    node = copy.deepcopy(config)
    node.task = "node"
    assert model_key(config) != model_key(node) and "decoder=mlp" in model_key(config)
    assert "task=" not in model_key(node)  # node classification's keys are unchanged
    probe = calibrate.probe_config(config, SBM)
    assert (probe.task, probe.decoder, probe.link_split) == ("link", "mlp", config.link_split)
    refused = {c.strategy.name for c in candidates(config, 2) if refusal(c)}
    assert refused == {"pipeline", "task-parallel"}
    asked = []
    monkeypatch.setattr(calibrate, "calibrate", lambda machine, config, workers, tiny=False, strategies=None,
                        warn=None: asked.extend(strategies) or {})
    machine = synthetic()
    machine.calibration = {}
    assert calibrate.ensure_calibrated(machine, config, 2)
    assert set(asked) == {candidate_name(c) for c in candidates(config, 2)} - refused
    assert "single --minibatch" in asked  # single trains link prediction on edge mini-batches too


def test_strategy_auto_with_task_link_picks_a_strategy_that_runs_it(tmp_path, monkeypatch):
    """``--strategy auto --task link`` ranks the link predictions: the pick trains link prediction, the task and the
    decoder stay in the run's options."""
    from graphscale.advise.auto import resolve

    monkeypatch.setattr(calibrate, "calibrated_profile", lambda config, workers, **_: synthetic())
    overrides = {"data": {"dataset": SBM}, "model": {"hidden": 8}, "task": "link", "decoder": "distmult",
                 "strategy": {"name": "auto", "workers": 2}, "cache_dir": str(tmp_path / "cache"), "progress": False}
    chosen, advice = resolve(overrides)
    assert chosen["strategy"]["name"] not in ("pipeline", "task-parallel", "auto")
    assert (chosen["task"], chosen["decoder"]) == ("link", "distmult")
    assert advice["predicted"]["strategy"] == chosen["strategy"]["name"] and advice["predicted"]["fits"]

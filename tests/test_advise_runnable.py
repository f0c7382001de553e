"""Every ``run it`` line ``graphscale advise`` prints is one ``graphscale train`` accepts: a candidate train would
refuse (:func:`graphscale.advise.configs.refusal`, the run's own :func:`graphscale.validation.validate`) is listed
with the reason and never recommended; the sampled strategies sample the default fanout at every model layer
(``--fanouts 10,10,10`` for 3 layers, carried by their line; a 2-layer model's line has no ``--fanouts``); and the
line carries ``--device``, the device the prediction is for."""

from __future__ import annotations

import json
import shlex

import pytest

from graphscale.advise.command import command_line
from graphscale.advise.configs import candidate_name, candidates, refusal
from graphscale.cli import build_parser, main, overrides_from_args
from graphscale.config import build_config
from graphscale.validation import validate

SBM = "sbm:nodes=200,degree=4,features=8,seed=1"
SAMPLED = ("single --minibatch", "data-parallel", "split-parallel")


def _trained(command: str):
    """The configuration ``graphscale train`` builds from ``command``, validated as train validates it."""
    words = shlex.split(command)
    assert words[:2] == ["graphscale", "train"]
    config = build_config(overrides_from_args(build_parser(words[1:]).parse_args(words[1:])))
    validate(config)
    return config


def _advise(tmp_path, *extra) -> dict:
    out = tmp_path / "advice.json"
    assert main(["advise", "--dataset", SBM, "--workers", "2", "--hidden", "8", "--synthetic-profile",
                 "--cache-dir", str(tmp_path / "cache"), "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("model,layers", [("sage", 3), ("gcnii", 16)])
def test_every_candidate_of_a_deeper_model_is_one_train_accepts_or_lists_why(model, layers):
    base = build_config({"data": {"dataset": SBM}, "model": {"name": model, "layers": layers}, "progress": False})
    configs = candidates(base, 2)
    names = [candidate_name(c) for c in configs]
    assert set(SAMPLED) <= set(names)  # still offered: their fanouts follow the model
    for config in configs:
        why = refusal(config)
        if candidate_name(config) in SAMPLED:
            assert config.strategy.fanouts == [10] * layers and not why
        else:
            assert config.strategy.fanouts == [10, 10]  # read by no other candidate: left at its default
        if why:
            with pytest.raises((ValueError, KeyError), match=why[:40].replace("(", r"\(").replace(")", r"\)")):
                validate(config)
        else:
            validate(config)
    deep = build_config({"model": {"name": "sage", "layers": 3}})
    deep.strategy.fanouts = [5, 5]
    given = next(c for c in candidates(deep, 2) if c.strategy.name == "data-parallel")
    assert given.strategy.fanouts == [5, 5]  # fanouts given stay as given: train's refusal is the reason
    assert refusal(given).startswith("--fanouts gives 2 value(s) but model 'sage' has 3 layers")


@pytest.mark.parametrize("extra,fanouts", [(("--layers", "3"), "10,10,10"), (("--model", "gcnii", "--layers", "4"),
                                                                              "10,10,10,10"), ((), None)])
def test_every_run_it_line_is_one_train_accepts(tmp_path, capsys, extra, fanouts):
    """``--layers 3``, GCNII and the 2-layer default: each prediction's ``command`` (the recommended one is the
    printed ``run it`` line) parses to the configuration train validates, with the strategy, workers and fanouts
    advise predicted and ``--device cpu``; refused candidates carry a reason and are not recommended."""
    advice = _advise(tmp_path, *extra)
    out = capsys.readouterr().out
    best = advice["predictions"][advice["recommended"]]
    assert f"run it: {best['command']}" in out and best["fits"]
    offered = set()
    for p in advice["predictions"]:
        try:
            config = _trained(p["command"])
        except ValueError as err:  # refused (task-parallel: no decoupled form): listed with train's reason
            assert not p["fits"] and p["reason"] == str(err).splitlines()[0] and p is not best
            continue
        assert (config.strategy.name, config.strategy.workers, config.device) == (p["strategy"], p["workers"], "cpu")
        words = shlex.split(p["command"])
        assert words[words.index("--device") + 1] == "cpu"
        sampled = p["strategy"] in ("data-parallel", "split-parallel") or p["options"].get("minibatch")
        if sampled:
            offered.add(p["strategy"] + (" --minibatch" if p["options"].get("minibatch") else ""))
        if sampled and fanouts:
            assert words[words.index("--fanouts") + 1] == fanouts
        else:
            assert "--fanouts" not in words  # the 2-layer line as before: the default fanouts
    assert offered == set(SAMPLED)


def test_the_run_it_line_carries_the_device_predicted_for():
    """``train``'s default ``--device auto`` trains on CUDA where there is one: the line names advise's device."""
    args = build_parser(["advise"]).parse_args(["advise"])
    for device in ("cpu", "cuda"):
        config = build_config({"model": {"name": "sage"}, "device": device, "strategy": {"name": "graph-parallel",
                                                                                         "workers": 2}})
        words = shlex.split(command_line(config, args))
        assert words[words.index("--device") + 1] == device
        parsed = build_parser(words[1:]).parse_args(words[1:])
        assert build_config(overrides_from_args(parsed)).device == device


def test_more_workers_than_cores_are_priced_and_the_line_oversubscribes(monkeypatch):
    """advise prices the workers asked for on any machine: beyond this machine's cores the candidate is not refused
    and its line carries ``--oversubscribe``, which train needs to start them; within the cores it does not."""
    from graphscale.distributed import launch

    args = build_parser(["advise"]).parse_args(["advise"])
    config = build_config({"model": {"name": "sage"}, "strategy": {"name": "graph-parallel", "workers": 4}})
    for cores, expected in ((2, True), (8, False)):
        monkeypatch.setattr(launch, "cpu_count", lambda c=cores: c)
        assert refusal(config) == ""
        words = shlex.split(command_line(config, args))
        assert ("--oversubscribe" in words) == expected
        parsed = build_parser(words[1:]).parse_args(words[1:])
        validate(build_config(overrides_from_args(parsed)))  # train accepts the line on this machine


@pytest.mark.parametrize("layers,fanouts", [(3, [10, 10, 10]), (2, None)])
def test_strategy_auto_runs_the_recommendations_fanouts(monkeypatch, capsys, layers, fanouts):
    """``train --strategy auto`` takes a sampled recommendation's fanouts with its strategy: one per model layer
    (3 layers), none for a 2-layer model (the default); the configuration it builds is one train validates."""
    from graphscale.advise import auto, calibrate, command
    from graphscale.cost.machine import synthetic
    from graphscale.cost.prediction import Prediction

    model = {"name": "sage", "layers": layers}
    configs = candidates(build_config({"data": {"dataset": SBM}, "model": model, "progress": False}), 2)
    best = next(i for i, c in enumerate(configs) if c.strategy.name == "data-parallel")
    predictions = [Prediction(c.strategy.name, c.strategy.workers) for c in configs]
    monkeypatch.setattr(calibrate, "calibrated_profile", lambda *a, **k: synthetic())
    monkeypatch.setattr(command, "rank", lambda *a, **k: {"predictions": predictions, "configs": configs,
                                                          "recommended": best})
    overrides, _ = auto.resolve({"data": {"dataset": SBM}, "model": model, "strategy": {"name": "auto"}})
    assert overrides["strategy"] == {"name": "data-parallel", "workers": 2,
                                     **({"fanouts": fanouts} if fanouts else {})}
    capsys.readouterr()
    validate(build_config(overrides))

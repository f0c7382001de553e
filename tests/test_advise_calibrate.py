"""The machine profile's calibration (graphscale.advise.calibrate): each strategy's line through its modelled and
measured epoch times on two probe graphs, applied to every prediction, measured once per host, model and worker
count, never for a synthetic profile."""

import copy
import json
import statistics

import pytest

from graphscale.advise import calibrate
from graphscale.advise.configs import model_key, predict_config, run_key
from graphscale.advise.host_costs import cost_line
from graphscale.advise.profile import load_profile, profile_path, save_profile
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.cost.machine import synthetic

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"


def _base(tmp_path, strategy="single", workers=1):
    return build_config({"data": {"dataset": SBM}, "strategy": {"name": strategy, "workers": workers},
                         "model": {"hidden": 8}, "cache_dir": str(tmp_path / "cache"), "progress": False})


def _measured_profile():
    """A profile as a measured one starts: synthetic rates, no calibration yet."""
    machine = synthetic()
    machine.calibration = {}
    return machine


def test_a_prediction_is_its_model_on_the_strategys_calibration_line(tmp_path):
    config = _base(tmp_path, "graph-parallel", 2)
    machine = _measured_profile()
    modelled = predict_config(copy.deepcopy(config), machine)
    assert modelled.seconds == modelled.modelled_seconds > 0  # no line: the model's time
    machine.calibration = {model_key(config): {run_key(config): {"intercept_s": 0.004, "slope": 1.5, "probes": []}}}
    prediction = predict_config(copy.deepcopy(config), machine)
    assert prediction.modelled_seconds == pytest.approx(modelled.modelled_seconds)
    assert prediction.seconds == pytest.approx(0.004 + 1.5 * modelled.modelled_seconds)
    other = _base(tmp_path, "single", 1)  # another strategy's key: uncalibrated
    assert predict_config(other, machine).seconds == predict_config(copy.deepcopy(other), synthetic()).seconds
    wider = copy.deepcopy(config)
    wider.model.hidden = 16  # another model: another key
    assert model_key(wider) != model_key(config)


def test_the_lines_go_through_the_two_probes(tmp_path, monkeypatch):
    """Probe runs measured at 2x the model's time plus 10 ms, and at the modelled resident set plus 1 MiB plus 3
    bytes per graph byte: time slope 2 and intercept 10 ms for every strategy asked; for the multi-worker ones a
    memory line of 1 MiB plus 3 bytes per graph byte (a single run's peak is its calibrating process's, not the
    run's), which a prediction adds to its model's."""
    def fake_probe(config):
        prediction = predict_config(copy.deepcopy(config), synthetic())
        assert prediction.graph_bytes > 0
        return (0.01 + 2 * prediction.modelled_seconds,
                prediction.modelled_os_memory + (1 << 20) + 3 * prediction.graph_bytes)
    monkeypatch.setattr(calibrate, "probe", fake_probe)
    lines = calibrate.calibrate(_measured_profile(), _base(tmp_path), 2, tiny=True,
                                strategies=["single", "graph-parallel"])
    assert set(lines) == {"single@1", "graph-parallel@2"}
    for line in lines.values():
        (m0, t0), (m1, t1) = line["probes"]
        assert m1 > m0 > 0
        assert line["slope"] == pytest.approx(2.0) and line["intercept_s"] == pytest.approx(0.01)
        assert (line["intercept_s"], line["slope"]) == cost_line((m0, m1), (t0, t1))
    assert "memory" not in lines["single@1"]
    memory = lines["graph-parallel@2"]["memory"]
    assert memory["slope"] == pytest.approx(3.0) and memory["intercept_bytes"] == pytest.approx(1 << 20)
    assert len(memory["probes"]) == 2
    machine = _measured_profile()
    machine.calibration = {model_key(_base(tmp_path)): lines}
    config = _base(tmp_path, "graph-parallel", 2)
    prediction = predict_config(config, machine)
    assert prediction.os_memory == int(prediction.modelled_os_memory + (1 << 20) + 3 * prediction.graph_bytes)


def test_graph_bytes_are_the_feature_rows_and_the_csr(tmp_path):
    config = _base(tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    from graphscale.prepare import prepare_data

    data = prepare_data(config)
    nodes, edges = data.num_nodes, int(data.summary["edges"])
    assert prediction.graph_bytes == nodes * 16 * 4 + 8 * (nodes + 1 + edges)  # 16 float32 features


def test_a_probe_is_the_median_epoch_after_the_warmup_and_the_largest_peak(tmp_path, monkeypatch):
    """probe runs the configuration for PROBE_EPOCHS epochs: the median of the epochs after the warm-up and the
    largest worker's peak resident set, from the run's report."""
    seen = {}

    def fake_run(config):
        seen["epochs"] = config.optim.epochs
        return {"epochs": [{"seconds": s} for s in (9.0, 8.0, 0.3, 0.1, 0.2)],
                "final": {"os_memory_per_worker": [{"peak_rss": 5}, {"peak_rss": 7}, None]}}
    monkeypatch.setattr("graphscale.run.run", fake_run)
    config = _base(tmp_path)
    config.optim.epochs = calibrate.PROBE_EPOCHS
    assert calibrate.probe(config) == (statistics.median([0.3, 0.1, 0.2]), 7)
    assert seen["epochs"] == calibrate.PROBE_EPOCHS == 8 and calibrate.PROBE_WARMUP == 2


def test_a_real_calibration_runs_each_strategy_on_both_probe_graphs(tmp_path):
    lines = calibrate.calibrate(_measured_profile(), _base(tmp_path), 2, tiny=True,
                                strategies=["single", "graph-parallel"])
    for key in ("single@1", "graph-parallel@2"):
        probes = lines[key]["probes"]
        assert len(probes) == 2 and all(m > 0 and t > 0 for m, t in probes)
        assert lines[key]["slope"] > 0 and lines[key]["intercept_s"] >= 0
    residuals = lines["graph-parallel@2"]["memory"]["probes"]  # [graph bytes, measured - modelled], either sign
    assert len(residuals) == 2 and residuals[0][0] < residuals[1][0] and all(isinstance(r, int) for _, r in residuals)
    assert list((tmp_path / "cache").rglob("*")), "the probe graphs are prepared in the run's cache directory"


def test_calibration_runs_once_per_model_and_worker_count_and_is_saved(tmp_path, monkeypatch):
    calls = []

    def fake(machine, config, workers, tiny=False, strategies=None, warn=None):
        calls.append((workers, tuple(strategies)))
        return {f"{s}@{1 if s.startswith('single') else workers}": {"intercept_s": 0.0, "slope": 1.0, "probes": []}
                for s in strategies}
    monkeypatch.setattr(calibrate, "calibrate", fake)
    monkeypatch.setattr("graphscale.advise.profile.measure", lambda device, tiny=False: _measured_profile())
    config, notes = _base(tmp_path), []
    machine = calibrate.calibrated_profile(config, 2, note=notes.append)
    assert len(calls) == 1 and calls[0][0] == 2 and "offload" in calls[0][1] and len(notes) == 1
    assert "calibrating" in notes[0] and "gcn on 2 worker(s)" in notes[0]
    saved, why = load_profile(profile_path(tmp_path / "cache", "cpu"))
    assert saved is not None, why
    assert saved.calibration == machine.calibration and "single@1" in saved.calibration[model_key(config)]
    calibrate.calibrated_profile(config, 2, note=notes.append)  # cached: no probes
    assert len(calls) == 1 and len(notes) == 1
    calibrate.calibrated_profile(config, 1, note=notes.append)  # one worker: single@1 is there, the rest not
    assert calls[1][0] == 1 and not any(s.startswith("single") for s in calls[1][1])


def test_a_synthetic_profile_is_never_calibrated(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: pytest.fail("a synthetic profile was calibrated"))
    machine = synthetic()
    assert machine.calibration is None
    assert calibrate.ensure_calibrated(machine, _base(tmp_path), 2) is False
    save_profile(machine, tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text())["calibration"] is None


def test_advise_prints_the_calibration_notice(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(calibrate, "calibrate", lambda machine, config, workers, tiny=False, strategies=None, warn=None: {})
    monkeypatch.setattr("graphscale.advise.profile.measure", lambda device, tiny=False: _measured_profile())
    code = main(["advise", "--dataset", SBM, "--workers", "2", "--hidden", "8", "--cache-dir", str(tmp_path / "c")])
    assert code == 0
    err = capsys.readouterr().err
    assert "graphscale: calibrating the time models of single, single --minibatch, graph-parallel" in err


def test_a_probe_run_that_fails_leaves_its_strategy_uncalibrated(tmp_path, monkeypatch):
    """More workers than cores without --oversubscribe: the run refuses, the strategy's entry says why, its
    predictions keep the model's time, and it is not probed again."""
    def refuse(config):
        if config.strategy.name == "graph-parallel":
            raise ValueError("--workers 2 exceeds the 1 CPU core(s)\nsecond line")
        return 0.01, None
    monkeypatch.setattr(calibrate, "probe", refuse)
    machine = _measured_profile()
    lines = calibrate.calibrate(machine, _base(tmp_path), 2, tiny=True, strategies=["single", "graph-parallel"])
    assert lines["graph-parallel@2"] == {"error": "ValueError: --workers 2 exceeds the 1 CPU core(s)"}
    machine.calibration = {model_key(_base(tmp_path)): lines}
    config = _base(tmp_path, "graph-parallel", 2)
    prediction = predict_config(config, machine)
    assert prediction.seconds == prediction.modelled_seconds
    assert prediction.os_memory == prediction.modelled_os_memory
    from graphscale.advise.configs import candidates

    for other in candidates(_base(tmp_path), 2):  # the other candidates calibrated: nothing left to probe
        machine.calibration[model_key(config)].setdefault(run_key(other), {"intercept_s": 0.0, "slope": 1.0})
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: pytest.fail("probed again"))
    assert not calibrate.ensure_calibrated(machine, _base(tmp_path), 2, tiny=True)


def test_a_line_through_noisy_probes_prices_nothing_free():
    """Times: an intercept is a cost (at least 0); a large probe measured no slower than the small one gives its
    ratio; memory residuals keep the exact line, of either sign."""
    assert calibrate.line([[1.0, 3.0], [2.0, 5.0]], cost=True) == (1.0, 2.0)
    assert calibrate.line([[2.0, 5.0], [1.0, 3.0]], cost=True) == (1.0, 2.0)  # the order of the probes is free
    assert calibrate.line([[1.0, 1.0], [2.0, 4.0]], cost=True) == (0.0, 3.0)  # below 0 at the origin: cost_line's 0
    assert calibrate.line([[1.0, 1.0], [2.0, 4.0]], cost=False) == (-2.0, 3.0)
    assert calibrate.line([[1.0, 4.0], [2.0, 1.0]], cost=False) == (7.0, -3.0)  # a residual may fall
    assert calibrate.line([[2.0, 4.0], [2.0, 2.0]], cost=False) == (3.0, 0.0)  # one size: the mean
    assert calibrate.line([[1.0, 5.0], [2.0, 4.0]], cost=True) == (0.0, 2.0)  # noise: the large probe's ratio
    assert calibrate.line([[2.0, 5.0], [2.0, 6.0]], cost=True) == (0.0, 3.0)  # one modelled size: its ratio


def test_a_configuration_whose_probe_fails_is_left_uncalibrated_with_a_warning(tmp_path, monkeypatch):
    """offload's probe run raises: the calibration records why, warns once, and calibrates the others; a
    candidate train would refuse (SAGE has no decoupled form for task-parallel) is never probed."""
    def probe(config):
        if config.strategy.name == "offload":
            raise RuntimeError("worker 1 exited")
        return 0.01, None

    monkeypatch.setattr(calibrate, "probe", probe)
    config = build_config({"model": {"name": "sage", "hidden": 8}, "cache_dir": str(tmp_path / "cache"),
                           "progress": False})
    warnings = []
    lines = calibrate.calibrate(_measured_profile(), config, 2, tiny=True,
                                strategies=["graph-parallel", "offload", "task-parallel"], warn=warnings.append)
    assert "intercept_s" in lines["graph-parallel@2"]
    assert lines["offload@2"]["error"] == "RuntimeError: worker 1 exited"
    assert "task-parallel@2" not in lines
    assert len(warnings) == 1 and warnings[0].startswith("calibration: offload@2 on sbm:")


def test_a_probe_runs_the_model_and_nothing_else_of_the_users_options(tmp_path):
    """The probe configuration keeps the model, dtype, device, seed and cache directory; the user's features,
    output files, checkpoints and strategy options are not the probe's; it may oversubscribe the cores."""
    config = build_config({"data": {"dataset": SBM, "features": "onehot"}, "model": {"name": "gat", "hidden": 8},
                           "json": str(tmp_path / "r.json"), "checkpoint": str(tmp_path / "ck"), "seed": 3,
                           "strategy": {"name": "offload", "workers": 2, "chunks": 4},
                           "cache_dir": str(tmp_path / "cache")})
    probe = calibrate.probe_config(config, "sbm:nodes=300,degree=6,features=16,seed=7")
    assert probe.model == config.model and probe.seed == 3 and probe.cache_dir == config.cache_dir
    assert probe.data.dataset.startswith("sbm:nodes=300") and probe.data.features != "onehot"
    assert probe.json is None and probe.checkpoint is None and not probe.resume and not probe.progress
    assert probe.strategy.chunks != 4 and probe.oversubscribe and probe.device == "cpu"
    assert probe.optim.epochs == calibrate.PROBE_EPOCHS


def test_the_memory_left_out_is_never_extrapolated_below_the_probes_and_counts_in_the_budget(tmp_path):
    """A falling residual line is held at the smallest residual the probes measured; on CPU ``need`` (the budget
    check) holds the positive part, on CUDA the tracked memory alone."""
    config = _base(tmp_path, "graph-parallel", 2)
    machine = _measured_profile()
    falling = {"intercept_bytes": 50 << 20, "slope": -1000.0, "probes": [[1, 50 << 20], [2, 10 << 20]]}
    machine.calibration = {model_key(config): {run_key(config): {"intercept_s": 0.0, "slope": 1.0, "probes": [],
                                                                 "memory": falling}}}
    prediction = predict_config(copy.deepcopy(config), machine)
    assert prediction.os_memory == prediction.modelled_os_memory + (10 << 20)  # 50 MiB - 1000 x graph bytes < 10 MiB
    assert prediction.need("cpu") == prediction.memory + (10 << 20)
    assert prediction.need("cuda") == prediction.memory
    assert not prediction.check_fit(prediction.memory + (5 << 20), "cpu").fits

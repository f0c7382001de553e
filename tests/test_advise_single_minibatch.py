"""``graphscale advise`` weighs ``single --minibatch`` beside full-graph ``single``: its prediction replays the run's
epoch (the host rows it reads through the hot-row cache of ``--host-memory`` and their hits, its sampler calls and
their edges equal a real run's; no bytes move; the predicted memory bounds the tracked peak as for the other
mini-batch strategies), it samples the default fanout at every model layer, it has its own
calibration line, and when it is recommended its ``run it`` line parses to the configuration it predicted."""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import asdict

import pytest
import torch

from graphscale.advise.configs import (
    candidate_name,
    candidates,
    device_kind,
    is_sampled_single,
    predict_config,
    refusal,
    run_key,
)
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.cost import host_rows
from graphscale.cost.host_rows import DISK_SPAN_READ_S, RESIDENT_BYTES_PER_VERTEX
from graphscale.cost.machine import synthetic
from graphscale.run import run

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"
#: a quarter of it holds 8 of the 400 float32 rows of 16 features
TINY = "2KiB"
#: predicted / tracked peak (tests/test_advise.py's range of the mini-batch strategies)
RANGE = (0.75, 5.0)


def _config(tmp_path, host_memory: str = TINY, task: str = "node", model: str = "sage"):
    return build_config({"data": {"dataset": SBM}, "model": {"name": model, "hidden": 8}, "optim": {"epochs": 1},
                         "strategy": {"name": "single", "workers": 1, "minibatch": True, "batch_size": 16},
                         "task": task, "cache_dir": str(tmp_path / "cache"), "progress": False,
                         "host_memory": host_memory})


def _epoch_reads(env, config, data) -> tuple[int, int, int, int, int]:
    """The run's worker: its hot-row cache's capacity, the host rows it read and hit in epoch 0, and the sampler's
    calls and the edges of the blocks they returned."""
    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model
    from graphscale.strategies.single import SingleStrategy
    from graphscale.tasks.link import attach_decoder, output_width

    model = build_model(config.model, input_width(config.data.features, data.num_features),
                        output_width(config, data.num_classes), seed=config.seed, dtype=getattr(torch, config.dtype))
    model = attach_decoder(model, config)
    strategy = SingleStrategy()
    strategy.setup(data, model, env, config)
    rows, sample, counts = strategy.rows, strategy.sampler.sample, [0, 0]

    def counted(*args, **kwargs):
        blocks = sample(*args, **kwargs)
        counts[0], counts[1] = counts[0] + 1, counts[1] + sum(b.num_edges for b in blocks)
        return blocks

    strategy.sampler.sample = counted
    rows.hits = rows.misses = 0  # the setup's cache fill is not the epoch's
    strategy.train_epoch(0)
    strategy.teardown()
    return rows.capacity, rows.hits + rows.misses, rows.hits, counts[0], counts[1]


@pytest.mark.parametrize("task", ["node", "link"])
def test_the_prediction_counts_the_runs_host_reads_hits_and_samples(task, tmp_path):
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(tmp_path, task=task)
    machine = synthetic()
    prediction = predict_config(copy.deepcopy(config), machine)
    cache = prediction.host_cache
    [(capacity, reads, hits, samples, edges)] = launch(_epoch_reads, 1, config, prepare_data(copy.deepcopy(config)),
                                                       device="cpu", timeout_s=120)
    assert capacity == cache["rows"] == 8
    assert (cache["reads"], cache["reads"] - cache["misses"]) == (reads, hits)
    assert 0 < cache["hit_rate"] < 1 and cache["from_disk"] and cache["bytes"] == 8 * 64 + 4 * 400
    assert prediction.events == {"samples": samples, "sampled_edges": edges} and samples > 1
    assert prediction.worker_host_memory == int(RESIDENT_BYTES_PER_VERTEX * 400)
    assert prediction.os_memory == prediction.memory + prediction.worker_host_memory + machine.process_rss
    assert prediction.need() == prediction.memory + prediction.worker_host_memory
    assert prediction.options == {"minibatch": True, "batch_size": 16} and not prediction.exact


def test_a_budget_that_holds_the_table_prices_no_cache_and_the_tracked_peak_is_bounded(tmp_path, monkeypatch):
    machine = synthetic()
    config = _config(tmp_path)
    priced = []
    disk_seconds = host_rows.HostRowPrice.disk_seconds
    monkeypatch.setattr(host_rows.HostRowPrice, "disk_seconds",
                        lambda self, worker=0: priced.append(disk_seconds(self, worker)) or priced[-1])
    tiny = predict_config(copy.deepcopy(config), machine)
    assert len(priced) == 1 and priced[0] >= DISK_SPAN_READ_S  # the superbatches' spans (priced in host_rows)
    roomy = predict_config(_config(tmp_path / "roomy", "1GiB"), machine)
    assert roomy.host_cache["rows"] == 0 and not roomy.host_cache["from_disk"]
    assert roomy.host_cache["reads"] == tiny.host_cache["reads"]
    assert tiny.memory - roomy.memory == tiny.host_cache["bytes"]
    assert priced[1] == 0.0  # a table within the budget's share is read from the page cache
    assert tiny.modelled_seconds - roomy.modelled_seconds == pytest.approx(priced[0])

    report = run(config)
    assert {k: v for k, v in report["final"]["bytes_per_epoch"].items() if v} == tiny.bytes == {}
    measured = max(report["final"]["peak_memory_per_worker"])  # the tracked peak, the hot-row cache in it
    assert RANGE[0] <= tiny.memory / measured <= RANGE[1], (tiny.memory, measured)


def test_an_in_memory_run_holds_the_graph_and_no_cache(tmp_path, monkeypatch):
    """``single --minibatch`` trains on the graph in memory where it cannot read the mapped directory (a decoupled
    model, a learnable input, another stored dtype: ``SingleStrategy.data_view_for``): its prediction holds the
    whole graph's tensors (features, int64 labels, three masks, the CSR) instead of the hot-row cache."""
    from graphscale.data.handle import MEMORY
    from graphscale.strategies.single import SingleStrategy

    mapped = predict_config(_config(tmp_path), synthetic())
    decoupled = _config(tmp_path, model="gcn")
    decoupled.model.decoupled = "on"
    prediction = predict_config(decoupled, synthetic())
    assert prediction.host_cache == {} and prediction.worker_host_memory == 0

    monkeypatch.setattr(SingleStrategy, "data_view_for", classmethod(lambda cls, config: MEMORY))
    in_memory = predict_config(_config(tmp_path), synthetic())
    assert in_memory.host_cache == {} and in_memory.worker_host_memory == 0 and mapped.host_cache["rows"] == 8
    assert in_memory.memory - mapped.memory == mapped.graph_bytes + 400 * (8 + 3) - mapped.host_cache["bytes"]


def test_single_minibatch_is_a_candidate_sampling_one_fanout_per_layer(tmp_path):
    base = build_config({"data": {"dataset": SBM}, "model": {"name": "sage"}, "progress": False,
                         "cache_dir": str(tmp_path / "cache")})
    names = [candidate_name(c) for c in candidates(base, 2)]
    assert names[:2] == ["single", "single --minibatch"] and names.count("single --minibatch") == 1
    keys = [run_key(c) for c in candidates(base, 2)]
    assert len(set(keys)) == len(keys) and "single --minibatch@1" in keys and "single@1" in keys

    deep = copy.deepcopy(base)
    deep.model.layers = 3  # the default --fanouts give one per layer of 2: train refuses them with --minibatch
    from graphscale.validation import validate

    with pytest.raises(ValueError, match="--fanouts gives 2 value"):
        main_config = copy.deepcopy(deep)
        main_config.strategy.minibatch = True
        validate(main_config)
    sampled = next(c for c in candidates(deep, 2) if is_sampled_single(c))
    assert sampled.strategy.fanouts == [10, 10, 10] and not refusal(sampled)  # the default fanout at every layer
    validate(sampled)


def test_a_recommended_single_minibatch_line_runs_the_predicted_configuration(tmp_path, capsys):
    """A device budget below full-graph ``single``'s and a host budget below METIS's: the recommendation is
    ``single --minibatch``; its ``run it`` line, parsed as ``graphscale train`` parses it, is the configuration
    advise predicted, and the table names its hot-row cache."""
    from graphscale.advise.command import advise
    from graphscale.cli import build_parser, overrides_from_args

    argv = ["advise", "--dataset", SBM, "--model", "sage", "--workers", "2", "--host-memory", TINY,
            "--device-memory", "120KiB", "--synthetic-profile", "--cache-dir", str(tmp_path / "cache")]
    out_json = tmp_path / "advice.json"
    assert main([*argv, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    advice = json.loads(out_json.read_text())
    best = advice["predictions"][advice["recommended"]]
    assert best["strategy"] == "single" and best["options"]["minibatch"] and best["fits"]
    singles = [p for p in advice["predictions"] if p["strategy"] == "single"]
    assert [bool(p["host_cache"]) for p in singles] == [False, True]
    assert "recommended: single --minibatch on 1 worker(s)" in out
    assert f"run it: {best['command']}" in out
    cache = best["host_cache"]
    row = next(line for line in out.splitlines() if "minibatch=True" in line)
    assert f"8 rows (2.1 KiB), {cache['hit_rate']:.0%} hits, misses from disk" in row

    words = shlex.split(best["command"])
    assert words[:2] == ["graphscale", "train"] and "--minibatch" in words
    args = build_parser(words[1:]).parse_args(words[1:])
    ran = build_config(overrides_from_args(args))
    result = advise(build_parser(argv).parse_args(argv))
    predicted = result["configs"][result["recommended"]]
    assert is_sampled_single(predicted) and is_sampled_single(ran)
    # where the advice was computed, not what the run trains; the device: the line names advise's (cpu)
    skip = ("cache_dir", "progress")
    assert ({k: v for k, v in asdict(ran).items() if k not in skip}
            == {k: v for k, v in asdict(predicted).items() if k not in skip})
    assert device_kind(ran) == device_kind(predicted) == "cpu"


def test_strategy_auto_runs_single_minibatch_when_it_is_recommended(tmp_path, monkeypatch, capsys):
    """``train --strategy auto`` takes the recommendation's ``--minibatch`` with its strategy."""
    from graphscale.advise import auto, calibrate, command

    base = build_config({"data": {"dataset": SBM}, "model": {"name": "sage"}, "progress": False,
                         "cache_dir": str(tmp_path / "cache")})
    configs = candidates(base, 2)
    best = next(i for i, c in enumerate(configs) if is_sampled_single(c))
    from graphscale.cost.prediction import Prediction

    predictions = [Prediction(c.strategy.name, c.strategy.workers) for c in configs]
    monkeypatch.setattr(calibrate, "calibrated_profile", lambda *a, **k: synthetic())
    monkeypatch.setattr(command, "rank", lambda *a, **k: {"predictions": predictions, "configs": configs,
                                                          "recommended": best})
    overrides, _ = auto.resolve({"data": {"dataset": SBM}, "model": {"name": "sage"},
                                 "strategy": {"name": "auto", "workers": 2}})
    assert overrides["strategy"] == {"name": "single", "workers": 1, "minibatch": True}
    assert "--strategy auto: single --minibatch on 1 worker(s)" in capsys.readouterr().err
    assert build_config(overrides).strategy.minibatch


def test_calibration_probes_single_minibatch_on_its_own_line(tmp_path, monkeypatch):
    """A profile calibrated before single's mini-batch mode was a candidate has no line for it: the probes run for
    it alone, under its own key."""
    from graphscale.advise import calibrate
    from graphscale.advise.configs import model_key

    base = build_config({"data": {"dataset": SBM}, "model": {"name": "sage"}, "progress": False,
                         "cache_dir": str(tmp_path / "cache")})
    machine = synthetic()
    machine.calibration = {model_key(base): {run_key(c): {"intercept_s": 0.0, "slope": 1.0}
                                             for c in candidates(base, 2) if not is_sampled_single(c)}}
    asked = []
    monkeypatch.setattr(calibrate, "calibrate", lambda machine, config, workers, tiny=False, strategies=None,
                        warn=None: asked.extend(strategies) or {})
    assert calibrate.ensure_calibrated(machine, base, 2)
    assert asked == ["single --minibatch"]


def _epoch_waits(env, config, data) -> tuple[int, int]:
    """The run's worker: the collectives and receives of its epoch 0 (``Comm``'s log, ``DistEnv.receives``)."""
    from graphscale.testing.distributed import train_epochs

    def reset(_epoch):
        env.comm_log, env.receives = [], 0

    try:
        train_epochs(env, config, data, 0, reset)
        return len(env.comm_log), env.receives
    finally:
        env.comm_log = None


def test_the_predicted_collectives_are_the_runs(tmp_path):
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    counts = launch(_epoch_waits, 1, config, prepare_data(copy.deepcopy(config)), device="cpu", timeout_s=120)
    assert [tuple(c) for c in counts] == [(prediction.collectives, 0)] and prediction.messages == 0


def test_on_cuda_the_hot_row_cache_is_host_memory_beside_the_gpus(tmp_path):
    """On CUDA the worker's cache lives in host memory: out of the tracked (GPU) figure, in its own host bytes."""
    config = _config(tmp_path)
    cpu = predict_config(copy.deepcopy(config), synthetic("cpu"))
    config.device = "cuda"
    cuda_machine = synthetic("cuda")
    cuda = predict_config(copy.deepcopy(config), cuda_machine)
    cache = cpu.host_cache["bytes"]
    assert cuda.host_cache == cpu.host_cache and cache > 0
    assert cuda.memory == cpu.memory - cache and cuda.worker_host_memory == cpu.worker_host_memory + cache
    assert cuda.os_memory == cuda.worker_host_memory + cuda_machine.process_rss

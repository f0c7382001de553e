"""graphscale advise: every strategy's predicted bytes equal the Ledger of a short real run (exact), predicted
memory against the tracked peak, and bad input as one-line errors."""

import copy
import json

import pytest

from graphscale.advise.configs import predict_config
from graphscale.advise.profile import load_profile, save_profile
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.cost.machine import synthetic
from graphscale.run import run

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"
STRATEGIES = ["single", "graph-parallel", "offload", "pipeline", "task-parallel", "model-averaging",
              "data-parallel", "split-parallel"]
#: predicted / tracked peak memory per worker lies in this range on the 400-vertex SBM (deterministic tracked
#: figures: measured 0.95-1.2x for the full-graph strategies; the mini-batch ones over-predict up to 4.5x, the
#: model reserving the feature rows of a whole batch)
MEMORY_RANGE = {"full": (0.75, 1.4), "minibatch": (0.75, 5.0)}


def _config(name: str, tmp_path):
    strategy = {"name": name, "workers": 1 if name == "single" else 2}
    if name == "model-averaging":
        strategy["parts"] = 2
    minibatch = name in ("data-parallel", "split-parallel")
    if minibatch:
        strategy["batch_size"] = 64
    return build_config({"data": {"dataset": SBM}, "strategy": strategy, "model": {"hidden": 8},
                         "optim": {"epochs": 1 if minibatch else 2}, "cache_dir": str(tmp_path / "cache"),
                         "progress": False})


@pytest.mark.parametrize("name", STRATEGIES)
def test_predicted_bytes_equal_the_ledger_and_memory_is_bounded(name, tmp_path):
    config = _config(name, tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    report = run(config)
    ledger = {k: v for k, v in report["final"]["bytes_per_epoch"].items() if v}
    assert prediction.bytes == ledger
    measured = max(report["final"]["peak_memory_per_worker"])
    low, high = MEMORY_RANGE["minibatch" if name in ("data-parallel", "split-parallel") else "full"]
    assert low <= prediction.memory / measured <= high, (prediction.memory, measured)


def _collectives_worker(env, config, data, epoch: int) -> tuple[int, int]:
    """One worker: set the strategy up as a run does, train epochs ``0..epoch``; the collectives (``Comm``'s log:
    collectives and barriers) and the point-to-point receives (``DistEnv.receives``) of the last one."""
    from graphscale.testing.distributed import train_epochs

    def reset(_epoch):
        env.comm_log, env.receives = [], 0

    try:
        train_epochs(env, config, data, epoch, reset)
        return len(env.comm_log), env.receives
    finally:
        env.comm_log = None


@pytest.mark.parametrize("name", STRATEGIES)
def test_predicted_collectives_equal_the_runs(name, tmp_path):
    """The synchronising collectives and receives each prediction prices (counted from the strategy's plan) are
    those a worker's training epoch issues."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(name, tmp_path)
    prediction = predict_config(copy.deepcopy(config), synthetic())
    data = prepare_data(config)
    epoch = 1 if prediction.bytes_epoch is None else prediction.bytes_epoch
    counts = launch(_collectives_worker, config.strategy.workers, config, data, epoch, device="cpu", timeout_s=120)
    waits = prediction.waits or [0] * config.strategy.workers
    assert [tuple(c) for c in counts] == [(prediction.collectives, w) for w in waits]
    assert prediction.messages == prediction.collectives + max(waits)
    if name in ("pipeline", "task-parallel"):
        assert max(waits) > 0


@pytest.mark.parametrize("workers,width", [(3, 1), (4, 2)])
def test_pipeline_receives_per_stage_equal_the_runs(workers, width, tmp_path):
    """Every stage's receives (:func:`stage_receives`, what the prediction prices) are its worker's in a run: a
    middle stage of a 3-stage pipeline receives twice per chunk, and a hybrid group's members as a pure stage's."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data
    from graphscale.strategies.pipeline.predict import stage_receives
    from graphscale.strategies.pipeline.strategy import num_chunks, num_stages

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8, "layers": 3},
                           "strategy": {"name": "pipeline", "workers": workers, "hybrid_width": width},
                           "optim": {"epochs": 2}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    stages, chunks = num_stages(config), num_chunks(config)
    assert stages == workers // width
    counts = launch(_collectives_worker, workers, config, prepare_data(config), 1, device="cpu", timeout_s=180)
    assert [c[1] for c in counts] == [stage_receives(r // width, stages, chunks) for r in range(workers)]
    if stages == 3:
        assert counts[1][1] == 2 * (chunks + 1) == 2 * counts[0][1]


def _advise(tmp_path, capsys, *extra):
    code = main(["advise", "--dataset", SBM, "--workers", "2", "--synthetic-profile", "--cache-dir",
                 str(tmp_path / "cache"), *extra])
    return code, capsys.readouterr()


def test_advise_ranks_every_strategy_and_writes_json(tmp_path, capsys):
    code, out = _advise(tmp_path, capsys, "--json", str(tmp_path / "advice.json"))
    assert code == 0
    assert "recommended:" in out.out and "run it: graphscale train --strategy" in out.out
    advice = json.loads((tmp_path / "advice.json").read_text())
    assert {p["strategy"] for p in advice["predictions"]} == set(STRATEGIES)
    best = advice["predictions"][advice["recommended"]]
    assert best["fits"] and best["command"].startswith("graphscale train")


def test_a_budget_nothing_fits_names_the_smallest_requirement(tmp_path, capsys):
    code, out = _advise(tmp_path, capsys, "--device-memory", "1KiB")
    assert code == 2
    line = out.err.strip()
    assert "\n" not in line and "no configuration fits" in line and "smallest requirement" in line
    assert "--device-memory" in line


def test_an_unknown_dataset_is_one_line(tmp_path, capsys):
    code = main(["advise", "--dataset", "nosuch:xyz", "--synthetic-profile", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--dataset" in err


def test_an_unknown_store_is_one_line(tmp_path, capsys):
    code = main(["advise", "--partitions", str(tmp_path / "missing"), "--synthetic-profile"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--partitions" in err


def test_a_profile_from_another_host_is_stale(tmp_path):
    machine = synthetic()
    machine.host = "another-host"
    save_profile(machine, tmp_path / "p.json")
    loaded, why = load_profile(tmp_path / "p.json")
    assert loaded is None and "another-host" in why and "stale" in why and "\n" not in why


def test_a_profile_of_an_older_version_is_measured_again_with_a_warning(tmp_path, monkeypatch):
    """A cached profile without the host costs (version 3) is refused in one line and measured again."""
    from graphscale.advise import profile
    from graphscale.cost.machine import HOST_COSTS

    old = synthetic().to_dict()
    old["version"] = 3
    for key in HOST_COSTS:
        old.pop(key)
    path = profile.profile_path(tmp_path, "cpu")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    warnings = []
    monkeypatch.setattr(profile, "measure", lambda device, tiny=False: synthetic(device))
    machine = profile.cached_profile(tmp_path, "cpu", warn=warnings.append)
    assert machine.version == profile.PROFILE_VERSION == 5 and machine.block_edge_s > 0
    assert len(warnings) == 1 and "version 3, not 5" in warnings[0] and "\n" not in warnings[0]
    assert load_profile(path)[0] is not None  # the new one is cached


def test_predicted_os_memory_adds_the_process_baseline(tmp_path):
    machine = synthetic()
    prediction = predict_config(_config("graph-parallel", tmp_path), machine)
    assert prediction.os_memory == prediction.memory + machine.process_rss


def test_fixed_costs_scale_with_the_passes():
    from graphscale.cost.pricing import layer_seconds

    machine = synthetic()
    one = layer_seconds(machine, 0, 0, [8, 8], [8, 4])
    four = layer_seconds(machine, 0, 0, [8, 8], [8, 4], calls=4)
    assert one == pytest.approx(2 * machine.layer_call_s) and four == pytest.approx(4 * one)


def test_spearman():
    from graphscale.bench.tools.advise import spearman

    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1], [2]) is None and spearman([1, 1], [1, 2]) is None


def test_bench_advise_prints_predicted_against_measured(tmp_path, capsys, monkeypatch, train_in_process):
    from graphscale.bench.tools import advise as bench_advise

    monkeypatch.setattr(bench_advise, "train_once", train_in_process)  # the table, not fresh processes' figures
    code = main(["bench", "advise", "--datasets", SBM, "--strategies", "single,graph-parallel", "--epochs", "2",
                 "--warmup", "1",
                 "--hidden", "8", "--synthetic-profile", "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert code == 0
    assert "single" in out and "graph-parallel" in out and "Spearman" in out
    assert out.count(" yes ") >= 2  # bytes predicted exactly


def test_train_strategy_auto_records_the_prediction(tmp_path, capsys):
    from graphscale.advise.profile import profile_path

    cache = tmp_path / "cache"
    save_profile(synthetic(), profile_path(cache, "cpu"))
    out = tmp_path / "run.json"
    code = main(["train", "--strategy", "auto", "--workers", "2", "--dataset", SBM, "--hidden", "8", "--epochs", "2",
                 "--cache-dir", str(cache), "--json", str(out), "--no-progress"])
    assert code == 0
    report = json.loads(out.read_text())
    advice = report["advise"]
    assert report["config"]["strategy"]["name"] == advice["predicted"]["strategy"]
    assert advice["predicted"]["fits"] and advice["measured"]["seconds"] > 0
    assert "advise predicted" in capsys.readouterr().out


def test_a_worker_is_priced_with_its_threads_and_the_co_run_slowdown():
    from dataclasses import replace

    from graphscale.cost.pricing import layer_seconds, worker_scale, worker_threads

    machine = replace(synthetic(), cores=4, thread_speedup=2.5, corun_slowdown=1.5, layer_call_s=0.0)
    assert [worker_threads(machine, w) for w in (1, 2, 4, 8)] == [4, 2, 1, 1]
    assert worker_scale(machine, 1) == pytest.approx(1 / 2.5)  # all 4 threads: the measured speedup
    assert worker_scale(machine, 2) == pytest.approx(1.5 / 1.5)  # 2 threads: halfway to it, times the co-run
    assert worker_scale(machine, 4) == pytest.approx(1.5)
    one = layer_seconds(machine, 1000, 5000, [16, 8], [8, 4], workers=1)
    assert layer_seconds(machine, 1000, 5000, [16, 8], [8, 4], workers=4) == pytest.approx(one * 2.5 * 1.5)


def test_independent_workers_are_priced_with_the_free_co_run_slowdown():
    """Workers that do not synchronise inside the work (model-averaging's) pay ``corun_free``, not the lock-step
    ``corun_slowdown``; one worker pays neither; model-averaging's prediction uses it."""
    from dataclasses import replace

    from graphscale.cost.pricing import layer_seconds, worker_scale

    machine = replace(synthetic(), cores=4, thread_speedup=2.5, corun_slowdown=1.5, corun_free=1.2, layer_call_s=0.0)
    assert worker_scale(machine, 4, independent=True) == pytest.approx(1.2)
    assert worker_scale(machine, 1, independent=True) == worker_scale(machine, 1)
    lockstep = layer_seconds(machine, 1000, 5000, [16, 8], [8, 4], workers=4)
    assert layer_seconds(machine, 1000, 5000, [16, 8], [8, 4], workers=4, independent=True) == \
        pytest.approx(lockstep * 1.2 / 1.5)


def test_model_averaging_prices_its_workers_as_independent(tmp_path):
    from dataclasses import replace

    config = _config("model-averaging", tmp_path)
    base = replace(synthetic(), cores=2, corun_slowdown=2.0, corun_free=1.0)
    lockstep = predict_config(copy.deepcopy(config), replace(base, corun_free=2.0)).seconds
    assert predict_config(copy.deepcopy(config), base).seconds < lockstep


def test_collectives_are_priced_at_the_profiles_sync_cost():
    from dataclasses import replace

    from graphscale.cost.pricing import transfer_seconds

    machine = replace(synthetic(), sync_s=3e-3, collective_latency_s=1e-4)
    assert transfer_seconds(machine, 0, 5) == pytest.approx(5 * 3e-3)
    assert transfer_seconds(replace(machine, sync_s=0.0), 0, 5) == pytest.approx(5 * 1e-4)


def test_the_profile_measures_every_figure_and_says_how(monkeypatch):
    from graphscale.advise import profile
    from graphscale.advise.profile import measure
    from graphscale.distributed.launch import cpu_count

    monkeypatch.setattr(profile, "free_slowdown", lambda alone, free: 1.37)  # what becomes corun_free
    machine = measure("cpu", tiny=True)
    assert machine.threads == 1 and machine.cores == cpu_count()
    for key in ("threads", "thread_speedup", "sync", "load_factor", "collective", "fixed_costs", "elementwise",
                "spmm", "blocks", "sampling", "host_transfer"):
        assert machine.how[key]
    assert machine.block_edge_s > 0 and machine.sample_edge_s > 0 and machine.host_transfer_bandwidth > 0
    assert "corun_free" in machine.how["sync"] and machine.corun_free == 1.37  # free_slowdown's, below
    assert "slope = corun_slowdown" in machine.how["sync"] and "median / best" in machine.how["load_factor"]


def test_a_host_cost_line_never_prices_work_free():
    """cost_line: the line through two probes; a noisy pair (the small probe not faster than the large one) falls
    back to the large probe's average cost per unit, a negative intercept to 0."""
    from graphscale.advise.host_costs import cost_line

    assert cost_line((100.0, 1100.0), (0.3, 1.3)) == pytest.approx((0.2, 0.001))
    assert cost_line((100.0, 1100.0), (1.5, 1.1)) == (0.0, 1.1 / 1100.0)
    assert cost_line((100.0, 1100.0), (1.1, 1.1)) == (0.0, 1.1 / 1100.0)
    assert cost_line((100.0, 1100.0), (0.05, 1.1))[0] == 0.0


def test_the_sync_line_recovers_a_known_slope_and_intercept():
    """sync_line on synthetic timings: co-run steps on the line ``sync + slowdown * alone`` give back both, and
    the clamps engage only outside their range."""
    from graphscale.advise.profile import SYNC_WORK, sync_line

    small, large = SYNC_WORK
    alone = {small: 0.002, large: 0.012}
    co = {k: 0.0005 + 1.25 * t for k, t in alone.items()}
    assert sync_line(alone, co, 1e-5) == (pytest.approx(0.0005), pytest.approx(1.25))
    assert sync_line(alone, co, 0.001)[0] == pytest.approx(0.001)  # intercept below the bare latency: the latency
    faster = {k: 0.003 + 0.5 * t for k, t in alone.items()}  # slope 0.5: clamped to 1, intercept follows
    assert sync_line(alone, faster, 1e-5) == (pytest.approx(0.003 + 0.5 * 0.002 - 0.002), pytest.approx(1.0))
    slower = {k: 0.004 + 3.0 * t for k, t in alone.items()}  # slope 3: clamped to 2
    assert sync_line(alone, slower, 1e-5) == (pytest.approx(0.004 + 3.0 * 0.002 - 2.0 * 0.002), pytest.approx(2.0))


def test_the_free_co_run_slowdown_is_the_slope_without_the_collective():
    """free_slowdown: the slope of the slower worker's steps without the all-reduce against the alone ones,
    clamped as sync_line's (a fixed per-step offset, such as a collective's, does not enter it)."""
    from graphscale.advise.profile import SYNC_WORK, free_slowdown

    small, large = SYNC_WORK
    alone = {small: 0.002, large: 0.012}
    assert free_slowdown(alone, {k: 0.0005 + 1.1 * t for k, t in alone.items()}) == pytest.approx(1.1)
    assert free_slowdown(alone, {k: 0.5 * t for k, t in alone.items()}) == 1.0
    assert free_slowdown(alone, {k: 3.0 * t for k, t in alone.items()}) == 2.0


def test_the_load_factor_is_median_over_best():
    from graphscale.advise.profile import load_factor_of

    assert load_factor_of([0.02, 0.01, 0.03, 0.04, 0.025]) == pytest.approx(2.5)
    assert load_factor_of([0.01, 0.01, 0.05]) == pytest.approx(1.0)  # a quiet median: no inflation


def test_bench_advise_refuses_a_warmup_without_measured_epochs(tmp_path, capsys):
    code = main(["bench", "advise", "--datasets", SBM, "--epochs", "3", "--warmup", "3", "--synthetic-profile",
                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--warmup" in err


def test_task_parallel_receives_per_worker_equal_the_runs(tmp_path):
    """A T group of 2 ranks (3 workers, ``--t-workers 2``, 2 subgraphs): the receives the prediction prices per worker
    (routed over the epoch's shuffle) are each worker's in a run."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "task-parallel", "workers": 3, "t_workers": 2, "subgraphs": 2},
                           "optim": {"epochs": 2}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    prediction = predict_config(copy.deepcopy(config), synthetic())
    assert prediction.options["t_workers"] == 2 and len(prediction.waits) == 3
    counts = launch(_collectives_worker, 3, config, prepare_data(config), 1, device="cpu", timeout_s=180)
    assert [c[1] for c in counts] == prediction.waits
    assert len(set(prediction.waits)) > 1  # the workers' receives differ: a per-worker count, not a constant


def _host_bytes_worker(env, config, data) -> int:
    """One offload worker set up as a run does: the bytes of the host arrays it maps."""
    import torch

    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model
    from graphscale.registry import STRATEGIES

    model = build_model(config.model, input_width(config.data.features, data.num_features), data.num_classes,
                        seed=config.seed, dtype=getattr(torch, config.dtype))
    strategy = STRATEGIES.get("offload")()
    strategy.setup(data, model, env, config)
    try:
        return strategy.host.nbytes()
    finally:
        strategy.teardown()


def test_offload_host_memory_is_the_host_arrays_every_worker_maps(tmp_path):
    """offload's ``host_memory`` (counted in ``os_memory``, not in the device-side ``memory``) is the bytes of the
    host arrays each worker of a run maps."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config("offload", tmp_path)
    machine = synthetic()
    prediction = predict_config(copy.deepcopy(config), machine)
    mapped = launch(_host_bytes_worker, 2, config, prepare_data(config), device="cpu", timeout_s=120)
    assert prediction.host_memory > 0 and list(mapped) == [prediction.host_memory] * 2
    assert prediction.os_memory == prediction.memory + prediction.host_memory + machine.process_rss


def test_model_averaging_prices_the_rows_its_step_runs(tmp_path):
    """A part's training step runs on every local vertex (home and halo): :func:`trained_rows` of each part's
    ``meta.json`` counts are the destination rows of the block the strategy builds from that part."""
    from graphscale.partition.store import read_store_meta
    from graphscale.prepare import prepare_data
    from graphscale.strategies.model_averaging.predict import trained_rows

    data = prepare_data(_config("model-averaging", tmp_path))
    parts = read_store_meta(data.path)["parts"]
    for j, part in enumerate(parts):
        local = data.open_partition(j)
        assert trained_rows(part) == local.graph.indptr.numel() - 1 > int(part["num_inner"])


def test_pipeline_halo_rows_are_the_blocks_gathered_rows():
    """:func:`halo_rows` (what pipeline's prediction prices each chunk's input side over) counts, per chunk, the
    halo rows of the block :meth:`ChunkPlan.build` gives it, without building the blocks."""
    import torch

    from graphscale.strategies.pipeline.plan import ChunkPlan, halo_rows
    from graphscale.testing import random_graph

    graph = random_graph(500, 6.0, num_features=4, seed=0)
    chunk_of = torch.randint(0, 4, (500,), generator=torch.Generator().manual_seed(0))
    counts = halo_rows(graph, chunk_of)
    assert counts == [b.halo_ids.numel() for b in ChunkPlan.build(graph, chunk_of).blocks]
    assert halo_rows(graph, torch.zeros(500, dtype=torch.int64)) == [0]  # one chunk gathers nothing


def test_layer_sources_price_the_input_side_only():
    """``sources`` rows (a chunked block's gathered neighbour rows too) add the input side's elementwise pass and,
    for a layer that transforms first (the layers' own choice, ``nn.order``), its dense product; the output side
    stays on ``rows``."""
    from graphscale.cost.pricing import layer_seconds, worker_scale
    from graphscale.nn.order import cheaper_to_transform_first

    machine = synthetic()
    rows, halo, d, o = 1000, 300, 512, 4
    for src in (rows, rows + halo):  # a narrowing layer transforms first, a widening one aggregates first
        assert cheaper_to_transform_first(5000, src, rows, d, o, False, True, "cpu")
        assert not cheaper_to_transform_first(5000, src, rows, o, d, False, True, "cpu")
    base = layer_seconds(machine, rows, 5000, [d], [o])
    assert layer_seconds(machine, rows, 5000, [d], [o], sources=rows) == base
    extra = worker_scale(machine, 1) * (2 * (2.0 * halo * d * o / machine.gemm_flops) + halo * d * machine.elementwise_s)
    assert layer_seconds(machine, rows, 5000, [d], [o], sources=rows + halo) - base == pytest.approx(extra)
    widening = layer_seconds(machine, rows, 5000, [o], [d], sources=rows + halo) - layer_seconds(machine, rows, 5000,
                                                                                                    [o], [d])
    assert widening == pytest.approx(worker_scale(machine, 1) * halo * o * machine.elementwise_s)


def test_model_averaging_and_pipeline_predictions_price_their_rows(tmp_path, monkeypatch):
    """The terms the two predictions add are used: model-averaging's time and memory are priced over
    :func:`trained_rows` (home and halo rows; the home rows alone price less), pipeline's time over each chunk's
    gathered halo rows too (none priced less)."""
    from graphscale.strategies.model_averaging import predict as ma
    from graphscale.strategies.pipeline import predict as pp

    machine = synthetic()
    runs = {}
    for name, module, attr, stand_in in (
            ("model-averaging", ma, "trained_rows", lambda part: int(part["num_inner"])),
            ("pipeline", pp, "chunk_halo_rows", lambda data: [0])):
        config = _config(name, tmp_path)
        priced = predict_config(copy.deepcopy(config), machine)
        with monkeypatch.context() as m:
            m.setattr(module, attr, stand_in)
            runs[name] = (priced, predict_config(copy.deepcopy(config), machine))
    priced, home_only = runs["model-averaging"]
    assert priced.seconds > home_only.seconds and priced.memory > home_only.memory
    priced, no_halo = runs["pipeline"]
    assert priced.seconds > no_halo.seconds


def test_a_cpu_budget_holds_each_workers_share_of_the_host_arrays():
    """On CPU the budget is host memory: offload's shared host arrays count once per host, split over its workers;
    a CUDA budget holds the device-side ``memory`` alone."""
    from graphscale.cost.prediction import Prediction

    def offload(budget, device):
        return Prediction("offload", 2, memory=100, host_memory=61).check_fit(budget, device)

    assert offload(131, "cpu").fits and not offload(130, "cpu").fits  # 100 + ceil(61 / 2)
    assert "needs 131 B per worker" in offload(130, "cpu").reason
    assert offload(100, "cuda").fits and not offload(99, "cuda").fits


def test_the_predicted_resident_set_leaves_the_gpus_bytes_out_on_cuda(tmp_path):
    """``os_memory`` is what the OS counts: on CPU the tracked ``memory`` is in it, on CUDA the GPU holds that."""
    config = _config("single", tmp_path)
    cpu = predict_config(copy.deepcopy(config), synthetic("cpu"))
    config.device = "cuda"
    cuda_machine = synthetic("cuda")
    cuda = predict_config(copy.deepcopy(config), cuda_machine)
    assert cpu.memory > 0 and cpu.os_memory == cpu.memory + cpu.host_memory + synthetic("cpu").process_rss
    assert cuda.memory > 0 and cuda.os_memory == cuda.host_memory + cuda_machine.process_rss

"""``graphscale advise`` under a host budget below the data: the mini-batch strategies are priced with the hot-row
cache ``--host-memory`` sizes (:mod:`graphscale.cost.host_rows`). The cache's rows and the epoch's host reads and
hits equal a real run's, the predicted memory bounds the tracked peak as for the other predictions, the misses of
a table beyond the cache's share are priced as disk reads, and ``advise`` names the cache and its hit rate."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from graphscale.advise.configs import predict_config
from graphscale.cli import main
from graphscale.config import build_config
from graphscale.cost.host_rows import DISK_SPAN_READ_S, RESIDENT_BYTES_PER_VERTEX
from graphscale.cost.machine import synthetic
from graphscale.metrics.units import format_bytes
from graphscale.run import run

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"
#: a quarter of it holds 8 of the 400 float32 rows of 16 features
TINY = "2KiB"
#: predicted / tracked peak per worker of the mini-batch strategies (tests/test_advise.py's range)
RANGE = (0.75, 5.0)


def _config(name: str, tmp_path, host_memory: str = TINY):
    return build_config({"data": {"dataset": SBM}, "model": {"hidden": 8}, "optim": {"epochs": 1},
                         "strategy": {"name": name, "workers": 2, "batch_size": 64, "partitioner": "restream"},
                         "cache_dir": str(tmp_path / "cache"), "progress": False, "host_memory": host_memory})


def _epoch_reads(env, config, data) -> tuple[int, int, int]:
    """One worker: its hot-row cache's capacity and the host rows it read and hit in epoch 0."""
    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model
    from graphscale.registry import STRATEGIES

    model = build_model(config.model, input_width(config.data.features, data.num_features), data.num_classes,
                        seed=config.seed, dtype=getattr(torch, config.dtype))
    strategy = STRATEGIES.get(config.strategy.name)()
    strategy.setup(data, model, env, config)
    rows = strategy.host_rows
    rows.hits = rows.misses = 0  # the setup's cache fills are not the epoch's
    strategy.train_epoch(0)
    strategy.teardown()
    return rows.capacity, rows.hits + rows.misses, rows.hits


@pytest.mark.parametrize("name", ["data-parallel", "split-parallel"])
def test_a_tiny_host_budget_prices_the_hot_row_cache_the_run_holds(name, tmp_path):
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(name, tmp_path)
    machine = synthetic()
    prediction = predict_config(copy.deepcopy(config), machine)
    cache = prediction.host_cache
    runs = launch(_epoch_reads, 2, config, prepare_data(copy.deepcopy(config)), device="cpu", timeout_s=120)
    assert {capacity for capacity, _, _ in runs} == {cache["rows"]} == {8}
    assert (cache["reads"], cache["reads"] - cache["misses"]) == tuple(map(sum, zip(*runs)))[1:]
    assert 0 < cache["hit_rate"] < 1 and cache["from_disk"] and cache["bytes"] == 8 * 64 + 4 * 400
    assert prediction.worker_host_memory == int(RESIDENT_BYTES_PER_VERTEX * 400)
    assert prediction.os_memory == prediction.memory + prediction.worker_host_memory + machine.process_rss
    assert prediction.need() == prediction.memory + prediction.worker_host_memory

    # the same run with a budget that holds the table: no cache, no disk reads, less time
    roomy = predict_config(_config(name, tmp_path / "roomy", "1GiB"), machine)
    assert roomy.host_cache["rows"] == 0 and not roomy.host_cache["from_disk"]
    assert prediction.memory - roomy.memory == cache["bytes"]
    assert prediction.modelled_seconds - roomy.modelled_seconds >= DISK_SPAN_READ_S > 0  # a span read at least

    report = run(config)
    measured = max(report["final"]["peak_memory_per_worker"])  # the tracked peak, the host cache in it
    assert RANGE[0] <= prediction.memory / measured <= RANGE[1], (prediction.memory, measured)


def test_advise_names_the_cache_and_its_hit_rate(tmp_path, capsys):
    """Wide rows, so that METIS (the partitioner advise's candidates take) fits the budget and the features do not:
    a quarter of 40 MiB holds 320 of the 400 rows of 8,192 float32 features."""
    out_json = tmp_path / "advice.json"
    code = main(["advise", "--dataset", "sbm:nodes=400,degree=6,features=8192,seed=1", "--model", "gcn",
                 "--workers", "2", "--host-memory", "40MiB", "--device-memory", "4GiB", "--synthetic-profile",
                 "--cache-dir", str(tmp_path / "cache"), "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0
    caches = {p["strategy"] + (" --minibatch" if p["options"].get("minibatch") else ""): p["host_cache"]
              for p in json.loads(out_json.read_text())["predictions"]}
    for name in ("single --minibatch", "data-parallel", "split-parallel"):
        cache = caches[name]
        assert cache["rows"] == 320 and cache["from_disk"] and 0 < cache["hit_rate"] < 1, name
        line = next(line for line in out.splitlines()
                    if (" minibatch=True " in line if name == "single --minibatch" else f" {name} " in line))
        assert (f"320 rows ({format_bytes(cache['bytes'])}), {cache['hit_rate']:.0%} hits, misses from disk"
                in line), line
    assert caches["single"] == {} and "host cache" in out
    assert "--host-memory 40MiB" in next(line for line in out.splitlines() if line.startswith("run it: "))


@pytest.mark.parametrize("buffers", [1, 2])
def test_misses_are_priced_a_superbatch_at_a_time(tmp_path, monkeypatch, buffers):
    """Each worker's batches grouped while their distinct misses and held bytes fit one superbatch's bytes (the
    share over the buffers held at once; a batch that does not fit opens the next group), each group's misses
    priced by the reader's spans."""
    import numpy as np

    from graphscale.cost import host_rows
    from graphscale.data import superbatch
    from graphscale.data.formats import save_graph_dir
    from graphscale.data.handle import HOST_SHARED, DataHandle
    from graphscale.data.row_file import plan_spans, span_rows
    from graphscale.testing import random_graph

    graph = random_graph(400, avg_degree=4.0, num_features=16, num_classes=3, seed=0)  # float32 rows of 64 bytes
    folder = save_graph_dir(graph, tmp_path / "graph")
    data = DataHandle(HOST_SHARED, graph.summary(), path=str(folder))
    monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", buffers)
    bound = 1024 // buffers
    config = _config("data-parallel", tmp_path, "8KiB")  # a cache of 32 rows, superbatches of 1 KiB over the buffers
    price = host_rows.HostRowPrice(data, config, 4)
    assert price.on_disk and price.capacity == 32 and price.stage_bytes == bound
    rng = np.random.default_rng(0)
    batches = [torch.from_numpy(rng.integers(0, 400, size)) for size in (6, 3, 9, 40, 2, 2)]
    groups, group, held = [], torch.zeros(0, dtype=torch.int64), 0
    for ids in batches:
        missed = torch.unique(ids)[~price.cached[torch.unique(ids)]]
        union = torch.unique(torch.cat([group, missed]))
        if held and held + 100 + 64 * union.numel() > bound:
            groups.append(group)
            union, held = missed, 0
        group, held = union, held + 100
        assert price.read(ids, worker=1, held=100) == ids.numel() - int(price.cached[ids].sum())
    groups.append(group)
    assert 2 < len(groups) < len(batches)
    expected = 0.0
    for ids in groups:
        starts = plan_spans(ids.numpy(), 64)
        expected += (starts.size - 1) * host_rows.DISK_SPAN_READ_S
        expected += 64 * span_rows(ids.numpy(), starts) / host_rows.DISK_READ_BANDWIDTH
    assert price.disk_seconds(1) == pytest.approx(expected, rel=1e-12) and price.disk_seconds(0) == 0.0

"""Mini-batch training from a memory-mapped graph directory equals the in-memory run, whatever the host budget.

The mini-batch strategies (``single --minibatch``, ``data-parallel``, ``split-parallel``) read feature rows from a
mapped graph directory through a hot-row cache sized from ``--host-memory``, gather the next batch in a background
thread, and evaluate with per-layer tables that go to a temporary file over their share of the budget. Tiny budgets
make every one of those paths run: caches of a few rows (or none), every evaluation table spilled. Losses and
parameters must be bit for bit those of the same run on the graph in memory; the cache must never hold more rows
than its capacity.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data import superbatch
from graphscale.data.formats import load_graph_dir, save_graph_dir
from graphscale.data.handle import HOST_SHARED, MEMORY, DataHandle
from graphscale.data.row_cache import FEATURE_CACHE_SHARE, HotRowCache, advise_random, cache_capacity, prefetched
from graphscale.data.spill import TableMemory
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.strategies import minibatch_common
from graphscale.strategies.minibatch_common import host_row_cache
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import random_graph, run_distributed

EPOCHS = 2
#: budgets: none cached (every row read from the file), a few rows, none again (the whole table fits the cache's
#: share: the page cache holds it); evaluation tables spill under the two small ones
BUDGETS = ("64", "1KiB", "1GiB")
BUDGET_BYTES = {"64": 64, "1KiB": 1024, "1GiB": 1 << 30}
#: a superbatch share that lets 1 KiB's superbatches hold a few of these tiny batches each (the default holds one)
WIDE_SUPERBATCH_SHARE = 8.0


def make_graph():
    return random_graph(60, avg_degree=5.0, num_features=6, num_classes=3, seed=0, dtype=torch.float64, isolated=2)


def make_config(name: str, workers: int, model: str, budget: str, cache_dir) -> RunConfig:
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=2, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name=name, workers=workers, fanouts=[3, 3], batch_size=7, minibatch=True,
                                             **({"cache": "pagraph", "cache_fraction": 0.2}
                                                if name == "data-parallel" else {"cache_fraction": 0.1}
                                                if name == "split-parallel" else {})),
                     seed=0, host_memory=budget, cache_dir=str(cache_dir), dtype="float64")


def disk_handle(handle: DataHandle, folder) -> DataHandle:
    """``handle`` (prepared for an in-memory graph) reading the same graph from its graph directory instead."""
    return dataclasses.replace(handle, view=HOST_SHARED, graph=None, path=str(folder))


def train(strategy, data, model, env, config) -> dict:
    strategy.setup(data, model, env, config)
    losses = [strategy.train_epoch(epoch).loss for epoch in range(EPOCHS)]
    out = {"losses": losses, "params": [p.detach().clone() for p in model.parameters()],
           "metrics": strategy.evaluate()}
    rows = getattr(strategy, "rows", None) or getattr(strategy, "host_rows", None)
    if rows is not None:
        out["cache"] = (rows.capacity, rows.ids.numel(), rows.rows.shape[0], rows.hits, rows.misses)
        out["pread"] = None if rows.file is None else rows.file.rows_read  # misses read from the file, deduplicated
        out["superbatches"] = (rows.superbatches, rows.staged_hits)
    evaluator = getattr(strategy, "evaluator", None)
    out["spilled"] = evaluator.tables.spilled if evaluator is not None else 0
    return out


def assert_same_run(disk: dict, memory: dict, tag: str) -> None:
    assert disk["losses"] == memory["losses"], tag
    for p, q in zip(disk["params"], memory["params"]):
        assert torch.equal(p, q), f"{tag}: parameters differ"
    for key, value in memory["metrics"].items():
        assert disk["metrics"][key] == pytest.approx(value, rel=1e-12, abs=1e-12), f"{tag}: {key}"


# ------------------------------------------------------------------ the cache and the prefetch
def test_hot_row_cache_gathers_exact_rows_and_holds_at_most_its_capacity(tmp_path):
    graph = make_graph()
    np.save(tmp_path / "x.npy", graph.x.numpy())
    x = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="r").copy()).to(torch.float32)
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="c"))
    degrees = graph.out_degrees()
    hottest = sorted(range(graph.num_nodes), key=lambda v: (-int(degrees[v]), v))
    ids = torch.tensor([5, 0, 59, 5, 17, 3, 42, 0, 31])
    for capacity in (0, 1, 4, graph.num_nodes, graph.num_nodes + 9):
        cache = HotRowCache(mapped, capacity, degrees if capacity else None, torch.float32)
        held = min(capacity, graph.num_nodes)
        assert cache.rows.shape[0] == cache.ids.numel() == held <= max(capacity, 0)
        assert cache.ids.tolist() == hottest[:held]
        assert torch.equal(cache.gather(ids), x[ids]), capacity
        assert torch.equal(cache.gather(torch.zeros(0, dtype=torch.int64)), x[:0])
        hits = sum(int(v) in set(hottest[:held]) for v in ids)
        assert (cache.hits, cache.misses) == (hits, ids.numel() - hits)
    assert cache_capacity(1000, 48, 60) == int(1000 * FEATURE_CACHE_SHARE) // 48
    assert cache_capacity(1 << 30, 48, 60) == 0  # every row fits: the page cache holds the file, no private copy
    assert cache_capacity(10, 48, 60) == 0
    with pytest.raises(ValueError, match="needs the \\[60\\] degrees"):
        HotRowCache(mapped, 3)
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        HotRowCache(mapped, -1)


def vm_flags(address: int) -> list[str]:
    """The ``VmFlags`` of this process's mapping that holds ``address`` (``/proc/self/smaps``)."""
    inside = False
    for line in open("/proc/self/smaps").read().splitlines():  # noqa: SIM115 - read whole
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            low, high = (int(v, 16) for v in head.split("-"))
            inside = low <= address < high
        elif line.startswith("VmFlags:") and inside:
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise flags are read from Linux's smaps")
def test_a_table_over_the_cache_share_is_advised_random(tmp_path):
    """A feature table larger than the cache's share of the budget is read at random: its mapping carries
    MADV_RANDOM (smaps' ``rr``) and its misses are read from the file with positioned reads, with a cache of a few
    rows or of none; one that fits keeps the kernel's read-around (the page cache holds it) and is read through the
    mapping; the rows gathered are the same."""
    folder = save_graph_dir(make_graph(), tmp_path / "graph")
    for budget, advised in (("64", True), ("1KiB", True), ("1GiB", False)):
        graph = load_graph_dir(folder)
        config = make_config("single", 1, "sage", budget, tmp_path / "cache")
        handle = DataHandle(HOST_SHARED, graph.summary(), path=str(folder), dtype="float64")
        rows = host_row_cache(handle, graph, torch.float64, config)
        assert ("rr" in vm_flags(graph.x.data_ptr())) == advised, budget
        assert (rows.file is not None) == advised, budget  # misses read from x.npy with pread exactly then
        assert torch.equal(rows.gather(torch.arange(60)), make_graph().x), budget
    assert not advise_random(torch.zeros(0))


def test_prefetched_yields_in_order_one_item_ahead():
    started = []

    def produce(i):
        started.append(i)
        return i * i

    seen = []
    for item in prefetched(produce, 5):
        seen.append(item)
        assert len(started) <= len(seen) + 1  # at most one item ahead of the consumer
    assert seen == [0, 1, 4, 9, 16] and started == [0, 1, 2, 3, 4]
    assert list(prefetched(produce, 0)) == []

    def broken(i):
        if i == 2:
            raise RuntimeError("batch 2 failed")
        return i

    with pytest.raises(RuntimeError, match="batch 2 failed"):
        list(prefetched(broken, 4))


def test_table_memory_spills_over_its_limit_to_a_removed_file(tmp_path):
    tables = TableMemory(limit=64, directory=tmp_path / "spill")
    small = tables.empty((2, 4), torch.float64)  # 64 bytes: in memory
    assert tables.spilled == 0 and small.shape == (2, 4)
    big = tables.empty((50, 4), torch.float64)
    assert tables.spilled == 1 and big.shape == (50, 4)
    big[:] = torch.arange(200, dtype=torch.float64).view(50, 4)
    assert torch.equal(big.sum(0), torch.arange(200, dtype=torch.float64).view(50, 4).sum(0))
    assert list((tmp_path / "spill").iterdir()) == []  # the file's name is gone; its space goes with the tensor
    assert TableMemory().fits(1 << 60)


# ------------------------------------------------------------------ single --minibatch
def test_single_minibatch_from_disk_matches_in_memory(tmp_path):
    graph = make_graph()
    folder = save_graph_dir(graph, tmp_path / "graph")
    env = DistEnv.local()
    # GraphSAGE under every budget; GCNII (a learned input map, mapped batch by batch into a spilled table) once
    for model_name, budgets in (("sage", BUDGETS), ("gcnii", ("1KiB",))):
        config = make_config("single", 1, model_name, "1GiB", tmp_path / "cache")
        assert SingleStrategy.data_view_for(config) == HOST_SHARED
        memory = train(SingleStrategy(), graph, build_model(config.model, 6, 3, seed=0, dtype=torch.float64), env,
                       config)
        for budget in budgets:
            tag = f"single/{model_name}/{budget}"
            config = make_config("single", 1, model_name, budget, tmp_path / "cache")
            handle = DataHandle(HOST_SHARED, graph.summary(), path=str(folder), dtype="float64")
            disk = train(SingleStrategy(), handle, build_model(config.model, 6, 3, seed=0, dtype=torch.float64), env,
                         config)
            assert_same_run(disk, memory, tag)
            capacity, ids, rows, hits, misses = disk["cache"]
            assert ids == rows == capacity <= graph.num_nodes, tag
            assert capacity == cache_capacity(BUDGET_BYTES[budget], 6 * 8, graph.num_nodes), tag
            assert misses > 0 if capacity < graph.num_nodes else misses == 0, tag
            assert (0 < disk["pread"] <= misses) if budget != "1GiB" else disk["pread"] is None, tag
            assert (capacity == 5 and hits > 0) if budget == "1KiB" else (capacity == 0 and hits == 0), tag
            assert (disk["spilled"] > 0) == (budget != "1GiB"), tag
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []  # the spilled tables left nothing behind
    config = make_config("single", 1, "sage", "", tmp_path)
    config.strategy.minibatch = False
    assert SingleStrategy.data_view_for(config) == MEMORY
    config.strategy.minibatch, config.data.features = True, "learnable:4"
    assert SingleStrategy.data_view_for(config) == MEMORY


def test_a_cache_whose_misses_go_to_disk_holds_the_first_epochs_most_read_rows(tmp_path):
    """With misses read from disk the cache holds the rows epoch 0's seeded batches read most (ties by degree,
    then id), counted here one read at a time; on this graph that set is not the highest-degree one."""
    from graphscale.data.feature_cache import hotness_order
    from graphscale.data.sampler import MiniBatchLoader, NeighborSampler

    graph = make_graph()
    folder = save_graph_dir(graph, tmp_path / "graph")
    config = make_config("single", 1, "sage", "1KiB", tmp_path / "cache")
    handle = DataHandle(HOST_SHARED, graph.summary(), path=str(folder), dtype="float64")
    strategy = SingleStrategy()
    strategy.setup(handle, build_model(config.model, 6, 3, seed=0, dtype=torch.float64), DistEnv.local(), config)
    assert strategy.rows.file is not None and strategy.rows.capacity == 5  # misses from disk, five rows cached
    loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), 7, seed=0)
    sampler = NeighborSampler(graph, [3, 3], seed=0)
    batches = loader.batches(0)
    reads = {}
    for i, batch in enumerate(batches):
        for v in sampler.sample(batch, batch_key=i)[0].src_ids.tolist():
            reads[v] = reads.get(v, 0) + 1
    degrees = graph.out_degrees().tolist()
    expected = sorted(range(graph.num_nodes), key=lambda v: (-reads.get(v, 0), -degrees[v], v))[:5]
    assert strategy.rows.ids.tolist() == expected
    assert set(expected) != set(hotness_order(graph.out_degrees())[:5].tolist())


def test_single_minibatch_in_superbatches_matches_in_memory(tmp_path, monkeypatch):
    """Batches sampled ahead in superbatches of a few batches each, their misses read together: the same run."""
    graph = make_graph()
    folder = save_graph_dir(graph, tmp_path / "graph")
    env = DistEnv.local()
    config = make_config("single", 1, "sage", "1KiB", tmp_path / "cache")
    memory = train(SingleStrategy(), graph, build_model(config.model, 6, 3, seed=0, dtype=torch.float64), env, config)
    runs, default = {}, minibatch_common.SUPERBATCH_SHARE
    for share, buffers in ((default, 1), (WIDE_SUPERBATCH_SHARE, 1), (2 * WIDE_SUPERBATCH_SHARE, 2)):
        monkeypatch.setattr(minibatch_common, "SUPERBATCH_SHARE", share)
        monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", buffers)  # 2: the next superbatch read ahead
        handle = DataHandle(HOST_SHARED, graph.summary(), path=str(folder), dtype="float64")
        runs[buffers, share] = disk = train(SingleStrategy(), handle,
                                            build_model(config.model, 6, 3, seed=0, dtype=torch.float64), env, config)
        assert_same_run(disk, memory, f"share {share}, {buffers} buffers")
    batches = EPOCHS * -(-int(graph.train_mask.sum()) // 7)
    one, wide = runs[1, default], runs[1, WIDE_SUPERBATCH_SHARE]
    assert runs[2, 2 * WIDE_SUPERBATCH_SHARE]["superbatches"] == wide["superbatches"]  # the same groups
    assert one["superbatches"][0] == batches  # 256 bytes hold one batch a superbatch
    assert 2 * EPOCHS <= wide["superbatches"][0] < batches  # several superbatches an epoch, several batches each
    assert wide["superbatches"][1] == wide["cache"][4] > 0  # every miss of training taken from the staged rows
    assert wide["pread"] < one["pread"]  # rows two batches of a superbatch share are read once


def test_single_sampled_evaluation_from_disk_matches_in_memory(tmp_path):
    """--eval-fanouts: the splits' vertices evaluated on sampled neighbourhoods, the same from the graph directory
    (every budget) as in memory, the same every call; with every neighbour (-1) it is the exact evaluation."""
    graph = make_graph()
    folder = save_graph_dir(graph, tmp_path / "graph")
    env = DistEnv.local()

    def run(data, budget: str, eval_fanouts: list[int]) -> dict:
        config = make_config("single", 1, "sage", budget, tmp_path / "cache")
        config.strategy.eval_fanouts = eval_fanouts
        strategy = SingleStrategy()
        out = train(strategy, data, build_model(config.model, 6, 3, seed=0, dtype=torch.float64), env, config)
        out["again"] = strategy.evaluate()
        return out

    memory = run(graph, "1GiB", [2, 1])
    assert memory["again"] == memory["metrics"]  # a fixed key: the same samples at every evaluation
    for budget in ("64", "1KiB"):
        disk = run(DataHandle(HOST_SHARED, graph.summary(), path=str(folder), dtype="float64"), budget, [2, 1])
        assert disk["losses"] == memory["losses"], budget
        assert disk["metrics"] == memory["metrics"], budget  # the same rows, the same sums: bit for bit
        assert disk["spilled"] == 0, budget  # no layer-wise tables
    exact, every = run(graph, "1GiB", []), run(graph, "1GiB", [-1, -1])
    assert exact["losses"] == every["losses"] == memory["losses"]  # evaluation does not touch training
    for key, value in exact["metrics"].items():
        assert every["metrics"][key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert memory["metrics"]["val_loss"] != exact["metrics"]["val_loss"]  # two neighbours are not all of them


# ------------------------------------------------------------------ data-parallel, split-parallel
def _worker(env: DistEnv, name: str, folder: str, cache_dir: str) -> list[dict]:
    graph = make_graph()
    out = []
    for budget in ("1GiB",) + BUDGETS:
        config = make_config(name, env.world_size, "sage", budget, cache_dir)
        handle = prepare_graph(graph, config, cache_dir)
        data = handle if len(out) == 0 else disk_handle(handle, folder)  # first: the in-memory reference
        model = build_model(config.model, 6, 3, seed=0, dtype=torch.float64)
        out.append(train(STRATEGIES.get(name)(), data, model, env, config))
    share = minibatch_common.SUPERBATCH_SHARE  # superbatches of a few batches each, the next read ahead
    minibatch_common.SUPERBATCH_SHARE = 2 * WIDE_SUPERBATCH_SHARE
    superbatch.SUPERBATCH_BUFFERS = 2
    try:
        config = make_config(name, env.world_size, "sage", "1KiB", cache_dir)
        data = disk_handle(prepare_graph(graph, config, cache_dir), folder)
        model = build_model(config.model, 6, 3, seed=0, dtype=torch.float64)
        out.append(train(STRATEGIES.get(name)(), data, model, env, config))
    finally:
        minibatch_common.SUPERBATCH_SHARE = share
        superbatch.SUPERBATCH_BUFFERS = 1
    return out


@pytest.mark.parametrize("name", ["data-parallel", "split-parallel"])
def test_minibatch_strategies_from_disk_match_in_memory(name, tmp_path):
    """Two workers, each run from the graph directory against the same run on the graph in memory (the data's source
    is all that differs, so this runs on the default kernel path only)."""
    folder = save_graph_dir(make_graph(), tmp_path / "graph")
    results = run_distributed(_worker, 2, name, str(folder), str(tmp_path / "cache"))
    for rank, runs in enumerate(results):
        memory = runs[0]
        assert memory["cache"][0] == 0  # an in-memory graph is read directly
        wide = runs[-1]
        assert_same_run(wide, memory, f"{name}/rank {rank}/superbatches, two buffers")
        assert 1 < wide["superbatches"][0] < runs[2]["superbatches"][0]  # fewer than 1 KiB's one-batch ones
        assert wide["superbatches"][1] > 0
        for budget, disk in zip(BUDGETS, runs[1:]):
            tag = f"{name}/rank {rank}/{budget}"
            assert_same_run(disk, memory, tag)
            capacity, ids, rows, _, misses = disk["cache"]
            assert ids == rows == capacity <= 60, tag
            assert (0 < disk["pread"] <= misses) if budget != "1GiB" else disk["pread"] is None, tag
            assert (disk["spilled"] > 0) == (budget != "1GiB"), tag
        assert [run["cache"][0] for run in runs[1:]] == [0, 5, 0, 5]

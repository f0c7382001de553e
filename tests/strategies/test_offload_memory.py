"""The offload memory model matches the measured peak, the budget option picks the smallest K that fits,
and chunking cuts the peak below graph parallelism's at identical loss (in-process, one worker)."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, RunConfig, StrategyConfig
from graphscale.cost.dims import probe_dims
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.registry import PARTITIONERS
from graphscale.strategies.graph_parallel import GraphParallel
from graphscale.strategies.offload import OffloadStrategy, chunk_budget, layout, plan
from graphscale.strategies.offload.cost import Bandwidths
from graphscale.strategies.offload.memory import choose_chunks, estimate_peak, layout_peak
from graphscale.strategies.offload.plan import two_level_partition
from graphscale.strategies.offload.reorg import reorganize
from graphscale.testing import random_graph
from graphscale.training_store import store_handle, write_training_store


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(model_name: str, recompute: str, chunks: int = 1, budget: str = ""):
    graph = random_graph(400, avg_degree=6.0, num_features=48, num_classes=4, seed=1)
    config = RunConfig(model=ModelConfig(name=model_name, hidden=16, layers=2, dropout=0.5, heads=2),
                       strategy=StrategyConfig(name="offload", chunks=chunks, dedup="reorg", recompute=recompute,
                                               memory_budget=budget))
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
    return graph, config, model


def steady_peak(strategy: OffloadStrategy) -> tuple[int, float]:
    strategy.train_epoch(0)
    stats = strategy.train_epoch(1)  # optimiser state exists from epoch 1 on
    return stats.peak_memory, stats.loss


@pytest.mark.parametrize("model_name,recompute", [("gcn", "hybrid"), ("gat", "recompute")])
def test_model_tracks_measured_peak_and_budget_picks_k(model_name, recompute):
    graph, config, model = make(model_name, recompute)
    env = DistEnv.local()
    measured, estimated, losses = {}, {}, {}
    for k in (1, 2, 4, 8):
        graph, config, model = make(model_name, recompute, chunks=k)
        strategy = OffloadStrategy()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        measured[k], losses[k] = steady_peak(strategy)
        estimated[k] = estimate_peak(graph, strategy.sets.owner, strategy.sets.batch, 1, k, model, strategy.dims,
                                     config, strategy.bandwidths)
        strategy.teardown()
        assert measured[k] <= estimated[k] <= 1.05 * measured[k], (k, measured[k], estimated[k])
    assert all(losses[k] == pytest.approx(losses[1], rel=1e-5) for k in losses)
    assert measured[8] < measured[4] < measured[2] < measured[1]
    # a budget between the modelled peaks of K = 2 and K = 4 picks the smallest K that fits; its measured peak fits
    budget = int(estimated[2] + estimated[4]) // 2
    graph, config, model = make(model_name, recompute, budget=str(budget))
    config.strategy.dedup = "intra"  # the identity schedule, as in `smallest` below
    owner = torch.zeros(graph.num_nodes, dtype=torch.int64)
    strategy = OffloadStrategy()
    strategy.setup(prepare_graph(graph, config), model, env, config)
    dims = strategy.dims
    smallest = next(k for k in range(1, 9) if estimate_peak(
        graph, owner, two_level_partition(graph, 1, k, "metis", owner=owner)[1], 1, k, model, dims, config,
        strategy.bandwidths) <= budget)
    assert strategy.num_chunks == choose_chunks(graph, model, owner, 1, budget, config, dims) == smallest
    assert smallest in (3, 4)
    peak, _ = steady_peak(strategy)
    assert peak <= budget
    strategy.teardown()
    with pytest.raises(ValueError, match="--memory-budget .* too small"):
        choose_chunks(graph, model, owner, 1, 1000, config, strategy.dims)


def test_budget_search_on_the_bounded_planner_equals_the_in_memory_model(tmp_path, monkeypatch):
    """``--memory-budget``'s search plans every candidate ``K`` with the bounded planner (tiny record blocks here,
    so every chunked loop turns) and reads the mapped plans: the very peaks of the in-memory sets and plans, the
    same ``K``, and no scratch folder left behind."""
    graph = random_graph(300, avg_degree=5.0, num_features=24, num_classes=3, seed=3)
    config = RunConfig(model=ModelConfig(name="gcn", hidden=8, layers=2),
                       strategy=StrategyConfig(name="offload", workers=2, dedup="reorg", recompute="auto"))
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
    dims = probe_dims(model, graph.num_features, torch.float32)
    owner = PARTITIONERS.get("random")().partition(graph, 2, seed=0)
    monkeypatch.setattr(plan, "INDUCED_BLOCK_EDGES", 7)
    monkeypatch.setattr(layout, "GATHER_EDGES", 5)
    bw, fits, want = Bandwidths(), {}, {}
    for k in range(1, 5):
        _, chunk = two_level_partition(graph, 2, k, "metis", 0, owner=owner)
        batch = reorganize(graph, owner, chunk, 2, k, dims.widths[0], 4, bw)
        want[k] = estimate_peak(graph, owner, batch, 2, k, model, dims, config, bw, fits)
        folder = tmp_path / f"layout{k}"
        folder.mkdir()
        layout.write_layout(graph, owner, 2, k, "metis", 0, "reorg", dims.widths[0], 4, folder, bw)
        assert layout_peak(graph, folder, model, dims, config, bw, fits) == want[k]
    assert want[4] < want[2] < want[1]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for budget in (int(want[1]), int(want[2] + want[4]) // 2):
        smallest = next(k for k in range(1, 5) if want[k] <= budget)
        assert choose_chunks(graph, model, owner, 2, budget, config, dims, bw, scratch=scratch) == smallest
        assert not any(scratch.iterdir())


def test_chunking_beats_graph_parallel_memory_at_identical_loss(tmp_path):
    graph, config, model = make("gcn", "auto")
    write_training_store(graph, tmp_path / "store", 1)
    gp = GraphParallel()
    gp.setup(store_handle(tmp_path / "store", dtype=str(graph.x.dtype).removeprefix("torch.")), model,
             DistEnv.local(), config)
    gp.train_epoch(0)
    gp_stats = gp.train_epoch(1)
    gp.teardown()
    graph, config, model = make("gcn", "auto", chunks=16)
    strategy = OffloadStrategy()
    strategy.setup(prepare_graph(graph, config), model, DistEnv.local(), config)
    peak, loss = steady_peak(strategy)
    strategy.teardown()
    assert loss == pytest.approx(gp_stats.loss, rel=1e-5)
    # 2.4-2.5x measured on both kernel paths (graph-parallel keeps the whole graph's topology, the 16-chunk run one
    # chunk's at a time); 3.7x before graph-parallel exchanged (and saved) projected rows, above 4x while every
    # transpose also stored an edge permutation and a symmetric graph a second CSR
    assert 2 * peak <= gp_stats.peak_memory, (peak, gp_stats.peak_memory)
    _, chunk = two_level_partition(graph, 1, 16, "metis")
    assert int(torch.bincount(chunk).min()) > 0


@pytest.mark.parametrize("model_name,recompute", [("gcn", "auto"), ("gat", "recompute")])
def test_host_budget_chunks_bound_the_measured_peak(tmp_path, monkeypatch, model_name, recompute):
    """``--host-memory``'s ``K`` (no ``--chunks``), from tiny budgets: the chosen ``K``'s modelled worker bytes
    (:func:`~graphscale.strategies.offload.chunk_budget.worker_bytes`, less the fixed runtime and staging, set to 0
    here) bound the worker's measured steady peak of tracked memory, and a tighter budget takes more chunks."""
    monkeypatch.setattr(chunk_budget, "RUNTIME_BYTES", 0)
    monkeypatch.setattr(chunk_budget, "STAGING_BYTES", 0)
    graph = random_graph(400, avg_degree=6.0, num_features=48, num_classes=4, seed=1)
    chosen = []
    for target in (1, 3, 8):
        config = RunConfig(model=ModelConfig(name=model_name, hidden=16, layers=2, dropout=0.5, heads=2),
                           strategy=StrategyConfig(name="offload", dedup="intra", recompute=recompute,
                                                   partitioner="restream"),
                           cache_dir=str(tmp_path / "cache"))
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
        dims = probe_dims(model, graph.num_features, torch.float32)
        shape = chunk_budget.ChunkShape(graph.num_nodes, graph.num_nodes, graph.num_edges, graph.num_nodes)
        width = max(dims.in_dim, *dims.widths, *dims.agg, *dims.out)
        fixed = chunk_budget.worker_fixed(sum(p.numel() for p in model.parameters()), 2, 4)
        budget = -(-chunk_budget.worker_bytes(shape, target, width, 4, fixed) // 1) * 2 + 2  # ARRAY_SHARE = 0.5
        config.host_memory = str(budget)
        strategy = OffloadStrategy()
        strategy.setup(prepare_graph(graph, config), model, DistEnv.local(), config)
        k = strategy.num_chunks
        peak, _ = steady_peak(strategy)
        strategy.teardown()
        assert k <= target and chunk_budget.worker_bytes(shape, k, width, 4, fixed) <= budget // 2
        assert peak <= chunk_budget.worker_bytes(shape, k, width, 4, fixed), (target, k, peak)
        chosen.append(k)
    assert chosen[0] < chosen[1] < chosen[2], chosen

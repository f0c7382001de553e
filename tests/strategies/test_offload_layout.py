"""The parent's bounded offload planner writes the very files the in-memory planner does; ``K`` from the host
budget.

The bounded path (:func:`~graphscale.strategies.offload.layout.write_layout`) runs here with tiny blocks (a few
records per gathered block and per induced-subgraph block), so every chunked loop turns many times; its files are
compared byte for byte with ``ChunkSets.save`` and ``WorkerPlan.save`` of the in-memory sets and plans.
"""

from __future__ import annotations

import dataclasses
import filecmp
from pathlib import Path

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, RunConfig, StrategyConfig
from graphscale.cost.dims import probe_dims
from graphscale.nn.models import build_model
from graphscale.partition import metis as metis_module
from graphscale.partition.induced import InducedEdges
from graphscale.registry import PARTITIONERS
from graphscale.strategies.offload import chunk_budget, layout, plan
from graphscale.strategies.offload.plan import ChunkSets, build_worker_plan, plan_folder, two_level_partition
from graphscale.strategies.offload.reorg import reorganize
from graphscale.testing import random_graph


def _in_memory(graph, owner, world, chunks, partitioner, dedup, folder: Path) -> None:
    """The in-memory planner's files: two-level partition, reorganisation, ``ChunkSets.build``, every plan."""
    owner, batch = two_level_partition(graph, world, chunks, partitioner, 0, owner=owner)
    if dedup == "reorg":
        batch = reorganize(graph, owner, batch, world, chunks, 5, 4)
    sets = ChunkSets.build(graph, owner, batch, world, chunks)
    sets.save(folder)
    for rank in range(world):
        build_worker_plan(graph, sets, rank, dedup).save(plan_folder(folder, rank))


def _same_tree(a: Path, b: Path) -> None:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), name


@pytest.mark.parametrize("partitioner,dedup,world,chunks", [
    ("restream", "reorg", 2, 4), ("ldg", "intra", 3, 3), ("metis", "reorg", 2, 3), ("restream", "baseline", 2, 2),
    ("fennel", "inter", 1, 4), ("restream", "reorg", 2, 1),
])
def test_bounded_planner_writes_the_in_memory_planners_files(tmp_path, monkeypatch, partitioner, dedup, world,
                                                              chunks):
    graph = random_graph(160, avg_degree=5.0, num_features=5, num_classes=3, seed=2, isolated=3)
    owner = PARTITIONERS.get("random")().partition(graph, world, seed=1) if world > 1 else \
        torch.zeros(graph.num_nodes, dtype=torch.int64)
    monkeypatch.setattr(plan, "INDUCED_BLOCK_EDGES", 7)  # induced subgraphs read 7 records at a time
    monkeypatch.setattr(layout, "GATHER_EDGES", 5)  # neighbour sets gathered 5 records at a time
    want, got = tmp_path / "memory", tmp_path / "bounded"
    want.mkdir()
    got.mkdir()
    _in_memory(graph, owner, world, chunks, partitioner, dedup, want)
    layout.write_layout(graph, owner, world, chunks, partitioner, 0, dedup, 5, 4, got)
    assert not (got / ".chunks").exists()  # the per-chunk scratch sets are gone
    _same_tree(want, got)


def test_reorganised_schedule_is_taken_when_cheaper(tmp_path):
    """On a graph where the greedy pays off, the bounded reorganisation picks the same non-identity schedule."""
    graph = random_graph(300, avg_degree=6.0, num_features=5, num_classes=3, seed=4)
    owner = PARTITIONERS.get("random")().partition(graph, 3, seed=0)
    owner_t, chunk = two_level_partition(graph, 3, 5, "restream", 0, owner=owner)
    want = reorganize(graph, owner_t, chunk, 3, 5, 16, 4)
    layout.write_layout(graph, owner, 3, 5, "restream", 0, "reorg", 16, 4, tmp_path)
    got = torch.from_numpy(np.load(tmp_path / "batch.npy"))
    assert torch.equal(got, want)
    assert not torch.equal(want, chunk)  # the reorganisation did change the schedule here


def test_induced_edges_equal_the_built_subgraph():
    graph = random_graph(120, avg_degree=4.0, num_features=2, num_classes=2, seed=5)
    nodes = torch.arange(3, 120, 3)
    sub = graph.subgraph(nodes)
    induced = InducedEdges(graph, nodes.numpy(), block_edges=4)
    ptr, indices = induced.arrays()
    assert induced.num_edges == sub.num_edges and np.array_equal(induced.in_degrees(), sub.in_degrees().numpy())
    assert np.array_equal(ptr, sub.indptr.numpy()) and np.array_equal(indices, sub.indices.numpy())
    induced.close()
    with pytest.raises(ValueError, match="ascending"):
        InducedEdges(graph, np.array([5, 2]))


def test_metis_chunks_of_the_induced_topology_equal_those_of_the_built_subgraph(monkeypatch):
    """Level 2 with METIS reads each part's induced topology in blocks instead of building ``graph.subgraph``: the
    very chunks METIS cuts from the built subgraph."""
    graph = random_graph(240, avg_degree=5.0, num_features=4, num_classes=3, seed=6, isolated=2)
    owner = PARTITIONERS.get("random")().partition(graph, 2, seed=3)
    monkeypatch.setattr(plan, "INDUCED_BLOCK_EDGES", 6)
    _, chunk = two_level_partition(graph, 2, 3, "metis", 0, owner=owner)
    metis, work = PARTITIONERS.get("metis")(), metis_module.work_weights(graph)
    for i in range(2):
        nodes = torch.nonzero(owner == i).flatten()
        want = metis.partition_weighted(graph.subgraph(nodes), 3, work[nodes.numpy()], seed=0)
        assert torch.equal(chunk[nodes], want)


def test_level_two_metis_refuses_a_part_beyond_the_host_budget():
    """A part whose METIS chunking (its induced CSR plus METIS's estimate) exceeds the budget is refused before
    anything is built: one line with the estimate, the part and the O(|V|) alternatives."""
    graph = random_graph(200, avg_degree=5.0, num_features=4, num_classes=3, seed=7)
    owner = PARTITIONERS.get("random")().partition(graph, 2, seed=0)
    nodes = torch.nonzero(owner == 0).flatten()
    induced = InducedEdges(graph, nodes.numpy())
    need = metis_module.metis_memory_estimate(nodes.numel(), induced.num_edges) + \
        8 * (nodes.numel() + 1 + induced.num_edges)
    induced.close()
    with pytest.raises(ValueError, match=rf"metis would need about .* for {nodes.numel()} vertices and "
                                         rf"{induced.num_edges} records \(part 0's induced subgraph, cut into "
                                         r"offload's chunks\), more than the .* budget \(--host-memory\); "
                                         r".*restream.*fennel, ldg or random") as err:
        two_level_partition(graph, 2, 2, "metis", 0, owner=owner, host_memory=need - 1)
    assert "\n" not in str(err.value)
    _, chunk = two_level_partition(graph, 2, 2, "metis", 0, owner=owner, host_memory=need + (1 << 20))
    assert set(chunk.tolist()) == {0, 1}
    _, chunk = two_level_partition(graph, 2, 2, "restream", 0, owner=owner, host_memory=1024)  # O(|V|): no check
    assert set(chunk.tolist()) == {0, 1}


def _config(host_memory: str, chunks: int | None = None) -> RunConfig:
    return RunConfig(model=ModelConfig(name="gcn", hidden=8, layers=2),
                     strategy=StrategyConfig(name="offload", workers=2, partitioner="random", chunks=chunks),
                     host_memory=host_memory)


def _model(graph):
    model = build_model(ModelConfig(name="gcn", hidden=8, layers=2), graph.num_features, graph.num_classes, seed=0)
    return model, probe_dims(model, graph.num_features, torch.float32)


def test_chunks_from_the_host_budget(capsys, monkeypatch):
    """Without --chunks, K is the fewest whose bound fits the worker's share; a tighter budget takes more; a
    budget below the minimum is refused naming it; a --chunks over the budget runs with a warning naming both."""
    graph = random_graph(400, avg_degree=6.0, num_features=64, num_classes=3, seed=0)
    owner = PARTITIONERS.get("random")().partition(graph, 2, seed=0)
    model, dims = _model(graph)
    monkeypatch.setattr(chunk_budget, "RUNTIME_BYTES", 0)  # the runtime's share would dwarf a 400-vertex graph
    shape = chunk_budget.ChunkShape.of(owner.numpy(), np.diff(graph.indptr.numpy()), 2)
    fixed = chunk_budget.worker_fixed(sum(p.numel() for p in model.parameters()), 2, 4)
    width = max(dims.in_dim, *dims.widths, *dims.agg, *dims.out)

    def need(k):
        return chunk_budget.worker_bytes(shape, k, width, 4, fixed)

    budget = int(need(4) / (1 - chunk_budget.ARRAY_SHARE)) + 1  # K = 4 fits, K = 3 does not
    assert need(3) > chunk_budget.worker_share(budget)
    k, why = chunk_budget.plan_chunks(graph, owner, 2, _config(str(budget)), model, dims)
    assert k == 4 and "4 chunks per worker" in why and "fewest" in why
    assert "offload: 4 chunks per worker" in capsys.readouterr().err
    roomy, _ = chunk_budget.plan_chunks(graph, owner, 2, _config("64GiB"), model, dims)
    assert roomy == 1 and "offload: 1 chunk per worker" in capsys.readouterr().err
    minimum = chunk_budget.minimum_budget(shape, width, 4, fixed)
    with pytest.raises(ValueError, match=r"--host-memory 1KiB is below offload's minimum .*about .* per process"):
        chunk_budget.plan_chunks(graph, owner, 2, _config("1KiB"), model, dims)
    assert minimum > 1024
    k, why = chunk_budget.plan_chunks(graph, owner, 2, _config(str(budget), chunks=2), model, dims)
    err = capsys.readouterr().err
    assert (k, why) == (2, "--chunks 2")
    assert "warning: offload --chunks 2: a worker may need about" in err and "4 would fit" in err
    assert len(err.strip().splitlines()) == 1
    chunk_budget.plan_chunks(graph, owner, 2, _config("1KiB", chunks=2), model, dims)  # tests' tiny budgets run
    assert "none fits below about" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--chunks must be >= 1"):
        chunk_budget.plan_chunks(graph, owner, 2, _config("", chunks=0), model, dims)


def test_chosen_chunks_are_bounded_by_the_smallest_part():
    shape = chunk_budget.ChunkShape(num_nodes=1000, nodes=600, edges=6000, smallest=400)
    fixed = chunk_budget.worker_fixed(100, 2, 4)
    assert chunk_budget.choose_host_chunks(shape, 10**12, 16, 4, fixed) == 1
    assert chunk_budget.choose_host_chunks(shape, 1, 16, 4, fixed) is None
    k = chunk_budget.choose_host_chunks(shape, chunk_budget.minimum_budget(shape, 16, 4, fixed), 16, 4, fixed)
    assert k is not None and k <= 400
    assert dataclasses.asdict(shape)["smallest"] == 400

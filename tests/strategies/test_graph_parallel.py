"""Graph parallelism reproduces the single-process reference, and its Ledger matches the closed form.

One spawned run per world size checks every (model, dtype, partitioner) combination: loss, logits and
every parameter gradient against ``model.forward(Block.full(graph), x)`` with dropout on, halo bytes and
all-reduce bytes against their closed forms, identical parameters across workers after Adam steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.block import Block
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.partition.store import load_partition
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import counts_to_metrics, masked_loss_sum, split_counts
from graphscale.strategies.graph_parallel import (
    GraphParallel,
    allreduce_bytes_per_epoch,
    halo_bytes_per_epoch,
    projected_exchanges,
)
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.training_store import store_handle, write_training_store

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: (model, dtype, partitioner): float64 for every model, float32 for fewer.
COMBOS = [("gcn", "float64", "metis"), ("sage", "float64", "random"), ("gat", "float64", "metis"),
          ("gcnii", "float64", "random"), ("gcn", "float32", "random"), ("gat", "float32", "random")]
#: Models whose input map is learned: the input of step 0 requires grad, so layer 0 exchanges gradients too.
LEARNED_INPUT_MAP = {"gcnii", "resgcn"}
EXTRA_EPOCHS = 3


def _narrower(width: int, d: int) -> int | None:
    return width if width < d else None


#: The projected rows each layer of the combos' models exchanges (``None``: its inputs), written out per model:
#: GCN and SAGE project to their output width, GAT to heads * hidden; GCNII never projects.
PROJECTED = {
    "gcn": lambda l, m: _narrower(m.layers[l].out_dim, m.layer_widths()[l]),
    "sage": lambda l, m: _narrower(m.layers[l].out_dim, m.layer_widths()[l]),
    "gat": lambda l, m: _narrower(m.layers[l].heads * m.layers[l].out_dim, m.layer_widths()[l]),
    "gcnii": lambda l, m: None,
}


def make_graph(dtype: torch.dtype):
    return random_graph(40, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=2)


def make_config(model: str, partitioner: str, workers: int) -> RunConfig:
    layers = 3 if model == "gcn" else 2
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=layers, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="graph-parallel", workers=workers, partitioner=partitioner),
                     seed=0)


def write_stores(root, world_size: int) -> list[str]:
    """One partition store per combo (the parent writes them before the workers start, as a run does)."""
    paths = []
    for model_name, dtype_name, partitioner in COMBOS:
        path = root / f"{dtype_name}-{partitioner}-{world_size}"
        if not path.exists():
            write_training_store(make_graph(DTYPES[dtype_name]), path, world_size, partitioner, seed=0)
        paths.append(str(path))
    return paths


def _worker(env: DistEnv, combos: list[tuple[str, str, str]], stores: list[str], overlap: bool = False) -> list[dict]:
    out = []
    for (model_name, dtype_name, partitioner), store in zip(combos, stores):
        dtype = DTYPES[dtype_name]
        handle = store_handle(store, "none", dtype_name)
        config = make_config(model_name, partitioner, env.world_size)
        model = build_model(config.model, handle.num_features, handle.num_classes, seed=0, dtype=dtype)
        strategy = GraphParallel(overlap=overlap)
        strategy.setup(handle, model, env, config)
        metrics = strategy.evaluate()  # with the initial parameters, like the reference
        model.train()
        model.set_epoch(0)
        logits = strategy.forward().detach()
        stats = strategy.train_epoch(0)
        grads = [p.grad.clone() for p in model.parameters()]
        later = [strategy.train_epoch(e) for e in range(1, 1 + EXTRA_EPOCHS)]
        # every row-indexed array the worker holds (the blocks' indices are per edge)
        held = [t for t in vars(strategy).values() if torch.is_tensor(t)] + list(strategy.masks.values())
        for b in strategy.blocks:
            held += [b.indptr, b.src_ids, b.src_deg]
        out.append({"inner_ids": strategy.inner_ids.cpu(), "logits": logits, "loss": stats.loss, "grads": grads,
                    "params": [p.detach().clone() for p in model.parameters()], "bytes": stats.bytes,
                    "later_bytes": [s.bytes for s in later], "opened": handle.opened,
                    "max_rows": max(t.shape[0] for t in held if t.dim()),
                    "block_edges": sum(b.num_edges for b in strategy.blocks),
                    "peak": stats.peak_memory, "metrics": metrics})
        strategy.teardown()
    return out


def reference(model_name: str, dtype_name: str) -> dict:
    dtype = DTYPES[dtype_name]
    graph = make_graph(dtype)
    config = make_config(model_name, "metis", 1)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
    model.train()
    model.set_epoch(0)
    logits = model.forward(Block.full(graph), graph.x)
    loss = masked_loss_sum(logits, graph.y, graph.train_mask) / int(graph.train_mask.sum())
    loss.backward()
    model.eval()
    with torch.no_grad():
        eval_logits = model.forward(Block.full(graph), graph.x)
    masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
    return {"graph": graph, "model": model, "logits": logits.detach(), "loss": loss.detach(),
            "grads": [p.grad.clone() for p in model.parameters()],
            "metrics": counts_to_metrics(split_counts(eval_logits, graph.y, masks))}


def brute_force_halo_sizes(graph, owner: torch.Tensor, parts: int) -> list[int]:
    halos = [set() for _ in range(parts)]
    for v in range(graph.num_nodes):
        for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist():
            if owner[u] != owner[v]:
                halos[int(owner[v])].add(u)
    return [len(h) for h in halos]


@pytest.mark.parametrize("world_size, overlap", [(1, False), (2, False), (4, False), (2, True), (4, True)])
def test_graph_parallel_matches_single_process(world_size, overlap, tmp_path):
    """With the halo exchange overlapped (interior rows first, then the boundary rows) and without."""
    stores = write_stores(tmp_path, world_size)
    results = run_distributed(_worker, world_size, COMBOS, stores, overlap)
    for i, (model_name, dtype_name, _) in enumerate(COMBOS):
        dtype = DTYPES[dtype_name]
        ref = reference(model_name, dtype_name)
        graph, model = ref["graph"], ref["model"]
        runs = [worker_results[i] for worker_results in results]
        tag = f"{model_name}/{dtype_name}/W={world_size}"

        # logits: every vertex computed by exactly one worker
        ids = torch.cat([r["inner_ids"] for r in runs])
        assert torch.equal(torch.sort(ids).values, torch.arange(graph.num_nodes)), tag
        logits = torch.empty_like(ref["logits"])
        logits[ids] = torch.cat([r["logits"] for r in runs])
        assert_close_rel(logits, ref["logits"], dtype, what=f"{tag} logits")

        for rank, r in enumerate(runs):
            assert_close_rel(torch.tensor(r["loss"], dtype=torch.float64), ref["loss"].double(), dtype, what=f"{tag} loss")
            for (name, _), g, g_ref in zip(model.named_parameters(), r["grads"], ref["grads"]):
                assert_close_rel(g, g_ref, dtype, what=f"{tag} rank {rank} grad {name}")
            for p, p0 in zip(r["params"], runs[0]["params"]):
                assert torch.equal(p, p0), f"{tag}: parameters diverged across workers"
            for key, value in ref["metrics"].items():
                rel = 1e-9 if dtype == torch.float64 else 1e-5
                assert r["metrics"][key] == pytest.approx(value, rel=rel, nan_ok=True), f"{tag} {key}"
            assert r["peak"] > 0

        # Ledger against the closed forms (summed over workers)
        elem = torch.empty(0, dtype=dtype).element_size()
        owner = torch.from_numpy(np.load(f"{stores[i]}/owner.npy").astype(np.int64))
        sizes = brute_force_halo_sizes(graph, owner, world_size)
        widths = model.layer_widths()
        learned = model_name in LEARNED_INPUT_MAP
        # a layer exchanges its projected rows (both directions) where they are narrower than its inputs
        projected = [PROJECTED[model_name](layer, model) for layer in range(model.num_layers)]
        assert projected == projected_exchanges(model, elem), tag
        expected_halo = sum((2 * p if p is not None else (1 if layer == 0 and not learned else 2) * d)
                            * sum(sizes) * elem for layer, (d, p) in enumerate(zip(widths, projected)))
        assert expected_halo == halo_bytes_per_epoch(sizes, widths, elem, learned, projected=projected)
        num_params = sum(p.numel() for p in model.parameters())
        for epoch_bytes in [r["bytes"] for r in runs], *([r["later_bytes"][e] for r in runs]
                                                         for e in range(EXTRA_EPOCHS)):
            assert sum(b.get("halo", 0) for b in epoch_bytes) == expected_halo, tag
            assert sum(b.get("allreduce", 0) for b in epoch_bytes) == \
                allreduce_bytes_per_epoch(num_params, world_size, elem) == 2 * (world_size - 1) * num_params * elem
            assert sum(b.get("control", 0) for b in epoch_bytes) == 2 * (world_size - 1) * 8
            assert set().union(*epoch_bytes) <= {"halo", "allreduce", "control"}
        if world_size > 1:
            assert expected_halo > 0
        # The data path: worker r opened arrays of part r only, and holds no more rows than that part has.
        for rank, r in enumerate(runs):
            part = load_partition(stores[i], rank)
            local_rows = part.graph.num_nodes
            assert r["opened"] and all(f.startswith(f"{stores[i]}/part-{rank:05d}/") for f, _ in r["opened"]), tag
            assert all(rows <= (part.graph.num_edges if f.endswith("/indices.npy") else local_rows + 1)
                       for f, rows in r["opened"]), tag
            assert r["max_rows"] <= local_rows + 1 and r["block_edges"] <= part.graph.num_edges, tag
            if world_size > 1:
                assert local_rows < graph.num_nodes


def test_registered_and_rejects_bad_setups(tmp_path):
    assert STRATEGIES.get("graph-parallel") is GraphParallel
    assert GraphParallel.data_view == "partition-local"
    graph = make_graph(torch.float64)
    graph.train_mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
    write_training_store(graph, tmp_path / "none", 1, "metis")
    with pytest.raises(ValueError, match="no training vertices"):
        store_handle(tmp_path / "none")
    with pytest.raises(KeyError, match="unknown partitioner 'nope'"):
        write_training_store(make_graph(torch.float64), tmp_path / "nope", 2, "nope")
    config = make_config("gcn", "metis", 1)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="has no partitions"):
        GraphParallel().setup(make_graph(torch.float64), model, DistEnv.local(), config)


@pytest.mark.parametrize("model_name", ["gcn", "sage", "gat", "gcnii"])
def test_overlap_plan_computes_every_row_as_the_unsplit_block(model_name):
    """Interior rows (local sources only) then boundary rows (with the halo): each aggregated row is summed as in
    the unsplit block (bitwise), and a model step on both equals the step on the whole block."""
    from graphscale.nn.layers import gcn_aggregate, mean_aggregate
    from graphscale.strategies.graph_parallel import OverlapPlan

    graph = random_graph(80, avg_degree=4.0, num_features=6, num_classes=3, seed=3, dtype=torch.float64,
                         isolated=2)
    config = make_config(model_name, "random", 1)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    model.train()
    model.set_epoch(1)
    subsets = [torch.arange(0, 80, 2), torch.arange(0, 40), torch.arange(80), torch.tensor([3, 17, 40]),
               torch.randperm(80, generator=torch.Generator().manual_seed(0))[:50].sort().values]
    for nodes in subsets:
        block = Block.from_nodes(graph, nodes)
        plan = OverlapPlan.build(block)
        n = block.num_dst
        assert plan.num_interior + plan.boundary.num_dst == n
        assert bool((plan.interior.indices < plan.interior.num_src).all())
        raw = torch.randn(block.num_src, graph.num_features, dtype=torch.float64)
        x = model.input_map(raw, block.src_ids)  # the identity, or GCNII's learned projection
        src_b = torch.cat([x[plan.boundary_src], x[n:]])
        for aggregate in (gcn_aggregate, mean_aggregate):
            split = torch.cat([aggregate(plan.interior, x[plan.interior_src]), aggregate(plan.boundary, src_b)])
            assert torch.equal(split[plan.inverse], aggregate(block, x))
        h0 = x[:n] if model.needs_h0 else None
        whole = model.step(0, block, x, h0)
        h0_i = None if h0 is None else h0[plan.interior_src[: plan.num_interior]]
        h0_b = None if h0 is None else h0[plan.boundary_src[: plan.boundary.num_dst]]
        split = torch.cat([model.step(0, plan.interior, x[plan.interior_src], h0_i),
                           model.step(0, plan.boundary, src_b, h0_b)])[plan.inverse]
        assert_close_rel(split, whole, torch.float64, what=f"{model_name} step")


def test_explicit_host_budget_runs_without_the_buffer_pool_to_the_same_numbers(tmp_path):
    """Under an explicit ``--host-memory`` a worker's kernels take fresh outputs instead of the pool's (whose idle
    buffers stay resident across the forward and backward passes); the pool is back after teardown, and the epoch
    is the same to the bit."""
    from dataclasses import replace

    from graphscale.nn import buffers
    from graphscale.nn.backend import uses_numba

    graph = random_graph(3000, avg_degree=8.0, num_features=64, num_classes=3, seed=0, dtype=torch.float32)
    write_training_store(graph, tmp_path / "store", 1, "metis", seed=0)
    previous = buffers.set_enabled(True)
    runs = {}
    try:
        for host_memory in ("", "auto", "2GiB"):
            config = replace(make_config("gcn", "metis", 1), host_memory=host_memory)
            config.model.hidden = 128  # outputs above the pool's minimum size
            model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float32)
            strategy = GraphParallel()
            strategy.setup(store_handle(tmp_path / "store", "none", "float32"), model, DistEnv.local(), config)
            assert buffers.enabled() is (host_memory != "2GiB")
            buffers.clear()
            stats = [strategy.train_epoch(0)]
            runs[host_memory] = ([s.loss for s in stats], [p.detach().clone() for p in model.parameters()])
            if uses_numba(graph.x):  # the CPU kernels' outputs: from the pool, or not (the device backend never pools)
                assert (sum(buffers.held_bytes()) > 0) is (host_memory != "2GiB")
            strategy.teardown()
            assert buffers.enabled()
    finally:
        buffers.set_enabled(previous)
    for host_memory in ("auto", "2GiB"):
        assert runs[host_memory][0] == runs[""][0]
        assert all(torch.equal(a, b) for a, b in zip(runs[host_memory][1], runs[""][1], strict=True))

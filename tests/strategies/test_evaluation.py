"""Distributed layer-wise evaluation reproduces single-process full-graph evaluation.

One spawned run (3 workers) loops over models, dtypes and ownerships (contiguous ranges, a vertex partition,
a partition and a graph that leave a worker without vertices) with tiny batches: metrics against
``counts_to_metrics(split_counts(model(Block.full(graph), x), ...))`` (accuracies exactly, losses within the
correctness standard), logits row by row, each worker's block holding only its own destinations, batches
bounded, and the Ledger against the closed form. World size 1 runs in-process.
"""

from __future__ import annotations

import math

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.block import Block
from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.base import COUNTS_PER_SPLIT, SPLITS, counts_to_metrics, split_counts
from graphscale.strategies.evaluation import (
    EVAL_HALO,
    LayerwiseEvaluator,
    batch_block,
    contiguous_bounds,
    halo_of,
)
from graphscale.testing import assert_close_rel, random_graph, run_distributed

DTYPES = {"float64": torch.float64, "float32": torch.float32}
MODELS = ("gcn", "sage", "gat", "gcnii", "resgcn")
BATCH_ROWS = 7
WORLD = 3
#: (model, dtype, ownership, graph): ``partition-empty`` leaves the last worker without vertices, the
#: ``tiny`` graph (2 vertices, no validation vertex) does the same for contiguous ranges.
COMBOS = [("gcn", "float64", "contiguous", "small"), ("sage", "float64", "partition", "small"),
          ("gat", "float64", "contiguous", "small"), ("gcnii", "float64", "partition-empty", "small"),
          ("resgcn", "float64", "contiguous", "small"), ("gcn", "float32", "partition", "small"),
          ("gat", "float32", "partition-empty", "small"), ("gcnii", "float32", "contiguous", "small"),
          ("sage", "float32", "contiguous", "tiny"), ("resgcn", "float32", "partition", "small")]


def make_graph(kind: str, dtype: torch.dtype):
    if kind == "tiny":
        return random_graph(2, avg_degree=2.0, num_features=5, num_classes=3, seed=1, dtype=dtype)
    return random_graph(40, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=2)


def make_model(name: str, graph, dtype: torch.dtype):
    cfg = ModelConfig(name=name, hidden=4, layers=3 if name == "gcn" else 2, dropout=0.5, heads=2)
    return build_model(cfg, graph.num_features, 3, seed=0, dtype=dtype)


def make_owner(ownership: str, num_nodes: int, world: int) -> torch.Tensor | None:
    if ownership == "contiguous":
        return None
    parts = world - 1 if ownership == "partition-empty" else world
    return torch.randint(0, parts, (num_nodes,), generator=torch.Generator().manual_seed(7))


def masks_of(graph) -> dict[str, torch.Tensor]:
    return {s: getattr(graph, f"{s}_mask") for s in SPLITS}


def reference(model, graph) -> tuple[torch.Tensor, dict[str, float]]:
    model.eval()
    with torch.no_grad():
        logits = model(Block.full(graph), graph.x)
    return logits, counts_to_metrics(split_counts(logits, graph.y, masks_of(graph)))


def assert_metrics(actual: dict, expected: dict, dtype: torch.dtype, tag: str) -> None:
    assert actual.keys() == expected.keys(), tag
    for split in SPLITS:
        acc, acc_ref = actual[f"{split}_acc"], expected[f"{split}_acc"]
        assert acc == acc_ref or (math.isnan(acc) and math.isnan(acc_ref)), f"{tag} {split}_acc"
        assert_close_rel(torch.tensor(actual[f"{split}_loss"]), torch.tensor(expected[f"{split}_loss"]), dtype,
                         what=f"{tag} {split}_loss")


def brute_force_halo(graph, owned: set[int]) -> set[int]:
    return {u for v in owned for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist() if u not in owned}


def _worker(env: DistEnv, combos: list[tuple[str, str, str, str]]) -> list[dict]:
    comm = Comm(env)
    out = []
    for model_name, dtype_name, ownership, graph_kind in combos:
        dtype = DTYPES[dtype_name]
        graph = make_graph(graph_kind, dtype)
        model = make_model(model_name, graph, dtype)
        evaluator = LayerwiseEvaluator(comm, graph, model, make_owner(ownership, graph.num_nodes, env.world_size),
                                       batch_rows=BATCH_ROWS)
        before = env.ledger.snapshot()
        metrics = evaluator.evaluate()
        spent = env.ledger.since(before)
        out.append({"metrics": metrics, "bytes": spent, "owned": evaluator.owned, "logits": evaluator.logits(),
                    "block_dst": evaluator.num_owned, "max_batch_dst": evaluator.max_batch_dst,
                    "halo_ids": evaluator.halo_ids})
    return out


def test_distributed_evaluation_matches_full_graph():
    results = run_distributed(_worker, WORLD, COMBOS)
    for i, (model_name, dtype_name, ownership, graph_kind) in enumerate(COMBOS):
        dtype = DTYPES[dtype_name]
        tag = f"{model_name}/{dtype_name}/{ownership}/{graph_kind}"
        graph = make_graph(graph_kind, dtype)
        model = make_model(model_name, graph, dtype)
        ref_logits, ref_metrics = reference(model, graph)
        runs = [r[i] for r in results]
        owner = make_owner(ownership, graph.num_nodes, WORLD)
        expected_owned = (list(torch.tensor_split(torch.arange(graph.num_nodes), WORLD)) if owner is None
                          else [torch.nonzero(owner == r).flatten() for r in range(WORLD)])
        if ownership == "partition-empty" or graph_kind == "tiny":
            assert runs[-1]["owned"].numel() == 0, tag  # a worker without vertices takes part all the same

        logits = torch.full_like(ref_logits, float("nan"))
        halo_rows = 0
        for rank, r in enumerate(runs):
            assert_metrics(r["metrics"], runs[0]["metrics"], torch.float64, f"{tag}: workers disagree")
            assert_metrics(r["metrics"], ref_metrics, dtype, f"{tag} rank {rank}")
            assert torch.equal(r["owned"], expected_owned[rank]), tag
            # never the whole graph: the worker's block has its own destinations only, batches are bounded
            assert r["block_dst"] == r["owned"].numel() < graph.num_nodes, tag
            assert r["max_batch_dst"] <= BATCH_ROWS, tag
            halo = brute_force_halo(graph, set(r["owned"].tolist()))
            assert r["halo_ids"].tolist() == sorted(halo), tag
            halo_rows += len(halo)
            logits[r["owned"]] = r["logits"]
        assert_close_rel(logits, ref_logits, dtype, what=f"{tag} logits")
        assert max(r["owned"].numel() for r in runs) > BATCH_ROWS or graph_kind == "tiny"  # several batches

        # Ledger (summed over workers): halo rows per layer, the all-reduced counts; nothing else
        elem = torch.empty(0, dtype=dtype).element_size()
        total = {k: sum(r["bytes"].get(k, 0) for r in runs) for k in (EVAL_HALO, "control")}
        first = 1 if model_name in ("gcn", "sage", "gat") else 0  # identity input map: layer 0 reads raw rows
        assert total[EVAL_HALO] == sum(halo_rows * d * elem for d in model.layer_widths()[first:]), tag
        assert total["control"] == 2 * (WORLD - 1) * COUNTS_PER_SPLIT * len(SPLITS) * 8, tag
        assert set().union(*(r["bytes"] for r in runs)) <= {EVAL_HALO, "control"}, tag


@pytest.mark.parametrize("batch_rows", [BATCH_ROWS, 1 << 16])
def test_single_worker_matches_full_graph(batch_rows):
    comm = Comm(DistEnv.local())
    for model_name in MODELS:
        for dtype_name, dtype in DTYPES.items():
            graph = make_graph("small", dtype)
            model = make_model(model_name, graph, dtype)
            ref_logits, ref_metrics = reference(model, graph)
            model.train()  # evaluate switches dropout off itself
            evaluator = LayerwiseEvaluator(comm, graph, model, batch_rows=batch_rows)
            tag = f"{model_name}/{dtype_name}/batch_rows={batch_rows}"
            assert_metrics(evaluator.evaluate(), ref_metrics, dtype, tag)
            assert_close_rel(evaluator.logits(), ref_logits, dtype, what=f"{tag} logits")
            assert evaluator.max_batch_dst == min(batch_rows, graph.num_nodes)
            assert evaluator.halo.num_halo == 0
    assert comm.ledger.by_category() == {}  # one worker moves nothing


def test_batch_blocks_reproduce_the_full_graph_rows():
    graph = make_graph("small", torch.float64)
    full = Block.full(graph)
    nodes = torch.tensor([1, 2, 4, 8, 9, 10, 11, 20, 21, 30, 33, 39])
    reference = Block.from_nodes(graph, nodes)
    halo = halo_of(graph, nodes, batch_rows=5)
    assert torch.equal(halo, reference.halo_ids)
    assert halo_of(graph, torch.zeros(0, dtype=torch.int64)).numel() == 0
    # batch blocks: global ids and degrees carried, and the sparse half bit for bit the full-graph rows
    for model_name in ("gcn", "sage", "gcnii"):
        model = make_model(model_name, graph, torch.float64).eval()
        with torch.no_grad():
            h = model.input_map(graph.x, torch.arange(graph.num_nodes))
            agg_full = model.aggregate(0, full, h)
            layout = torch.cat([nodes, halo])
            for a in range(0, nodes.numel(), 5):
                b = min(a + 5, nodes.numel())
                sub, rows = batch_block(graph, nodes, halo, a, b)
                assert torch.equal(sub.dst_ids, nodes[a:b])
                assert torch.equal(sub.src_ids, layout[rows])
                assert torch.equal(sub.src_deg, graph.in_degrees()[sub.src_ids])
                assert torch.equal(model.aggregate(0, sub, h[sub.src_ids]), agg_full[nodes[a:b]]), model_name


def test_contiguous_bounds_and_errors():
    for n in range(12):
        for w in range(1, 6):
            sizes = [t.numel() for t in torch.tensor_split(torch.arange(n), w)]
            assert contiguous_bounds(n, w).diff().tolist() == sizes
    graph = make_graph("small", torch.float64)
    model = make_model("gcn", graph, torch.float64)
    comm = Comm(DistEnv.local())
    with pytest.raises(ValueError, match="batch_rows"):
        LayerwiseEvaluator(comm, graph, model, batch_rows=0)
    with pytest.raises(ValueError, match="one entry per vertex"):
        LayerwiseEvaluator(comm, graph, model, owner=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="owner values"):
        LayerwiseEvaluator(comm, graph, model, owner=torch.ones(graph.num_nodes, dtype=torch.int64))


@pytest.mark.parametrize("strategy", ["data-parallel", "split-parallel"])
def test_minibatch_strategies_evaluate_with_it(strategy):
    from graphscale.registry import STRATEGIES

    graph = make_graph("small", torch.float64)
    model = make_model("sage", graph, torch.float64)
    _, ref_metrics = reference(model, graph)
    config = RunConfig(model=ModelConfig(name="sage", hidden=4, layers=2, dropout=0.5),
                       optim=OptimConfig(lr=0.01), seed=0,
                       strategy=StrategyConfig(name=strategy, workers=1, fanouts=[3, 3], batch_size=8))
    s = STRATEGIES.get(strategy)()
    s.eval_batch_rows = BATCH_ROWS
    s.setup(prepare_graph(graph, config), model, DistEnv.local(), config)
    assert_metrics(s.evaluate(), ref_metrics, torch.float64, strategy)
    assert isinstance(s.evaluator, LayerwiseEvaluator) and s.evaluator.num_owned == graph.num_nodes
    assert s.evaluator.max_batch_dst == BATCH_ROWS

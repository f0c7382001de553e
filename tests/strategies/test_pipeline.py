"""GNNPipe (``--strategy pipeline``): spec ``shared/specs/gnnpipe.md`` §4 P1-P7.

The main oracle is :class:`ChunkedReference` (one process, one autograd pass per epoch over the stale forward):
the pipeline must reproduce its losses, gradients and parameters for every number of stages. One spawned run
(3 workers) checks every configuration, the schedule and the bytes; the rest runs in-process.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import DataHandle
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.partition.base import halo_sizes
from graphscale.prepare import prepare_graph
from graphscale.strategies.chunking import assign_chunks, chunk_order, rcm_chunks
from graphscale.strategies.graph_parallel import halo_bytes_per_epoch
from graphscale.strategies.pipeline.passes import EVAL_HALO, EVAL_STAGE, INIT_HALO, PIPE_BWD, PIPE_FWD, PIPE_INIT
from graphscale.strategies.pipeline.plan import (
    ChunkPlan,
    assign_hybrid,
    assign_subchunks,
    check_plan,
    pipeline_bytes_per_epoch,
    refreshes_history,
    stage_layers,
)
from graphscale.strategies.pipeline.reference import ChunkedReference
from graphscale.strategies.pipeline.strategy import CHUNK_FILE, SUBCHUNK_FILE, PipelineStrategy
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import assert_close_rel, random_graph, run_distributed

EPOCHS = 4
#: (model, layers, chunks, shuffle, history period, history grad): each a configuration of the oracle test
CASES = [("gcn", 3, 6, True, 1, "zero"), ("gcnii", 4, 5, True, 2, "zero"), ("resgcn", 3, 4, False, 1, "historical"),
         ("sage", 3, 3, True, 3, "historical"), ("gcnii", 3, 4, True, 1, "historical")]

#: The toy graph of the spec's §2 (Figs. 2/3): 8 vertices, parts V1 = {0,1,2}, V2 = {3,4}, V3 = {5,6,7}.
TOY_EDGES = [(0, 1), (0, 2), (1, 4), (2, 3), (3, 4), (4, 5), (4, 6), (5, 7), (6, 7)]
TOY_PARTS = [0, 0, 0, 1, 1, 2, 2, 2]
#: the toy graph's run: a 6-layer GCN on 3 stages, chunks = the spec's parts, no shuffling
TOY_CASE = ("gcn", 6, 3, False, 1, "zero")


def toy_graph(dtype=torch.float64) -> Graph:
    src, dst = zip(*TOY_EDGES)
    g = Graph.from_edges(torch.tensor(src), torch.tensor(dst), 8).coalesce().symmetrize()
    gen = torch.Generator().manual_seed(0)
    g.x = torch.randn(8, 4, generator=gen, dtype=dtype)
    g.y = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    g.train_mask = torch.tensor([True] * 6 + [False] * 2)
    g.val_mask = torch.tensor([False] * 6 + [True, False])
    g.test_mask = torch.tensor([False] * 7 + [True])
    g.meta["num_classes"] = 2
    return g


@pytest.fixture
def toy() -> Graph:
    return toy_graph()


def graph() -> Graph:
    g = random_graph(48, avg_degree=4.0, num_features=6, num_classes=3, seed=3, dtype=torch.float64, isolated=1)
    g.meta["num_classes"] = 3
    return g


def make_config(model: str, layers: int, chunks: int, shuffle: bool, period: int, hist: str,
                schedule: str = "gpipe", cross: str = "fresh", *, workers: int = 1, lr: float = 0.01,
                dropout: float = 0.3) -> RunConfig:
    """A case ``(model, layers, chunks, shuffle, period, history grad[, schedule, cross-chunk grad])``."""
    return RunConfig(model=ModelConfig(name=model, hidden=5, layers=layers, dropout=dropout),
                     optim=OptimConfig(lr=lr, weight_decay=5e-4),
                     strategy=StrategyConfig(name="pipeline", workers=workers, chunks=chunks, shuffle=shuffle,
                                             history_period=period, history_grad=hist, schedule=schedule,
                                             cross_chunk_grad=cross),
                     seed=0, dtype="float64")


def handle_with_chunks(g: Graph, chunk_of: torch.Tensor, folder, width: int = 1) -> DataHandle:
    """An in-memory handle carrying the chunks (and a hybrid's sub-chunks) as the parent's ``prepare_shared``
    would."""
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / CHUNK_FILE, chunk_of.numpy())
    np.save(folder / SUBCHUNK_FILE, assign_subchunks(g, chunk_of, width).numpy())
    return dataclasses.replace(DataHandle.in_memory(g), shared=str(folder))


def reference_run(g: Graph, chunk_of: torch.Tensor, config: RunConfig, epochs: int = EPOCHS):
    sc = config.strategy
    model = build_model(config.model, g.num_features, g.meta["num_classes"], seed=0, dtype=torch.float64)
    ref = ChunkedReference(model, g, chunk_of, config.optim, config.seed, sc.shuffle, sc.history_period,
                           sc.history_grad, sc.cross_chunk_grad)
    losses = [ref.train_epoch(e) for e in range(epochs)]
    return losses, model


def exact_metrics(model, g: Graph) -> dict[str, float]:
    """Evaluation by one exact full-graph forward in eval mode (what the pipeline's evaluation must give)."""
    from graphscale.data.block import Block
    from graphscale.strategies.base import counts_to_metrics, split_counts

    model.eval()
    with torch.no_grad():
        logits = model(Block.full(g), g.x)
    return counts_to_metrics(split_counts(logits, g.y, {s: getattr(g, f"{s}_mask") for s in ("train", "val", "test")}))


def assert_same_metrics(actual: dict, expected: dict, what: str) -> None:
    for key, value in expected.items():
        assert_close_rel(actual[key], value, torch.float64, what=f"{what} {key}")


# ------------------------------------------------------------------ the plan
def test_stage_layers_are_contiguous_with_the_remainder_in_the_middle():
    assert stage_layers(6, 3) == [range(2), range(2, 4), range(4, 6)]  # the spec's Fig. 3
    split = stage_layers(10, 4)
    assert [len(r) for r in split] == [2, 3, 3, 2]
    assert [r.start for r in split[1:]] == [r.stop for r in split[:-1]] and split[-1].stop == 10
    assert [len(r) for r in stage_layers(7, 5)] == [1, 2, 2, 1, 1]


def test_chunk_order_is_a_seeded_permutation_per_epoch():
    orders = [chunk_order(8, e, seed=5, shuffle=True) for e in range(4)]
    assert all(sorted(o.tolist()) == list(range(8)) for o in orders)
    assert torch.equal(orders[2], chunk_order(8, 2, seed=5, shuffle=True))  # a function of (seed, epoch) alone
    assert len({tuple(o.tolist()) for o in orders}) > 1
    assert torch.equal(chunk_order(8, 3, seed=5, shuffle=False), torch.arange(8))


def test_history_refresh_epochs():
    # spec: s(t) = alpha floor((t - 1) / alpha); 1-based t = e + 1, so epochs 10..19 (t = 11..20) read epoch 10's
    refreshed = [e for e in range(25) if refreshes_history(e, 10)]
    assert refreshed == [0, 10, 20]
    assert all(refreshes_history(e, 1) for e in range(5))


def test_bad_plans_name_the_option():
    with pytest.raises(ValueError, match="--workers 5 gives 5 stages but the model has 4 layers"):
        check_plan(4, 5, 20, 10, "zero")
    with pytest.raises(ValueError, match="--chunks 2 is smaller than the 3 stages"):
        check_plan(6, 3, 2, 10, "zero")
    with pytest.raises(ValueError, match="--history-period must be >= 1, got 0"):
        check_plan(6, 3, 12, 0, "zero")
    with pytest.raises(ValueError, match="--history-grad must be one of zero, historical"):
        check_plan(6, 3, 12, 1, "stale")


@pytest.mark.parametrize("argv, message", [
    (["--strategy", "pipeline", "--workers", "3", "--layers", "2", "--oversubscribe"],
     "--workers 3 gives 3 stages but the model has 2 layers"),
    (["--strategy", "pipeline", "--workers", "2", "--chunks", "1", "--oversubscribe"],
     "--chunks 1 is smaller than the 2 stages"),
    (["--strategy", "pipeline", "--workers", "2", "--history-period", "0", "--oversubscribe"],
     "--history-period must be >= 1, got 0"),
    (["--strategy", "single", "--history-period", "2"], "--history-period is not used by strategy 'single'"),
    (["--strategy", "pipeline", "--workers", "3", "--hybrid-width", "2", "--oversubscribe"],
     "--hybrid-width 2 must be >= 1 and divide --workers 3"),
    (["--strategy", "pipeline", "--workers", "4", "--hybrid-width", "2", "--layers", "4", "--history-grad", "historical",
      "--oversubscribe"], "--history-grad historical is not supported with --hybrid-width 2"),
    (["--strategy", "pipeline", "--workers", "2", "--schedule", "1f1b", "--oversubscribe"],
     "--schedule 1f1b needs --cross-chunk-grad none"),
    (["--strategy", "pipeline", "--workers", "2", "--cross-chunk-grad", "none", "--history-grad", "historical",
      "--oversubscribe"], "--history-grad historical needs --cross-chunk-grad fresh"),
    (["--strategy", "pipeline", "--hybrid-split", "parts-first"],
     "--hybrid-split is not used by strategy 'pipeline' without --hybrid-width"),
])
def test_bad_input_fails_before_any_worker_starts(argv, message, capsys):
    from graphscale.cli import main

    assert main(["train", *argv, "--epochs", "1"]) == 2
    assert message in capsys.readouterr().err


def test_toy_graph_fixture_matches_the_spec(toy):
    owner = torch.tensor(TOY_PARTS)
    assert halo_sizes(toy, owner, 3).tolist() == [2, 4, 1]  # B1 = {3,4}, B2 = {1,2,5,6}, B3 = {4}
    plan = ChunkPlan.build(toy, owner)
    assert [n.tolist() for n in plan.nodes] == [[0, 1, 2], [3, 4], [5, 6, 7]]
    assert [b.halo_ids.tolist() for b in plan.blocks] == [[3, 4], [1, 2, 5, 6], [4]]
    assert plan.cut_fraction() == pytest.approx(2 * 4 / 18)  # 4 of the 9 undirected edges cross chunks
    # a 6-layer model on 3 stages sends 2 N H per forward pass (pipeline) against 6 * 7 * H (graph parallelism)
    h, b = 16, 8
    assert pipeline_bytes_per_epoch(8, [h, h], b, carries_h0=False) // 2 == 2 * 8 * h * b
    assert halo_bytes_per_epoch(halo_sizes(toy, owner, 3).tolist(), [h] * 6, b, True) // 2 == 6 * 7 * h * b


def test_chunking_is_local_and_the_fallback_cuts_contiguous_ranges():
    g = random_graph(60, avg_degree=4.0, seed=2)
    metis = ChunkPlan.build(g, assign_chunks(g, 4, "metis", seed=0))
    random = ChunkPlan.build(g, assign_chunks(g, 4, "random", seed=0))
    assert metis.cut_fraction() < random.cut_fraction()
    rcm = rcm_chunks(g, 4)
    assert torch.bincount(rcm, minlength=4).tolist() == [15, 15, 15, 15]
    assert ChunkPlan.build(g, rcm).cut_fraction() < random.cut_fraction()


def test_only_metis_falls_back_to_rcm_chunks(monkeypatch):
    """A missing pymetis gives RCM chunks; another partitioner's ImportError reaches the user."""
    from graphscale.partition import build

    class Missing:
        def partition(self, *args, **kwargs):
            raise ImportError("no such library")

    monkeypatch.setattr(build, "build_vertex_partitioner", lambda *args, **kwargs: Missing())
    g = random_graph(60, avg_degree=4.0, seed=2)
    assert torch.equal(assign_chunks(g, 4, "metis"), rcm_chunks(g, 4))
    with pytest.raises(ImportError, match="no such library"):
        assign_chunks(g, 4, "fennel")


# ------------------------------------------------------------------ in-process properties
@pytest.mark.parametrize("model", ["gcn", "sage", "gcnii", "resgcn"])
def test_one_chunk_equals_single(model):
    """P1: K = 1 (one stage) is exact full-graph training: losses and parameters within 1e-10."""
    g = graph()
    config = make_config(model, 3, 1, True, 1, "zero")
    env = DistEnv()
    pipe_model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64)
    single_model = copy.deepcopy(pipe_model)
    pipe, single = PipelineStrategy(), SingleStrategy()
    pipe.setup(prepare_graph(g, config), pipe_model, env, config)
    single.setup(g, single_model, env, dataclasses_replace_strategy(config, "single"))
    for epoch in range(EPOCHS):
        assert_close_rel(pipe.train_epoch(epoch).loss, single.train_epoch(epoch).loss, torch.float64,
                         what=f"loss {epoch}")
    for (name, p), q in zip(pipe_model.named_parameters(), single_model.parameters()):
        assert_close_rel(p, q, what=name)
    got, want = pipe.evaluate(), single.evaluate()
    assert got.keys() == want.keys()
    for key in got:  # accuracies exactly; losses within float64's tolerance (the device backend sums in its order)
        assert got[key] == (want[key] if key.endswith("_acc") else pytest.approx(want[key], rel=1e-10)), key


def dataclasses_replace_strategy(config: RunConfig, name: str) -> RunConfig:
    out = copy.deepcopy(config)
    out.strategy = StrategyConfig(name=name)
    return out


def components_graph() -> tuple[Graph, torch.Tensor]:
    """Four disconnected random graphs; chunk k = component k."""
    parts = [random_graph(12, avg_degree=3.0, num_features=6, num_classes=3, seed=s, dtype=torch.float64)
             for s in range(4)]
    src, dst, offset = [], [], 0
    for p in parts:
        s, d = p.edge_index()
        src.append(s + offset)
        dst.append(d + offset)
        offset += p.num_nodes
    g = Graph.from_edges(torch.cat(src), torch.cat(dst), offset).coalesce()
    for attr in ("x", "y", "train_mask", "val_mask", "test_mask"):
        setattr(g, attr, torch.cat([getattr(p, attr) for p in parts]))
    g.meta["num_classes"] = 3
    return g, torch.repeat_interleave(torch.arange(4), 12)


@pytest.mark.parametrize("model", ["gcn", "gcnii"])
def test_no_cross_chunk_edges_is_exact(model, tmp_path):
    """P3: chunks that are whole components read no history: any K gives exact training."""
    g, chunk_of = components_graph()
    config = make_config(model, 3, 4, True, 10, "zero")
    pipe_model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64)
    single_model = copy.deepcopy(pipe_model)
    pipe, single = PipelineStrategy(), SingleStrategy()
    pipe.setup(handle_with_chunks(g, chunk_of, tmp_path), pipe_model, DistEnv(), config)
    single.setup(g, single_model, DistEnv(), dataclasses_replace_strategy(config, "single"))
    assert pipe.plan.cut_fraction() == 0.0
    for epoch in range(EPOCHS):
        assert_close_rel(pipe.train_epoch(epoch).loss, single.train_epoch(epoch).loss, torch.float64,
                         what=f"loss {epoch}")
    for p, q in zip(pipe_model.parameters(), single_model.parameters()):
        assert_close_rel(p, q)


@pytest.mark.parametrize("period", [1, 3])
def test_fixed_point_with_zero_learning_rate(period):
    """P4: with lr = 0 and no dropout the weights never move, so with the exact initial history every epoch's
    stale forward equals the exact forward: the loss is the exact loss in every epoch."""
    g = graph()
    config = make_config("gcnii", 4, 6, True, period, "zero", lr=0.0, dropout=0.0)
    config.optim.weight_decay = 0.0
    pipe_model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64)
    single = SingleStrategy()
    single.setup(g, copy.deepcopy(pipe_model), DistEnv(), dataclasses_replace_strategy(config, "single"))
    exact = single.train_epoch(0).loss
    pipe = PipelineStrategy()
    pipe.setup(prepare_graph(g, config), pipe_model, DistEnv(), config)
    for epoch in range(5):
        stats = pipe.train_epoch(epoch)
        assert stats.extra["stale_frac"] > 0
        assert_close_rel(stats.loss, exact, torch.float64, what=f"loss {epoch}")


def test_staleness_changes_training():
    """The stale forward is not the exact one (so the oracle tests below test something)."""
    g = graph()
    losses, _ = reference_run(g, assign_chunks(g, 6), make_config("gcn", 3, 6, True, 1, "zero"))
    exact = make_config("gcn", 3, 1, True, 1, "zero")
    exact_losses, _ = reference_run(g, assign_chunks(g, 1), exact)
    assert abs(losses[-1] - exact_losses[-1]) > 1e-6


# ------------------------------------------------------------------ the oracle, on 3 workers
class RecordingPipeline(PipelineStrategy):
    """Records the chunks each epoch's forward and backward visit, in order."""

    def setup(self, *args) -> None:
        super().setup(*args)
        self.visits: list[tuple[list[int], list[int]]] = []

    def train_epoch(self, epoch: int):
        self.visits.append(([], []))
        return super().train_epoch(epoch)

    def _forward_chunk(self, k: int) -> dict:
        self.visits[-1][0].append(k)
        return super()._forward_chunk(k)

    def _backward_chunk(self, k, saved, pos):
        self.visits[-1][1].append(k)
        return super()._backward_chunk(k, saved, pos)


def _worker(env: DistEnv, jobs: list[tuple[Graph, tuple, str]], width: int = 1) -> list[dict]:
    out = []
    for g, case, folder in jobs:
        config = make_config(*case, workers=env.world_size)
        config.strategy.hybrid_width = width
        model = build_model(config.model, g.num_features, g.meta["num_classes"], seed=0, dtype=torch.float64)
        handle = dataclasses.replace(DataHandle.in_memory(g), shared=folder)
        strategy = RecordingPipeline()
        strategy.setup(handle, model, env, config)
        stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
        owned = {n: (p.detach().clone(), p.grad.clone()) for n, p in model.named_parameters() if p.grad is not None}
        before = env.ledger.snapshot()
        metrics = strategy.evaluate()
        out.append({"losses": [s.loss for s in stats], "bytes": [s.bytes for s in stats], "owned": owned,
                    "visits": strategy.visits, "metrics": metrics, "eval_bytes": env.ledger.since(before),
                    "widths": model.layer_widths(), "layers": stats[0].extra["stage_layers"],
                    "extra": [s.extra for s in stats], "steps": list(strategy.timeline.steps),
                    "waits": list(strategy.timeline.waits),
                    "view_rows": {l: v.shape[0] for l, v in strategy.view.items()},
                    "local_ids": strategy.local_ids.clone()})
    return out


def test_pipeline_equals_the_chunked_reference_on_three_stages(tmp_path):
    """P2 (and P5, P6, P7): 3 stages reproduce the single-process chunked reference (losses, every parameter's
    gradient and value after Adam steps); every epoch visits each chunk once per stage, backward in reverse,
    with the same order on every rank; the stage bytes equal the closed form, with no weight traffic."""
    graphs = [graph()] * len(CASES) + [toy_graph()]
    cases = CASES + [TOY_CASE]
    chunks = [assign_chunks(g, case[2], seed=0) for g, case in zip(graphs, CASES)] + [torch.tensor(TOY_PARTS)]
    folders = [tmp_path / f"case{i}" for i in range(len(cases))]
    for g, c, f in zip(graphs, chunks, folders):
        handle_with_chunks(g, c, f)
    results = run_distributed(_worker, 3, list(zip(graphs, cases, map(str, folders))), timeout_s=120)
    for i, (g, case) in enumerate(zip(graphs, cases)):
        config = make_config(*case)
        losses, ref_model = reference_run(g, chunks[i], config)  # one process, one autograd pass per epoch
        per_rank = [r[i] for r in results]
        assert [r["layers"] for r in per_rank] == [[a.start, a.stop] for a in stage_layers(case[1], 3)]
        for r in per_rank:
            for e in range(EPOCHS):
                assert_close_rel(r["losses"][e], losses[e], torch.float64, what=f"{case} loss {e}")
        owners: dict[str, int] = {}
        for rank, r in enumerate(per_rank):
            for name in r["owned"]:
                assert name not in owners, f"{case}: {name} trained on ranks {owners[name]} and {rank}"
                owners[name] = rank
        for name, p in ref_model.named_parameters():
            value, grad = per_rank[owners[name]]["owned"][name]
            assert_close_rel(grad, p.grad, what=f"{case} grad {name}")
            assert_close_rel(value, p, what=f"{case} {name}")
        # P6: the schedule
        visits = [r["visits"] for r in per_rank]
        assert all(v == visits[0] for v in visits), f"{case}: ranks visited chunks in different orders"
        for e, (forward, backward) in enumerate(visits[0]):
            assert forward == chunk_order(case[2], e, 0, case[3]).tolist()
            assert sorted(forward) == list(range(case[2])) and backward == forward[::-1]
        assert (len({tuple(f) for f, _ in visits[0]}) > 1) == case[3]  # shuffled orders change between epochs
        # P7: bytes, summed over workers, every epoch
        widths = per_rank[0]["widths"]
        boundaries = [widths[a.start] for a in stage_layers(case[1], 3)[1:]]
        expected = pipeline_bytes_per_epoch(g.num_nodes, boundaries, 8, carries_h0=case[0] == "gcnii")
        for e in range(EPOCHS):
            sent = {cat: sum(r["bytes"][e].get(cat, 0) for r in per_rank) for cat in (PIPE_FWD, PIPE_BWD)}
            assert sent[PIPE_FWD] == sent[PIPE_BWD] == expected // 2
            assert all("allreduce" not in r["bytes"][e] for r in per_rank)
        # the exact forwards (initial history in epoch 0, evaluation) move every row once per boundary
        assert sum(r["bytes"][0].get(PIPE_INIT, 0) for r in per_rank) == expected // 2
        assert all(PIPE_INIT not in r["bytes"][e] for r in per_rank for e in range(1, EPOCHS))
        assert sum(r["eval_bytes"].get(EVAL_STAGE, 0) for r in per_rank) == expected // 2
        assert len({tuple(sorted(r["metrics"].items())) for r in per_rank}) == 1
        # the chunk-by-chunk evaluation through the stages is the exact forward
        assert_same_metrics(per_rank[0]["metrics"], exact_metrics(ref_model, g), f"{case} evaluation")
        # timestamps: one step per (phase, chunk), a receive wait per chunk from each neighbour; the fractions split
        # the schedule
        k = case[2]
        for stage, r in enumerate(per_rank):
            assert [(p, c) for p, c, _, _ in r["steps"]] == [("F", c) for c in forward] + [("B", c) for c in backward]
            waits = [(p, c) for p, c, _, _ in r["waits"]]
            assert waits == [("F", c) for c in forward] * (stage > 0) + [("B", c) for c in backward] * (stage < 2)
            for extra in r["extra"]:
                parts = [extra[key] for key in ("compute_s", "bubble_s", "transfer_s")]
                assert all(p >= -1e-9 for p in parts) and sum(parts) == pytest.approx(extra["schedule_s"])
                assert 0 <= extra["bubble_frac"] + extra["transfer_frac"] <= 1 + 1e-9
                assert extra["chunks"] == k and extra["activation_peak"] > 0


# ------------------------------------------------------------------ the cost model (§3.7)
def test_cost_model_reproduces_the_papers_volumes_and_decides():
    from graphscale.strategies.pipeline.costmodel import predict

    gib = 2 ** 30
    reddit = predict(232_965, 100, 32, 8, 2.61)  # Table 2's rho; Table 5: 14.50 GiB (graph), 1.22 GiB (pipeline)
    assert round(reddit.graph / gib, 2) == 14.50 and round(reddit.pipeline / gib, 2) == 1.22
    assert reddit.best() == "pipeline"
    squirrel = predict(5_201, 1000, 32, 8, 2.22, c=2)  # GCNII: H^0 crosses the boundaries too (0.54 GiB)
    assert round(squirrel.pipeline / gib, 2) == 0.54
    # graph parallelism moves less exactly when rho L < (S - 1) c
    assert predict(1000, 16, 4, 8, 1.5).best() == "graph"  # 6 < 7, and the pipeline needs S <= L anyway
    assert predict(1000, 16, 8, 8, 0.8).best() == "graph" and predict(1000, 16, 8, 8, 0.9).best() == "pipeline"
    toy = predict(8, 16, 6, 3, 7 / 8, element_size=8)  # the spec's toy graph: 2 * 6 * 7 H b against 2 * 2 * 8 H b
    assert toy.graph == 2 * 6 * 7 * 16 * 8 and toy.pipeline == 2 * 2 * 8 * 16 * 8
    # hybrid: S_h = M is the pipeline (rho of one part is 0), S_h = 1 is graph parallelism
    assert predict(100, 8, 8, 4, 1.2, hybrid_stages=4, rho_hybrid=0.0).hybrid == predict(100, 8, 8, 4, 1.2).pipeline
    assert predict(100, 8, 8, 4, 1.2, hybrid_stages=1, rho_hybrid=1.2).hybrid == predict(100, 8, 8, 4, 1.2).graph
    assert predict(100, 8, 8, 4, 1.2, hybrid_stages=2, rho_hybrid=0.1).best() == "hybrid"  # 1.6 + 2 < 6 < 19.2
    with pytest.raises(ValueError, match="divides the 4 workers"):
        predict(100, 8, 8, 4, 1.2, hybrid_stages=3, rho_hybrid=0.5)


# ------------------------------------------------------------------ end to end
def test_a_run_prepares_the_chunks_in_the_parent_and_trains(tmp_path):
    """``graphscale train --strategy pipeline``: the parent writes the chunks (host-shared), 2 stages train, the
    report carries the measured stage bytes (= the closed form) and each worker's cut and stale fractions."""
    from graphscale.config import build_config
    from graphscale.run import run

    config = build_config({"data": {"dataset": "sbm:nodes=120,degree=5,features=8,classes=3,seed=0"},
                           "model": {"name": "gcnii", "layers": 3, "hidden": 8}, "optim": {"epochs": 2},
                           "strategy": {"name": "pipeline", "workers": 2, "history_period": 1},
                           "cache_dir": str(tmp_path), "progress": False, "oversubscribe": True})
    report = run(config)
    assert list((tmp_path / "shared").glob("*/chunk_of.npy"))
    for epoch in report["epochs"]:
        assert epoch["bytes"][PIPE_FWD] == epoch["bytes"][PIPE_BWD] == 120 * 8 * 2 * 4  # N H c b, one boundary
        extras = epoch["extra_per_worker"]
        assert [e["stage_layers"] for e in extras] == [[0, 2], [2, 3]] and all(e["chunks"] == 8 for e in extras)
        assert 0 < extras[0]["stale_frac"] <= extras[0]["cut_frac"] < 1
    assert 0 <= report["final"]["test_acc"] <= 1


def test_bench_pipeline_prints_the_volume_tables(capsys, tmp_path):
    import argparse

    from graphscale.bench.papers import gnnpipe as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graphs", "sbm:nodes=300,degree=8,features=8,seed=0", "--stages", "4",
                              "--layers", "8", "--hidden", "16", "--depths", "4,8,16", "--skip-accuracy",
                              "--skip-timing", "--plot", str(tmp_path / "volume.png")])
    assert bench.run(args) == 0
    assert (tmp_path / "volume.png").stat().st_size > 0 and (tmp_path / "volume.depth.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "Table 5 analogue" in out and "Table 7 analogue" in out and "Table 8 analogue" in out
    assert "geometric mean" in out
    graph = bench._load("sbm:nodes=300,degree=8,features=8,seed=0", 0)
    from graphscale.registry import PARTITIONERS

    owner = PARTITIONERS.get("metis")().partition(graph, 4, seed=0)
    shallow, deep = (bench.volumes(graph, owner, "gcnii", depth, 4, 16) for depth in (8, 16))
    assert shallow["pipeline"] == deep["pipeline"] == 2 * 3 * 300 * 16 * 2 * 4  # constant in L, c = 2
    assert deep["graph"] == 2 * shallow["graph"]  # linear in L


def test_bench_pipeline_times_and_trains(capsys):
    """The timing runs (real pipelines: bubble, transfer, stale reads, memory per stage, GPipe vs 1F1B) and the
    accuracy runs (chunked reference), at a toy size."""
    import argparse

    from graphscale.bench.papers import gnnpipe as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graphs", "sbm:nodes=200,degree=6,features=8,seed=0", "--stages", "2",
                              "--layers", "2", "--hidden", "8", "--depths", "2", "--accuracy-layers", "2",
                              "--timing-workers", "2", "--timing-epochs", "2", "--epochs", "2", "--chunks", "2",
                              "--jobs", "1"])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    for text in ("bubble %", "transfer %", "stale reads %", "1F1B, no cross grads", "GPipe hybrid x2",
                 "1f1b / gpipe", "no cross-chunk grads", "exact (K=1)", "resgcn"):
        assert text in out, text


#: hybrid cases, 2 stages x 2-way graph parallelism (4 workers): (configuration, --hybrid-split)
HYBRID_CASES = [(("gcn", 3, 4, True, 1, "zero"), "chunks-first"), (("gcnii", 3, 5, True, 2, "zero"), "chunks-first"),
                (("resgcn", 3, 4, True, 1, "zero"), "parts-first"),
                (("gcnii", 3, 4, True, 1, "zero", "1f1b", "none"), "chunks-first")]


def test_hybrid_equals_the_chunked_reference(tmp_path):
    """P2 for the hybrid (§3.6): 2 stages x 2-way graph parallelism gives the same numbers as the pure pipeline's
    reference (sub-chunks do not change which rows are fresh); the members of a group hold identical weights;
    bytes: stage traffic as the pure pipeline, the groups' ghost rows (2 sum_r |B_r| sum_l d_l b) and the weight
    all-reduce (2 (W-1) P b), each exactly."""
    from graphscale.partition.base import halo_sizes
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch
    from graphscale.strategies.pipeline.plan import group_halo_bytes_per_epoch

    g, width, stages = graph(), 2, 2
    cases = [case for case, _ in HYBRID_CASES]
    folders = [tmp_path / f"hybrid{i}" for i in range(len(HYBRID_CASES))]
    chunks = []
    for (case, split), folder in zip(HYBRID_CASES, folders):
        chunk_of, sub_of = assign_hybrid(g, case[2], width, split)
        folder.mkdir()
        np.save(folder / CHUNK_FILE, chunk_of.numpy())
        np.save(folder / SUBCHUNK_FILE, sub_of.numpy())
        chunks.append(chunk_of)
    results = run_distributed(_worker, stages * width, list(zip([g] * len(chunks), cases, map(str, folders))),
                              width, timeout_s=120)
    for i, case in enumerate(cases):
        losses, ref_model = reference_run(g, chunks[i], make_config(*case))
        per_rank = [r[i] for r in results]
        for r in per_rank:
            for e in range(EPOCHS):
                assert_close_rel(r["losses"][e], losses[e], torch.float64, what=f"{case} loss {e}")
        for name, p in ref_model.named_parameters():
            holders = [r for r in per_rank if name in r["owned"]]
            assert len(holders) == width, f"{case}: {name} held by {len(holders)} ranks"
            for r in holders:
                value, grad = r["owned"][name]
                assert_close_rel(grad, p.grad, what=f"{case} grad {name}")
                assert_close_rel(value, p, what=f"{case} {name}")
        widths = per_rank[0]["widths"]
        split = stage_layers(case[1], stages)
        sub_of = torch.from_numpy(np.load(folders[i] / SUBCHUNK_FILE))
        ghosts = int(halo_sizes(g, sub_of, width).sum())
        assert ghosts > 0
        exchanged = [widths[l] for l in range(case[1]) if l > 0 or case[0] in ("gcnii", "resgcn")]
        num_params = sum(p.numel() for p in ref_model.parameters())
        assert_same_metrics(per_rank[0]["metrics"], exact_metrics(ref_model, g), f"{case} evaluation")
        # memory split: a member keeps its own rows and its ghosts only, per layer
        for rank, r in enumerate(per_rank):
            member = rank % width
            rows = int((sub_of == member).sum()) + int(halo_sizes(g, sub_of, width)[member])
            assert r["local_ids"].numel() == rows < g.num_nodes
            assert set(r["view_rows"].values()) <= {rows} and r["extra"][0]["buffer_rows"] == rows
        for e in range(EPOCHS):
            sent = {cat: sum(r["bytes"][e].get(cat, 0) for r in per_rank)
                    for cat in (PIPE_FWD, PIPE_BWD, "halo", "allreduce")}
            pipe = pipeline_bytes_per_epoch(g.num_nodes, [widths[split[1].start]], 8, case[0] == "gcnii")
            assert sent[PIPE_FWD] == sent[PIPE_BWD] == pipe // 2
            assert sent["halo"] == group_halo_bytes_per_epoch(ghosts, exchanged, 8)
            assert sent["allreduce"] == allreduce_bytes_per_epoch(num_params, width, 8)
        # the exact forwards: every member's own rows once per boundary; ghosts once per layer but stage 0's first
        # (its input map runs on the ghost rows too), forward only
        ghost_layers = [widths[l] for l in range(1, case[1])]
        for cat, halo_cat, sent in ((PIPE_INIT, INIT_HALO, [r["bytes"][0] for r in per_rank]),
                                    (EVAL_STAGE, EVAL_HALO, [r["eval_bytes"] for r in per_rank])):
            assert sum(b.get(cat, 0) for b in sent) == pipe // 2
            assert sum(b.get(halo_cat, 0) for b in sent) == group_halo_bytes_per_epoch(ghosts, ghost_layers, 8) // 2


#: (configuration) of the 1F1B test on 3 stages; each runs with GPipe and with 1F1B, cross-chunk gradients dropped
ONE_F_ONE_B_CASES = [("gcnii", 4, 6, True, 2, "zero"), ("resgcn", 3, 5, False, 1, "zero"), ("gcn", 3, 3, True, 1, "zero")]


def test_1f1b_equals_gpipe_without_cross_chunk_gradients(tmp_path):
    """With --cross-chunk-grad none both schedules compute the same numbers: 1F1B and GPipe on 3 stages give the
    chunked reference's losses, gradients and parameters (rows of other chunks as constants), and each other's;
    1F1B runs each chunk's backward in forward order, holds fewer chunks' activations on the first stages, and
    moves the same bytes. Dropping the gradients changes training (so the test tests something)."""
    g = graph()
    jobs, chunks = [], []
    for i, case in enumerate(ONE_F_ONE_B_CASES):
        chunk_of = assign_chunks(g, case[2], seed=0)
        handle_with_chunks(g, chunk_of, tmp_path / f"c{i}")
        chunks.append(chunk_of)
        jobs += [(g, (*case, schedule, "none"), str(tmp_path / f"c{i}")) for schedule in ("gpipe", "1f1b")]
    results = run_distributed(_worker, 3, jobs, timeout_s=120)
    for i, case in enumerate(ONE_F_ONE_B_CASES):
        gpipe, onef = ([r[2 * i + j] for r in results] for j in (0, 1))
        losses, ref_model = reference_run(g, chunks[i], make_config(*case, "gpipe", "none"))
        fresh_losses, _ = reference_run(g, chunks[i], make_config(*case))
        assert abs(fresh_losses[-1] - losses[-1]) > 1e-8
        for run_ in (gpipe, onef):
            for e in range(EPOCHS):
                assert_close_rel(run_[0]["losses"][e], losses[e], torch.float64, what=f"{case} loss {e}")
            for name, p in ref_model.named_parameters():
                (value, grad), = [r["owned"][name] for r in run_ if name in r["owned"]]
                assert_close_rel(grad, p.grad, what=f"{case} grad {name}")
                assert_close_rel(value, p, what=f"{case} {name}")
            assert_same_metrics(run_[0]["metrics"], exact_metrics(ref_model, g), f"{case} evaluation")
        for a, b in zip(gpipe, onef):
            assert [x for x, _ in b["visits"]] == [x for x, _ in a["visits"]]  # same forward order
            assert all(fwd == bwd for fwd, bwd in b["visits"])  # 1F1B: backwards in forward order
            assert a["bytes"] == b["bytes"]
        k = case[2]
        for stage in range(3):  # stage s of 3 holds at most 3 - s chunks' activations under 1F1B, GPipe all k
            less, more = (run_[stage]["extra"][-1]["activation_peak"] for run_ in (onef, gpipe))
            assert less < more if k > 3 - stage else less == more
        steps = [(p, c) for p, c, _, _ in onef[0]["steps"]]
        order = chunk_order(k, EPOCHS - 1, 0, case[3]).tolist()
        assert steps[:3] == [("F", order[0]), ("F", order[1]), ("F", order[2])] and steps[3] == ("B", order[0])


def test_pipeline_schedules():
    from graphscale.strategies.pipeline.plan import pipeline_schedule

    order = torch.tensor([2, 0, 3, 1])
    assert pipeline_schedule(order, 0, 2, "gpipe") == [("F", 2), ("F", 0), ("F", 3), ("F", 1),
                                                       ("B", 1), ("B", 3), ("B", 0), ("B", 2)]
    assert pipeline_schedule(order, 0, 3, "1f1b") == [("F", 2), ("F", 0), ("F", 3), ("B", 2), ("F", 1), ("B", 0),
                                                      ("B", 3), ("B", 1)]
    assert pipeline_schedule(order, 2, 3, "1f1b") == [("F", 2), ("B", 2), ("F", 0), ("B", 0), ("F", 3), ("B", 3),
                                                      ("F", 1), ("B", 1)]
    assert pipeline_schedule(torch.tensor([1, 0]), 0, 4, "1f1b") == [("F", 1), ("F", 0), ("B", 1), ("B", 0)]


def test_waits_split_at_the_peers_send():
    """A wait is bubble until the peer sent what it waits for, transfer after."""
    from graphscale.strategies.pipeline.timeline import ideal_bubble_fraction, split_waits

    waits = [("F", 0, 1.0, 3.0), ("F", 1, 4.0, 4.5), ("B", 0, 6.0, 9.0)]
    # chunk 0 sent at 2.5 (1.5 s bubble, 0.5 s transfer); chunk 1 sent at 3.9, before the wait (all transfer);
    # the gradient sent at 10 (after the wait ended: all bubble)
    assert split_waits(waits, [2.5, 3.9], [10.0, float("nan")]) == (1.5 + 3.0, 0.5 + 0.5)
    assert split_waits([("B", 1, 0.0, 2.0)], None, [1.0, float("nan")]) == (0.0, 2.0)
    assert ideal_bubble_fraction(8, 32) == pytest.approx(7 / 39)


def test_hybrid_splits():
    """chunks-first cuts every chunk in W; parts-first cuts W parts into K pieces each: every sub-chunk is
    non-empty either way, and parts-first has the ghosts of a W-way partition only (fewer)."""
    from graphscale.partition.base import halo_sizes

    g = random_graph(80, avg_degree=4.0, seed=4)
    ghosts = {}
    for split in ("chunks-first", "parts-first"):
        chunk_of, sub_of = assign_hybrid(g, 6, 2, split)
        assert torch.bincount(chunk_of * 2 + sub_of, minlength=12).min() > 0
        ghosts[split] = int(halo_sizes(g, sub_of, 2).sum())
    assert ghosts["parts-first"] < ghosts["chunks-first"]
    assert torch.equal(assign_hybrid(g, 6, 2, "parts-first")[1], assign_chunks(g, 2))
    with pytest.raises(ValueError, match="--hybrid-split must be one of"):
        assign_hybrid(g, 6, 2, "rows-first")


# ------------------------------------------------------------------ checkpoints
#: (configuration, hybrid width) of the resume test on 4 workers: 4 stages with a fixed history of period 3 and
#: historical gradients (the history, the fixed copy and the kept stale-edge gradients are all restored), and a
#: 2 x 2 hybrid (each member's own rows)
RESUME_CASES = [(("gcnii", 4, 8, True, 3, "historical"), 1), (("resgcn", 3, 4, True, 2, "zero"), 2)]


def _resume_worker(env: DistEnv, g: Graph, folders: list[str], ckpt_dir: str) -> list[dict]:
    from graphscale.distributed.comm import Comm
    from graphscale.run import train_worker

    out = []
    for (case, width), folder in zip(RESUME_CASES, folders):
        handle = dataclasses.replace(DataHandle.in_memory(g), shared=folder)

        def config(epochs: int, path: str, resume: bool = False, case=case, width=width) -> RunConfig:
            c = make_config(*case, workers=env.world_size)
            c.strategy.hybrid_width, c.optim.epochs, c.checkpoint, c.resume = width, epochs, path, resume
            c.progress = False
            return c

        barrier = Comm(env).barrier  # worker 0 writes the checkpoint the others read next
        straight = train_worker(env, config(5, f"{ckpt_dir}/{width}a.pt"), handle)
        train_worker(env, config(2, f"{ckpt_dir}/{width}b.pt"), handle)
        barrier()
        resumed = train_worker(env, config(5, f"{ckpt_dir}/{width}b.pt", resume=True), handle)
        barrier()
        out.append({"straight": straight, "resumed": resumed})
    return out


def test_resume_with_other_semantics_is_refused():
    """The options that change what the pipeline computes are part of a checkpoint's identity: resuming with another
    history period or chunk count is refused in the parent, naming the options; the schedule may change."""
    from graphscale.checkpoint import check_resume, identity

    saved = {"identity": identity(make_config("gcnii", 4, 8, True, 3, "zero", workers=2))}
    other = make_config("gcnii", 4, 6, True, 5, "zero", workers=2)
    with pytest.raises(ValueError, match="--chunks 8 .checkpoint. vs 6; --history-period 3 .checkpoint. vs 5"):
        check_resume(other, saved)
    check_resume(make_config("gcnii", 4, 8, True, 3, "zero", workers=2), saved)
    none = {"identity": identity(make_config("gcnii", 4, 8, True, 3, "zero", "gpipe", "none", workers=2))}
    check_resume(make_config("gcnii", 4, 8, True, 3, "zero", "1f1b", "none", workers=2), none)


def test_resume_continues_identically(tmp_path):
    """A pipeline run resumed from its checkpoint (every stage's parameters, Adam state and historical rows,
    gathered to worker 0) continues exactly as the uninterrupted run: losses, metrics and the best epoch of the
    three epochs after the checkpoint; the checkpoint holds the whole model, each parameter as its stage trained
    it."""
    g = graph()
    folders = []
    for i, (case, width) in enumerate(RESUME_CASES):
        chunk_of = assign_chunks(g, case[2], seed=0)
        folders.append(str(tmp_path / f"resume{i}"))
        handle_with_chunks(g, chunk_of, tmp_path / f"resume{i}", width)
    results = run_distributed(_resume_worker, 4, g, folders, str(tmp_path), timeout_s=120)
    for i, (case, width) in enumerate(RESUME_CASES):
        for rank, r in enumerate(results):
            straight, resumed = r[i]["straight"], r[i]["resumed"]
            assert [h["epoch"] for h in resumed["history"]] == list(range(5))
            for a, b in zip(straight["history"][2:], resumed["history"][2:]):
                for key in ("loss", "train_loss", "val_loss", "test_loss", "val_acc", "test_acc"):
                    assert_close_rel(b[key], a[key], torch.float64, what=f"{case} rank {rank} epoch {a['epoch']} {key}")
            assert straight["best"] == resumed["best"]
        saved = torch.load(tmp_path / f"{width}a.pt", weights_only=False)
        ref_losses, ref_model = reference_run(g, assign_chunks(g, case[2], seed=0), make_config(*case), epochs=5)
        for h, loss in zip(results[0][i]["straight"]["history"], ref_losses):
            assert_close_rel(h["loss"], loss, torch.float64)
        for name, p in ref_model.named_parameters():
            assert_close_rel(saved["strategy"]["model"][name], p, what=f"{case} checkpoint {name}")

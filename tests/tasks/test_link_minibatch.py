"""``--task link`` with edge mini-batches: ``single --minibatch`` (LinkNeighborLoader semantics: with every neighbour
sampled and one batch of every positive it is full-graph training), ``split-parallel`` x2 equal to it (losses,
parameters and metrics, float64 within 1e-10, both kernel paths) with the pair exchange's bytes against their
closed form, and ``data-parallel`` x2 equal to its single-process reference."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.block import Block
from graphscale.data.sampler import NeighborSampler
from graphscale.distributed.env import DistEnv
from graphscale.nn.backend import KERNELS_ENV
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.base import make_optimizer
from graphscale.strategies.data_parallel import DataParallel, MicroBatchSchedule, link_reference_step
from graphscale.strategies.link_minibatch import PAIR_ROWS
from graphscale.strategies.single import SingleStrategy
from graphscale.strategies.split_parallel import SplitParallel
from graphscale.tasks.edge_batches import EdgeBatchLoader
from graphscale.tasks.link import LinkTask, attach_decoder
from graphscale.tasks.split import split_edges
from graphscale.testing import assert_close_rel, random_graph, run_distributed

#: (model, decoder, $GRAPHSCALE_KERNELS) trained in float64 by one spawned split-parallel run: both kernel paths
COMBOS = [("sage", "mlp", "torch"), ("sage", "mlp", "auto"), ("gat", "dot", "torch"), ("gcn", "distmult", "auto")]
EPOCHS = 2
BATCH = 24
FANOUTS = [3, 3]
HIDDEN = 4


def make_graph(dtype: torch.dtype):
    return random_graph(70, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=2)


def make_config(strategy: str, model: str, decoder: str, workers: int = 1, fanouts=FANOUTS, batch=BATCH,
                minibatch: bool = True) -> RunConfig:
    return RunConfig(task="link", decoder=decoder, hits_k=[5],
                     model=ModelConfig(name=model, hidden=HIDDEN, layers=len(fanouts), dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4, epochs=EPOCHS),
                     strategy=StrategyConfig(name=strategy, workers=workers, fanouts=list(fanouts), batch_size=batch,
                                             cache_fraction=0.1, minibatch=minibatch),
                     seed=0)


def make_model(config: RunConfig, graph, dtype: torch.dtype) -> torch.nn.Module:
    model = build_model(config.model, graph.num_features, HIDDEN, seed=0, dtype=dtype)
    return attach_decoder(model, config)


def train_single(config: RunConfig, graph, dtype: torch.dtype, epochs: int = EPOCHS):
    model = make_model(config, graph, dtype)
    single = SingleStrategy()
    single.setup(graph, model, DistEnv.local(), config)
    losses = [single.train_epoch(e).loss for e in range(epochs)]
    return model, losses, single.evaluate(), single


def test_every_neighbour_and_one_batch_is_full_graph_training():
    """fan-outs -1 and a batch of every positive: the seeds' sampled embeddings are the full-graph ones, so
    ``single --minibatch`` takes ``single``'s full-graph steps (the same keyed negatives)."""
    dtype = torch.float64
    graph = make_graph(dtype)
    full = make_config("single", "gcn", "dot", fanouts=[-1, -1], batch=10_000, minibatch=False)
    mini = make_config("single", "gcn", "dot", fanouts=[-1, -1], batch=10_000)
    model_f, losses_f, metrics_f, _ = train_single(full, graph, dtype)
    model_m, losses_m, metrics_m, strategy = train_single(mini, graph, dtype)
    assert len(strategy.loader) == 1
    assert losses_m == pytest.approx(losses_f, rel=1e-10)
    for (name, p), q in zip(model_f.named_parameters(), model_m.parameters()):
        assert_close_rel(q, p, dtype, what=name)
    assert metrics_m == pytest.approx(metrics_f, rel=1e-10, nan_ok=True)


def test_edge_batches_hold_positives_and_their_keyed_negatives_and_sample_the_message_graph():
    graph = make_graph(torch.float64)
    split = split_edges(graph, [0.85, 0.05, 0.10], 0)
    loader = EdgeBatchLoader(split, BATCH, seed=0)
    edge_ids = loader.edge_ids(1)
    assert sorted(torch.cat(edge_ids).tolist()) == split.ids("train").tolist()
    assert [e.tolist() for e in edge_ids] == [e.tolist() for e in EdgeBatchLoader(split, BATCH, 0).edge_ids(1)]
    assert [e.tolist() for e in edge_ids] != [e.tolist() for e in loader.edge_ids(2)]
    batch = loader.batch(edge_ids[0], 1)
    b = edge_ids[0].numel()
    u, v = split.pairs[:, edge_ids[0]]
    assert torch.equal(batch.seeds[batch.src_pos[:b]], u) and torch.equal(batch.seeds[batch.dst_pos[:b]], v)
    assert torch.equal(batch.seeds[batch.src_pos[b:]], u) and batch.label.tolist() == [1.0] * b + [0.0] * b
    assert torch.equal(batch.seeds, torch.unique(torch.cat([u, v, batch.seeds[batch.dst_pos[b:]]])))
    config = make_config("single", "sage", "dot")
    single = SingleStrategy()
    single.setup(graph, make_model(config, graph, torch.float64), DistEnv.local(), config)
    held_out = {tuple(p) for s in ("val", "test") for p in split.pairs[:, split.ids(s)].t().tolist()}
    blocks = single.sampler.sample(batch.seeds, 0)
    for block in blocks:
        dst = block.src_ids[:block.num_dst].repeat_interleave(block.indptr.diff())
        edges = {tuple(sorted(e)) for e in torch.stack([block.src_ids[block.indices], dst]).t().tolist()}
        assert not edges & held_out, "a held-out edge was sampled"


def assert_same_metrics(got: dict, expected: dict, what: str) -> None:
    """The losses of every split within float reassociation; the rank metrics (AUC, Hits@K, MRR) within 1e-3: two
    scores equal in one run can differ in the last bit in the other, which moves a tie by one rank."""
    assert set(got) == set(expected), what
    for key, value in expected.items():
        tol = {"rel": 1e-9} if key.endswith("_loss") else {"abs": 1e-3}
        assert got[key] == pytest.approx(value, nan_ok=True, **tol), f"{what} {key}"


@contextlib.contextmanager
def kernel_path(value: str):
    """``$GRAPHSCALE_KERNELS`` set to ``value`` inside a (pooled) worker, restored after."""
    before = os.environ.get(KERNELS_ENV)
    os.environ[KERNELS_ENV] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(KERNELS_ENV, None)
        else:
            os.environ[KERNELS_ENV] = before


def _split_worker(env: DistEnv, combos) -> list[dict]:
    out = []
    for model_name, decoder, kernels in combos:
        with kernel_path(kernels):
            out.append(_split_run(env, model_name, decoder))
    return out


def _split_run(env: DistEnv, model_name: str, decoder: str) -> dict:
    dtype = torch.float64
    graph = make_graph(dtype)
    config = make_config("split-parallel", model_name, decoder, workers=env.world_size)
    model = make_model(config, graph, dtype)
    strategy = SplitParallel()
    strategy.setup(prepare_graph(graph, config), model, env, config)
    stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
    return {"losses": [s.loss for s in stats], "bytes": stats[0].bytes, "owner": strategy.owner,
            "pairs": stats[0].extra["pairs"], "params": [p.detach().clone() for p in model.parameters()],
            "metrics": strategy.evaluate()}


def expected_pair_bytes(graph, config, owner: torch.Tensor, elem: int) -> int:
    """The pair exchange's closed form over epoch 0, from the definition with Python sets: per batch, every
    (destination seed, scoring worker) with the scorer (the source's owner) other than the seed's owner, one
    ``HIDDEN``-wide row forward and its gradient back."""
    loader = EdgeBatchLoader(split_edges(graph, config.link_split, 0), BATCH, seed=0)
    rows = 0
    for batch in loader.batches(0):
        src, dst = batch.seeds[batch.src_pos].tolist(), batch.seeds[batch.dst_pos].tolist()
        rows += len({(t, int(owner[s])) for s, t in zip(src, dst) if owner[s] != owner[t]})
    return 2 * rows * HIDDEN * elem


@pytest.mark.slow
def test_split_parallel_equals_single_minibatch(monkeypatch):
    results = run_distributed(_split_worker, 2, COMBOS)
    for c, (model_name, decoder, kernels) in enumerate(COMBOS):
        monkeypatch.setenv("GRAPHSCALE_KERNELS", kernels)
        dtype, tag = torch.float64, f"{model_name}/{decoder}/{kernels}"
        runs = [r[c] for r in results]
        graph = make_graph(dtype)
        reference, losses, metrics, single = train_single(make_config("single", model_name, decoder), graph, dtype)
        assert sum(r["pairs"] for r in runs) == 2 * single.loader.num_positives, tag  # every pair scored once
        for rank, r in enumerate(runs):
            assert r["losses"] == pytest.approx(losses, rel=1e-10), f"{tag} rank {rank}"
            for (name, p_ref), p in zip(reference.named_parameters(), r["params"]):
                assert_close_rel(p, p_ref, dtype, what=f"{tag} rank {rank} {name}")
            assert_same_metrics(r["metrics"], metrics, f"{tag} rank {rank}")
        elem = torch.empty(0, dtype=dtype).element_size()
        got = sum(r["bytes"].get(PAIR_ROWS, 0) for r in runs)
        assert got == expected_pair_bytes(graph, make_config("single", model_name, decoder), runs[0]["owner"],
                                          elem) > 0, tag


#: (cache, model, decoder, $GRAPHSCALE_KERNELS) trained in float64 by one spawned data-parallel run
DP_COMBOS = [("none", "sage", "mlp", "torch"), ("pagraph", "gat", "dot", "auto"),
             ("quiver", "gcn", "distmult", "torch"), ("none", "sage", "mlp", "auto")]


def dp_config(cache: str, model: str, decoder: str, workers: int) -> RunConfig:
    config = make_config("data-parallel", model, decoder, workers=workers)
    config.strategy.cache = cache
    return config


def _dp_worker(env: DistEnv, combos) -> list[dict]:
    out = []
    for cache, model_name, decoder, kernels in combos:
        with kernel_path(kernels):
            out.append(_dp_run(env, cache, model_name, decoder))
    return out


def _dp_run(env: DistEnv, cache: str, model_name: str, decoder: str) -> dict:
    graph = make_graph(torch.float64)
    config = dp_config(cache, model_name, decoder, env.world_size)
    model = make_model(config, graph, torch.float64)
    strategy = DataParallel()
    strategy.setup(prepare_graph(graph, config), model, env, config)
    stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
    return {"losses": [s.loss for s in stats], "owner": strategy.owner, "targets": stats[0].extra["targets"],
            "params": [p.detach().clone() for p in model.parameters()], "metrics": strategy.evaluate()}


@pytest.mark.slow
def test_data_parallel_equals_its_single_process_reference(monkeypatch):
    """Every iteration: one step over the union of the workers' edge micro-batches (each sampled on its own, the
    loss over the union's pairs); the metrics those of the reference model's full-graph embeddings."""
    world = 2
    results = run_distributed(_dp_worker, world, DP_COMBOS)
    for c, (cache, model_name, decoder, kernels) in enumerate(DP_COMBOS):
        monkeypatch.setenv("GRAPHSCALE_KERNELS", kernels)
        tag, dtype = f"{cache}/{model_name}/{decoder}/{kernels}", torch.float64
        runs = [r[c] for r in results]
        graph = make_graph(dtype)
        config = dp_config(cache, model_name, decoder, world)
        split = split_edges(graph, config.link_split, 0)
        model = make_model(config, graph, dtype)
        optimizer = make_optimizer(model, config.optim)
        task = LinkTask(split, model.link_decoder, 0, config.hits_k, "cpu")
        loader = EdgeBatchLoader(split, BATCH, seed=0)
        owner = runs[0]["owner"]
        schedule = MicroBatchSchedule(split.ids("train"), BATCH, world, 0,
                                      None if owner is None else owner[split.pairs[0]])
        sampler = NeighborSampler(split.message_graph, FANOUTS, seed=0)
        model.train()
        losses = []
        for epoch in range(EPOCHS):
            model.set_epoch(epoch)
            total = 0.0
            for k, micro in enumerate(schedule.iterations(epoch)):
                optimizer.zero_grad()
                loss = link_reference_step(model, sampler, graph.x, task, loader, epoch, micro,
                                           [schedule.batch_key(epoch, k, r) for r in range(world)])
                optimizer.step()
                total += float(loss) * 2 * sum(t.numel() for t in micro)
            losses.append(total / (2 * split.ids("train").numel()))
        model.eval()
        metrics = task.evaluate(model(Block.full(split.message_graph), graph.x))
        assert sum(r["targets"] for r in runs) == split.ids("train").numel(), tag
        for rank, r in enumerate(runs):
            assert r["losses"] == pytest.approx(losses, rel=1e-10), f"{tag} rank {rank}"
            for (name, p_ref), p in zip(model.named_parameters(), r["params"]):
                assert_close_rel(p, p_ref, dtype, what=f"{tag} rank {rank} {name}")
            assert_same_metrics(r["metrics"], metrics, f"{tag} rank {rank}")

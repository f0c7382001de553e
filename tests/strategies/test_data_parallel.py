"""Data parallelism reproduces its single-process semantics; its caches and Ledger match the closed forms.

One spawned run (3 workers, one micro-batch left empty in the last iteration) checks the three cache
policies: parameters after every epoch against one single-process step per iteration over the union of the
micro-batches (loss / B_k), identical parameters across workers, the cache contents against brute force, and
the h2d / p2p / allreduce / control bytes of every epoch against the module docstring's closed forms. With one
worker, ``data-parallel`` is ``single`` mini-batch training.
"""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.feature_cache import FeatureCache, cache_rows
from graphscale.data.sampler import NeighborSampler
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import make_optimizer
from graphscale.strategies.data_parallel import DataParallel, MicroBatchSchedule, reference_step
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.validation import validate

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: (cache, model, dtype)
COMBOS = [("none", "sage", "float64"), ("pagraph", "gat", "float64"), ("quiver", "sage", "float32")]
EPOCHS = 2
BATCH = 7  # 30 training vertices: batches 7, 7, 7, 7, 2 -> the last iteration leaves one of 3 workers empty
FRACTION = 0.2
FANOUTS = [3, 3]


def make_graph(dtype: torch.dtype):
    return random_graph(60, avg_degree=5.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=2)


def make_config(cache: str, model: str, workers: int) -> RunConfig:
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=2, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="data-parallel", workers=workers, fanouts=FANOUTS, batch_size=BATCH,
                                             cache=cache, cache_fraction=FRACTION, minibatch=True),
                     seed=0)


def _worker(env: DistEnv, combos: list[tuple[str, str, str]]) -> list[dict]:
    out = []
    for cache, model_name, dtype_name in combos:
        dtype = DTYPES[dtype_name]
        graph = make_graph(dtype)
        config = make_config(cache, model_name, env.world_size)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        strategy = DataParallel()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        epochs = []
        for epoch in range(EPOCHS):
            stats = strategy.train_epoch(epoch)
            epochs.append({"loss": stats.loss, "bytes": stats.bytes, "extra": stats.extra,
                           "params": [p.detach().clone() for p in model.parameters()]})
        out.append({"epochs": epochs, "cache_ids": strategy.cache.ids, "owner": strategy.owner,
                    "metrics": strategy.evaluate()})
    return out


def brute_force_caches(graph, cache: str, world: int, owner: torch.Tensor | None) -> list[set[int]]:
    """Each worker's cached vertices, from the policy's definition with Python sets."""
    cap = cache_rows(FRACTION, graph.num_nodes)
    deg = graph.out_degrees().tolist()
    rank = sorted(range(graph.num_nodes), key=lambda v: (-deg[v], v))
    if cache == "none":
        return [set() for _ in range(world)]
    if cache == "quiver":
        hot = rank[: world * cap]
        return [set(hot[r::world]) for r in range(world)]
    train = torch.nonzero(graph.train_mask).flatten().tolist()
    caches = []
    for r in range(world):
        reach = {v for v in train if owner[v] == r}
        for _ in range(len(FANOUTS)):
            reach |= {int(u) for v in reach for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]]}
        caches.append(set([v for v in rank if v in reach][:cap]))
    return caches


@pytest.mark.parametrize("world_size", [3])
def test_data_parallel_matches_union_of_micro_batches(world_size):
    results = run_distributed(_worker, world_size, COMBOS)
    for c, (cache, model_name, dtype_name) in enumerate(COMBOS):
        dtype = DTYPES[dtype_name]
        tag = f"{cache}/{model_name}/{dtype_name}/W={world_size}"
        runs = [r[c] for r in results]
        graph = make_graph(dtype)
        config = make_config(cache, model_name, world_size)
        owner = runs[0]["owner"]
        caches = brute_force_caches(graph, cache, world_size, owner)
        for r, run in enumerate(runs):
            assert set(run["cache_ids"].tolist()) == caches[r], f"{tag} cache of worker {r}"
        union = set().union(*caches)

        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        optimizer = make_optimizer(model, config.optim)
        schedule = MicroBatchSchedule(torch.nonzero(graph.train_mask).flatten(), BATCH, world_size, 0, owner)
        sampler = NeighborSampler(graph, FANOUTS, seed=0)
        model.train()
        elem = torch.empty(0, dtype=dtype).element_size()
        row = graph.num_features * elem
        num_params = sum(p.numel() for p in model.parameters())
        saw_empty = False
        for epoch in range(EPOCHS):
            model.set_epoch(epoch)
            loss_total, expected = 0.0, {"h2d": 0, "p2p": 0, "control": 2 * (world_size - 1) * 8}
            iterations = schedule.iterations(epoch)
            for k, micro in enumerate(iterations):
                saw_empty |= any(t.numel() == 0 for t in micro)
                keys = [schedule.batch_key(epoch, k, r) for r in range(world_size)]
                optimizer.zero_grad()
                loss, _ = reference_step(model, sampler, graph.x, graph.y, micro, keys)
                optimizer.step()
                loss_total += float(loss) * sum(t.numel() for t in micro)
                for r, (targets, key) in enumerate(zip(micro, keys)):
                    inputs = set(sampler.sample(targets, key)[0].src_ids.tolist()) if targets.numel() else set()
                    local = union if cache == "quiver" else caches[r]
                    expected["h2d"] += len(inputs - local) * row
                    peer = len(inputs & (union - caches[r])) if cache == "quiver" else 0
                    expected["p2p"] += peer * row
                    if cache == "quiver":
                        expected["control"] += (world_size - 1) * 8 + peer * 8
            expected["allreduce"] = len(iterations) * 2 * (world_size - 1) * num_params * elem
            got = [run["epochs"][epoch] for run in runs]
            for rank, e in enumerate(got):
                for (name, p_ref), p in zip(model.named_parameters(), e["params"]):
                    assert_close_rel(p, p_ref.detach(), dtype, what=f"{tag} epoch {epoch} rank {rank} {name}")
                for p, p0 in zip(e["params"], got[0]["params"]):
                    assert torch.equal(p, p0), f"{tag}: parameters diverged across workers"
                assert e["loss"] == pytest.approx(loss_total / int(graph.train_mask.sum()),
                                                  rel=1e-9 if dtype == torch.float64 else 1e-5)
            total = {k: sum(e["bytes"].get(k, 0) for e in got) for k in expected}
            assert total == expected, f"{tag} epoch {epoch}"
            assert set().union(*(e["bytes"] for e in got)) <= {"h2d", "h2d_struct", "p2p", "allreduce", "control"}
            hits = sum(e["extra"]["cache_hit_rows"] for e in got)
            assert (hits > 0) == (cache != "none"), tag
        if cache != "pagraph":  # PaGraph's own training sets split into K slices of about 2 here
            assert saw_empty, "the schedule should leave a worker without targets in some iteration"
        for run in runs:
            assert run["metrics"] == runs[0]["metrics"]


def test_one_worker_is_single_minibatch_training():
    graph = make_graph(torch.float64)
    config = make_config("quiver", "sage", 1)
    models = [build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
              for _ in range(2)]
    single, dp = SingleStrategy(), DataParallel()
    single.setup(graph, models[0], DistEnv.local(), config)
    dp.setup(prepare_graph(graph, config), models[1], DistEnv.local(), config)
    for epoch in range(2):
        s, d = single.train_epoch(epoch), dp.train_epoch(epoch)
        assert d.loss == pytest.approx(s.loss, rel=1e-12)
        assert d.bytes.get("p2p", 0) == 0 and d.extra["cache_hit_rows"] > 0
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        assert_close_rel(q, p, torch.float64, what="data-parallel W=1 vs single")
    assert dp.evaluate() == pytest.approx(single.evaluate(), abs=1e-12)


def test_cache_policies_and_errors():
    graph = make_graph(torch.float64)
    caches = [FeatureCache.build("quiver", graph, r, 3, 0.1) for r in range(3)]
    ids = torch.arange(graph.num_nodes)
    for r, cache in enumerate(caches):
        parts = cache.classify(ids)
        assert sorted(torch.cat([parts["own_pos"], parts["peer_pos"], parts["host_pos"]]).tolist()) == ids.tolist()
        assert torch.equal(cache.ids[parts["own_slot"]], parts["own_pos"])
        for q, other in enumerate(caches):  # a peer's rows are where its cache holds them
            mine = parts["peer_holder"] == q
            assert torch.equal(other.ids[parts["peer_slot"][mine]], parts["peer_pos"][mine])
    assert sum(c.ids.numel() for c in caches) == len(set().union(*(set(c.ids.tolist()) for c in caches)))
    config = make_config("lru", "sage", 1)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="--cache must be one of none, pagraph, quiver"):
        DataParallel().setup(prepare_graph(graph, config), model, DistEnv.local(), config)
    config = make_config("pagraph", "sage", 1)
    config.strategy.cache_fraction = -0.1
    with pytest.raises(ValueError, match=r"--cache-fraction must lie in \[0, 1\]"):  # in the parent
        validate(config)
    config.strategy.cache = "lru"
    with pytest.raises(ValueError, match="--cache must be one of none, pagraph, quiver"):
        validate(config)
    assert STRATEGIES.get("data-parallel") is DataParallel

"""``--task link`` under ``graph-parallel`` equals ``single`` full-graph: per-epoch losses, trained parameters
(decoder included) and every link metric, with 2 and 4 workers, float64 and float32; the scoring exchange's bytes
equal their closed form, counted here from the split, the keyed negatives and the store's partition."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.handle import DataHandle
from graphscale.partition.store import load_partition
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.strategies.link_scoring import LINK, link_bytes_per_epoch
from graphscale.tasks.negatives import train_tails
from graphscale.tasks.split import split_edges
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.validation import validate

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: (model, dtype, decoder)
COMBOS = [("gcn", "float64", "dot"), ("sage", "float64", "mlp"), ("gcn", "float32", "distmult")]
EPOCHS = 3
#: the rank metrics' tolerance: float64 scores equal single's to ~1e-15, so the ranks do too; float32 scores equal them
#: to ~1e-7 relative, so two scores closer than that may swap (one swap moves the training AUC by ``1 / P^2``)
METRIC_ABS = {"float64": 1e-10, "float32": 1e-3}


def make_graph(dtype: torch.dtype):
    return random_graph(60, avg_degree=5.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=1)


def make_config(model: str, dtype: str, decoder: str, strategy: str, workers: int) -> RunConfig:
    return RunConfig(model=ModelConfig(name=model, hidden=6, layers=2, dropout=0.5),
                     optim=OptimConfig(lr=0.02, weight_decay=5e-4),
                     strategy=StrategyConfig(name=strategy, workers=workers, partitioner="random"),
                     task="link", decoder=decoder, hits_k=[5, 20], dtype=dtype, seed=0, progress=False,
                     oversubscribe=True)


def _train(env, config: RunConfig, data: DataHandle) -> dict:
    """Train ``EPOCHS`` epochs as a run does, then evaluate: the losses, the link bytes per epoch, the trained
    parameters and the metrics."""
    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model
    from graphscale.tasks.link import attach_decoder, output_width

    model = build_model(config.model, input_width(config.data.features, data.num_features),
                        output_width(config, data.num_classes), seed=config.seed, dtype=getattr(torch, config.dtype))
    model = attach_decoder(model.to(env.device), config)
    strategy = STRATEGIES.get(config.strategy.name)()
    strategy.setup(data, model, env, config)
    losses, link_bytes = [], []
    for epoch in range(EPOCHS):
        stats = strategy.train_epoch(epoch)
        losses.append(stats.loss)
        link_bytes.append(stats.bytes.get(LINK, 0))
    metrics = strategy.evaluate()
    strategy.teardown()
    return {"losses": losses, "link_bytes": link_bytes, "metrics": metrics,
            "params": {k: v.detach().cpu() for k, v in model.state_dict().items()}}


def _worker(env, jobs: list[tuple[RunConfig, DataHandle]]) -> list[dict]:
    return [_train(env, config, data) for config, data in jobs]


def store_owner_by_hand(store: str, num_nodes: int, workers: int) -> torch.Tensor:
    """The part of every vertex, from the store's parts' inner rows."""
    owner = torch.empty(num_nodes, dtype=torch.int64)
    for part in range(workers):
        local = load_partition(store, part)
        owner[local.orig_ids[: local.num_inner]] = part
    return owner


def expected_link_bytes(graph, config: RunConfig, owner: torch.Tensor, workers: int, epoch: int) -> int:
    """The closed form with ``R_i`` counted by brute force: the distinct destinations of worker ``i``'s training
    pairs (positives and epoch ``epoch``'s keyed negatives) that it does not own (``owner``: the worker of every
    vertex)."""
    split = split_edges(graph, config.link_split, config.seed)
    ids = split.ids("train")
    u, v = split.pairs[:, ids]
    t = train_tails(ids, graph.num_nodes, config.seed, epoch)
    remote = [set() for _ in range(workers)]
    for src, dst in zip(torch.cat([u, u]).tolist(), torch.cat([v, t]).tolist()):
        if owner[dst] != owner[src]:
            remote[int(owner[src])].add(dst)
    width, element = config.model.hidden, getattr(torch, config.dtype).itemsize
    total = sum(8 * (workers - 1) + len(r) * (8 + 2 * width * element) for r in remote)
    assert link_bytes_per_epoch([len(r) for r in remote], width, element) == total
    return total


@pytest.mark.parametrize("workers", [2, 4])
def test_graph_parallel_link_equals_single(workers, tmp_path):
    graphs = {name: make_graph(dtype) for name, dtype in DTYPES.items()}
    singles, jobs, configs = [], [], []
    for model, dtype, decoder in COMBOS:
        config = make_config(model, dtype, decoder, "graph-parallel", workers)
        validate(config)
        jobs.append((config, prepare_graph(graphs[dtype], config, cache_dir=tmp_path)))
        reference = make_config(model, dtype, decoder, "single", 1)
        singles.append(run_distributed(_worker, 1, [(reference, DataHandle.in_memory(graphs[dtype]))])[0][0])
        configs.append(config)
    results = run_distributed(_worker, workers, jobs)
    for i, (config, (_, data)) in enumerate(zip(configs, jobs)):
        single, dtype = singles[i], DTYPES[config.dtype]
        what = f"{COMBOS[i]} x{workers}"
        for rank in range(workers):
            got = results[rank][i]
            assert_close_rel(torch.tensor(got["losses"], dtype=torch.float64),
                             torch.tensor(single["losses"], dtype=torch.float64), dtype, f"{what} losses")
            for name, value in single["params"].items():
                assert_close_rel(got["params"][name], value, dtype, f"{what} {name}")
            assert got["metrics"].keys() == single["metrics"].keys()
            for key, value in single["metrics"].items():  # float32: a rank statistic may flip on a near-tie
                if key.endswith("_loss"):  # continuous in the scores
                    assert_close_rel(torch.tensor(got["metrics"][key]), torch.tensor(value), dtype, f"{what} {key}")
                else:
                    assert got["metrics"][key] == pytest.approx(value, rel=1e-10, abs=METRIC_ABS[config.dtype]), \
                        f"{what} {key}"
        for epoch in range(EPOCHS):
            recorded = sum(results[rank][i]["link_bytes"][epoch] for rank in range(workers))
            owner = store_owner_by_hand(data.path, graphs[config.dtype].num_nodes, workers)
            assert recorded == expected_link_bytes(graphs[config.dtype], config, owner, workers, epoch) > 0


def test_a_graph_parallel_link_run_equals_single_end_to_end(tmp_path):
    """``run``: the store of the split's message graph and the pairs next to it written from a dataset spec, the
    report's losses, test scores and split warning those of ``single``."""
    from graphscale.config import build_config
    from graphscale.run import run

    def config(strategy: str, workers: int) -> RunConfig:
        return build_config({"task": "link", "data": {"dataset": "sbm:nodes=120,degree=3,classes=3,features=8,seed=1"},
                             "model": {"hidden": 6}, "optim": {"epochs": 2}, "dtype": "float64", "progress": False,
                             "strategy": {"name": strategy, "workers": workers}, "oversubscribe": True,
                             "cache_dir": str(tmp_path)})

    single, parallel = run(config("single", 1), write=False), run(config("graph-parallel", 2), write=False)
    assert [e["loss"] for e in parallel["epochs"]] == pytest.approx([e["loss"] for e in single["epochs"]],
                                                                     rel=1e-10)
    assert parallel["final"]["test_mrr"] == pytest.approx(single["final"]["test_mrr"], rel=1e-10)
    assert parallel["warnings"] == single["warnings"]
    assert any("vertices without any training edge" in w for w in single["warnings"])


def _small_blocks_worker(env, jobs: list[tuple[RunConfig, DataHandle]], per_block: int) -> list[dict]:
    """:func:`_worker` with evaluation blocks of ``per_block`` candidates (many blocks on a small graph)."""
    from graphscale.strategies import link_scoring

    before = link_scoring.EVAL_CANDIDATES_PER_BLOCK
    link_scoring.EVAL_CANDIDATES_PER_BLOCK = per_block
    try:
        return _worker(env, jobs)
    finally:
        link_scoring.EVAL_CANDIDATES_PER_BLOCK = before


def test_graph_parallel_link_evaluation_in_blocks_equals_single(tmp_path):
    """Evaluation a few pairs at a time (workers with different block counts, some blocks empty on one worker)
    gives ``single``'s metrics."""
    graph = make_graph(torch.float64)
    config = make_config("gcn", "float64", "dot", "graph-parallel", 2)
    data = prepare_graph(graph, config, cache_dir=tmp_path)
    single = run_distributed(_worker, 1, [(make_config("gcn", "float64", "dot", "single", 1),
                                           DataHandle.in_memory(graph))])[0][0]
    for got in run_distributed(_small_blocks_worker, 2, [(config, data)], 40):  # train: 40 pairs a block, others: 1
        for key, value in single["metrics"].items():
            assert got[0]["metrics"][key] == pytest.approx(value, rel=1e-10, abs=1e-10), key

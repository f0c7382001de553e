"""``--eval-fanouts`` under the multi-worker mini-batch strategies: two workers, each evaluating a share of the
sampled batches, report bit for bit the metrics of ``single --minibatch --eval-fanouts`` on the same parameters;
with every neighbour (``-1``) the sampled evaluation is the exact one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.formats import save_graph_dir
from graphscale.data.handle import HOST_SHARED
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import random_graph, run_distributed

FANOUTS = [2, 1]
NAMES = ("data-parallel", "split-parallel")


def make_graph():
    return random_graph(50, avg_degree=5.0, num_features=6, num_classes=3, seed=1, dtype=torch.float64, isolated=2)


def make_config(name: str, workers: int, cache_dir, eval_fanouts: list[int]) -> RunConfig:
    extra = {"cache": "pagraph", "cache_fraction": 0.2} if name == "data-parallel" else {}
    return RunConfig(model=ModelConfig(name="sage", hidden=4, layers=2, dropout=0.5),
                     optim=OptimConfig(lr=0.01), seed=3, host_memory="1KiB", cache_dir=str(cache_dir),
                     dtype="float64",
                     strategy=StrategyConfig(name=name, workers=workers, fanouts=[3, 3], batch_size=7, minibatch=True,
                                             eval_fanouts=eval_fanouts, **extra))


def _worker(env: DistEnv, folder: str, cache_dir: str) -> dict:
    return {name: _evaluations(env, name, folder, f"{cache_dir}/{name}") for name in NAMES}


def _evaluations(env: DistEnv, name: str, folder: str, cache_dir: str) -> dict:
    config = make_config(name, env.world_size, cache_dir, FANOUTS)
    handle = prepare_graph(make_graph(), config, cache_dir)
    data = dataclasses.replace(handle, view=HOST_SHARED, graph=None, path=folder)  # rows through the host cache
    model = build_model(config.model, 6, 3, seed=0, dtype=torch.float64)
    strategy = STRATEGIES.get(name)()
    strategy.setup(data, model, env, config)
    strategy.train_epoch(0)
    out = {"params": [p.detach().clone() for p in model.parameters()], "sampled": strategy.evaluate(),
           "again": strategy.evaluate()}
    for key, fanouts in (("every", [-1, -1]), ("exact", [])):
        config.strategy.eval_fanouts, strategy.sampled = fanouts, None
        out[key] = strategy.evaluate()
    return out


def single_metrics(params: list[torch.Tensor], eval_fanouts: list[int], cache_dir) -> dict:
    """``single --minibatch --eval-fanouts`` on the in-memory graph with the given parameters."""
    config = make_config("single", 1, cache_dir, eval_fanouts)
    model = build_model(config.model, 6, 3, seed=0, dtype=torch.float64)
    with torch.no_grad():
        for p, q in zip(model.parameters(), params):
            p.copy_(q)
    strategy = SingleStrategy()
    strategy.setup(make_graph(), model, DistEnv.local(), config)
    return strategy.evaluate()


def test_sampled_evaluation_over_two_workers_equals_single(tmp_path):
    folder = save_graph_dir(make_graph(), tmp_path / "graph")
    results = run_distributed(_worker, 2, str(folder), str(tmp_path / "cache"))
    for name in NAMES:
        runs = [result[name] for result in results]
        reference = single_metrics(runs[0]["params"], FANOUTS, tmp_path / "single")
        for rank, out in enumerate(runs):
            tag = f"{name}/rank {rank}"
            assert out["sampled"] == reference, tag  # the batches shared, the counts summed exactly: bit for bit
            assert out["again"] == out["sampled"], tag  # a fixed key: the same samples at every evaluation
            for key, value in out["exact"].items():  # every neighbour: the exact evaluation
                assert out["every"][key] == pytest.approx(value, rel=1e-12, abs=1e-12), (tag, key)
            assert out["sampled"]["val_loss"] != out["exact"]["val_loss"], tag  # a sample is not every neighbour

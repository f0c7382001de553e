"""PyG layer-sequential models under ``pipeline`` on 2 stages and on 2 stages x 2-way hybrid groups (4 workers):
per-epoch losses, and every parameter after the Adam steps, equal the single-process chunked reference
(:class:`~graphscale.strategies.pipeline.reference.ChunkedReference`, what graphscale's own models are held to).
float64, dropout 0; PyG's GraphSAGE and GCN run no module before their first conv: their input map is the identity,
which the pipeline must not differentiate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import DataHandle
from graphscale.nn.models import build_model
from graphscale.strategies.chunking import assign_chunks
from graphscale.strategies.pipeline.plan import assign_hybrid
from graphscale.strategies.pipeline.reference import ChunkedReference
from graphscale.strategies.pipeline.strategy import CHUNK_FILE, SUBCHUNK_FILE, PipelineStrategy
from graphscale.testing import assert_close_rel, random_graph, run_distributed

pytest.importorskip("torch_geometric")

EPOCHS = 3
SPEC = "graphscale.testing.pyg_models:"


def _graph() -> Graph:
    from graphscale.testing import pyg_models

    g = random_graph(40, avg_degree=4.0, num_features=pyg_models.IN, num_classes=pyg_models.CLASSES, seed=0,
                     dtype=torch.float64, isolated=2)
    g.meta["num_classes"] = pyg_models.CLASSES
    return g


def _config(name: str, workers: int, chunks: int, width: int) -> RunConfig:
    return RunConfig(model=ModelConfig(name=SPEC + name), optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="pipeline", workers=workers, chunks=chunks, hybrid_width=width,
                                             shuffle=True, history_period=1),
                     seed=0, dtype="float64")


def _model(config: RunConfig, g: Graph):
    return build_model(config.model, g.num_features, g.meta["num_classes"], seed=0, dtype=torch.float64)


def _worker(env, jobs: list[tuple[str, Graph, int, str]], width: int) -> list[dict]:
    out = []
    for name, g, chunks, folder in jobs:
        config = _config(name, env.world_size, chunks, width)
        model = _model(config, g)
        strategy = PipelineStrategy()
        strategy.setup(dataclasses.replace(DataHandle.in_memory(g), shared=folder), model, env, config)
        losses = [strategy.train_epoch(e).loss for e in range(EPOCHS)]
        out.append({"losses": losses, "owned": {n: p.detach().clone() for n, p in model.named_parameters()
                                                if p.grad is not None}})
    return out


@pytest.mark.parametrize(("workers", "width"), [(2, 1), (4, 2)])
def test_pyg_pipeline_equals_the_chunked_reference(tmp_path, workers, width):
    g, chunks = _graph(), 4
    jobs, references = [], []
    for name in ("sage", "gcn"):
        folder = tmp_path / name
        folder.mkdir()
        if width == 1:
            chunk_of = assign_chunks(g, chunks, seed=0)
            sub_of = torch.zeros_like(chunk_of)
        else:
            chunk_of, sub_of = assign_hybrid(g, chunks, width, "chunks-first")
        np.save(folder / CHUNK_FILE, chunk_of.numpy())
        np.save(folder / SUBCHUNK_FILE, sub_of.numpy())
        jobs.append((name, g, chunks, str(folder)))
        config = _config(name, 1, chunks, 1)
        model = _model(config, g)
        sc = config.strategy
        ref = ChunkedReference(model, g, chunk_of, config.optim, config.seed, sc.shuffle, sc.history_period,
                               sc.history_grad, sc.cross_chunk_grad)
        references.append(([ref.train_epoch(e) for e in range(EPOCHS)], model))
    results = run_distributed(_worker, workers, jobs, width, timeout_s=120)
    for i, (name, *_rest) in enumerate(jobs):
        losses, model = references[i]
        for rank, per_rank in enumerate(r[i] for r in results):
            for e in range(EPOCHS):
                assert_close_rel(per_rank["losses"][e], losses[e], torch.float64, what=f"{name} rank {rank} loss {e}")
        params = dict(model.named_parameters())
        owned = set()
        for r in results:
            for pname, value in r[i]["owned"].items():
                assert_close_rel(value, params[pname], what=f"{name} {pname}")
                owned.add(pname)
        assert owned == set(params), f"{name}: parameters trained by no stage: {set(params) - owned}"


@pytest.mark.parametrize("workers", [2, 4])
def test_pyg_offload_on_several_workers_equals_single(workers):
    """``offload`` (2 chunks) with PyG's GraphSAGE on 2 and 4 workers: ``single``'s losses."""
    from graphscale.config import build_config
    from graphscale.run import run
    from graphscale.testing import pyg_models

    def losses(strategy: str, n: int, **options) -> list[float]:
        config = build_config({"data": {"dataset": pyg_models.DATASET, "feature_norm": "none"},
                               "model": {"name": SPEC + "sage"},
                               "optim": {"epochs": EPOCHS, "lr": 0.01, "weight_decay": 5e-4},
                               "strategy": {"name": strategy, "workers": n, **options}, "dtype": "float64",
                               "progress": False, "oversubscribe": True})
        return [e["loss"] for e in run(config)["epochs"]]

    single = losses("single", 1)
    for e, (got, want) in enumerate(zip(losses("offload", workers, chunks=2), single)):
        assert_close_rel(got, want, torch.float64, what=f"offload x{workers} loss {e}")

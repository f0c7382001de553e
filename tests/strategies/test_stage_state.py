"""The shared stage-state gathering for checkpoints (:mod:`graphscale.strategies.stage_state`): the stage leaders'
parameters and Adam state reach worker 0 exactly, in the closed-form bytes, and a stage's share loads back; the
pipeline's checkpoint gathers move those bytes (task-parallel's resume test lives in ``test_task_parallel.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.handle import DataHandle
from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.strategies.chunking import assign_chunks
from graphscale.strategies.pipeline.plan import assign_subchunks, stage_layers
from graphscale.strategies.pipeline.strategy import CHUNK_FILE, SUBCHUNK_FILE, PipelineStrategy, stage_parameters
from graphscale.strategies.stage_state import (
    CHECKPOINT,
    gather_stage_state,
    load_stage_share,
    optimizer_states,
    stage_state_bytes,
)
from graphscale.testing import random_graph, run_distributed

#: leader rank -> parameter indices of a 4-parameter model over 3 workers (rank 1 is no leader: a replica; rank 0
#: leads one parameter, which it never sends)
OWNERS = {0: [0], 2: [1, 3], 3: [2]}


def _model(dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).to(dtype)


def _gather_worker(env: DistEnv, dtype_name: str) -> dict:
    dtype = getattr(torch, dtype_name)
    comm = Comm(env)
    model = _model(dtype)
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=0.1)
    mine = list(OWNERS.get(env.rank, []))
    for step in range(2 if env.rank in (0, 2) else 0):  # rank 3's parameter has no Adam state yet
        optimizer.zero_grad()
        sum(((params[i] - step * 0.5 - env.rank) ** 2).sum() for i in mine).backward()
        optimizer.step()
    snap = env.ledger.snapshot()
    gathered = gather_stage_state(comm, OWNERS, params, optimizer_states(optimizer, params))
    with_opt = env.ledger.since(snap).get(CHECKPOINT, 0)
    snap = env.ledger.snapshot()
    values = gather_stage_state(comm, OWNERS, [p.detach() * 2 for p in params])
    values_only = env.ledger.since(snap).get(CHECKPOINT, 0)
    own = {i: (params[i].detach().clone(), {k: (v.clone() if torch.is_tensor(v) else v)
                                            for k, v in optimizer.state.get(params[i], {}).items()}) for i in mine}
    out = {"own": own, "with_opt": with_opt, "values_only": values_only, "gathered": gathered,
           "values": values}
    # load a whole state back: every worker keeps the model and its own parameters' Adam state
    if env.rank == 0:
        whole = {"model": {**model.state_dict()}, "optimizer": optimizer.state_dict()}
        names = [n for n, _ in model.named_parameters()]
        for i, v in gathered.values.items():
            whole["model"][names[i]] = v
        whole["optimizer"]["state"].update(gathered.optimizer)
        out["whole"] = whole
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gather_brings_every_leaders_parameters_and_adam_state_in_closed_form_bytes(dtype):
    """Worker 0 receives each leader's values and Adam state bit for bit (a leader with no state yet sends step 0
    and no state arrives); the ledger's ``checkpoint`` bytes equal :func:`stage_state_bytes` (with and without
    the optimiser state); workers that lead nothing send nothing."""
    results = run_distributed(_gather_worker, 4, dtype, timeout_s=120)
    model = _model(getattr(torch, dtype))
    numels = [p.numel() for p in model.parameters()]
    size = model[0].weight.element_size()
    sent = [numels[i] for leader, idx in OWNERS.items() if leader != 0 for i in idx]
    assert sum(r["with_opt"] for r in results) == stage_state_bytes(sent, size, True) == sum(3 * n + 1 for n in sent) * size
    assert sum(r["values_only"] for r in results) == stage_state_bytes(sent, size, False) == sum(sent) * size
    assert results[0]["with_opt"] == results[1]["with_opt"] == 0  # worker 0 and the non-leader send nothing
    got = results[0]["gathered"]
    assert results[1]["gathered"] is None and sorted(got.values) == [1, 2, 3]
    for leader, idx in OWNERS.items():
        for i in idx:
            if leader == 0:
                continue
            value, state = results[leader]["own"][i]
            assert torch.equal(got.values[i], value)
            assert torch.equal(results[0]["values"].values[i], value * 2)
            if not state:
                assert i not in got.optimizer
                continue
            assert got.optimizer[i].keys() == state.keys()
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(got.optimizer[i][k], state[k])
            assert float(got.optimizer[i]["step"]) == float(state["step"]) and got.optimizer[i]["step"].dtype == torch.float32
    assert results[0]["values"].optimizer == {}
    # load_stage_share: the whole model, and only the named parameters' Adam state
    whole = results[0]["whole"]
    fresh = _model(getattr(torch, dtype))
    optimizer = torch.optim.Adam(fresh.parameters(), lr=0.1)
    load_stage_share(fresh, optimizer, whole, [1, 3])
    params = list(fresh.parameters())
    for name, p in fresh.named_parameters():
        assert torch.equal(p, whole["model"][name])
    assert set(optimizer.state) == {params[1], params[3]} and 2 not in whole["optimizer"]["state"]
    assert torch.equal(optimizer.state[params[3]]["exp_avg"], whole["optimizer"]["state"][3]["exp_avg"])


def test_an_optimiser_with_other_state_is_refused():
    p = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.Adam([p], amsgrad=True)
    p.sum().backward()
    optimizer.step()
    with pytest.raises(ValueError,
                       match=r"keeps \['max_exp_avg_sq'\] per parameter; only \['exp_avg', 'exp_avg_sq', 'step'\]"):
        optimizer_states(optimizer, [p])


# ------------------------------------------------------------------ the pipeline's checkpoint bytes
def _pipeline_worker(env: DistEnv, g, folder: str, width: int) -> dict:
    config = RunConfig(model=ModelConfig(name="gcnii", hidden=5, layers=4, dropout=0.3),
                       optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                       strategy=StrategyConfig(name="pipeline", workers=env.world_size, chunks=4, history_period=2,
                                               hybrid_width=width),
                       seed=0, dtype="float64")
    handle = dataclasses.replace(DataHandle.in_memory(g), shared=folder)
    model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64)
    strategy = PipelineStrategy()
    strategy.setup(handle, model, env, config)
    for e in range(2):
        strategy.train_epoch(e)
    ledger = env.ledger
    snap = ledger.snapshot()
    strategy.full_model_state(model.state_dict())
    best = ledger.since(snap).get(CHECKPOINT, 0)
    snap = ledger.snapshot()
    strategy._gather_rows()
    rows = ledger.since(snap).get(CHECKPOINT, 0)
    snap = ledger.snapshot()
    saved = strategy.state_dict()
    whole = ledger.since(snap).get(CHECKPOINT, 0)
    return {"best": best, "rows": rows, "whole": whole, "saved": saved,
            "owned": {n: p.detach().clone() for n, p in model.named_parameters() if n in strategy.owned}}


@pytest.mark.parametrize("width", [1, 2])
def test_pipeline_checkpoint_moves_the_stage_state_closed_form(tmp_path, width):
    """The pipeline's checkpoint gathers: the best model's (values only) moves ``b sum(n)`` over the parameters of
    stages 1..S-1, the run's state ``b sum(3 n + 1)`` more than the history rows alone (Ledger category
    ``checkpoint``); worker 0's saved model holds every parameter as its stage trained it."""
    g = random_graph(48, avg_degree=4.0, num_features=6, num_classes=3, seed=3, dtype=torch.float64, isolated=1)
    g.meta["num_classes"] = 3
    chunk_of = assign_chunks(g, 4, seed=0)
    np.save(tmp_path / CHUNK_FILE, chunk_of.numpy())
    np.save(tmp_path / SUBCHUNK_FILE, assign_subchunks(g, chunk_of, width).numpy())
    results = run_distributed(_pipeline_worker, 4, g, str(tmp_path), width, timeout_s=120)
    stages = 4 // width
    model = build_model(ModelConfig(name="gcnii", hidden=5, layers=4, dropout=0.3), g.num_features, 3, seed=0,
                        dtype=torch.float64)
    first = stage_parameters(model, stage_layers(4, stages)[0], True, stages == 1, g.num_features)
    sent = [p.numel() for n, p in model.named_parameters() if n not in first]
    assert sent and sum(r["best"] for r in results) == sum(sent) * 8
    assert sum(r["whole"] - r["rows"] for r in results) == sum(3 * n + 1 for n in sent) * 8
    for rank, r in enumerate(results):
        if rank % width:  # replicas send only their rows
            assert r["best"] == 0 and r["whole"] == r["rows"]
        for name, value in r["owned"].items():
            assert torch.equal(results[0]["saved"]["model"][name], value), (rank, name)
    assert len(results[0]["saved"]["optimizer"]["state"]) == len(list(model.parameters()))

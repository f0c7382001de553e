"""Model averaging's evaluation (``--evaluation``) and optimiser state (``--optimizer-state``): exactness against
``single``'s evaluation of the same averaged model, the fetched rows' bytes against their closed form, bad input."""

from __future__ import annotations

import pytest
import torch

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.data.datasets import load_dataset
from graphscale.distributed.env import DistEnv
from graphscale.distributed.launch import launch
from graphscale.nn.models import build_model
from graphscale.partition.store import load_partition
from graphscale.prepare import prepare_data
from graphscale.strategies.model_averaging import ModelAveraging
from graphscale.strategies.model_averaging.evaluation import EVALUATION
from graphscale.strategies.single import SingleStrategy
from graphscale.validation import validate

SPEC = "sbm:nodes=240,degree=6,classes=3,features=8,seed=2"
FEATURES, WORKERS = 8, 2


def config_for(tmp_path, strategy="model-averaging", model=None, **extra):
    return build_config({"data": {"dataset": SPEC}, "model": model or {"name": "gcn", "hidden": 8},
                         "strategy": {"name": strategy, "workers": WORKERS if strategy != "single" else 1, **extra},
                         "optim": {"epochs": 2}, "dtype": "float64", "progress": False,
                         "cache_dir": str(tmp_path / "cache")})


def _worker(env, config, handle):
    """Two averaging rounds, then the evaluation as configured and the truncated one, with their bytes."""
    model = build_model(config.model, handle.summary["features"], handle.summary["classes"], seed=0,
                        dtype=torch.float64)
    strategy = ModelAveraging()
    before = env.ledger.snapshot()
    strategy.setup(handle, model, env, config)
    for epoch in range(2):
        strategy.train_epoch(epoch)
    setup = env.ledger.since(before).get(EVALUATION, 0)  # the layer-wise plan's ids (training moves none)
    before = env.ledger.snapshot()
    metrics = strategy.evaluate()
    spent = env.ledger.since(before)
    mode, strategy.eval_mode = strategy.eval_mode, "truncated"
    truncated = strategy.evaluate()
    return {"metrics": metrics, "bytes": spent, "setup": setup, "mode": mode, "widths": model.layer_widths(), "truncated": truncated, "parts": strategy.parts,
            "state": {k: v.cpu() for k, v in model.state_dict().items()}}


def single_metrics(tmp_path, state, model=None) -> dict:
    config = config_for(tmp_path, strategy="single", model=model)
    handle = prepare_data(config)
    model = build_model(config.model, handle.summary["features"], handle.summary["classes"], dtype=torch.float64)
    model.load_state_dict(state)
    single = SingleStrategy()
    single.setup(handle, model, DistEnv.local(), config)
    return single.evaluate()


def closed_form_bytes(handle, parts_of: list[list[int]], widths: list[int]) -> tuple[int, int]:
    """The layer-wise evaluation's bytes summed over workers: ``(plan, per evaluation)``. With ``T`` every home
    vertex in a split, ``G_L = T`` and ``G_{l-1} = G_l + N_in(G_l)``; worker ``w`` (home vertices ``H_w``) needs
    ``N_l = H_w & G_l`` at layer ``l`` and for ``l >= 2`` fetches ``R_l = N_in(N_l) - H_w``: the plan asks 8
    bytes per id of ``R_l``, an evaluation moves ``d_{l-1} 8`` bytes per row of it (float64). Layer 1 reads the
    partitions' own halos: nothing."""
    graph = load_dataset(SPEC)
    indptr, indices = graph.indptr, graph.indices

    def in_neighbours(vertices):
        return {int(u) for v in vertices for u in indices[indptr[v]:indptr[v + 1]]}

    home, targets = {}, set()
    for worker, parts in enumerate(parts_of):
        for part in parts:
            local = load_partition(handle.path, part)
            n, g = local.num_inner, local.graph
            home.update({v: worker for v in local.orig_ids[:n].tolist()})
            split = (g.train_mask | g.val_mask | g.test_mask)[:n]
            targets.update(local.orig_ids[:n][split].tolist())
    needed = [targets]  # G_L, G_{L-1}, ..., G_1
    for _ in range(len(widths) - 1):
        needed.append(needed[-1] | in_neighbours(needed[-1]))
    plan = rows = 0
    for worker in range(len(parts_of)):
        for layer, width in zip(range(len(widths), 1, -1), reversed(widths)):  # layer l reads d_{l-1} wide rows
            mine = {v for v in needed[len(widths) - layer] if home[v] == worker}
            fetched = {u for u in in_neighbours(mine) if home[u] != worker}
            plan += 8 * len(fetched)
            rows += 8 * width * len(fetched)
    return plan, rows


@pytest.mark.parametrize("hops, mode, model", [(1, "fetch", None), (2, "local", None),
                                               (1, "fetch", {"name": "gcnii", "hidden": 8, "layers": 3})])
def test_exact_evaluation_equals_single_on_the_same_averaged_model(tmp_path, hops, mode, model):
    """4 parts on 2 workers, a 2-layer GCN: with a 1-hop halo the model runs layer by layer and the rows of each
    layer's remote in-neighbours are fetched (Ledger ``evaluation``, the closed form), with a 2-hop halo nothing
    moves; either way the metrics are ``single``'s on
    the averaged model, and the truncated evaluation (1-hop halo) is not. GCNII (3 layers) reads its learned input
    map's rows and ``h0`` of every layer's destinations."""
    config = config_for(tmp_path, parts=4, halo_hops=hops, model=model)
    handle = prepare_data(config)
    runs = launch(_worker, WORKERS, config, handle, device="cpu")
    assert [r["mode"] for r in runs] == [mode] * WORKERS
    for key, value in runs[0]["state"].items():  # bit-identical averaged weights
        assert torch.equal(value, runs[1]["state"][key])
    want = single_metrics(tmp_path, runs[0]["state"], model)
    for r in runs:
        for key, value in want.items():
            if key.endswith("_acc"):
                assert r["metrics"][key] == value, key
            else:
                assert r["metrics"][key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
    spent = sum(r["bytes"].get(EVALUATION, 0) for r in runs)
    assert set().union(*(r["bytes"] for r in runs)) <= {EVALUATION, "control"}
    if mode == "fetch":
        plan, rows = closed_form_bytes(handle, [r["parts"] for r in runs], runs[0]["widths"])
        assert sum(r["setup"] for r in runs) == plan > 0
        assert spent == rows > 0
        gap = max(abs(runs[0]["truncated"][k] - want[k]) for k in ("val_loss", "test_loss"))
        assert gap > 1e-6  # the truncated receptive field is not the model's
    else:
        assert spent == 0 and sum(r["setup"] for r in runs) == 0


def test_averaged_optimizer_state_is_the_default_and_bad_values_are_named(tmp_path, capsys):
    assert build_config({}).strategy.optimizer_state == "averaged"
    assert build_config({}).strategy.evaluation == "exact"
    with pytest.raises(ValueError, match="--optimizer-state must be one of local, averaged, got 'global'"):
        validate(config_for(tmp_path, optimizer_state="global"))
    with pytest.raises(ValueError, match="--average-optimizer .deprecated.* contradicts --optimizer-state local"):
        validate(config_for(tmp_path, optimizer_state="local", average_optimizer=True))
    validate(config_for(tmp_path, average_optimizer=True))  # the old spelling still works, with a note
    assert "--average-optimizer is deprecated" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--evaluation must be one of exact, halo, truncated, got 'full'"):
        validate(config_for(tmp_path, evaluation="full"))
    # exact from the halo alone, forbidding the fetch: a shallow halo is refused before any worker starts
    with pytest.raises(ValueError, match="--evaluation halo needs a store with a halo of >= 2 hops"):
        validate(config_for(tmp_path, evaluation="halo"))
    store = prepare_data(config_for(tmp_path, parts=2)).path
    config = config_for(tmp_path, partitions=store, evaluation="halo")
    config.data.dataset = ""
    validate(config)  # the store's halo is known only once it is opened
    with pytest.raises(ValueError, match="this one holds 1: partition with --halo-hops 2, or use --evaluation exact"):
        prepare_data(config)
    validate(config_for(tmp_path, evaluation="halo", halo_hops=2))
    # a checkpoint of one optimiser state does not resume with the other
    from graphscale.checkpoint import identity

    assert identity(config_for(tmp_path))["optimizer_state"] == "averaged"
    assert identity(config_for(tmp_path, average_optimizer=True))["optimizer_state"] == "averaged"
    assert identity(config_for(tmp_path, optimizer_state="local"))["optimizer_state"] == "local"


@pytest.mark.parametrize("argv, message", [
    (["--optimizer-state", "global"], "--optimizer-state must be one of local, averaged, got 'global'"),
    (["--evaluation", "full"], "--evaluation must be one of exact, halo, truncated"),
    (["--evaluation", "halo"], "--evaluation halo needs a store with a halo of >= 2 hops"),
    (["--optimizer-state", "local", "--average-optimizer"], "contradicts --optimizer-state local"),
])
def test_cli_bad_averaging_options_are_one_line(argv, message, capsys):
    assert main(["train", "--strategy", "model-averaging", "--epochs", "1", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1

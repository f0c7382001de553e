"""The offload (HongTu) strategy reproduces the single-process reference, and its Ledger equals the closed forms.

One run per world size (M = 1 in-process, M = 2 and M = 4 spawned) checks every combination below:
the per-epoch loss, every host representation ``H^l`` and every parameter gradient against
``model.step`` on ``Block.full(graph)`` with dropout on, identical parameters across workers after
the Adam step, evaluation metrics, and every Ledger category of the epoch (summed over workers)
against :func:`~graphscale.strategies.offload.cost.epoch_bytes`.
"""

from __future__ import annotations

import re

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.cost.dims import probe_dims
from graphscale.data.block import Block
from graphscale.distributed.env import DistEnv
from graphscale.metrics.units import parse_bytes
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.base import counts_to_metrics, masked_loss_sum, split_counts
from graphscale.strategies.offload import OffloadStrategy
from graphscale.strategies.offload.cost import epoch_bytes, layer_pass_rows
from graphscale.strategies.offload.plan import ChunkSets
from graphscale.testing import assert_close_rel, random_graph, run_distributed

DTYPES = {"float64": torch.float64, "float32": torch.float32}
DEDUPS = ("baseline", "inter", "intra", "reorg")
#: (model, recompute, dedup, K, dtype, order_seed)
CORE = [(model, rec, dedup, k, "float64", None)
        for model, rec in (("gcn", "hybrid"), ("gat", "recompute")) for k in (1, 2, 8) for dedup in DEDUPS]
EXTRA = [("gcn", "recompute", "intra", 2, "float64", None), ("gcn", "none", "intra", 2, "float64", None),
         ("gcn", "hybrid", "reorg", 8, "float64", 1), ("gat", "recompute", "intra", 8, "float64", 2),
         ("gcn", "hybrid", "reorg", 2, "float32", None), ("gat", "recompute", "inter", 8, "float32", None),
         ("sage", "auto", "intra", 2, "float64", None), ("gcnii", "hybrid", "reorg", 2, "float64", None),
         ("resgcn", "none", "baseline", 2, "float64", None)]
COMBOS = CORE + EXTRA


def make_graph(dtype: torch.dtype):
    return random_graph(120, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=2)


def make_config(model: str, recompute: str, dedup: str, chunks: int, workers: int) -> RunConfig:
    layers = 3 if model in ("gcn", "gcnii") else 2
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=layers, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="offload", workers=workers, partitioner="metis", chunks=chunks,
                                             dedup=dedup, recompute=recompute), seed=0)


def _worker(env: DistEnv, combos: list[tuple]) -> list[dict]:
    threads = torch.get_num_threads()  # world size 1 runs in the test process: restore afterwards
    torch.set_num_threads(1)
    try:
        return _run_combos(env, combos)
    finally:
        torch.set_num_threads(threads)


def _run_combos(env: DistEnv, combos: list[tuple]) -> list[dict]:
    out = []
    for model_name, recompute, dedup, chunks, dtype_name, order_seed in combos:
        dtype = DTYPES[dtype_name]
        graph = make_graph(dtype)
        config = make_config(model_name, recompute, dedup, chunks, env.world_size)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        strategy = OffloadStrategy(order_seed=order_seed)
        strategy.setup(prepare_graph(graph, config), model, env, config)
        metrics = strategy.evaluate()  # with the initial parameters, like the reference
        stats = strategy.train_epoch(0)
        owned = strategy.owned
        reps = [strategy.host[f"H{l}"][owned].clone() for l in range(model.num_layers + 1)]
        grads = [p.grad.clone() for p in model.parameters()]
        params = [p.detach().clone() for p in model.parameters()]
        second = strategy.train_epoch(1).bytes if chunks == 8 else stats.bytes  # the schedule repeats per epoch
        out.append({"owned": owned, "reps": reps, "loss": stats.loss, "grads": grads, "bytes": stats.bytes,
                    "second_bytes": second, "params": params,
                    "owner": strategy.sets.owner, "batch": strategy.sets.batch, "modes": strategy.modes,
                    "chunks": strategy.num_chunks, "peak": stats.peak_memory, "metrics": metrics})
        strategy.teardown()
    return out


def reference(model_name: str, dtype_name: str) -> dict:
    dtype = DTYPES[dtype_name]
    graph = make_graph(dtype)
    config = make_config(model_name, "auto", "reorg", 1, 1)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
    block = Block.full(graph)
    model.eval()
    with torch.no_grad():
        eval_logits = model.forward(block, graph.x)
    model.train()
    model.set_epoch(0)
    h = model.input_map(graph.x, block.src_ids)
    h0 = h if model.needs_h0 else None
    reps = [h.detach()]
    for layer in range(model.num_layers):
        h = model.step(layer, block, h, h0)
        reps.append(h.detach())
    logits = model.output_map(h, block.dst_ids)
    loss = masked_loss_sum(logits, graph.y, graph.train_mask) / int(graph.train_mask.sum())
    loss.backward()
    masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
    return {"graph": graph, "model": model, "reps": reps, "loss": loss.detach(),
            "grads": [p.grad.clone() for p in model.parameters()],
            "metrics": counts_to_metrics(split_counts(eval_logits, graph.y, masks))}


def check_run(world_size: int, results: list[list[dict]]) -> None:
    refs: dict[tuple[str, str], dict] = {}
    grads_by_mode: dict[tuple, list] = {}
    for c, (model_name, recompute, dedup, chunks, dtype_name, order_seed) in enumerate(COMBOS):
        dtype = DTYPES[dtype_name]
        ref = refs.setdefault((model_name, dtype_name), reference(model_name, dtype_name))
        graph, model = ref["graph"], ref["model"]
        runs = [worker[c] for worker in results]
        tag = f"{model_name}/{recompute}/{dedup}/K={chunks}/{dtype_name}/seed={order_seed}/M={world_size}"
        ids = torch.cat([r["owned"] for r in runs])
        assert torch.equal(torch.sort(ids).values, torch.arange(graph.num_nodes)), tag
        for layer in range(model.num_layers + 1):
            rows = torch.empty_like(ref["reps"][layer])
            rows[ids] = torch.cat([r["reps"][layer] for r in runs])
            assert_close_rel(rows, ref["reps"][layer], dtype, what=f"{tag} H^{layer}")
        for rank, r in enumerate(runs):
            assert_close_rel(torch.tensor(r["loss"], dtype=torch.float64), ref["loss"].double(), dtype,
                             what=f"{tag} loss")
            for (name, _), g, g_ref in zip(model.named_parameters(), r["grads"], ref["grads"]):
                assert_close_rel(g, g_ref, dtype, what=f"{tag} rank {rank} grad {name}")
            for p, p0 in zip(r["params"], runs[0]["params"]):
                assert torch.equal(p, p0), f"{tag}: parameters diverged across workers"
            for key, value in ref["metrics"].items():
                rel = 1e-9 if dtype == torch.float64 else 1e-5
                assert r["metrics"][key] == pytest.approx(value, rel=rel, nan_ok=True), f"{tag} {key}"
            assert r["peak"] > 0 and r["chunks"] == chunks
        # every Ledger category against the closed form, both epochs
        sets = ChunkSets.build(graph, runs[0]["owner"], runs[0]["batch"], world_size, chunks)
        dims = probe_dims(model, graph.num_features, dtype)
        elem = torch.empty(0, dtype=dtype).element_size()
        expected = epoch_bytes(sets, dedup, runs[0]["modes"], dims, elem, sum(p.numel() for p in model.parameters()))
        for key in ("bytes", "second_bytes"):
            measured: dict[str, int] = {}
            for r in runs:
                for cat, n in r[key].items():
                    measured[cat] = measured.get(cat, 0) + n
            assert measured == expected, f"{tag} {key}: measured {measured} != closed form {expected}"
        # the hybrid backward moves no neighbour rows: host neighbour traffic is one pass per layer
        rows = layer_pass_rows(sets, dedup)
        assert all(r["modes"] == runs[0]["modes"] for r in runs), f"{tag}: workers chose different layer modes"
        if recompute != "auto":  # an explicit --recompute is every layer's mode
            assert runs[0]["modes"] == [recompute] * dims.num_layers, tag
            assert expected.get("h2d_local", 0) == sum(
                (1 + (recompute == "recompute")) * rows.h2d_local * d * elem for d in dims.widths), tag
        if world_size > 1 and dedup != "baseline":
            assert expected.get("p2p", 0) > 0 and expected.get("h2d_remote", 0) == 0, tag
        if dedup in ("intra", "reorg") and chunks > 1:
            assert expected.get("reuse", 0) > 0, tag
        if (model_name, chunks, dedup) == ("gcn", 2, "intra") and dtype_name == "float64" and order_seed is None:
            grads_by_mode[recompute] = runs[0]["grads"]
    # hybrid = pure recompute = no recompute (each also equals the reference)
    for other in ("recompute", "none"):
        for g, g_h in zip(grads_by_mode[other], grads_by_mode["hybrid"]):
            assert_close_rel(g, g_h, torch.float64, what=f"{other} vs hybrid gradient")


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_offload_matches_single_process(world_size):
    check_run(world_size, run_distributed(_worker, world_size, COMBOS))


def test_rejects_bad_options():
    graph = make_graph(torch.float64)
    env = DistEnv.local()

    def setup(**strategy):
        config = make_config("gat", "auto", "intra", 2, 1)
        for key, value in strategy.items():
            setattr(config.strategy, key, value)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
        OffloadStrategy().setup(prepare_graph(graph, config), model, env, config)

    with pytest.raises(ValueError, match="--recompute hybrid"):
        setup(recompute="hybrid")
    with pytest.raises(ValueError, match="--dedup must be one of"):
        setup(dedup="both")
    with pytest.raises(ValueError, match="--recompute must be one of"):
        setup(recompute="sometimes")
    with pytest.raises(ValueError, match="--chunks 500 exceeds"):
        setup(chunks=500)
    with pytest.raises(ValueError, match="--chunks must be >= 1"):
        setup(chunks=0)
    with pytest.raises(ValueError, match="--memory-budget"):
        setup(memory_budget="lots")
    assert parse_bytes("64MiB") == 64 * 2**20 and parse_bytes("1.5kb") == 1500 and parse_bytes("4096") == 4096


def test_trajectory_matches_single_strategy():
    """Five Adam steps of offload (one worker, 4 chunks) follow the single strategy's parameters."""
    from graphscale.strategies.single import SingleStrategy

    graph = make_graph(torch.float64)
    runs = {}
    for name in ("single", "offload"):
        config = make_config("gat", "recompute", "reorg", 4, 1)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
        strategy = SingleStrategy() if name == "single" else OffloadStrategy()
        strategy.setup(prepare_graph(graph, config), model, DistEnv.local(), config)
        losses = [strategy.train_epoch(epoch).loss for epoch in range(5)]
        runs[name] = (losses, [p.detach().clone() for p in model.parameters()], strategy.evaluate())
        strategy.teardown()
    assert runs["offload"][0] == pytest.approx(runs["single"][0], abs=1e-10)
    for p, p_ref in zip(runs["offload"][1], runs["single"][1]):
        assert_close_rel(p, p_ref, torch.float64, what="parameters after 5 steps")
    assert runs["offload"][2] == pytest.approx(runs["single"][2], abs=1e-10)


def test_host_arrays_need_room_in_the_shm_dir(tmp_path, monkeypatch):
    """Rank 0 compares the host arrays' bytes with the free space of ``--shm-dir`` before it allocates them."""
    from graphscale.distributed.comm import Comm
    from graphscale.strategies.offload import host

    graph = make_graph(torch.float64)
    config = make_config("gcn", "hybrid", "intra", 2, 1)
    config.strategy.shm_dir = str(tmp_path)

    def setup() -> OffloadStrategy:
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
        strategy = OffloadStrategy()
        strategy.setup(prepare_graph(graph, config), model, DistEnv.local(), config)
        return strategy

    with monkeypatch.context() as patch:
        patch.setattr(host, "free_bytes", lambda path: 4096)  # a small shared-memory file system
        with pytest.raises(ValueError) as info:
            setup()
    match = re.search(r"host arrays need [\d.]+ KiB \(([\d,]+) bytes\) in (\S+), which has 4\.0 KiB \(4,096 bytes\) "
                      r"free; point --shm-dir at a directory", str(info.value))
    assert match and match[2] == str(tmp_path), str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing was allocated
    strategy = setup()  # the real free space suffices
    assert strategy.host.nbytes() == int(match[1].replace(",", "")) > 4096
    assert list(tmp_path.iterdir()) == []  # the mapped files are already unlinked
    strategy.teardown()
    with pytest.raises(ValueError, match="is not a writable directory"):
        host.HostArrays(Comm(DistEnv.local()), {"H0": (2, 2)}, torch.float32, torch.device("cpu"),
                        str(tmp_path / "missing"))

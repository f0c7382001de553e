"""``--feature-dtype bfloat16``: input features stored and exchanged in bfloat16, computation in float32.

graph-parallel (2 workers, one spawn) reproduces single on the same bfloat16 features to float32 tolerance; the
strategies hold bfloat16 feature tensors (tracked bytes of the features halve) and graph-parallel's layer-0 halo
moves 2 bytes per element (its closed form); the option is refused where it cannot hold.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig, build_config
from graphscale.data.handle import DataHandle
from graphscale.nn.models import build_model
from graphscale.prepare import store_handle, write_training_store
from graphscale.strategies.graph_parallel import GraphParallel, halo_bytes_per_epoch
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.validation import validate

MODELS = ("gcn", "gat", "gcnii")
EPOCHS = 3


def make_graph():
    return random_graph(60, avg_degree=4.0, num_features=12, num_classes=3, seed=0, dtype=torch.float32,
                        isolated=2)


def make_config(model: str, strategy: str, workers: int, feature_dtype: str = "bfloat16") -> RunConfig:
    config = RunConfig(model=ModelConfig(name=model, hidden=4, layers=2, dropout=0.5, heads=2),
                       optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                       strategy=StrategyConfig(name=strategy, workers=workers, partitioner="random"), seed=0)
    config.data.feature_dtype = feature_dtype
    return config


def train(strategy, model, handle, env, config) -> dict:
    strategy.setup(handle, model, env, config)
    out = {"x_dtype": strategy.x.dtype, "tracked": strategy.tracker.current, "metrics": strategy.evaluate()}
    stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
    out.update(losses=[s.loss for s in stats], bytes=[s.bytes for s in stats], after=strategy.evaluate())
    if isinstance(strategy, GraphParallel):
        out.update(halo_rows=strategy.halo.num_halo, raw_exchange=strategy.raw_exchange)
    strategy.teardown()
    return out


def _parallel_worker(env, store: str) -> dict[bool, list[dict]]:
    out = {}
    for overlap in (False, True):  # the halo exchange overlapped with the interior rows' step, and not
        out[overlap] = []
        for name in MODELS:
            config = make_config(name, "graph-parallel", env.world_size)
            handle = store_handle(store, "none", "bfloat16")
            model = build_model(config.model, handle.num_features, handle.num_classes, seed=0)
            out[overlap].append(train(GraphParallel(overlap=overlap), model, handle, env, config))
    return out


def single_run(name: str, feature_dtype: str = "bfloat16") -> dict:
    from graphscale.distributed.env import DistEnv

    graph = make_graph()
    config = make_config(name, "single", 1, feature_dtype)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
    return train(SingleStrategy(), model, DataHandle.in_memory(graph), DistEnv.local(), config)


def test_graph_parallel_reproduces_single_with_bfloat16_features(tmp_path):
    store = tmp_path / "store"
    write_training_store(make_graph(), store, 2, "random", seed=0)
    parallel = run_distributed(_parallel_worker, 2, str(store))
    graph = make_graph()
    for (i, name), overlap in itertools.product(enumerate(MODELS), (False, True)):
        ref = single_run(name)
        assert ref["x_dtype"] == torch.bfloat16
        runs = [worker[overlap][i] for worker in parallel]
        for rank, r in enumerate(runs):
            assert r["x_dtype"] == torch.bfloat16, (name, rank)
            assert_close_rel(torch.tensor(r["losses"]), torch.tensor(ref["losses"]), torch.float32,
                             what=f"{name} rank {rank} losses")
            for key in ("metrics", "after"):
                for metric, value in ref[key].items():
                    assert r[key][metric] == pytest.approx(value, rel=1e-5), (name, key, metric)
        # the Ledger: step 0 moves the stored bfloat16 rows (identity input map), float32 rows elsewhere
        learned = name == "gcnii"
        assert all(r["raw_exchange"] is not learned for r in runs)
        model = build_model(make_config(name, "single", 1).model, graph.num_features, graph.num_classes)
        sizes, widths = [r["halo_rows"] for r in runs], model.layer_widths()
        expected = halo_bytes_per_epoch(sizes, widths, 4, learned, input_element_size=4 if learned else 2)
        if not learned:  # half of float32's layer-0 bytes
            assert expected == halo_bytes_per_epoch(sizes, widths, 4, False) - sum(sizes) * widths[0] * 2
        for epoch in range(EPOCHS):
            assert sum(r["bytes"][epoch]["halo"] for r in runs) == expected > 0, (name, epoch)


def test_single_holds_bfloat16_features_at_half_the_tracked_bytes():
    graph = make_graph()
    bf16, f32 = single_run("gcn"), single_run("gcn", "float32")
    assert (bf16["x_dtype"], f32["x_dtype"]) == (torch.bfloat16, torch.float32)
    assert f32["tracked"] - bf16["tracked"] == graph.x.numel() * 2  # 4 -> 2 bytes per feature element
    assert bf16["losses"] != f32["losses"]  # the rounding of the stored features is real


def test_feature_dtype_refusals(tmp_path):
    def config(**kw):
        data = {"feature_dtype": "bfloat16", **kw.pop("data", {})}
        return build_config({"data": data, "progress": False, **kw})

    with pytest.raises(ValueError, match=r"--feature-dtype bfloat16 needs --dtype float32.*float64"):
        validate(config(dtype="float64"))
    with pytest.raises(ValueError, match=r"--feature-dtype is not used by strategy 'offload'; it is used by "
                                         r"strategies graph-parallel, single"):
        config(strategy={"name": "offload", "workers": 2})
    with pytest.raises(ValueError, match=r"--feature-dtype is not used by strategy 'single' with --features "
                                         r"learnable:8"):
        config(data={"features": "learnable:8"})
    (tmp_path / "run.toml").write_text('[data]\nfeature_dtype = "float16"\n')
    with pytest.raises(ValueError, match=r"--feature-dtype must be one of float32, bfloat16, got 'float16'"):
        validate(build_config({}, tmp_path / "run.toml"))
    (tmp_path / "run.toml").write_text('[data]\nfeature_dtype = "bfloat16"\n[strategy]\nname = "pipeline"\n')
    with pytest.raises(ValueError, match=r"run.toml: \[data\] feature_dtype is not used by strategy 'pipeline'"):
        build_config({}, tmp_path / "run.toml")
    validate(config(strategy={"name": "graph-parallel", "workers": 2}))

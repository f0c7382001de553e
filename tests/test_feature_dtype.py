"""``--feature-dtype bfloat16``: input features stored and exchanged in bfloat16, computation in float32.

graph-parallel (2 workers, one spawn) reproduces single on the same bfloat16 features to float32 tolerance; the
strategies hold bfloat16 feature tensors (tracked bytes of the features halve) and graph-parallel's layer-0 halo
moves 2 bytes per element where it exchanges the stored rows, not projected ones (its closed form); the option is
refused where it cannot hold.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig, build_config
from graphscale.data.handle import DataHandle
from graphscale.nn.models import build_model
from graphscale.strategies.graph_parallel import GraphParallel, halo_bytes_per_epoch, projected_exchanges
from graphscale.strategies.single import SingleStrategy
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.training_store import store_handle, write_training_store
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
        # GCN's layer 0 projects 12 stored bfloat16 columns (24 bytes) to 4 float32 ones (16 bytes) and moves
        # those; GAT's projection (2 heads of 4: 32 bytes) is wider than the stored row, so it moves the row
        projected = projected_exchanges(model, 4, 4 if learned else 2)
        assert projected[0] == {"gcn": 4, "gat": None, "gcnii": None}[name], name
        expected = halo_bytes_per_epoch(sizes, widths, 4, learned, input_element_size=4 if learned else 2,
                                        projected=projected)
        if not learned and projected[0] is None:  # half of float32's layer-0 bytes
            assert expected == halo_bytes_per_epoch(sizes, widths, 4, False, projected=projected) \
                - sum(sizes) * widths[0] * 2
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


class DropInput(torch.nn.Module):
    """A forward that drops its input before the first conv (not learned, but conv 0 does not read ``x`` itself)."""

    def __init__(self) -> None:
        from torch_geometric.nn.conv import SAGEConv

        from graphscale.testing import pyg_models

        super().__init__()
        self.conv1, self.conv2 = SAGEConv(pyg_models.IN, 8), SAGEConv(8, pyg_models.CLASSES)

    def forward(self, x, edge_index):
        h = torch.nn.functional.dropout(x, 0.5, self.training)
        return self.conv2(torch.relu(self.conv1(h, edge_index)), edge_index)


#: forward models (graphscale.testing.pyg_models factories, or this module's) and whether layer 0 moves stored rows
FORWARD = {"sage_jk_cat": True, "skip_jk_dropout": False, "drop_input": False}


def forward_model(name: str):
    from graphscale.nn.pyg import as_gnn
    from graphscale.testing import pyg_models

    torch.manual_seed(0)
    module = DropInput() if name == "drop_input" else getattr(pyg_models, name)()
    return as_gnn(module, pyg_models.IN, pyg_models.CLASSES, seed=0)


def forward_config(strategy: str, workers: int) -> RunConfig:
    config = RunConfig(model=ModelConfig(name="graphscale.testing.pyg_models:sage_jk_cat"),
                       optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                       strategy=StrategyConfig(name=strategy, workers=workers, partitioner="random"), seed=0)
    config.data.feature_dtype = "bfloat16"
    return config


def forward_graph():
    from graphscale.testing import pyg_models

    return random_graph(40, avg_degree=4.0, num_features=pyg_models.IN, num_classes=pyg_models.CLASSES, seed=0,
                        dtype=torch.float32, isolated=2)


def _predicted_halo(handle, model, config, whole: bool = True) -> int:
    """The halo bytes the advisor predicts: graph-parallel's ``predict`` (``whole``), or the byte part of it
    (``epoch_bytes``; the advisor's width probe does not run a forward model)."""
    from graphscale.cost.machine import synthetic
    from graphscale.partition.store import read_store_meta
    from graphscale.strategies.graph_parallel import epoch_bytes, predict

    if whole:
        return predict(handle, model, config, synthetic()).bytes.get("halo", 0)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return epoch_bytes(read_store_meta(handle.path)["parts"], model, config, 4, params).get("halo", 0)


def _forward_worker(env, store: str, gcnii_store: str) -> dict:
    out = {}
    for name in FORWARD:
        config = forward_config("graph-parallel", env.world_size)
        handle = store_handle(store, "none", "bfloat16")
        model = forward_model(name)
        out[name] = train(GraphParallel(), model, handle, env, config)
        out[name].update(widths=model.layer_widths(), learned=model.learned_input_map,
                         predicted=_predicted_halo(handle, model, config, whole=False))
    config = make_config("gcnii", "graph-parallel", env.world_size)
    handle = store_handle(gcnii_store, "none", "bfloat16")
    model = build_model(config.model, handle.num_features, handle.num_classes, seed=0)
    out["gcnii"] = train(GraphParallel(), model, handle, env, config)
    out["gcnii"]["predicted"] = _predicted_halo(handle, model, config)
    return out


def test_graph_parallel_bfloat16_halo_of_forward_models_and_gcnii_equals_closed_form_and_predict(tmp_path):
    """A PyG model with its own forward whose first conv reads ``x`` itself exchanges the stored bfloat16 rows at
    layer 0 (upcast in the conv's step; losses equal ``single``'s on the same rows); one that computes on ``x``
    first (a linear map, a dropout) exchanges float32 rows. The Ledger's halo bytes equal the closed form and the
    advisor's prediction, also for GCNII (a learned input map: float32 rows both ways)."""
    from graphscale.distributed.env import DistEnv

    store, gcnii_store = tmp_path / "store", tmp_path / "gcnii"
    write_training_store(forward_graph(), store, 2, "random", seed=0)
    write_training_store(make_graph(), gcnii_store, 2, "random", seed=0)
    runs = run_distributed(_forward_worker, 2, str(store), str(gcnii_store))
    graph = forward_graph()
    for name, raw in FORWARD.items():
        results = [r[name] for r in runs]
        assert [r["raw_exchange"] for r in results] == [raw, raw], name
        sizes, widths, learned = [r["halo_rows"] for r in results], results[0]["widths"], results[0]["learned"]
        assert learned == (name == "skip_jk_dropout"), name
        expected = halo_bytes_per_epoch(sizes, widths, 4, learned, input_element_size=2 if raw else 4)
        if raw:  # half of float32's layer-0 bytes
            assert expected == halo_bytes_per_epoch(sizes, widths, 4, False) - sum(sizes) * widths[0] * 2
        for epoch in range(EPOCHS):
            assert sum(r["bytes"][epoch]["halo"] for r in results) == expected > 0, (name, epoch)
        assert all(r["predicted"] == expected for r in results), name
        config = forward_config("single", 1)
        ref = train(SingleStrategy(), forward_model(name), DataHandle.in_memory(graph), DistEnv.local(), config)
        for rank, r in enumerate(results):
            assert r["x_dtype"] == torch.bfloat16
            assert_close_rel(torch.tensor(r["losses"]), torch.tensor(ref["losses"]), torch.float32,
                             what=f"{name} rank {rank} losses")
    gcnii = [r["gcnii"] for r in runs]
    assert not any(r["raw_exchange"] for r in gcnii)
    measured = sum(r["bytes"][0]["halo"] for r in gcnii)
    assert all(r["predicted"] == measured > 0 for r in gcnii)

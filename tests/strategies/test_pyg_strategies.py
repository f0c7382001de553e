"""PyG models trained by graphscale's strategies equal PyG's own full-graph training and graphscale's ``single``.

float64, dropout 0 (except the keyed-dropout check), 3 epochs, Adam: per-epoch losses within 1e-10 relative.

* ``single`` and ``graph-parallel`` (2 and 4 workers, one spawned group per world size training every model) against
  a plain PyG full-graph loop (``model(x, edge_index)``, cross-entropy over the training vertices, the same initial
  weights): GraphSAGE, GAT, GIN, GCN (whose GCNConv gets the whole graph's normalisation on every partition);
* a user-defined ``MessagePassing`` layer (:class:`graphscale.testing.pyg_models.GatedMean`) and GraphSAGE with
  keyed dropout 0.5: ``graph-parallel`` equals ``single``;
* mini-batches: ``split-parallel`` x2 equals ``single`` on the same sampled blocks, ``data-parallel`` x2 equals one
  single-process step per iteration over the union of its micro-batches' sampled blocks
  (:func:`graphscale.strategies.data_parallel.reference_step`);
* ``offload`` (2 chunks) and ``pipeline`` (one chunk) equal ``single`` (a ``torch.nn.Sequential`` stack);
* ``model-averaging``: one partition equals ``single``, two partitions train (approximate by design).

Models with their own forward (:mod:`graphscale.nn.pyg_forward`: a skip connection with jumping knowledge by
concatenation, ``GraphSAGE(jk='cat')``, ``GIN(jk='max')``) are held to the same references: ``single`` and
``graph-parallel`` x2 / x4 against PyG's loop, keyed dropout 0.5 (``nn.Dropout`` and ``F.dropout``) under
``graph-parallel`` against ``single``, ``split-parallel`` x2 and ``data-parallel`` x2 on the same sampled blocks,
``model-averaging`` with one partition against ``single`` and its exact (fetching) evaluation of the averaged model
against ``single``'s evaluation of the same weights; ``overlap=True`` is refused.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig, build_config
from graphscale.data.block import Block
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import load_training_graph
from graphscale.run import run
from graphscale.strategies.base import make_optimizer
from graphscale.strategies.graph_parallel import GraphParallel, halo_bytes_per_epoch
from graphscale.testing import assert_close_rel, pyg_models, random_graph, run_distributed
from graphscale.training_store import store_handle, write_training_store

EPOCHS = 3
SPEC = "graphscale.testing.pyg_models:"
#: models with their own forward (skip connections, jumping knowledge)
FORWARD = ("skip_jk", "sage_jk_cat", "gin_jk_max")
#: compared with PyG's own full-graph loop
AGAINST_PYG = ("sage", "gat", "gin", "gcn", *FORWARD)
#: compared with graphscale's single only (user-defined layer; keyed dropout)
AGAINST_SINGLE = ("custom", "sage_dropout", "skip_jk_dropout")


def make_graph():
    return random_graph(40, avg_degree=4.0, num_features=pyg_models.IN, num_classes=pyg_models.CLASSES, seed=0,
                        dtype=torch.float64, isolated=2)


def make_config(name: str, strategy: str = "single", workers: int = 1) -> RunConfig:
    return RunConfig(model=ModelConfig(name=SPEC + name), optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name=strategy, workers=workers, partitioner="metis"), seed=0,
                     dtype="float64")


def pyg_losses(name: str, graph, epochs: int = EPOCHS) -> list[float]:
    """A plain PyG full-graph training loop with the same initial weights (the factory under seed 0)."""
    torch.manual_seed(0)
    model = getattr(pyg_models, name)().double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    edge_index = torch.stack([graph.indices, Block.full(graph).dst_of_edges()])
    mask = graph.train_mask
    losses = []
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(graph.x, edge_index)[mask], graph.y[mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def single_losses(name: str, graph) -> list[float]:
    from graphscale.data.handle import DataHandle
    from graphscale.strategies.single import SingleStrategy

    config = make_config(name)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    strategy = SingleStrategy()
    strategy.setup(DataHandle.in_memory(graph), model, DistEnv.local(), config)
    return [strategy.train_epoch(e).loss for e in range(EPOCHS)]


def _gp_worker(env: DistEnv, store: str, names: list[str]) -> dict:
    out = {}
    for name in names:
        handle = store_handle(store, "none", "float64")
        config = make_config(name, "graph-parallel", env.world_size)
        model = build_model(config.model, handle.num_features, handle.num_classes, seed=0, dtype=torch.float64)
        strategy = GraphParallel()
        strategy.setup(handle, model, env, config)
        stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
        out[name] = [s.loss for s in stats]
        if name in FORWARD:  # this worker's halo bytes of an epoch, its halo rows, the closed form's inputs
            out[f"{name} halo"] = (stats[-1].bytes.get("halo", 0), strategy.halo.num_halo, model.layer_widths(),
                                   model.learned_input_map)
    return out


def assert_losses(got: list[float], expected: list[float], what: str) -> None:
    assert len(got) == len(expected) == EPOCHS, what
    assert_close_rel(torch.tensor(got), torch.tensor(expected), torch.float64, what=what)


@pytest.mark.parametrize("name", AGAINST_PYG)
def test_pyg_model_single_equals_pyg_full_graph_loop(name):
    graph = make_graph()
    assert_losses(single_losses(name, graph), pyg_losses(name, graph), f"{name} single vs PyG")


@pytest.mark.parametrize("world_size", [2, 4])
def test_pyg_models_graph_parallel_equal_pyg_loop_and_single(world_size, tmp_path):
    graph = make_graph()
    store = tmp_path / f"store-{world_size}"
    write_training_store(graph, store, world_size, "metis", seed=0)
    results = run_distributed(_gp_worker, world_size, str(store), [*AGAINST_PYG, *AGAINST_SINGLE])
    for name in AGAINST_PYG:
        reference = pyg_losses(name, graph)
        for rank, result in enumerate(results):
            assert_losses(result[name], reference, f"{name} graph-parallel W={world_size} rank {rank} vs PyG")
    for name in AGAINST_SINGLE:
        reference = single_losses(name, graph)
        for rank, result in enumerate(results):
            assert_losses(result[name], reference, f"{name} graph-parallel W={world_size} rank {rank} vs single")
    for name in FORWARD:  # one halo gather per conv call: the closed form, summed over workers
        sent, halo, widths, learned = zip(*(result[f"{name} halo"] for result in results))
        assert sum(sent) == halo_bytes_per_epoch(list(halo), widths[0], 8, learned[0]) > 0, name
    assert [results[0][f"{name} halo"][3] for name in FORWARD] == [True, False, False]  # conv 0 reads x or lin(x)
    # dropout 0.5 really drops: the keyed-dropout run differs from the dropout-free model
    assert abs(results[0]["sage_dropout"][0] - pyg_losses("sage", graph)[0]) > 1e-3
    assert abs(results[0]["skip_jk_dropout"][0] - pyg_losses("skip_jk", graph)[0]) > 1e-3


def test_graph_parallel_overlap_refuses_a_forward_model(tmp_path):
    graph = make_graph()
    write_training_store(graph, tmp_path / "store", 1, "metis", seed=0)
    handle = store_handle(str(tmp_path / "store"), "none", "float64")
    config = make_config("skip_jk", "graph-parallel")
    model = build_model(config.model, handle.num_features, handle.num_classes, seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="graph-parallel overlap=True splits each layer's step .* use overlap=False"):
        GraphParallel(overlap=True).setup(handle, model, DistEnv.local(), config)


# ------------------------------------------------------------ end to end through run()
def run_config(name: str, strategy: str, workers: int = 1, **options) -> RunConfig:
    return build_config({"data": {"dataset": pyg_models.DATASET, "feature_norm": "none"},
                         "model": {"name": SPEC + name},
                         "optim": {"epochs": EPOCHS, "lr": 0.01, "weight_decay": 5e-4},
                         "strategy": {"name": strategy, "workers": workers, **options}, "dtype": "float64",
                         "progress": False, "oversubscribe": True})


def report_losses(config: RunConfig) -> list[float]:
    return [e["loss"] for e in run(config)["epochs"]]


MINIBATCH = {"fanouts": [3, 3], "batch_size": 8}


def test_pyg_split_parallel_equals_single_minibatch():
    single = report_losses(run_config("gin", "single", minibatch=True, **MINIBATCH))
    split = report_losses(run_config("gin", "split-parallel", 2, **MINIBATCH))
    assert_losses(split, single, "gin split-parallel x2 vs single mini-batch")


@pytest.mark.parametrize("name", ["skip_jk", "sage_jk_cat", "skip_jk_dropout"])
def test_forward_model_split_parallel_equals_single_minibatch(name):
    """Each worker runs the forward on its own rows of the sample; every conv call is its halo step."""
    single = run(run_config(name, "single", minibatch=True, **MINIBATCH))
    split = run(run_config(name, "split-parallel", 2, **MINIBATCH))
    assert_losses([e["loss"] for e in split["epochs"]], [e["loss"] for e in single["epochs"]],
                  f"{name} split-parallel x2 vs single mini-batch")
    for key in ("val_loss", "test_loss"):  # the layer-wise evaluation runs the forward on each worker's rows
        assert split["epochs"][-1][key] == pytest.approx(single["epochs"][-1][key], rel=1e-10), key


@pytest.mark.parametrize("name", ["gat", "skip_jk"])
def test_pyg_data_parallel_equals_single_steps_on_the_same_blocks(name):
    from graphscale.testing.data_parallel_reference import data_parallel_reference_losses

    config = run_config(name, "data-parallel", 2, **MINIBATCH)
    got = report_losses(config)
    graph = load_training_graph(pyg_models.DATASET, "none", "float64")
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    optimizer = make_optimizer(model, config.optim)
    expected = data_parallel_reference_losses(model, optimizer, graph, MINIBATCH["batch_size"], MINIBATCH["fanouts"],
                                              EPOCHS)
    assert_losses(got, expected, f"{name} data-parallel x2 vs single steps")


@pytest.mark.parametrize(("strategy", "options"), [("offload", {"chunks": 2}), ("pipeline", {"chunks": 1})])
def test_pyg_offload_and_pipeline_equal_single(strategy, options):
    single = report_losses(run_config("stack", "single"))
    got = report_losses(run_config("stack", strategy, 1, **options))
    assert_losses(got, single, f"stack {strategy} vs single")


@pytest.mark.parametrize("name", ["sage", "skip_jk"])
def test_pyg_model_averaging_one_partition_equals_single_and_two_train(name):
    """One worker trains the one partition (the whole graph): single; two average partition-local models."""
    single = report_losses(run_config(name, "single"))
    assert_losses(report_losses(run_config(name, "model-averaging", 1)), single, f"{name} model-averaging x1")
    two = report_losses(run_config(name, "model-averaging", 2))
    assert two[-1] < two[0] and two != single


def _averaging_worker(env: DistEnv, config: RunConfig, handle) -> dict:
    from graphscale.strategies.model_averaging import ModelAveraging

    model = build_model(config.model, handle.num_features, handle.num_classes, seed=0, dtype=torch.float64)
    strategy = ModelAveraging()
    strategy.setup(handle, model, env, config)
    for epoch in range(2):
        strategy.train_epoch(epoch)
    return {"mode": strategy.eval_mode, "metrics": strategy.evaluate(),
            "state": {k: v.cpu() for k, v in model.state_dict().items()}}


def test_forward_model_averaging_exact_evaluation_equals_single_on_the_averaged_model(tmp_path):
    """4 parts on 2 workers, 1-hop halo: the evaluation runs the forward on each worker's rows ``N_0``, fetching
    every conv call's remote rows; its metrics are ``single``'s evaluation of the same averaged weights."""
    from graphscale.data.handle import DataHandle
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data
    from graphscale.strategies.single import SingleStrategy

    config = run_config("skip_jk", "model-averaging", 2, parts=4)
    config.cache_dir = str(tmp_path / "cache")
    handle = prepare_data(config)
    runs = launch(_averaging_worker, 2, config, handle, device="cpu")
    assert [r["mode"] for r in runs] == ["fetch", "fetch"]
    model = build_model(config.model, pyg_models.IN, pyg_models.CLASSES, seed=0, dtype=torch.float64)
    model.load_state_dict(runs[0]["state"])
    single = SingleStrategy()
    single.setup(DataHandle.in_memory(load_training_graph(pyg_models.DATASET, "none", "float64")), model,
                 DistEnv.local(), run_config("skip_jk", "single"))
    want = single.evaluate()
    for r in runs:
        for key, value in want.items():
            assert r["metrics"][key] == pytest.approx(value, rel=1e-10, abs=1e-12), key

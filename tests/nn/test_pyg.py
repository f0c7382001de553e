"""PyG models as graphscale models (:mod:`graphscale.nn.pyg`): convs on blocks, the layer order read from the
model, keyed dropout, and the one-line errors for models that cannot be trained (before any worker starts)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv import GCNConv, SAGEConv
from torch_geometric.nn.models import GraphSAGE

from graphscale.cli import main
from graphscale.config import ModelConfig, build_config
from graphscale.data.block import Block
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.models import build_model
from graphscale.nn.pyg import as_gnn, check_model
from graphscale.nn.pyg_convs import block_adjacency, block_edge_index
from graphscale.run import run
from graphscale.testing import assert_close_rel, pyg_models, random_graph
from graphscale.validation import validate

SPEC = "graphscale.testing.pyg_models:"


def make_graph():
    return random_graph(30, avg_degree=4.0, num_features=pyg_models.IN, num_classes=pyg_models.CLASSES, seed=1,
                        dtype=torch.float64, isolated=1)


def pyg_edge_index(graph):
    return torch.stack([graph.indices, Block.full(graph).dst_of_edges()])


def pyg_forward(module, x, edge_index):
    """PyG's own forward; a torch.nn.Sequential stack applied entry by entry (convs with the edges)."""
    if not isinstance(module, nn.Sequential):
        return module(x, edge_index)
    for entry in module:
        x = entry(x, edge_index) if isinstance(entry, MessagePassing) else entry(x)
    return x


@pytest.mark.parametrize("name", ["sage", "gat", "gin", "gcn", "custom", "stack"])
def test_wrapped_model_on_sampled_and_partition_blocks_matches_pyg_forward(name):
    """Full graph, and the last-layer rows of a partition computed on its 2-hop blocks: PyG's own forward."""
    graph = make_graph()
    torch.manual_seed(0)
    module = getattr(pyg_models, name)().double()
    expected = pyg_forward(module, graph.x, pyg_edge_index(graph))
    model = as_gnn(module, graph.num_features, graph.num_classes)
    model.eval()
    assert_close_rel(model(Block.full(graph), graph.x), expected, torch.float64, what=f"{name} full graph")
    top = Block.from_nodes(graph, torch.arange(0, 30, 3))
    blocks = [Block.from_nodes(graph, top.src_ids), top]
    got = model(blocks, graph.x[blocks[0].src_ids])
    assert_close_rel(got, expected[top.dst_ids], torch.float64, what=f"{name} partition blocks")
    assert model.num_layers == 2 and model.layer_widths()[0] == (12 if name == "stack" else pyg_models.IN)


def test_edge_index_cached_per_block_and_gcn_weights_are_the_whole_graphs():
    graph = make_graph()
    block = Block.from_nodes(graph, torch.arange(10))
    first = block_edge_index(block)
    assert block_edge_index(block) is first
    assert first.shape == (2, block.num_edges) and int(first[1].max()) < block.num_dst
    adj = block_adjacency(block, torch.float64)
    assert block_adjacency(block, torch.float64) is adj and adj.shape == (block.num_dst, block.num_src)
    assert torch.equal(adj.to_dense().nonzero().flip(1).T, first[:, torch.argsort(first[1] * block.num_src + first[0])])
    conv = GCNConv(pyg_models.IN, 4).double()
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    full_ei, full_w = gcn_norm(pyg_edge_index(graph), None, graph.num_nodes, add_self_loops=True,
                               dtype=torch.float64)
    model = as_gnn(nn.Sequential(conv), graph.num_features)
    out = model.layers[0](block, graph.x[block.src_ids])
    reference = conv.propagate(full_ei, x=conv.lin(graph.x), edge_weight=full_w) + conv.bias
    assert_close_rel(out, reference[:10], torch.float64, what="GCNConv on a partition block")
    assert conv.normalize  # restored after the call


@pytest.mark.parametrize("name", ["gcn", "gat", "sage"])
def test_prepare_block_keeps_what_steps_use_with_the_topology(name):
    """graph-parallel counts a block's topology tensors at setup: prepare_block builds the PyG adjacency (or edge
    list) there, and the steps reuse it."""
    from graphscale.nn.topology import topology

    graph = make_graph()
    block = Block.full(graph)
    model = as_gnn(getattr(pyg_models, name)().double(), graph.num_features, graph.num_classes)
    before = len(topology(block).tensors())
    model.prepare_block(block)
    prepared = topology(block).tensors()
    assert len(prepared) > before
    model(block, graph.x).sum().backward()
    assert len(topology(block).tensors()) == len(prepared)


def test_registered_models_keep_their_report_fields():
    from graphscale.config import model_dict

    assert "pyg_dropout" not in model_dict(ModelConfig()) and "factory" not in model_dict(ModelConfig())
    assert model_dict(ModelConfig(name=SPEC + "sage"))["pyg_dropout"] == "keyed"


def test_keyed_dropout_replaces_torch_dropout_and_torch_keeps_it():
    module = pyg_models.sage_dropout()
    keyed = as_gnn(module, pyg_models.IN, pyg_models.CLASSES)
    assert isinstance(keyed.tails[0][-1], KeyedDropout) and keyed.tails[0][-1].p == 0.5
    kept = as_gnn(module, pyg_models.IN, pyg_models.CLASSES, dropout="torch")
    assert type(kept.tails[0][-1]) is nn.Dropout
    assert as_gnn(pyg_models.gat_attention_dropout(), pyg_models.IN, dropout="torch").num_layers == 2
    graph = make_graph()
    keyed.set_epoch(3)
    a = keyed(Block.full(graph), graph.x.float())
    b = keyed(Block.full(graph), graph.x.float())
    assert torch.equal(a, b)  # the same keys, the same masks
    keyed.set_epoch(4)
    assert not torch.equal(keyed(Block.full(graph), graph.x.float()), a)


class NeedsEdgeAttr(MessagePassing):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(pyg_models.IN, pyg_models.CLASSES)

    def forward(self, x, edge_index, edge_attr):
        return self.propagate(edge_index, x=self.lin(x))


@pytest.mark.parametrize("make, message", [
    (pyg_models.mlp, "Sequential has no message-passing layers"),
    (pyg_models.two_hop, "SGConv (layer 0) cannot run on a graphscale block: it propagates K hops in one layer"),
    (pyg_models.gcn_batchnorm, "BatchNorm (entry 1) normalises over the rows of a batch or graph"),
    (pyg_models.gat_attention_dropout, "GATConv (layer 0) has a dropout inside"),
    (pyg_models.wide, "layer 0 (SAGEConv) takes 8 input features and fails on a graphscale block"),
    (lambda: nn.Sequential(GCNConv(pyg_models.IN, 3, cached=True)), ("GCNConv (layer 0) cannot run on a graphscale "
                                                                     "block: it caches the normalisation")),
    (lambda: nn.Sequential(NeedsEdgeAttr()), ("NeedsEdgeAttr (layer 0) cannot run on a graphscale block: it needs "
                                             "edge_attr besides x and edge_index")),
    (lambda: nn.Sequential(nn.Sequential(SAGEConv(pyg_models.IN, 3))), "nests message-passing layers"),
    (lambda: GraphSAGE(pyg_models.IN, 8, 2, 4), "outputs 4 values per vertex but the data has 3 classes"),
])
def test_models_that_cannot_run_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError, match=None) as err:
        as_gnn(make(), pyg_models.IN, pyg_models.CLASSES)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_check_model_names_the_strategy_and_leaves_the_model_unchanged():
    module = pyg_models.sage()
    before = [p.clone() for p in module.parameters()]
    assert check_model(module, "graph-parallel") == 2
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))
    with pytest.raises(ValueError, match="strategy 'task-parallel' does not train PyG models .* not decoupled"):
        check_model(module, "task-parallel")


def config(name: str, strategy: str = "single", **model) -> object:
    return build_config({"data": {"dataset": pyg_models.DATASET}, "model": {"name": name, **model},
                         "strategy": {"name": strategy, "workers": 2 if strategy != "single" else 1},
                         "oversubscribe": True})


@pytest.mark.parametrize("name, strategy, message", [
    (SPEC + "mlp", "graph-parallel", "has no message-passing layers"),
    (SPEC + "two_hop", "single", "SGConv (layer 0) cannot run on a graphscale block"),
    (SPEC + "residual", "pipeline", "Residual defines its own forward"),
    (SPEC + "residual", "offload", "Residual defines its own forward"),
    (SPEC + "sage", "task-parallel", "strategy 'task-parallel' does not train PyG models"),
    ("graphscale.testing.nosuch:sage", "single", "--model graphscale.testing.nosuch:sage: cannot import module"),
    (SPEC + "nosuch", "single", "module 'graphscale.testing.pyg_models' has no attribute 'nosuch'"),
    (SPEC + "not_a_model", "single", "returned a int, not a torch.nn.Module"),
    (SPEC + "DATASET", "single", "'DATASET' is a str, not a zero-argument callable"),
])
def test_bad_models_are_refused_before_any_worker(name, strategy, message):
    with pytest.raises(ValueError) as err:
        validate(config(name, strategy))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_widths_are_checked_against_the_data_before_any_worker(monkeypatch):
    import graphscale.run

    monkeypatch.setattr(graphscale.run, "launch", lambda *a, **k: pytest.fail("a worker started"))
    with pytest.raises(ValueError, match="layer 0 .SAGEConv. takes 8 input features and fails"):
        run(config(SPEC + "wide"))


def test_model_options_belong_to_their_models():
    with pytest.raises(ValueError, match=r"--hidden is not used by model graphscale.testing.pyg_models:sage \(a PyG "
                                         r"model defines its own"):
        build_config({"model": {"name": SPEC + "sage", "hidden": 4}})
    with pytest.raises(ValueError, match="--pyg-dropout is not used by model 'gcn'; it is used by model "
                                         "module.path:factory"):
        build_config({"model": {"name": "gcn", "pyg_dropout": "torch"}})
    with pytest.raises(ValueError, match="option 'factory' is set from Python only"):
        build_config({"model": {"factory": "x"}})
    with pytest.raises(ValueError, match="--pyg-dropout must be one of keyed, torch"):
        validate(config(SPEC + "sage", pyg_dropout="bernoulli"))


def test_factory_config_builds_the_same_model_and_reports_its_name():
    from graphscale.config import to_dict

    cfg = ModelConfig(factory=pyg_models.sage)
    a = build_model(cfg, pyg_models.IN, pyg_models.CLASSES, seed=5)
    b = build_model(ModelConfig(name=SPEC + "sage"), pyg_models.IN, pyg_models.CLASSES, seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    full = build_config({})
    full.model.factory = pyg_models.sage
    assert to_dict(full)["model"]["factory"] == "graphscale.testing.pyg_models.sage"
    json.dumps(to_dict(full))


def test_cli_trains_a_factory_and_matches_the_python_run(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["train", "--model", SPEC + "sage", "--dataset", pyg_models.DATASET, "--epochs", "2", "--no-progress",
            "--dtype", "float64", "--strategy", "graph-parallel", "--workers", "2", "--oversubscribe",
            "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["config"]["model"]["name"] == SPEC + "sage" and report["config"]["model"]["layers"] == 2
    expected = run(build_config({"data": {"dataset": pyg_models.DATASET}, "model": {"name": SPEC + "sage"},
                                 "optim": {"epochs": 2}, "dtype": "float64", "progress": False}))
    assert_close_rel(torch.tensor([e["loss"] for e in report["epochs"]]),
                     torch.tensor([e["loss"] for e in expected["epochs"]]), torch.float64, what="CLI vs run")
    capsys.readouterr()
    assert main(["train", "--model", "graphscale.testing.nosuch:make", "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'graphscale.testing.nosuch'" in err and err.count("\n") == 1

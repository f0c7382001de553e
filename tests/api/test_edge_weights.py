"""A PyG ``Data``'s ``edge_weight`` is honoured, never dropped: convs that take it receive every block's edge
weights (GCNConv normalised by the whole graph's weighted degrees) under ``single``, ``single --minibatch`` and
``graph-parallel``, exactly as PyG's own loop passes them; a conv, model or strategy that cannot take them is
refused in one line naming ``edge_weight``."""

from __future__ import annotations

import copy

import pytest
import torch

import graphscale as gs
from graphscale.data.block import Block
from graphscale.data.convert import to_graph
from graphscale.data.sampler import NeighborSampler
from graphscale.nn.pyg import as_gnn
from graphscale.testing import random_graph
from graphscale.testing.pyg_loop import pyg_loop_losses

pytest.importorskip("torch_geometric")
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, GraphConv
from torch_geometric.nn.models import GCN, GraphSAGE

EPOCHS = 3
OPTIONS = {"epochs": EPOCHS, "dtype": "float64", "progress": False, "lr": 0.01, "weight_decay": 5e-4}


def weighted_data() -> Data:
    """A small symmetric graph with asymmetric, seeded positive weights (no two edges weigh the same)."""
    g = random_graph(40, num_features=6, num_classes=3, seed=2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    w = 0.1 + torch.rand(g.num_edges, generator=gen, dtype=torch.float64)
    return Data(x=g.x, edge_index=g.edge_index(), edge_weight=w, y=g.y, train_mask=g.train_mask,
                val_mask=g.val_mask, test_mask=g.test_mask)


def pyg_loop(model, d: Data, epochs: int = EPOCHS) -> list[float]:
    """The user's own full-graph loop, passing the edge weights: Adam, cross-entropy over the training vertices."""
    return pyg_loop_losses(model, d, epochs, OPTIONS["lr"], OPTIONS["weight_decay"], edge_weight=True)


class Residual(torch.nn.Module):
    """A model with its own forward (a skip connection) that passes edge_weight to its convs."""

    def __init__(self, takes_weight: bool = True) -> None:
        super().__init__()
        self.c1, self.c2 = GCNConv(6, 8), GraphConv(8, 3)
        self.skip = torch.nn.Linear(6, 8)
        self.takes_weight = takes_weight

    def forward(self, x, edge_index, edge_weight=None):
        h = torch.relu(self.c1(x, edge_index, edge_weight)) + self.skip(x)
        return self.c2(h, edge_index, edge_weight if self.takes_weight else None)


@pytest.mark.parametrize(("strategy", "workers", "extra"), [
    ("single", 1, {}), ("graph-parallel", 2, {}),
    ("single", 1, {"minibatch": True, "fanouts": [-1, -1], "batch_size": 1000})])
def test_weighted_gcn_equals_pygs_loop(strategy, workers, extra):
    """PyG's ``GCN`` on a weighted graph: every epoch's loss and the trained parameters equal PyG's own loop with
    the weights (float64, 1e-10), under ``single``, ``graph-parallel`` x2 and ``single --minibatch`` with full
    neighbourhoods and one batch; without the weights PyG's loss differs (so they were not dropped)."""
    d = weighted_data()
    torch.manual_seed(0)
    model = GCN(6, 8, 2, 3).double()
    report = gs.train(model, d, strategy=strategy, workers=workers, **OPTIONS, **extra)
    expected = pyg_loop(model, d)
    assert all(abs(a.loss - b) <= 1e-10 * abs(b) for a, b in zip(report.epochs, expected, strict=True))
    for mine, theirs in zip(report.last_model.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.allclose(mine, theirs, rtol=1e-10, atol=1e-12)
    torch.manual_seed(0)
    unweighted = GCN(6, 8, 2, 3).double()  # the same initial parameters, trained without the weights
    d.edge_weight = None
    assert abs(pyg_loop(unweighted, d, 1)[0] - expected[0]) > 1e-6


def test_own_forward_passes_the_weights_under_graph_parallel():
    """A model with its own forward, passing edge_weight to GCNConv and GraphConv: ``graph-parallel`` x2 equals
    PyG's loop with the weights, and ``predict`` (single, graph-parallel x2) the trained model's own outputs."""
    d = weighted_data()
    torch.manual_seed(0)
    model = Residual().double()
    report = gs.train(model, d, strategy="graph-parallel", workers=2, **OPTIONS)
    expected = pyg_loop(model, d)
    assert all(abs(a.loss - b) <= 1e-10 * abs(b) for a, b in zip(report.epochs, expected, strict=True))
    trained = report.last_model.eval()
    with torch.no_grad():
        outputs = trained(d.x, d.edge_index, d.edge_weight)
    for strategy, workers in (("single", 1), ("graph-parallel", 2)):
        out = gs.predict(trained, d, strategy=strategy, workers=workers, dtype="float64")
        assert torch.allclose(out, outputs, rtol=1e-10, atol=1e-12), strategy


def _edge_weights(graph, block: Block) -> torch.Tensor:
    """The graph's weight of every edge of ``block`` (looked up by its global endpoints)."""
    weights = {(int(u), int(v)): float(w) for u, v, w in zip(graph.indices, graph.dst_of_edges(), graph.edge_weight)}
    return torch.tensor([weights[int(block.src_ids[u]), int(block.src_ids[v])]
                         for u, v in zip(block.indices, block.dst_of_edges())], dtype=torch.float64)


def test_sampled_blocks_carry_their_edges_weights():
    """Sampled blocks keep their edges' weights: PyG's GCN on blocks with full neighbourhoods equals its full-graph
    forward with the weights at the targets, and a GraphConv stack on blocks sampled with fanouts [3, 2] equals
    PyG's GraphConv called on each block's edges with those edges' weights from the graph."""
    d = weighted_data()
    graph = to_graph(d)
    targets = torch.tensor([0, 7, 19, 33])
    torch.manual_seed(0)
    gcn = GCN(6, 8, 2, 3).double().eval()
    full = gcn(d.x, d.edge_index, d.edge_weight)[targets]
    blocks = NeighborSampler(graph, [-1, -1], seed=3).sample(targets, 0)
    with torch.no_grad():
        mine = as_gnn(gcn, 6).eval()(blocks, graph.x[blocks[0].src_ids])
    assert torch.allclose(mine, full, rtol=1e-10, atol=1e-12)

    stack = torch.nn.Sequential(GraphConv(6, 8), GraphConv(8, 3)).double().eval()
    blocks = NeighborSampler(graph, [3, 2], seed=3).sample(targets, 0)
    assert blocks[0].num_edges < graph.num_edges
    h = graph.x[blocks[0].src_ids]
    for conv, block in zip(stack, blocks):
        assert torch.equal(block.edge_weight, _edge_weights(graph, block))
        edge_index = torch.stack([block.indices, block.dst_of_edges()])
        h = conv((h, h[: block.num_dst]), edge_index, _edge_weights(graph, block), size=(block.num_src, block.num_dst))
    with torch.no_grad():
        mine = as_gnn(stack, 6).eval()(blocks, graph.x[blocks[0].src_ids])
    assert torch.allclose(mine, h, rtol=1e-10, atol=1e-12)


@pytest.fixture
def no_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("workers started")

    monkeypatch.setattr("graphscale.run.launch", refuse)


@pytest.mark.parametrize(("model", "options", "match"), [
    (lambda: GraphSAGE(6, 8, 2, 3), {}, (r"GraphSAGE instance: the graph has edge weights \(edge_weight\), but "
                                         r"SAGEConv \(layer 0\) takes no edge_weight")),
    (lambda: Residual(takes_weight=False), {}, (r"Residual instance: the graph has edge weights \(edge_weight\), "
                                                r"but conv call 1 \(GraphConv\) is not passed")),
    (lambda: "gcn", {"strategy": "task-parallel", "workers": 2},
     r"^the graph has edge weights \(edge_weight\), which strategy 'task-parallel' does not give its convs"),
    (lambda: "sage", {}, r"^the graph has edge weights \(edge_weight\), which graphscale's model 'sage' does not"),
    (lambda: "gcn", {"decoupled": "on"},
     r"^the graph has edge weights \(edge_weight\), which the decoupled form of graphscale's model 'gcn' does not"),
])
def test_what_cannot_take_the_weights_is_refused(no_run, model, options, match):
    """A conv without edge_weight, a forward that leaves a conv without it, a strategy whose blocks carry no weights
    and graphscale's own models: one line naming edge_weight, before any worker starts."""
    with pytest.raises(ValueError, match=match) as err:
        gs.train(model(), weighted_data(), **{**OPTIONS, **options})
    assert "\n" not in str(err.value)


def test_bad_weights_are_refused():
    d = weighted_data()
    bad = copy.copy(d)
    bad.edge_weight = d.edge_weight[:-1]
    with pytest.raises(ValueError, match=r"^data\.edge_weight must be a \[\d+\] tensor of numbers"):
        to_graph(bad)
    bad.edge_weight = d.edge_weight.clone()
    bad.edge_weight[3] = float("nan")
    with pytest.raises(ValueError, match=r"^data\.edge_weight holds a non-finite value"):
        to_graph(bad)
    bad.edge_index = torch.cat([d.edge_index, d.edge_index[:, :1]], 1)
    bad.edge_weight = torch.cat([d.edge_weight, d.edge_weight[:1]])
    with pytest.raises(ValueError, match=r"^data\.edge_index repeats an edge while data\.edge_weight is set"):
        to_graph(bad)


def test_a_weighted_graphs_store_holds_every_parts_edge_weights(tmp_path):
    """A weighted (directed) graph's partition store: every part's local edge ``u -> v`` carries the graph's weight
    of ``u -> v`` (of ``v -> u`` for a record added reversed for a halo vertex), its vertices their weighted
    in-degrees, and a graph directory keeps the weights."""
    from graphscale.data.formats import load_graph_dir, save_graph_dir
    from graphscale.data.graph import Graph
    from graphscale.partition.store import load_partition
    from graphscale.training_store import write_training_store

    gen = torch.Generator().manual_seed(4)
    n = 30
    key = torch.unique(torch.randint(0, n * n, (150,), generator=gen))
    src, dst = key % n, key // n
    w = torch.rand(key.numel(), generator=gen, dtype=torch.float64) + 0.5
    graph = Graph.from_edges(src, dst, n, w, x=torch.randn(n, 3, generator=gen), y=torch.zeros(n, dtype=torch.int64),
                             train_mask=torch.ones(n, dtype=torch.bool), val_mask=torch.zeros(n, dtype=torch.bool),
                             test_mask=torch.zeros(n, dtype=torch.bool))
    save_graph_dir(graph, tmp_path / "g")
    assert torch.equal(load_graph_dir(tmp_path / "g").edge_weight, graph.edge_weight)
    weights = {(int(u), int(v)): float(x) for u, v, x in zip(src, dst, w)}
    meta = write_training_store(tmp_path / "g", tmp_path / "store", 3, "random")
    assert meta["weighted"] is True
    reversed_records = 0
    for s in range(3):
        part = load_partition(tmp_path / "store", s)
        local = part.graph
        u, v = part.orig_ids[local.indices], part.orig_ids[local.dst_of_edges()]
        for a, b, x, row in zip(u.tolist(), v.tolist(), local.edge_weight.tolist(), local.dst_of_edges().tolist()):
            if (a, b) not in weights:
                assert row >= part.num_inner  # only a halo row holds a reversed record
                reversed_records += 1
            assert x == weights.get((a, b), weights.get((b, a)))
        assert torch.equal(part.degree, graph.gcn_degrees()[part.orig_ids])
    assert reversed_records > 0

"""PyG models with their own forward (:mod:`graphscale.nn.pyg_forward`): the user's forward on a row space with each
conv call handed to the strategy; equal to PyG's own forward whole and on sampled blocks; keyed dropout; the
one-line refusals of what cannot run on rows (before any worker starts)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import Sequential
from torch_geometric.nn.conv import SAGEConv
from torch_geometric.nn.models import GraphSAGE

from graphscale.data.block import Block
from graphscale.nn.pyg import PyGModel, as_gnn, check_model
from graphscale.nn.pyg_forward import ForwardGNN
from graphscale.testing import assert_close_rel, pyg_models, random_graph

IN, CLASSES = pyg_models.IN, pyg_models.CLASSES
#: models with their own forward, by factory name
FORWARD = ("residual", "skip_jk", "sage_jk_cat", "gin_jk_max", "twice")


def make_graph():
    return random_graph(30, avg_degree=4.0, num_features=IN, num_classes=CLASSES, seed=1, dtype=torch.float64,
                        isolated=1)


def edge_index(graph):
    return torch.stack([graph.indices, Block.full(graph).dst_of_edges()])


def chained_blocks(graph, targets, layers: int) -> list[Block]:
    """Sampled blocks with full neighbourhoods (``Block.from_nodes``): each block's sources are the next's prefix."""
    blocks = [Block.from_nodes(graph, targets)]
    for _ in range(layers - 1):
        blocks.insert(0, Block.from_nodes(graph, blocks[0].src_ids))
    return blocks


@pytest.mark.parametrize("name", FORWARD)
def test_forward_model_matches_pyg_forward_whole_and_on_sampled_blocks(name):
    """The user's forward on the whole graph's rows, and on sampled blocks' rows (padded outputs), equals PyG's own
    forward on the targets: the padded rows are never read by a target's computation."""
    graph = make_graph()
    torch.manual_seed(0)
    module = getattr(pyg_models, name)().double()
    expected = module(graph.x, edge_index(graph))
    model = as_gnn(module, IN, CLASSES)
    assert isinstance(model, ForwardGNN) and model.num_layers == 2
    model.eval()
    assert_close_rel(model(Block.full(graph), graph.x), expected, torch.float64, what=f"{name} full graph")
    targets = torch.arange(0, 30, 4)
    blocks = chained_blocks(graph, targets, model.num_layers)
    assert blocks[0].num_src > blocks[1].num_src > blocks[1].num_dst  # the padding is exercised
    got = model(blocks, graph.x[blocks[0].src_ids])
    assert_close_rel(got, expected[targets], torch.float64, what=f"{name} sampled blocks")


def test_gradients_on_sampled_blocks_match_pyg_on_the_targets():
    """The padded rows carry no gradient: a loss over the targets' logits on sampled blocks gives PyG's parameter
    gradients of the same loss on the whole graph."""
    graph = make_graph()
    torch.manual_seed(0)
    module = pyg_models.skip_jk().double()
    reference = pyg_models.skip_jk().double()
    reference.load_state_dict(module.state_dict())
    targets = torch.tensor([1, 5, 9, 20])
    F.cross_entropy(reference(graph.x, edge_index(graph))[targets], graph.y[targets]).backward()
    model = as_gnn(module, IN, CLASSES)
    blocks = chained_blocks(graph, targets, 2)
    F.cross_entropy(model(blocks, graph.x[blocks[0].src_ids]), graph.y[targets]).backward()
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        assert_close_rel(p.grad, q.grad, torch.float64, what=name)


def test_a_conv_called_twice_is_two_layers_and_parameters_are_registered_once():
    module = pyg_models.twice()
    model = as_gnn(module, IN, CLASSES)
    assert model.num_layers == 2 and model.layers[0].conv is model.layers[1].conv is module.conv
    assert model.layer_widths() == [8, 8] and model.out_width == CLASSES
    assert [id(p) for p in model.parameters()] == [id(p) for p in module.parameters()]
    assert len(model.state_dict()) == len(module.state_dict())


def test_layer_sequential_models_keep_the_layer_path():
    assert isinstance(as_gnn(pyg_models.sage(), IN, CLASSES), PyGModel)
    jk = as_gnn(GraphSAGE(IN, 8, 2, CLASSES, jk="cat"), IN, CLASSES)
    assert isinstance(jk, ForwardGNN) and "jumping knowledge jk='cat'" in jk.reason
    seq = Sequential("x, edge_index", [(SAGEConv(IN, 8), "x, edge_index -> h"),
                                       (SAGEConv(8, 3), "h, edge_index -> h")])
    assert isinstance(as_gnn(seq, IN, CLASSES), ForwardGNN)


def test_keyed_dropout_keys_module_and_functional_dropout_by_vertex():
    """``nn.Dropout`` and ``F.dropout`` in the forward draw masks keyed by global id: a sampled batch's targets get
    the whole graph's rows; another epoch draws other masks; ``--pyg-dropout torch`` keeps the process RNG."""
    graph = make_graph()
    torch.manual_seed(0)
    module = pyg_models.skip_jk_dropout().double()
    model = as_gnn(module, IN, CLASSES)
    model.train()
    model.set_epoch(2)
    whole = model(Block.full(graph), graph.x)
    targets = torch.tensor([0, 7, 13])
    blocks = chained_blocks(graph, targets, 2)
    assert_close_rel(model(blocks, graph.x[blocks[0].src_ids]), whole[targets], torch.float64, what="keyed masks")
    model.eval()
    plain = model(Block.full(graph), graph.x)
    assert (whole - plain).abs().max() > 1e-3  # it drops
    model.train()
    model.set_epoch(3)
    assert not torch.equal(model(Block.full(graph), graph.x), whole)
    kept = as_gnn(pyg_models.skip_jk_dropout().double(), IN, CLASSES, dropout="torch")
    kept.train()
    torch.manual_seed(1)
    a = kept(Block.full(graph), graph.x)
    torch.manual_seed(1)
    assert torch.equal(kept(Block.full(graph), graph.x), a)


class _Forward(nn.Module):
    """A forward given as a function of (self, x, edge_index), around one or two SAGEConvs."""

    def __init__(self, body, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(IN, 8), SAGEConv(8, CLASSES)
        self.norm = norm
        self.body = body

    def forward(self, x: Tensor, edge_index) -> Tensor:
        return self.body(self, x, edge_index)


def _two(m, x, ei):
    return m.conv2(torch.relu(m.conv1(x, ei)), ei)


@pytest.mark.parametrize("make, message", [
    (pyg_models.GlobalPool, "GlobalPool: its forward mixes rows"),
    (pyg_models.ReadsEdges, ("its forward may only pass edge_index on to its convs (graphscale gives each conv its "
                            "block's edges), but it reads edge_index.size")),
    (lambda: _Forward(lambda m, x, ei: m.conv2(torch.relu(m.conv1(x, ei)), ei[:, :3])), "but it indexes edge_index"),
    (lambda: _Forward(lambda m, x, ei: m.conv2(m.conv1(x, ei), ei, torch.ones(3))),
     "call 1 (SAGEConv) is passed size; graphscale gives a conv only x, its block's edges and their edge_weight"),
    (lambda: _Forward(lambda m, x, ei: _two(m, x, ei)[:5]), "its forward returns [5, 3] for 12 vertices"),
    (lambda: _Forward(lambda m, x, ei: _two(m, x, ei) + m.norm(x[:, :3]), nn.BatchNorm1d(3)),
     "BatchNorm1d (in the model) normalises over the rows of a batch or graph"),
    (lambda: _Forward(lambda m, x, ei: _two(m, x, ei) + 0.0 * F.dropout(m.conv1.lin_l.weight, 0.5, m.training).sum()),
     "it applies dropout to a [8, 8] tensor, not one row per vertex ([12, *])"),
    (lambda: _Forward(lambda m, x, ei: _two(m, x, ei) + 0.0 * torch.rand(1)),
     ("it calls torch.rand, which draws from the process RNG and cannot be keyed by vertex (--pyg-dropout keyed); "
     "use --pyg-dropout torch")),
    (lambda: _Forward(lambda m, x, ei: x @ torch.ones(IN, CLASSES, dtype=x.dtype)),
     "its forward calls none of its convs"),
    (lambda: _Forward(lambda m, x, ei: 1 / 0), "its forward fails on graphscale's rows: ZeroDivisionError"),
])
def test_forwards_that_cannot_run_on_rows_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError) as err:
        as_gnn(make(), IN, CLASSES)
    assert message in str(err.value) and "\n" not in str(err.value)


def _weight_dropout(m, x, ei):
    return _two(m, x, ei) + 0.0 * F.dropout(m.conv1.lin_l.weight, 0.5, m.training).sum()


@pytest.mark.parametrize("body", [
    lambda m, x, ei: _two(m, x, ei) + 0.0 * torch.rand(1),
    _weight_dropout,
])
def test_torch_dropout_mode_accepts_random_functions_and_weight_dropout(body):
    graph = make_graph()
    model = as_gnn(_Forward(body).double(), IN, CLASSES, dropout="torch")
    assert model.num_layers == 2
    model.train()
    out = model(Block.full(graph), graph.x)
    out.sum().backward()
    assert out.shape == (graph.num_nodes, CLASSES) and model.net.conv1.lin_l.weight.grad is not None


def _inplace(m, x, ei):
    h = m.conv1(x, ei)  # an add's output: nothing saved for backward, so torch's dropout_ may overwrite it
    F.dropout(h, 0.5, m.training, inplace=True)
    return m.conv2(torch.relu(h), ei)


def _inplace_torch(m, x, ei):
    h = m.conv1(x, ei)
    torch.dropout_(h, 0.5, m.training)
    return m.conv2(torch.relu(h), ei)


def _out_of_place(m, x, ei):
    return m.conv2(torch.relu(F.dropout(m.conv1(x, ei), 0.5, m.training)), ei)


@pytest.mark.parametrize("body", [_inplace, _inplace_torch])
def test_keyed_dropout_in_place_equals_keyed_out_of_place(body):
    """``F.dropout(h, inplace=True)`` and ``torch.dropout_`` write the keyed rows into ``h`` (used or not): the
    outputs and gradients of the out-of-place keyed forward, and they drop."""
    graph = make_graph()
    results = []
    for forward in (body, _out_of_place):
        torch.manual_seed(0)
        model = as_gnn(_Forward(forward).double(), IN, CLASSES)
        model.train()
        model.set_epoch(1)
        out = model(Block.full(graph), graph.x)
        out.square().sum().backward()
        results.append((out.detach(), model.net.conv1.lin_l.weight.grad.clone()))
        model.eval()
        assert (out - model(Block.full(graph), graph.x)).abs().max() > 1e-3  # it drops
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("strategy, why", [
    ("offload", "it streams the graph through the device layer by layer"),
    ("pipeline", "it splits the model into stages of consecutive layers"),
])
def test_layer_splitting_strategies_refuse_a_forward_model_with_the_reason(strategy, why):
    with pytest.raises(ValueError) as err:
        check_model(pyg_models.skip_jk(), strategy)
    text = str(err.value)
    assert f"strategy {strategy!r} trains layer-sequential PyG models only ({why}" in text
    assert "SkipJK defines its own forward" in text and "\n" not in text
    for name in ("single", "graph-parallel", "data-parallel", "split-parallel", "model-averaging"):
        assert check_model(pyg_models.skip_jk(), name) == 2

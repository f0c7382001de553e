"""A PyG ``Data`` whose ``edge_index`` holds self-loops: they are kept as edges (as PyG's convs that aggregate
over ``edge_index`` as given see them), with a warning that ``GCNConv`` and ``GATConv`` add one self-loop per
vertex on top of them where PyG's do not; once removed, ``GCNConv`` equals PyG's loop on the original ``Data``."""

from __future__ import annotations

import copy

import pytest
import torch

import graphscale as gs
from tests.api.test_edge_weights import OPTIONS, pyg_loop, weighted_data

pytest.importorskip("torch_geometric")
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.utils import remove_self_loops


def with_loops(d: Data) -> Data:
    """``d`` (unweighted) with a self-loop on every third vertex."""
    loops = torch.arange(0, d.num_nodes, 3)
    edge_index = torch.cat([d.edge_index, torch.stack([loops, loops])], dim=1)
    return Data(x=d.x, edge_index=edge_index, y=d.y, train_mask=d.train_mask, val_mask=d.val_mask,
                test_mask=d.test_mask)


def losses_agree(report, expected) -> bool:
    return all(abs(a.loss - b) <= 1e-10 * abs(b) for a, b in zip(report.epochs, expected, strict=True))


def test_self_loops_are_kept_with_a_warning_naming_the_convs_that_differ():
    d = with_loops(weighted_data())
    torch.manual_seed(0)
    sage = GraphSAGE(6, 8, 2, 3).double()
    with pytest.warns(UserWarning, match=r"data\.edge_index holds 14 self-loop\(s\), kept as edges: GCNConv and "
                                         r"GATConv .*remove_self_loops"):
        report = gs.train(copy.deepcopy(sage), d, **OPTIONS)
    assert losses_agree(report, pyg_loop(sage, d))  # SAGEConv aggregates the loops, as PyG's does


def test_gcn_without_the_loops_equals_pygs_loop_on_the_data_with_them():
    d = with_loops(weighted_data())
    torch.manual_seed(0)
    model = GCN(6, 8, 2, 3).double()
    edge_index, _ = remove_self_loops(d.edge_index)
    clean = Data(x=d.x, edge_index=edge_index, y=d.y, train_mask=d.train_mask, val_mask=d.val_mask,
                 test_mask=d.test_mask)
    report = gs.train(copy.deepcopy(model), clean, **OPTIONS)
    assert losses_agree(report, pyg_loop(model, d))  # PyG's GCNConv ignores unweighted loops already there

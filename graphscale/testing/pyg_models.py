"""Small PyG models for tests, as zero-argument factories (``--model graphscale.testing.pyg_models:NAME``).

Widths fit :data:`DATASET` (8 features, 3 classes). Importing this module imports ``torch_geometric``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing, Sequential
from torch_geometric.nn.conv import GCNConv, SAGEConv, SGConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

#: a tiny graph the factories fit: 8 input features, 3 classes
DATASET = "sbm:nodes=48,degree=5,features=8,classes=3,train=0.5,val=0.25,seed=3"
IN, CLASSES = 8, 3


def sage() -> nn.Module:
    return GraphSAGE(IN, 16, 2, CLASSES)


def sage_dropout() -> nn.Module:
    """GraphSAGE with dropout 0.5 between its layers (swapped for keyed dropout by default)."""
    return GraphSAGE(IN, 16, 2, CLASSES, dropout=0.5)


def gat() -> nn.Module:
    return GAT(IN, 8, 2, CLASSES, heads=2)


def gat_attention_dropout() -> nn.Module:
    """GAT whose convs drop attention coefficients (process RNG: cannot be keyed)."""
    return GAT(IN, 8, 2, CLASSES, heads=2, dropout=0.5)


def gin() -> nn.Module:
    return GIN(IN, 16, 2, CLASSES)


def gcn() -> nn.Module:
    return GCN(IN, 16, 2, CLASSES)


def gcn_batchnorm() -> nn.Module:
    """GCN with batch normalisation between its layers (mixes rows: refused)."""
    return GCN(IN, 16, 2, CLASSES, norm="batch_norm")


class GatedMean(MessagePassing):
    """A user-defined layer: ``out_i = W_r x_i + mean_{j -> i} sigmoid(a . x_j) W x_j``.

    Its forward takes one tensor (no bipartite pair), so graphscale runs it on all of a block's source rows.
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="mean")
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.root = nn.Linear(in_channels, out_channels)
        self.gate = nn.Linear(in_channels, 1)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.root(x) + self.propagate(edge_index, x=x)

    def message(self, x_j: Tensor) -> Tensor:
        return torch.sigmoid(self.gate(x_j)) * self.lin(x_j)


def custom() -> nn.Module:
    """A torch_geometric.nn.Sequential of the user-defined :class:`GatedMean`, ReLU and GCNConv."""
    return Sequential("x, edge_index", [(GatedMean(IN, 16), "x, edge_index -> x"), nn.ReLU(),
                                        (GCNConv(16, CLASSES), "x, edge_index -> x")])


def stack() -> nn.Module:
    """A torch.nn.Sequential of convs and row-wise modules, with a linear input map."""
    return nn.Sequential(nn.Linear(IN, 12), nn.ReLU(), SAGEConv(12, 12), nn.ReLU(), SAGEConv(12, CLASSES))


def mlp() -> nn.Module:
    """No message passing at all (refused)."""
    return nn.Sequential(nn.Linear(IN, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def two_hop() -> nn.Module:
    """SGConv propagates K = 2 hops in one layer (refused: a block holds one hop)."""
    return nn.Sequential(SGConv(IN, CLASSES, K=2))


class Residual(nn.Module):
    """Its own forward with a skip connection: not layer-sequential (trained on rows by graphscale's
    :class:`~graphscale.nn.pyg_forward.ForwardGNN`; refused by offload and pipeline)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(IN, 16), SAGEConv(16, CLASSES)])
        self.skip = nn.Linear(IN, 16)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = torch.relu(self.convs[0](x, edge_index)) + self.skip(x)
        return self.convs[1](h, edge_index)


def residual() -> nn.Module:
    return Residual()


class SkipJK(nn.Module):
    """Its own forward: a linear input map, a skip connection around the second conv, dropout between the convs,
    and jumping knowledge by concatenation into a linear head::

        h0 = relu(lin_in(x)); h1 = dropout(relu(conv1(h0))); h2 = relu(conv2(h1)) + h1
        out = lin_out(cat([h1, h2]))
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.lin_in = nn.Linear(IN, 12)
        self.conv1 = SAGEConv(12, 12)
        self.conv2 = GCNConv(12, 12)
        self.lin_out = nn.Linear(24, CLASSES)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h0 = torch.relu(self.lin_in(x))
        h1 = self.dropout(torch.relu(self.conv1(h0, edge_index)))
        h2 = torch.relu(self.conv2(h1, edge_index)) + h1
        return self.lin_out(torch.cat([h1, h2], dim=-1))


def skip_jk() -> nn.Module:
    return SkipJK()


def skip_jk_dropout() -> nn.Module:
    """:class:`SkipJK` with ``nn.Dropout(0.5)`` and a functional ``F.dropout(p=0.5)`` on its input."""
    return SkipJKFunctional(0.5)


class SkipJKFunctional(SkipJK):
    """:class:`SkipJK` that also drops its input with ``torch.nn.functional.dropout``."""

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = torch.nn.functional.dropout(x, p=self.dropout.p, training=self.training)
        return super().forward(x, edge_index)


def sage_jk_cat() -> nn.Module:
    """GraphSAGE with jumping knowledge by concatenation (``jk='cat'``)."""
    return GraphSAGE(IN, 16, 2, CLASSES, jk="cat")


def gin_jk_max() -> nn.Module:
    """GIN with jumping knowledge by maximum (``jk='max'``)."""
    return GIN(IN, 16, 2, CLASSES, jk="max")


def twice() -> nn.Module:
    """One conv called twice (two layers sharing weights), with a skip connection."""
    return SharedTwice()


class SharedTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(IN, 8)
        self.conv = SAGEConv(8, 8)
        self.out = nn.Linear(8, CLASSES)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = torch.relu(self.lin(x))
        h = torch.relu(self.conv(h, edge_index)) + h
        h = self.conv(h, edge_index) + h
        return self.out(h)


class GlobalPool(nn.Module):
    """Adds the mean over all rows to every row between its convs (mixes rows: refused)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(IN, 8), SAGEConv(8, CLASSES)])

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = torch.relu(self.convs[0](x, edge_index))
        return self.convs[1](h + h.mean(dim=0, keepdim=True), edge_index)


class ReadsEdges(nn.Module):
    """Reads ``edge_index.size(1)`` (refused: graphscale hands each conv its block's edges)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = SAGEConv(IN, CLASSES)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv(x, edge_index) / edge_index.size(1)


def wide() -> nn.Module:
    """Expects 5 input features (the data has 8: refused)."""
    return GraphSAGE(5, 16, 2, CLASSES)


def not_a_model() -> int:
    return 3

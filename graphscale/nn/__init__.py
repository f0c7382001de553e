"""GNN layers, models and sparse kernels on blocks.

``graphscale.nn.models`` holds the model contract (:class:`GNN`, :func:`build_model`),
``graphscale.nn.layers`` the layers with their ``aggregate`` / ``update`` halves,
``graphscale.nn.ops`` the sparse kernels and ``graphscale.nn.dropout`` the
id-keyed dropout.
"""

from graphscale.nn.dropout import EdgeDropout, KeyedDropout, keyed_dropout
from graphscale.nn.layers import GATLayer, GCNIILayer, GCNLayer, ResGCNPlusLayer, SAGELayer
from graphscale.nn.models import GAT, GCN, GCNII, GNN, GraphSAGE, ResGCN, build_model
from graphscale.nn.ops import Topology, segment_softmax, spmm, spmm_heads, topology

__all__ = [
    "GAT",
    "GCN",
    "GCNII",
    "GNN",
    "EdgeDropout",
    "GATLayer",
    "GCNIILayer",
    "GCNLayer",
    "GraphSAGE",
    "KeyedDropout",
    "ResGCN",
    "ResGCNPlusLayer",
    "SAGELayer",
    "Topology",
    "build_model",
    "keyed_dropout",
    "segment_softmax",
    "spmm",
    "spmm_heads",
    "topology",
]

"""The PyG adapter: a :class:`Graph` as a ``torch_geometric.data.Data``.

The other direction (a ``Data``, checked to be trainable) is :func:`graphscale.data.convert.to_graph`."""

from __future__ import annotations

from graphscale.data.graph import Graph


def _pyg_data():
    try:
        from torch_geometric.data import Data
    except ImportError as err:
        raise ImportError("the PyG adapter needs torch_geometric; install it with `pip install graphscale[pyg]`") \
            from err
    return Data


def to_pyg(graph: Graph):
    """Convert to a ``torch_geometric.data.Data`` (``edge_index`` = ``(src, dst)`` in CSR order).

    ``name`` and ``num_classes`` travel as plain attributes of the ``Data``.
    """
    data_cls = _pyg_data()
    data = data_cls(x=graph.x, edge_index=graph.edge_index(), y=graph.y, num_nodes=graph.num_nodes)
    for key in ("train_mask", "val_mask", "test_mask"):
        if getattr(graph, key) is not None:
            data[key] = getattr(graph, key)
    data.name = graph.name
    data.num_classes = graph.num_classes
    return data


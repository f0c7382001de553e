"""The PyG adapter: a :class:`Graph` to and from ``torch_geometric.data.Data``."""

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


def from_pyg(data, name: str | None = None) -> Graph:
    """Build a :class:`Graph` from a PyG ``Data`` (edges as given; no symmetrisation or deduplication).

    Args:
        data: a ``Data`` with ``edge_index`` and optionally ``x``, ``y`` and the three masks.
        name: graph name; default ``data.name`` or ``"pyg"``.
    """
    _pyg_data()
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError("from_pyg: data.edge_index must be a [2, E] tensor")
    y = getattr(data, "y", None)
    if y is not None and y.dim() != 1:
        raise ValueError(f"from_pyg: data.y must be 1-D (one class per node), got shape {tuple(y.shape)}")
    if getattr(data, "num_nodes", None) is None:
        raise ValueError("from_pyg: data.num_nodes is unknown (no x and no num_nodes); set data.num_nodes")
    extra = {k: getattr(data, k, None) for k in ("x", "y", "train_mask", "val_mask", "test_mask")}
    meta = {"source": "pyg"}
    if getattr(data, "num_classes", None) is not None:
        meta["num_classes"] = int(data.num_classes)
    graph = Graph.from_edges(edge_index[0], edge_index[1], int(data.num_nodes),
                             name=name or getattr(data, "name", None) or "pyg", meta=meta, **extra)
    if "num_classes" not in meta and graph.y is not None:
        graph.meta["num_classes"] = graph.num_classes
    return graph

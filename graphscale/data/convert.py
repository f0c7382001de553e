"""In-memory training data as a :class:`Graph`: the ``data`` argument of :func:`graphscale.train`.

:func:`to_graph` accepts

* a graphscale :class:`~graphscale.data.graph.Graph` (checked, used as it is);
* a PyG ``torch_geometric.data.Data``: ``edge_index`` ``[2, E]``, ``x`` ``[N, F]`` (optional: ``features=``
  can generate them), ``y`` (class ids ``[N]`` or ``[N, 1]``, ``-1`` = unlabelled; a 0/1 ``[N, C]`` matrix for
  multi-label data) and a split: bool masks ``train_mask`` / ``val_mask`` / ``test_mask``, or node-id tensors
  ``train_idx`` / ``val_idx`` (or ``valid_idx``) / ``test_idx``;
* an OGB node-property dataset object (``ogb.nodeproppred.PygNodePropPredDataset``, whose ``dataset[0]`` is a
  ``Data``, or ``NodePropPredDataset``, whose ``dataset[0]`` is ``(graph dict, labels)``), its split from
  ``get_idx_split()``.

Edges are taken exactly as the object stores them: a graph PyG (or OGB) stores undirected holds both directions,
a directed one (``ogbn-arxiv``) stays directed, and self-loops and repeated edges are kept, so a model sees the
graph its PyG training loop would. (The ``ogb:DIR`` spec reader, like graphscale's other file readers, symmetrises
instead.) A ``Data``'s ``edge_weight`` (``[E]``, finite) becomes the graph's :attr:`Graph.edge_weight`, which the
convs that take an ``edge_weight`` receive (a weighted graph's repeated edges are refused: coalesce them first).
Edge features are not part of a :class:`Graph`: a ``Data`` that sets ``edge_attr`` is refused naming the field, never
trained without them silently. Float labels (OGB stores them so,
``NaN`` = unlabelled) must hold whole numbers.

Nothing here imports PyG or OGB: objects are recognised by their type's module and by what they hold, so the
conversion costs nothing to a user without them. Bad data is a one-line ``ValueError`` naming the field
(``data.y``, ``dataset[0].edge_index``, ``dataset.get_idx_split()['valid']``) and what was expected.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import replace

import numpy as np
import torch

from graphscale.data.graph import Graph

#: the split attributes a PyG ``Data`` may carry, per split: (mask name, node-id names)
SPLIT_FIELDS = {"train": ("train_mask", ("train_idx",)), "val": ("val_mask", ("val_idx", "valid_idx")),
                "test": ("test_mask", ("test_idx",))}
#: the keys of an OGB ``get_idx_split()`` dictionary, per split
OGB_SPLIT_KEYS = {"train": "train", "val": "valid", "test": "test"}
#: what :func:`to_graph` accepts, for messages
ACCEPTED = ("a dataset spec string, a graphscale Graph, a torch_geometric.data.Data, RandomLinkSplit's (train, val, "
            "test) triple of Data, or an OGB node-property dataset (ogb.nodeproppred.PygNodePropPredDataset / "
            "NodePropPredDataset)")


def kind_of(data) -> str:
    """``graph``, ``pyg`` (a PyG ``Data``), ``ogb`` (an OGB node-property dataset), ``hetero`` (a PyG
    ``HeteroData``) or ``""`` (none of these)."""
    if isinstance(data, Graph):
        return "graph"
    module = type(data).__module__ or ""
    names = {cls.__name__ for cls in type(data).__mro__}
    if module.startswith("torch_geometric") and "HeteroData" in names:
        return "hetero"
    if module.startswith("torch_geometric") and "Data" in names:
        return "pyg"
    if callable(getattr(data, "get_idx_split", None)) and hasattr(data, "__getitem__"):
        return "ogb"
    return ""


def to_graph(data, name: str | None = None) -> Graph:
    """``data`` as a trainable :class:`Graph` (module docstring): its topology, node data and split checked.

    Args:
        data: a :class:`Graph`, a PyG ``Data`` or an OGB node-property dataset object.
        name: the graph's name in reports (default: the object's ``name``, else ``graph`` / ``pyg`` / ``ogb``).

    Raises:
        TypeError: ``data`` is none of these.
        ValueError: a missing or malformed field (one line naming it).
    """
    kind = kind_of(data)
    if kind == "graph":
        return check_graph(data, name)
    if kind == "pyg":
        if getattr(data, "edge_label_index", None) is not None:
            raise ValueError("data.edge_label_index is set: one Data holds one split's link pairs; pass "
                             "RandomLinkSplit's (train, val, test) triple to train link prediction on them")
        return from_data(data, name)
    if kind == "ogb":
        return from_ogb(data, name)
    if kind == "hetero":
        raise ValueError("data: a heterogeneous graph (torch_geometric.data.HeteroData) is not supported; give a "
                         "homogeneous Data (HeteroData.to_homogeneous() keeps the node and edge types as attributes)")
    raise TypeError(f"data: expected {ACCEPTED}; got {type(data).__name__}")


# ------------------------------------------------------------------ fields
def _tensor(value, where: str) -> torch.Tensor:
    """A CPU tensor from a tensor or an array-like (numpy), or a one-line error naming ``where``."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        array = None
    if array is None or array.dtype == object:
        raise ValueError(f"{where} must be a tensor or an array, got {type(value).__name__}")
    return torch.from_numpy(np.ascontiguousarray(array))


def _edges(edge_index, num_nodes: int, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src, dst)`` of an ``[2, E]`` edge index, checked: integer ids in ``[0, num_nodes)``."""
    if edge_index is None:
        raise ValueError(f"{where} is missing: the graph's edges are needed as an [2, E] tensor of (source, "
                         "target) node ids")
    edges = _tensor(edge_index, where)
    if edges.dim() != 2 or edges.shape[0] != 2:
        raise ValueError(f"{where} must be an [2, E] tensor of (source, target) node ids, got shape "
                         f"{list(edges.shape)}")
    if edges.is_floating_point() or edges.dtype == torch.bool or edges.is_complex():
        raise ValueError(f"{where} must hold integer node ids, got dtype {str(edges.dtype).removeprefix('torch.')}")
    edges = edges.to(torch.int64)
    if edges.numel():
        bad = torch.nonzero((edges < 0) | (edges >= num_nodes))
        if bad.numel():
            row, col = (int(v) for v in bad[0])
            raise ValueError(f"{where} holds node id {int(edges[row, col])} as the {('source', 'target')[row]} of "
                             f"edge {col}, outside [0, {num_nodes}) for a graph of {num_nodes} nodes")
    return edges[0].contiguous(), edges[1].contiguous()


def _features(x, num_nodes: int, where: str) -> torch.Tensor | None:
    """Node features ``[N, F]``: float64 kept, other floats (and integers) as float32; ``None`` stays."""
    if x is None:
        return None
    x = _tensor(x, where)
    if x.dim() == 1:
        x = x.unsqueeze(1)
    if x.dim() != 2:
        raise ValueError(f"{where} must be an [N, F] feature matrix, got shape {list(x.shape)}")
    if x.shape[0] != num_nodes:
        raise ValueError(f"{where} has {x.shape[0]} rows but the graph has {num_nodes} nodes")
    if x.shape[1] == 0:
        raise ValueError(f"{where} has no columns; leave it out and give features= (degree, onehot, random:D, "
                         "learnable:D) to train on the structure")
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(f"{where} must hold numbers, got dtype {str(x.dtype).removeprefix('torch.')}")
    return x.contiguous() if x.dtype == torch.float64 else x.to(torch.float32).contiguous()


def _whole(values: torch.Tensor, where: str) -> torch.Tensor:
    """Float labels as int64 (``NaN`` -> ``-1``), refusing fractions."""
    if not values.is_floating_point():
        return values.to(torch.int64)
    nan = torch.isnan(values)
    filled = torch.where(nan, torch.full_like(values, -1), values)
    if bool((filled != torch.round(filled)).any()) or bool(torch.isinf(filled).any()):
        raise ValueError(f"{where} must hold whole class ids (NaN or -1 = unlabelled), got fractional or infinite "
                         "values; regression targets are not supported")
    return filled.to(torch.int64)


def _labels(y, num_nodes: int, where: str) -> torch.Tensor:
    """Class ids int64 ``[N]`` (``-1`` = unlabelled) from ``[N]`` / ``[N, 1]``, or a uint8 0/1 ``[N, C]`` matrix."""
    if y is None:
        raise ValueError(f"{where} is missing: node classification needs labels (class ids [N], -1 = unlabelled, "
                         "or a 0/1 [N, C] multi-label matrix)")
    y = _tensor(y, where)
    if y.dtype == torch.bool:
        y = y.to(torch.uint8) if y.dim() == 2 else y.to(torch.int64)
    if y.dim() == 0 or y.dim() > 2 or y.is_complex():
        raise ValueError(f"{where} must be class ids [N] (or [N, 1]) or a 0/1 [N, C] multi-label matrix, got shape "
                         f"{list(y.shape)}")
    if y.shape[0] != num_nodes:
        raise ValueError(f"{where} has {y.shape[0]} rows but the graph has {num_nodes} nodes")
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dim() == 1:
        y = _whole(y, where)
        if y.numel() and int(y.min()) < -1:
            bad = int(torch.nonzero(y < -1)[0])
            raise ValueError(f"{where}[{bad}] is {int(y[bad])}: class ids must be >= 0 (-1 = unlabelled)")
        return y.contiguous()
    if y.is_floating_point() and bool(torch.isnan(y).any()):
        raise ValueError(f"{where} is a multi-label matrix holding NaN; it must hold only 0 and 1")
    if bool(((y != 0) & (y != 1)).any()):
        raise ValueError(f"{where} has shape {list(y.shape)}: a multi-label matrix must hold only 0 and 1 (class "
                         "ids belong in an [N] tensor)")
    return y.to(torch.uint8).contiguous()


def _mask(value, num_nodes: int, where: str) -> torch.Tensor:
    mask = _tensor(value, where)
    if mask.dim() == 2 and mask.shape[0] == num_nodes and mask.shape[1] > 1:
        raise ValueError(f"{where} has shape {list(mask.shape)}: one column per split; choose one, e.g. "
                         f"{where.rpartition('.')[2]} = {where.rpartition('.')[2]}[:, 0]")
    if mask.dtype != torch.bool or mask.dim() != 1:
        raise ValueError(f"{where} must be a bool [N] mask, got dtype {str(mask.dtype).removeprefix('torch.')} "
                         f"and shape {list(mask.shape)}")
    if mask.shape[0] != num_nodes:
        raise ValueError(f"{where} has {mask.shape[0]} entries but the graph has {num_nodes} nodes")
    return mask.contiguous()


def _index_mask(value, num_nodes: int, where: str) -> torch.Tensor:
    """A bool ``[N]`` mask from node ids (integer ``[K]``), checked in range."""
    index = _tensor(value, where)
    if index.dtype == torch.bool:
        return _mask(index, num_nodes, where)
    if index.is_floating_point() or index.dim() != 1:
        raise ValueError(f"{where} must be node ids (an integer [K] tensor), got dtype "
                         f"{str(index.dtype).removeprefix('torch.')} and shape {list(index.shape)}")
    index = index.to(torch.int64)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= num_nodes):
        bad = int(index[(index < 0) | (index >= num_nodes)][0])
        raise ValueError(f"{where} holds node id {bad}, outside [0, {num_nodes})")
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[index] = True
    return mask


def _split(masks: dict[str, torch.Tensor | None], where: str, hint: str) -> dict[str, torch.Tensor]:
    """The three masks (a missing val / test split is an empty mask), the training one present and not empty."""
    train = masks.get("train")
    if train is None or not bool(train.any()):
        state = "is empty" if train is not None else "is missing"
        raise ValueError(f"{where}: the training split {state}; {hint}")
    num_nodes = train.shape[0]
    return {f"{split}_mask": masks.get(split) if masks.get(split) is not None
            else torch.zeros(num_nodes, dtype=torch.bool) for split in SPLIT_FIELDS}


def _assemble(src, dst, num_nodes: int, *, x, y, masks: dict, name: str, num_classes: int | None,
              source: str, edge_weight: torch.Tensor | None = None) -> Graph:
    meta = {"source": source}
    if num_classes is not None:
        meta["num_classes"] = int(num_classes)
    graph = Graph.from_edges(src, dst, num_nodes, edge_weight, x=x, y=y, name=name, meta=meta, **masks)
    if "num_classes" not in graph.meta:
        graph.meta["num_classes"] = graph.num_classes
    return graph


def _num_classes(y: torch.Tensor, declared, where: str) -> int:
    """The class count: ``declared`` (checked to cover the labels), else the labels' maximum + 1."""
    found = int(y.shape[1]) if y.dim() == 2 else int(y.max()) + 1 if y.numel() else 0
    if declared is None:
        return found
    declared = int(declared)
    if y.dim() == 1 and found > declared:
        raise ValueError(f"{where} holds class id {found - 1}, but num_classes is {declared}")
    if y.dim() == 2 and found != declared:
        raise ValueError(f"{where} has {found} label columns, but num_classes is {declared}")
    return declared


def _num_nodes(data, where: str) -> int:
    """``data.num_nodes`` (PyG infers it from ``x``, else from the edges)."""
    n = getattr(data, "num_nodes", None)
    if n is None:
        raise ValueError(f"{where}.num_nodes is unknown (no x and no edges); set {where}.num_nodes")
    return int(n)


# ------------------------------------------------------------------ kinds
def check_graph(graph: Graph, name: str | None = None) -> Graph:
    """A graphscale :class:`Graph` checked to be trainable: labels, a non-empty training split, ids in range."""
    where = "data (a Graph)"
    n = graph.num_nodes
    if graph.num_edges and (int(graph.indices.min()) < 0 or int(graph.indices.max()) >= n):
        raise ValueError(f"{where}: Graph.indices holds node ids outside [0, {n})")
    y = _labels(graph.y, n, "Graph.y")
    masks = {split: None if getattr(graph, mask) is None else _mask(getattr(graph, mask), n, f"Graph.{mask}")
             for split, (mask, _) in SPLIT_FIELDS.items()}
    _num_classes(y, graph.meta.get("num_classes"), "Graph.y")
    full = {}  # a multi-label graph without a split gets the seeded one (datasets.with_training_split)
    if not (graph.multilabel and all(m is None for m in masks.values())):
        full = _split(masks, where, "set Graph.train_mask (bool [N])")  # a missing val / test split: empty
    return replace(graph, name=graph.name if name is None else name, meta=dict(graph.meta), **full)


def _data_split(data, num_nodes: int, where: str) -> dict[str, torch.Tensor | None]:
    """The masks of a ``Data``'s ``*_mask`` or ``*_idx`` attributes (one form per split)."""
    masks: dict[str, torch.Tensor | None] = {}
    for split, (mask_name, index_names) in SPLIT_FIELDS.items():
        given = [n for n in (mask_name, *index_names) if getattr(data, n, None) is not None]
        if len(given) > 1:
            raise ValueError(f"{where} has both {where}.{given[0]} and {where}.{given[1]}; keep one form of the "
                             f"{split} split")
        if not given:
            masks[split] = None
        elif given[0] == mask_name:
            masks[split] = _mask(getattr(data, mask_name), num_nodes, f"{where}.{mask_name}")
        else:
            masks[split] = _index_mask(getattr(data, given[0]), num_nodes, f"{where}.{given[0]}")
    return masks


def from_data(data, name: str | None = None, where: str = "data", split: dict | None = None,
              num_classes=None, source: str = "pyg") -> Graph:
    """A PyG ``Data`` as a :class:`Graph` (module docstring).

    Args:
        data: the ``Data``.
        name: the graph's name (default ``data.name``, else ``pyg``).
        where: how messages name ``data`` (``dataset[0]`` for an OGB dataset's graph).
        split: masks given from elsewhere (an OGB ``get_idx_split()``); then the ``Data``'s own are not read.
        num_classes: the class count when known (else ``data.num_classes`` when set, else the labels').
        source: what the graph's ``meta['source']`` records.
    """
    n = _num_nodes(data, where)
    _refuse_edge_inputs(data, where)
    x = _features(getattr(data, "x", None), n, f"{where}.x")
    src, dst = _edges(getattr(data, "edge_index", None), n, f"{where}.edge_index")
    weight = _edge_weight(getattr(data, "edge_weight", None), src, dst, n, where)
    _warn_self_loops(src, dst, where)
    y = _labels(getattr(data, "y", None), n, f"{where}.y")
    masks = split if split is not None else _data_split(data, n, where)
    if y.dim() == 2 and all(m is None for m in masks.values()):
        full = {}  # multi-label without a split: the seeded one (datasets.with_training_split)
    else:
        full = _split(masks, where, f"set {where}.train_mask (bool [N]) or {where}.train_idx (node ids)"
                      if split is None else "the split has no training nodes")
    declared = num_classes if num_classes is not None else getattr(data, "num_classes", None)
    label = name or getattr(data, "name", None) or "pyg"
    return _assemble(src, dst, n, x=x, y=y, masks=full, name=str(label),
                     num_classes=_num_classes(y, declared, f"{where}.y"), source=source, edge_weight=weight)


def _edge_weight(value, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, where: str) -> torch.Tensor | None:
    """A ``Data``'s ``edge_weight``, checked: ``[E]`` finite floats, and no edge repeated (a partition keeps one
    copy of a repeated edge, so its weights would be ambiguous)."""
    if value is None:
        return None
    w = _tensor(value, f"{where}.edge_weight")
    if w.shape != src.shape or w.dtype == torch.bool or w.is_complex():
        raise ValueError(f"{where}.edge_weight must be a [{src.numel()}] tensor of numbers (one weight per edge of "
                         f"{where}.edge_index), got {str(w.dtype).removeprefix('torch.')} {list(w.shape)}")
    w = w.to(torch.float64)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{where}.edge_weight holds a non-finite value (NaN or inf)")
    key = dst * max(num_nodes, 1) + src
    if torch.unique(key).numel() != key.numel():
        raise ValueError(f"{where}.edge_index repeats an edge while {where}.edge_weight is set; coalesce the edges "
                         "first (torch_geometric.utils.coalesce(edge_index, edge_weight))")
    return w


def _warn_self_loops(src: torch.Tensor, dst: torch.Tensor, where: str) -> None:
    """A ``Data``'s self-loops are kept as edges, as every other edge is (convs that aggregate over ``edge_index``
    as given, such as ``SAGEConv``, ``GINConv`` and ``GraphConv``, see them as PyG's do); but ``GCNConv`` and
    ``GATConv`` add one self-loop per vertex on top of them, where PyG's ignore (``GATConv``) or keep instead of
    adding (``GCNConv``) the ones already there: a warning says so and how to agree."""
    count = int((src == dst).sum())
    if count:
        warnings.warn(f"{where}.edge_index holds {count} self-loop(s), kept as edges: GCNConv and GATConv add one "
                      "self-loop per vertex on top of them (PyG's do not), so their outputs differ from PyG's own "
                      "calls; remove them first (torch_geometric.utils.remove_self_loops) for those convs to agree",
                      UserWarning, stacklevel=3)


#: a ``Data``'s per-edge inputs, which a :class:`Graph` does not hold: refused rather than dropped
EDGE_FIELDS = {"edge_attr": "edge features (a conv's edge_attr)"}


def _refuse_edge_inputs(data, where: str) -> None:
    """A ``Data`` with ``edge_attr``: one line naming the field. graphscale's strategies give a conv ``x``, its
    block's edges and their ``edge_weight`` only, so training would silently differ from the user's loop that
    passes edge features."""
    for field, what in EDGE_FIELDS.items():
        if getattr(data, field, None) is not None:
            raise ValueError(f"{where}.{field} is set, but graphscale trains on the graph's edges without "
                             f"{what}: every strategy calls a conv with x, edge_index and edge_weight only; "
                             f"delete it (del {where}.{field}) to train without them, or keep training with "
                             "your own loop")


def _ogb_split(dataset, num_nodes: int) -> dict[str, torch.Tensor]:
    where = "dataset.get_idx_split()"
    split = dataset.get_idx_split()
    if not isinstance(split, dict):
        raise ValueError(f"{where} must return a dict with keys train, valid, test; got {type(split).__name__}")  # noqa: TRY004
    masks = {}
    for ours, key in OGB_SPLIT_KEYS.items():
        value = split.get(key)
        if isinstance(value, dict):
            raise ValueError(  # noqa: TRY004 - a bad value of the dataset, reported like the others
                f"{where}['{key}'] is a dict per node type: heterogeneous OGB datasets (ogbn-mag) are not supported")
        masks[ours] = None if value is None else _index_mask(value, num_nodes, f"{where}['{key}']")
    return masks


def from_ogb(dataset, name: str | None = None) -> Graph:
    """An OGB node-property dataset object as a :class:`Graph`: its one graph, labels and ``get_idx_split()``."""
    if len(dataset) != 1:
        raise ValueError(f"dataset holds {len(dataset)} graphs; an OGB node-property dataset holds one")
    item = dataset[0]
    label = name or getattr(dataset, "name", None) or "ogb"
    tasks = int(getattr(dataset, "num_tasks", 1) or 1)  # several binary tasks (ogbn-proteins): multi-label columns
    declared = getattr(dataset, "num_classes", None) if tasks == 1 else tasks
    if kind_of(item) == "pyg":  # PygNodePropPredDataset
        return from_data(item, label, "dataset[0]", _ogb_split(dataset, _num_nodes(item, "dataset[0]")), declared,
                         source="ogb")
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], dict)):
        raise ValueError("dataset[0] must be a torch_geometric Data (PygNodePropPredDataset) or a (graph dict, "
                         f"labels) pair (NodePropPredDataset), got {type(item).__name__}")
    graph, labels = item
    where = "dataset[0][0]"
    if graph.get("num_nodes") is None:
        raise ValueError(f"{where}['num_nodes'] is missing")
    n = int(graph["num_nodes"])
    if graph.get("edge_feat") is not None:
        raise ValueError(f"{where}['edge_feat'] is set, but graphscale trains on the graph's edges without "
                         f"{EDGE_FIELDS['edge_attr']}: every strategy calls a conv with x, edge_index and edge_weight "
                         "only; set it "
                         "to None to train on the graph without them, or keep training with your own loop")
    x = _features(graph.get("node_feat"), n, f"{where}['node_feat']")
    src, dst = _edges(graph.get("edge_index"), n, f"{where}['edge_index']")
    y = _labels(labels, n, "dataset[0][1] (the labels)")
    masks = _ogb_split(dataset, n)
    full = _split(masks, "dataset.get_idx_split()", "the split has no training nodes")
    return _assemble(src, dst, n, x=x, y=y, masks=full, name=str(label),
                     num_classes=_num_classes(y, declared, "dataset[0][1] (the labels)"), source="ogb")


# ------------------------------------------------------------------ identity
def graph_digest(graph: Graph) -> str:
    """A content hash (SHA-256, hex) of ``graph``: topology, node data, name and class count; equal graphs, equal
    digests (how a run finds the graph directory it wrote for the same data before)."""
    h = hashlib.sha256()
    h.update(f"{graph.name}\0{graph.num_nodes}\0{graph.num_classes}\0".encode())
    keys = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")
    for key in keys + (("edge_weight",) if graph.weighted else ()):  # (an unweighted graph's digest as before)
        value = getattr(graph, key)
        h.update(key.encode())
        if value is None:
            h.update(b"\0none")
            continue
        array = np.ascontiguousarray(value.numpy())
        h.update(f"{array.dtype.str}{array.shape}".encode())
        if array.size:  # (a zero-size view cannot be cast)
            h.update(memoryview(array).cast("B"))
    return h.hexdigest()

"""A given link split's inputs (:mod:`graphscale.data.link_pairs`): PyG ``RandomLinkSplit``'s ``(train, val,
test)`` triple as a graph carrying its pairs, and the pairs a graph carries, read and checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data.convert import from_data, kind_of
from graphscale.data.link_pairs import PAIRS_KEY, REFERENCE_KEY, SPLITS, check_ids, check_pairs
from graphscale.data.readers.ogbl import read_ogbl_split


def load_pairs(meta: dict, num_nodes: int) -> dict:
    """The given pairs of a graph with ``meta`` (module docstring), checked against ``num_nodes``.

    Raises:
        ValueError: a malformed reference or pairs (one line naming the file or field).
        FileNotFoundError: a missing file.
    """
    if PAIRS_KEY in meta:
        return check_pairs(meta[PAIRS_KEY], num_nodes, "link pairs")
    reference = str(meta[REFERENCE_KEY])
    kind, _, rest = reference.partition(":")
    if kind == "npz":
        file = Path(rest)
        if not file.is_file():
            raise FileNotFoundError(f"{file} does not exist; expected the graph's link split (.npz, meta link_split)")
        with np.load(file) as archive:
            pairs: dict = {}
            for name in archive.files:
                split, _, key = name.partition(".")
                pairs.setdefault(split, {})[key] = torch.from_numpy(archive[name])
        return check_pairs(pairs, num_nodes, str(file))
    if kind == "ogbl":
        folder, _, split = rest.rpartition(":")
        return check_pairs(read_ogbl_split(Path(folder), split), num_nodes, f"{folder}/split/{split}")
    raise ValueError(f"graph meta link_split {reference!r}: expected npz:FILE or ogbl:DIR:SPLIT")


def from_link_data(datas, name: str | None = None):
    """A graph from the ``(train, val, test)`` ``Data`` triple of ``torch_geometric.transforms.RandomLinkSplit``:
    the training ``Data``'s graph (its ``edge_index``: the message-passing edges, node data as
    :func:`graphscale.data.convert.from_data` reads it) carrying each ``Data``'s ``edge_label_index`` /
    ``edge_label`` pairs (label 1: positives; label 0: the validation and test negatives; the training
    negatives are dropped: a run draws its own keyed ones every epoch) in ``meta["link_pairs"]``.

    Raises:
        ValueError: one line naming the field: a triple of other lengths or kinds, a missing or malformed
            ``edge_label_index`` / ``edge_label``, ids out of range, labels other than 0 and 1.
    """
    datas = list(datas)
    if len(datas) != 3 or any(kind_of(d) != "pyg" for d in datas):
        raise ValueError(f"data: expected RandomLinkSplit's (train, val, test) triple of torch_geometric Data, got "
                         f"{len(datas)} items ({', '.join(type(d).__name__ for d in datas)})")
    graph = from_data(datas[0], name, "data[0]")
    pairs = {}
    for i, split in enumerate(SPLITS):
        where = f"data[{i}]"
        index, label = getattr(datas[i], "edge_label_index", None), getattr(datas[i], "edge_label", None)
        if index is None:
            raise ValueError(f"{where}.edge_label_index is missing: the {split} pairs are needed as an [2, P] tensor "
                             "(what RandomLinkSplit gives)")
        index = torch.as_tensor(index).detach().cpu()
        if index.dim() != 2 or index.shape[0] != 2:
            raise ValueError(f"{where}.edge_label_index must be an [2, P] tensor of (source, target) node ids, got "
                             f"shape {list(index.shape)}")
        index = check_ids(index, graph.num_nodes, f"{where}.edge_label_index")
        if label is None:
            label = torch.ones(index.shape[1])
        label = torch.as_tensor(label).detach().cpu()
        if label.shape != (index.shape[1],):
            raise ValueError(f"{where}.edge_label must be a [{index.shape[1]}] tensor (one label per pair of "
                             f"{where}.edge_label_index), got shape {list(label.shape)}")
        if not bool(((label == 0) | (label == 1)).all()):
            raise ValueError(f"{where}.edge_label must hold 0 (negative) and 1 (positive) only, got values "
                             f"{sorted(set(label.unique().tolist()))[:5]}")
        pairs[split] = {"pos": index[:, label == 1]}
        if split != "train" and bool((label == 0).any()):
            pairs[split]["neg"] = index[:, label == 0]
    graph.meta[PAIRS_KEY] = check_pairs(pairs, graph.num_nodes, "data (edge_label_index)")
    graph.meta["source"] = "pyg RandomLinkSplit"
    return graph

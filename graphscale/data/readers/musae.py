"""The MUSAE reader (Rozemberczki et al.: Facebook page-page, Twitch, ...; seeded per-class split)."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, require
from graphscale.data.readers.labels import class_ids, is_int, per_class_split
from graphscale.data.readers.text import read_int_pairs

# The label columns of the MUSAE sets (Facebook, GitHub, Wikipedia / Deezer / LastFM, Twitch), and the node
# id columns: Twitch's target files hold the original Twitch id as 'id' and the graph's id as 'new_id'.
MUSAE_LABEL_COLUMNS = ("page_type", "ml_target", "target", "mature")
MUSAE_ID_COLUMNS = ("new_id", "id")


def _musae_prefix(folder: Path) -> str:
    if not folder.is_dir():
        raise FileNotFoundError(f"MUSAE directory {folder} does not exist; expected NAME_edges.csv, NAME_target.csv "
                                "and optionally NAME.json or NAME_features.json in it")
    found = sorted(p.name[: -len("_edges.csv")] for p in folder.glob("*_edges.csv"))
    if len(found) != 1:
        raise ValueError(f"{folder} holds {len(found)} MUSAE edge files ({[f + '_edges.csv' for f in found]}); "
                         "a musae:DIR needs exactly one NAME_edges.csv with NAME_target.csv")
    return found[0]


def _musae_columns(path: Path, header: list[str], label: str | None, folder: Path) -> tuple[str, str]:
    """``(id column, label column)`` of a MUSAE target file: ``new_id`` over ``id``; the label ``label``, else
    the one known label column (:data:`MUSAE_LABEL_COLUMNS`), else the one column that is not an id."""
    ids = [c for c in MUSAE_ID_COLUMNS if c in header]
    if not ids:
        raise ValueError(f"{path}: header {header} has no node id column ('new_id' or 'id')")
    if label is not None:
        if label not in header or label == ids[0]:
            raise ValueError(f"{path} has no label column {label!r}; its columns are {header}")
        return ids[0], label
    known = [c for c in header if c in MUSAE_LABEL_COLUMNS]
    others = [c for c in header if c not in MUSAE_ID_COLUMNS and not c.endswith("_id")]
    if len(known) == 1 or (not known and len(others) == 1):
        return ids[0], (known or others)[0]
    raise ValueError(f"{path}: cannot tell which of the columns {header} is the label (none or several of "
                     f"{list(MUSAE_LABEL_COLUMNS)}); name it as musae:{folder}:label=COLUMN")


def _musae_targets(path: Path, label: str | None, folder: Path) -> tuple[np.ndarray, list[str], str, str]:
    """``(node ids, label strings, label column, id column)`` from a MUSAE ``*_target.csv``."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty; expected a header with an id column ('new_id' or 'id') and a "
                             "label column")
        header = [h.strip() for h in header]
        id_name, column = _musae_columns(path, header, label, folder)
        id_col, label_col = header.index(id_name), header.index(column)
        ids, values = [], []
        for row in reader:
            if not row:
                continue
            if len(row) <= max(id_col, label_col):
                raise ValueError(f"{path}, line {reader.line_num}: expected {len(header)} fields, got {len(row)}")
            ids.append(row[id_col])
            values.append(row[label_col].strip())
    try:
        node_ids = np.array(ids, dtype=np.int64)
    except ValueError:
        bad = next(i for i, v in enumerate(ids) if not is_int(v))
        raise ValueError(f"{path}: row {bad + 1}: node id {ids[bad]!r} (column {id_name!r}) is not an integer") \
            from None
    return node_ids, values, column, id_name


def _musae_features(path: Path, n: int) -> np.ndarray:
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    try:
        if not isinstance(table, dict):
            raise TypeError(f"the top level is a JSON {type(table).__name__}")
        nodes = np.fromiter((int(k) for k in table), np.int64, len(table))
        lengths = np.fromiter((len(v) for v in table.values()), np.int64, len(table))
        feats = np.fromiter(itertools.chain.from_iterable(table.values()), np.int64, int(lengths.sum()))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: expected an object mapping integer node ids to lists of integer feature ids "
                         f"({err})") from None
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
        raise ValueError(f"{path} has features for node {int(nodes.max() if nodes.max() >= n else nodes.min())}, "
                         f"outside the {n} nodes of the target file")
    if feats.size and feats.min() < 0:
        raise ValueError(f"{path} has a negative feature id {int(feats.min())}")
    x = np.zeros((n, int(feats.max(initial=-1)) + 1), dtype=np.float32)
    x[np.repeat(nodes, lengths), feats] = 1.0
    return x


def read_musae(folder: str | Path, seed: int = 0, label: str | None = None) -> Graph:
    """Read a MUSAE dataset (Rozemberczki et al.; e.g. the Facebook page-page network, Twitch) with a seeded split.

    ``folder`` holds ``NAME_edges.csv`` (header such as ``id_1,id_2`` or ``from,to``, undirected),
    ``NAME_target.csv`` and optionally the features, ``NAME.json`` (MUSAE repository) or
    ``NAME_features.json`` (SNAP): node id -> list of active feature ids. Node ids are the target file's
    ``new_id`` column when it has one (Twitch: ``id`` is then the original Twitch id), else its ``id``
    column. The label column is ``label`` when given, else the one of ``page_type``, ``ml_target``,
    ``target``, ``mature`` present, else the one column that is not an id (``id``, ``new_id``, ``*_id``);
    when that does not decide it the error lists the columns. Features are the dense binary bag of
    features (float32 [N, max feature id + 1]); without a features file there are none. Labels are the
    label values in sorted order (numbers sorted as numbers; the names in ``meta['class_names']``). MUSAE
    sets come without a standard split, so the split is :func:`per_class_split` with ``seed``: 20 nodes
    per class train, 30 val, the rest test.
    """
    folder = Path(folder)
    prefix = _musae_prefix(folder)
    edges_file = folder / f"{prefix}_edges.csv"
    target_file = require(folder / f"{prefix}_target.csv", f"the MUSAE labels ({prefix}_target.csv)")
    features_file = next((f for f in (folder / f"{prefix}.json", folder / f"{prefix}_features.json") if f.exists()),
                         None)
    node_ids, values, column, id_column = _musae_targets(target_file, label, folder)
    n = node_ids.size
    if n == 0 or not np.array_equal(np.sort(node_ids), np.arange(n)):
        raise ValueError(f"{target_file}: the {id_column!r} column must list every node 0..N-1 exactly once "
                         f"({n} rows, ids {int(node_ids.min(initial=0))}..{int(node_ids.max(initial=-1))})")
    classes, class_names = class_ids(values)
    y = np.empty(n, dtype=np.int64)
    y[node_ids] = classes
    edges = read_int_pairs(edges_file, "node ids")
    if edges.size and edges.max() >= n:
        raise ValueError(f"{edges_file} names node {int(edges.max())} but {target_file} has only {n} nodes")
    x = None if features_file is None else _musae_features(features_file, n)
    options = f"{seed}" if label is None else f"label={label},seed={seed}"
    graph = build_graph(edges[:, 0], edges[:, 1], n, x=x, y=y, masks=per_class_split(y, seed), name=prefix,
                   num_classes=len(class_names), source=f"musae:{folder.resolve()}:{options}")
    graph.meta["class_names"] = class_names
    graph.meta["label_column"] = column
    return graph



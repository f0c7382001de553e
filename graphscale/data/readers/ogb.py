"""The offline OGB node-property reader (``raw/*.csv.gz`` and ``split/SPLIT/*.csv.gz``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, index_mask, require

OGB_SPLITS = ("train", "valid", "test")


def read_csv_gz(path: Path, dtype, *, use_pandas: bool = True) -> np.ndarray:
    """Read a headerless ``.csv.gz`` into a 2-D array (pandas' C parser when available)."""
    try:
        if use_pandas:
            try:
                import pandas as pd
            except ImportError:
                use_pandas = False
        if use_pandas:
            try:
                return pd.read_csv(path, header=None, compression="gzip").to_numpy(dtype=dtype)
            except pd.errors.EmptyDataError:
                return np.empty((0, 0), dtype=dtype)
        with gzip.open(path, "rt") as f:
            text = f.read()
        if not text.strip():
            return np.empty((0, 0), dtype=dtype)
        return np.loadtxt(text.splitlines(), delimiter=",", dtype=dtype, ndmin=2)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"{path}: cannot read as a comma-separated .csv.gz of numbers: {err}") from None


def _ogb_root(folder: Path) -> Path:
    if not folder.is_dir():
        raise FileNotFoundError(f"OGB directory {folder} does not exist; expected a dataset root holding "
                                "raw/edge.csv.gz, raw/node-label.csv.gz and split/NAME/{train,valid,test}.csv.gz")
    if (folder / "raw").is_dir():
        return folder
    found = [d for d in sorted(folder.iterdir()) if (d / "raw").is_dir()]
    if len(found) != 1:
        raise FileNotFoundError(f"{folder} has no raw/ directory and {len(found)} sub-directories with one "
                                f"({[d.name for d in found]}); point ogb:DIR at a dataset root holding raw/ and split/")
    return found[0]


def read_ogb(folder: str | Path, split: str | None = None) -> Graph:
    """Read an OGB node-property-prediction dataset from its downloaded files, offline.

    Reads ``raw/edge.csv.gz`` (``src,dst`` rows), ``raw/node-label.csv.gz`` (one
    label per row; NaN = unlabelled), optional ``raw/node-feat.csv.gz`` and
    ``raw/num-node-list.csv.gz``, and ``split/SPLIT/{train,valid,test}.csv.gz``.
    Directed sources (e.g. arxiv) are symmetrised.

    Args:
        folder: the dataset root (``.../ogbn_arxiv``), or a folder holding exactly one dataset root.
        split: name of the split directory; default the only one under ``split/``.
    """
    root = _ogb_root(Path(folder))
    raw = root / "raw"
    edges = read_csv_gz(require(raw / "edge.csv.gz", "OGB edges (src,dst rows)"), np.int64)
    labels = read_csv_gz(require(raw / "node-label.csv.gz", "OGB node labels (one per row)"), np.float64)
    if edges.size and edges.shape[1] != 2:
        raise ValueError(f"{raw / 'edge.csv.gz'}: expected 2 columns (src,dst), got {edges.shape[1]}")
    if labels.ndim != 2 or labels.shape[1] != 1:
        raise ValueError(f"{raw / 'node-label.csv.gz'}: expected one label column, got shape {labels.shape}; "
                         "multi-label datasets are not supported")
    feats = read_csv_gz(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").exists() else None
    if (raw / "num-node-list.csv.gz").exists():
        n = int(read_csv_gz(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
    else:
        n = labels.shape[0]
    edges = edges.reshape(-1, 2)
    for file, rows in (("node-label.csv.gz", labels.shape[0]), ("node-feat.csv.gz", None if feats is None else
                                                                 feats.shape[0])):
        if rows is not None and rows != n:
            raise ValueError(f"{raw / file} has {rows} rows but the graph has {n} nodes")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"{raw / 'edge.csv.gz'} has node ids outside [0, {n})")
    y = np.where(np.isnan(labels[:, 0]), -1, np.nan_to_num(labels[:, 0])).astype(np.int64)
    splits = sorted(d.name for d in (root / "split").iterdir() if d.is_dir()) if (root / "split").is_dir() else []
    if split is None:
        if len(splits) != 1:
            raise FileNotFoundError(f"{root / 'split'} holds splits {splits or 'none'}; expected exactly one "
                                    "split/NAME/{train,valid,test}.csv.gz or name one as ogb:DIR:SPLIT")
        split = splits[0]
    masks = {}
    for part, key in zip(OGB_SPLITS, ("train_mask", "val_mask", "test_mask")):
        file = require(root / "split" / split / f"{part}.csv.gz", f"OGB split indices (splits found: {splits})")
        index = read_csv_gz(file, np.int64).reshape(-1)
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"{file} has node ids outside [0, {n})")
        masks[key] = index_mask(index, n)
    name = root.name.replace("_", "-")
    return build_graph(edges[:, 0], edges[:, 1], n, x=feats, y=y, masks=masks, name=name,
                  num_classes=int(y.max(initial=-1)) + 1, source=f"ogb:{root.resolve()}:{split}")


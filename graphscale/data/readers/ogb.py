"""The offline OGB node-property reader (``raw/*.csv.gz`` and ``split/SPLIT/*.csv.gz``)."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, index_mask, require

OGB_SPLITS = ("train", "valid", "test")


def _pandas(use_pandas: bool):
    """The pandas module when asked for and installed (its C parser reads ``.csv.gz`` fast), else ``None``."""
    if not use_pandas:
        return None
    try:
        import pandas as pd
    except ImportError:
        return None
    return pd


def read_csv_gz(path: Path, dtype, *, use_pandas: bool = True) -> np.ndarray:
    """Read a headerless ``.csv.gz`` into a 2-D array (pandas' C parser when available)."""
    try:
        pd = _pandas(use_pandas)
        if pd is not None:
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


def iter_csv_gz(path: Path, dtype, rows: int, *, use_pandas: bool = True) -> Iterator[np.ndarray]:
    """:func:`read_csv_gz` in chunks of ``rows`` rows (2-D arrays; nothing for an empty file), one in memory at a
    time; the same values and errors as the whole read."""
    try:
        pd = _pandas(use_pandas)
        if pd is not None:
            try:
                reader = pd.read_csv(path, header=None, compression="gzip", chunksize=rows)
            except pd.errors.EmptyDataError:
                return
            with reader:
                for frame in reader:
                    yield frame.to_numpy(dtype=dtype)
            return
        with gzip.open(path, "rt") as f:
            while lines := list(itertools.islice(f, rows)):
                if any(line.strip() for line in lines):
                    yield np.loadtxt(lines, delimiter=",", dtype=dtype, ndmin=2)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"{path}: cannot read as a comma-separated .csv.gz of numbers: {err}") from None


def ogb_root(folder: Path) -> Path:
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
    root = ogb_root(Path(folder))
    raw = root / "raw"
    n, y, masks, split = ogb_node_data(root, split)
    edges = read_csv_gz(require(raw / "edge.csv.gz", "OGB edges (src,dst rows)"), np.int64)
    if edges.size and edges.shape[1] != 2:
        raise ValueError(f"{raw / 'edge.csv.gz'}: expected 2 columns (src,dst), got {edges.shape[1]}")
    feats = read_csv_gz(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").exists() else None
    if feats is not None and feats.shape[0] != n:
        raise ValueError(f"{raw / 'node-feat.csv.gz'} has {feats.shape[0]} rows but the graph has {n} nodes")
    edges = edges.reshape(-1, 2)
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"{raw / 'edge.csv.gz'} has node ids outside [0, {n})")
    return build_graph(edges[:, 0], edges[:, 1], n, x=feats, y=y, masks=masks, name=ogb_name(root),
                       num_classes=int(y.max(initial=-1)) + 1, source=f"ogb:{root.resolve()}:{split}")


def ogb_name(root: Path) -> str:
    """The graph name of the OGB dataset at ``root`` (``ogbn_arxiv`` -> ``ogbn-arxiv``)."""
    return root.name.replace("_", "-")


def ogb_node_data(root: Path, split: str | None) -> tuple[int, np.ndarray, dict, str]:
    """``(nodes, labels, split masks, split name)`` of the OGB dataset at ``root``: O(nodes), the edges and features
    are not read. The node count is ``raw/num-node-list.csv.gz``'s, else the label count."""
    raw = root / "raw"
    labels = read_csv_gz(require(raw / "node-label.csv.gz", "OGB node labels (one per row)"), np.float64)
    if labels.ndim != 2 or labels.shape[1] != 1:
        raise ValueError(f"{raw / 'node-label.csv.gz'}: expected one label column, got shape {labels.shape}; "
                         "multi-label datasets are not supported")
    if (raw / "num-node-list.csv.gz").exists():
        n = int(read_csv_gz(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
    else:
        n = labels.shape[0]
    if labels.shape[0] != n:
        raise ValueError(f"{raw / 'node-label.csv.gz'} has {labels.shape[0]} rows but the graph has {n} nodes")
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
    return n, y, masks, split

"""Datasets by spec string: bundled Cora, Planetoid / npz / OGB directory readers, text edge lists,
MUSAE datasets, graph directories, synthetic graphs, and the PyG ``Data`` adapter.

:func:`load_dataset` accepts the forms in :data:`DATASET_HELP`. Every reader
returns a :class:`Graph` that is symmetric, coalesced and free of self-loops
(sources are treated as undirected, as GNN training on them usually does),
with float32 ``x``, int64 ``y`` (``-1`` = unlabelled), bool masks,
``meta['num_classes']`` and ``meta['source']`` (where it came from). Nothing
is downloaded: every reader works on files already on disk.
"""

from __future__ import annotations

import builtins
import codecs
import collections
import copyreg
import csv
import gzip
import itertools
import json
import pickle
from pathlib import Path

import numba as nb
import numpy as np
import scipy.sparse as sp
import torch

from graphscale.data import synthetic
from graphscale.data.formats import load_graph_dir
from graphscale.data.graph import Graph

PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
NPZ_TRAIN_PER_CLASS, NPZ_VAL_PER_CLASS = 20, 30
OGB_SPLITS = ("train", "valid", "test")

DATASET_HELP: list[tuple[str, str]] = [
    ("cora", "bundled Cora, Planetoid split: 2,708 nodes, 10,556 edges, 1,433 features, 7 classes, 140/500/1000"),
    ("planetoid:DIR[:NAME]", ("Planetoid raw files DIR/ind.NAME.{x,y,tx,ty,allx,ally,graph,test.index} (NAME "
                              "defaults to the only one in DIR); standard split: train = the labelled ind.NAME.y "
                              "nodes, val = the next 500, test = ind.NAME.test.index")),
    ("npz:FILE[:SEED]", ("gnn-benchmark .npz (adj_data/adj_indices/adj_indptr/adj_shape, attr_* or attr_matrix, "
                         "labels); seeded split (SEED default 0): 20 per class train, 30 per class val, rest test")),
    ("ogb:DIR[:SPLIT]", ("an OGB node-property dataset read offline: DIR/raw/{edge,node-feat,node-label,"
                         "num-node-list}.csv.gz and DIR/split/SPLIT/{train,valid,test}.csv.gz (SPLIT defaults "
                         "to the only one); DIR may also be a folder holding exactly one such dataset")),
    ("edgelist:FILE[:LABELS]", ("a text edge list, one 'src dst' pair per line (SNAP style: blanks or commas, '#'/'%' "
                                "comments, an optional header line, extra columns ignored), symmetrised; ids not "
                                "exactly 0..max are relabelled 0..N-1 in increasing order (meta original_ids); no "
                                "features; LABELS: 'node label' lines, unlabelled nodes -1, seeded 20/30/rest split")),
    ("musae:DIR[:SEED]", ("a MUSAE dataset (e.g. Facebook page-page): DIR/NAME_edges.csv, NAME.json (node -> "
                          "feature ids, dense binary features), NAME_target.csv (label column page_type, ml_target "
                          "or target; classes in sorted order); no standard split: seeded (SEED default 0) 20 per "
                          "class train, 30 per class val, rest test")),
    ("graphdir:DIR", "a graphscale graph directory (meta.json + .npy), memory-mapped, returned as stored"),
    ("sbm:key=value,...", ("degree-corrected SBM with power-law degrees and learnable labels; keys: "
                           + ", ".join(synthetic.PARAMS["sbm"]))),
    ("rmat:key=value,...", "R-MAT graph, labels = expected-degree classes; keys: " + ", ".join(synthetic.PARAMS["rmat"])),
]


def _accepted_forms() -> str:
    return ", ".join(pattern for pattern, _ in DATASET_HELP)


# ---------------------------------------------------------------- common
def _build(src, dst, num_nodes: int, *, x=None, y=None, masks: dict | None = None, name: str, num_classes: int,
           source: str) -> Graph:
    """Assemble a symmetric, coalesced, self-loop-free graph with normalised dtypes."""
    src, dst = torch.as_tensor(np.asarray(src), dtype=torch.int64), torch.as_tensor(np.asarray(dst), dtype=torch.int64)
    keep = src != dst
    masks = {k: torch.as_tensor(np.asarray(v), dtype=torch.bool) for k, v in (masks or {}).items()}
    graph = Graph.from_edges(src[keep], dst[keep], num_nodes, name=name,
                             x=None if x is None else torch.as_tensor(np.asarray(x), dtype=torch.float32),
                             y=None if y is None else torch.as_tensor(np.asarray(y), dtype=torch.int64),
                             meta={"num_classes": int(num_classes), "source": source}, **masks)
    return graph.symmetrize()


def _index_mask(index: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[index] = True
    return mask


def per_class_split(labels: np.ndarray, seed: int = 0, train_per_class: int = NPZ_TRAIN_PER_CLASS,
                    val_per_class: int = NPZ_VAL_PER_CLASS) -> dict[str, np.ndarray]:
    """Seeded per-class split (as for gnn-benchmark data): within each class, in a random order drawn
    from ``seed``, the first ``train_per_class`` nodes train, the next ``val_per_class`` validate and the
    rest test (a small class fills train first, then val). Unlabelled nodes (``-1``) are in no mask.

    Returns:
        ``{"train_mask", "val_mask", "test_mask"}`` as bool arrays.
    """
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(n), labels))
    sorted_labels = labels[order]
    starts = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts
    labelled = labels >= 0
    return {"train_mask": labelled & (rank < train_per_class),
            "val_mask": labelled & (rank >= train_per_class) & (rank < train_per_class + val_per_class),
            "test_mask": labelled & (rank >= train_per_class + val_per_class)}


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


# -------------------------------------------------------------- planetoid
def _pickle_classes() -> dict[tuple[str, str], object]:
    reconstruct = np.zeros(1).__reduce__()[0]
    scalar = np.float64(0).__reduce__()[0]
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("collections", "defaultdict"): collections.defaultdict}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = reconstruct
        allowed[(module, "scalar")] = scalar
    for fmt in ("csr", "csc", "coo", "lil", "dok"):
        cls = getattr(sp, f"{fmt}_matrix")
        for module in (f"scipy.sparse.{fmt}", f"scipy.sparse._{fmt}", "scipy.sparse"):
            allowed[(module, f"{fmt}_matrix")] = cls
    allowed[("_codecs", "encode")] = codecs.encode  # how Python 3 pickles bytes at protocol 2
    for module in ("copy_reg", "copyreg"):
        allowed[(module, "_reconstructor")] = copyreg._reconstructor  # builds only allowed classes
    for module in ("__builtin__", "builtins"):
        for name in ("list", "dict", "set", "tuple", "int", "float", "object"):
            allowed[(module, name)] = getattr(builtins, name)
    return allowed


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickler that only builds numpy arrays, scipy sparse matrices, lists and dicts."""

    def __init__(self, file, **kwargs) -> None:
        super().__init__(file, **kwargs)
        self._allowed = _pickle_classes()

    def find_class(self, module: str, name: str):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"Planetoid files may only hold numpy/scipy arrays and dicts of lists; "
                                         f"refusing to load {module}.{name}") from None


def _read_planetoid_part(folder: Path, prefix: str, part: str):
    path = folder / f"ind.{prefix}.{part}"
    _require(path, f"a Planetoid file (a Planetoid directory holds ind.{prefix}.{{{','.join(PLANETOID_PARTS)}}})")
    if part == "test.index":
        try:
            return np.loadtxt(path, dtype=np.int64, ndmin=1)
        except ValueError as err:
            raise ValueError(f"{path}: expected one integer per line: {err}") from None
    try:
        with open(path, "rb") as f:
            out = _PlanetoidUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{path} is not a valid Planetoid pickle: {err}") from None
    if part == "graph":
        if not isinstance(out, dict):
            raise ValueError(f"{path}: expected a dict of adjacency lists, got {type(out).__name__}")
        return out
    out = np.asarray(out.todense()) if sp.issparse(out) else np.asarray(out)
    if out.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D matrix, got shape {out.shape}")
    return out


def _planetoid_names(folder: Path) -> list[str]:
    return sorted(p.name[len("ind."): -len(".graph")] for p in folder.glob("ind.*.graph"))


def read_planetoid(folder: str | Path, name: str | None = None) -> Graph:
    """Read a Planetoid dataset (Kipf & Welling's / PyG's ``Planetoid`` format and split).

    Features of the test nodes are reordered by ``test.index``. When the test
    indices leave gaps (CiteSeer's isolated test nodes) ``tx``/``ty`` are
    extended with zero rows for the missing ids, as PyG and Kipf's code do; those
    nodes get label ``-1`` (PyG gives them class 0) and are in no split.

    Args:
        folder: directory with ``ind.NAME.*``.
        name: dataset prefix (``cora``, ``citeseer``, ``pubmed``); default the only one in ``folder``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"Planetoid directory {folder} does not exist; expected ind.NAME.{{"
                                f"{','.join(PLANETOID_PARTS)}}} files in it")
    if name is None:
        names = _planetoid_names(folder)
        if len(names) != 1:
            raise ValueError(f"{folder} holds Planetoid datasets {names or 'none'} (files ind.NAME.graph); "
                             "name one as planetoid:DIR:NAME")
        name = names[0]
    parts = {p: _read_planetoid_part(folder, name, p) for p in PLANETOID_PARTS}
    tx, ty, allx, ally = (parts[k] for k in ("tx", "ty", "allx", "ally"))
    test_index = parts["test.index"]
    sorted_test = np.sort(test_index)
    if tx.shape[0] != test_index.size or ty.shape[0] != test_index.size:
        raise ValueError(f"{folder}: ind.{name}.tx / .ty have {tx.shape[0]} / {ty.shape[0]} rows but "
                         f"ind.{name}.test.index lists {test_index.size} test nodes")
    if sorted_test.size and sorted_test[-1] - sorted_test[0] + 1 > tx.shape[0]:
        span = int(sorted_test[-1] - sorted_test[0] + 1)
        tx_ext, ty_ext = np.zeros((span, tx.shape[1]), tx.dtype), np.zeros((span, ty.shape[1]), ty.dtype)
        tx_ext[sorted_test - sorted_test[0]] = tx
        ty_ext[sorted_test - sorted_test[0]] = ty
        tx, ty = tx_ext, ty_ext
    features, onehot = np.vstack([allx, tx]).astype(np.float32), np.vstack([ally, ty])
    n = features.shape[0]
    if onehot.shape[0] != n or (test_index.size and (test_index.min() < 0 or test_index.max() >= n)):
        raise ValueError(f"{folder}: ind.{name}.{{allx,tx}} give {n} nodes, ind.{name}.{{ally,ty}} "
                         f"{onehot.shape[0]} labels and test.index reaches {int(test_index.max(initial=-1))}")
    features[test_index] = features[sorted_test]
    onehot[test_index] = onehot[sorted_test]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1)
    graph = parts["graph"]
    lengths = np.fromiter((len(v) for v in graph.values()), np.int64, len(graph))
    src = np.repeat(np.fromiter(graph.keys(), np.int64, len(graph)), lengths)
    dst = np.fromiter(itertools.chain.from_iterable(graph.values()), np.int64, int(lengths.sum()))
    if src.size and max(src.max(), dst.max()) >= n:
        raise ValueError(f"{folder / f'ind.{name}.graph'} names node {max(src.max(), dst.max())} "
                         f"but the features give only {n} nodes")
    n_train = parts["y"].shape[0]
    if n_train + 500 > n:
        raise ValueError(f"{folder}: {n_train} training + 500 validation nodes exceed the {n} nodes")
    masks = {"train_mask": _index_mask(np.arange(n_train), n), "val_mask": _index_mask(np.arange(n_train, n_train + 500), n),
             "test_mask": _index_mask(test_index, n)}
    return _build(src, dst, n, x=features, y=labels, masks=masks, name=name, num_classes=ally.shape[1],
                  source=f"planetoid:{folder.resolve()}:{name}")


def cora_dir() -> Path:
    """The bundled Cora raw directory (``graphscale/data/cora/raw``)."""
    return Path(__file__).resolve().parent / "cora" / "raw"


# -------------------------------------------------------------------- npz
def read_npz(file: str | Path, seed: int = 0) -> Graph:
    """Read a gnn-benchmark (Shchur et al.) ``.npz`` graph with a seeded per-class split.

    Keys: ``adj_data, adj_indices, adj_indptr, adj_shape`` (CSR adjacency), features as
    ``attr_data, attr_indices, attr_indptr, attr_shape`` or a dense ``attr_matrix``
    (optional), and ``labels``. Split: within each class, in a random order drawn from
    ``seed``, the first 20 nodes train, the next 30 validate and the rest test
    (a class with fewer nodes fills train first, then val).
    """
    file = Path(file)
    _require(file, "a gnn-benchmark .npz file")
    try:
        data = np.load(file, allow_pickle=False)
    except (ValueError, OSError) as err:
        raise ValueError(f"{file} is not a readable .npz file: {err}") from None
    with data:
        keys = set(data.files)
        needed = {"adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels"}
        if not needed <= keys:
            raise ValueError(f"{file} lacks {sorted(needed - keys)}; a gnn-benchmark .npz needs "
                             f"{sorted(needed)} and attr_data/attr_indices/attr_indptr/attr_shape or attr_matrix "
                             f"(found {sorted(keys)})")
        shape = tuple(int(s) for s in data["adj_shape"])
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"{file}: adj_shape must be square, got {shape}")
        try:
            adj = sp.csr_matrix((data["adj_data"], data["adj_indices"], data["adj_indptr"]), shape=shape).tocoo()
            if "attr_data" in keys:
                attr = sp.csr_matrix((data["attr_data"], data["attr_indices"], data["attr_indptr"]),
                                     shape=tuple(data["attr_shape"])).toarray()
            else:
                attr = data["attr_matrix"] if "attr_matrix" in keys else None
        except ValueError as err:
            raise ValueError(f"{file}: inconsistent sparse arrays: {err}") from None
        labels = np.asarray(data["labels"]).astype(np.int64)
    n = shape[0]
    if labels.shape != (n,) or (attr is not None and attr.shape[0] != n):
        raise ValueError(f"{file}: labels {labels.shape} and features {None if attr is None else attr.shape} "
                         f"must have one row per node ({n}); multi-label files are not supported")
    masks = per_class_split(labels, seed)
    return _build(adj.row, adj.col, n, x=attr, y=labels, masks=masks, name=file.stem,
                  num_classes=int(labels.max(initial=-1)) + 1, source=f"npz:{file.resolve()}:{seed}")


# -------------------------------------------------------------------- ogb
def _read_csv_gz(path: Path, dtype, *, use_pandas: bool = True) -> np.ndarray:
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
    edges = _read_csv_gz(_require(raw / "edge.csv.gz", "OGB edges (src,dst rows)"), np.int64)
    labels = _read_csv_gz(_require(raw / "node-label.csv.gz", "OGB node labels (one per row)"), np.float64)
    if edges.size and edges.shape[1] != 2:
        raise ValueError(f"{raw / 'edge.csv.gz'}: expected 2 columns (src,dst), got {edges.shape[1]}")
    if labels.ndim != 2 or labels.shape[1] != 1:
        raise ValueError(f"{raw / 'node-label.csv.gz'}: expected one label column, got shape {labels.shape}; "
                         "multi-label datasets are not supported")
    feats = _read_csv_gz(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").exists() else None
    if (raw / "num-node-list.csv.gz").exists():
        n = int(_read_csv_gz(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
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
        file = _require(root / "split" / split / f"{part}.csv.gz", f"OGB split indices (splits found: {splits})")
        index = _read_csv_gz(file, np.int64).reshape(-1)
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"{file} has node ids outside [0, {n})")
        masks[key] = _index_mask(index, n)
    name = root.name.replace("_", "-")
    return _build(edges[:, 0], edges[:, 1], n, x=feats, y=y, masks=masks, name=name,
                  num_classes=int(y.max(initial=-1)) + 1, source=f"ogb:{root.resolve()}:{split}")


# --------------------------------------------------------------- edgelist
_PAIR_ERRORS = {1: "fewer than two {what} on the line", 2: "{what} must be integers",
                3: "{what} must be non-negative", 4: "{what} must be below 2**63"}


@nb.njit(nogil=True, cache=True, inline="always")
def _k_int_field(buf, i):  # pragma: no cover - compiled
    """Parse the integer token at ``buf[i]`` (``buf`` ends with a newline): returns (value, status, end);
    status 0 ok, 2 not an integer, 3 negative, 4 too large. A token ends at a blank, a comma or a newline."""
    negative = buf[i] == 45  # '-'
    if negative:
        i += 1
    while buf[i] == 48 and 48 <= buf[i + 1] <= 57:  # leading zeros
        i += 1
    start, value = i, 0
    d = np.int64(buf[i]) - 48
    while 0 <= d <= 9:
        value = value * 10 + d
        i += 1
        d = np.int64(buf[i]) - 48
    c = buf[i]
    if i == start or not (c == 32 or c == 9 or c == 10 or c == 44 or c == 13):
        return 0, 2, i
    if negative:
        return 0, 3, i
    if i - start > 19 or value < 0:  # 20+ digits, or 19 that wrapped past 2**63 - 1
        return 0, 4, i
    return value, 0, i


@nb.njit(nogil=True, cache=True)
def _k_int_pairs(buf, out):  # pragma: no cover - compiled
    """Read the first two integers of every line of ``buf`` (bytes ending with a newline) into ``out``
    [capacity, 2].

    Blank lines and lines starting with ``#`` or ``%`` are skipped; fields are separated by runs of
    blanks and/or commas; further fields are ignored; the first non-comment line is skipped as a
    header when one of its first two fields is not an integer. Returns ``(count, status, line,
    line_start, header_line)`` where ``status`` is 0 or the error code of line ``line`` (1-based)
    that starts at byte ``line_start``; ``header_line`` is 0 when there was no header.
    """
    n = buf.shape[0]
    i, line, count, header_line = 0, 0, 0, 0
    seen_data = False
    while i < n:
        line += 1
        start = i
        c = buf[i]
        while c == 32 or c == 9 or c == 13:
            i += 1
            c = buf[i]
        if c == 10 or c == 35 or c == 37:  # blank line, '#' or '%' comment
            while buf[i] != 10:
                i += 1
            i += 1
            continue
        value0, status, i = _k_int_field(buf, i)
        value1 = 0
        if status == 0:
            c = buf[i]
            while c == 32 or c == 9 or c == 44 or c == 13:
                i += 1
                c = buf[i]
            if c == 10:
                status = 1
            else:
                value1, status, i = _k_int_field(buf, i)
        if status != 0:
            if status == 2 and not seen_data:
                header_line = line
            else:
                return count, status, line, start, header_line
        else:
            out[count, 0] = value0
            out[count, 1] = value1
            count += 1
        seen_data = True
        while buf[i] != 10:
            i += 1
        i += 1
    return count, 0, line, 0, header_line


def read_int_pairs(file: str | Path, what: str = "node ids") -> np.ndarray:
    """Read the first two integers of every line of a text file into an ``[rows, 2]`` int64 array.

    The format edge lists are shipped in (SNAP, KONECT, MUSAE, Network Repository): fields separated
    by blanks and/or commas, lines starting with ``#`` or ``%`` are comments, a first non-comment
    line that is not two integers is a header and skipped, columns after the first two (weights,
    timestamps) are ignored. The file is read whole and parsed by a compiled single-pass scanner.

    Raises:
        ValueError: naming the file and line for a line with fewer than two fields, a non-integer
            or negative value.
    """
    file = Path(file)
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected a text file of {what}") from None
    data = data.removeprefix(codecs.BOM_UTF8)
    if not data.endswith(b"\n"):
        data += b"\n"  # the scanner relies on a final newline instead of bounds checks
    buf = np.frombuffer(data, dtype=np.uint8)
    out = np.empty((data.count(b"\n"), 2), dtype=np.int64)
    count, status, line, start, _ = _k_int_pairs(buf, out)
    if status:
        end = data.find(b"\n", start)
        text = data[start: end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
        text = text if len(text) <= 80 else text[:77] + "..."
        raise ValueError(f"{file}, line {line}: {_PAIR_ERRORS[status].format(what=what)}, got {text!r}")
    return out[:count]


def _relabel(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """Map the ids used by ``src``/``dst`` to ``0..N-1`` in increasing order unless they already are exactly
    ``0..max``. Returns ``(src, dst, N, original_ids or None)``."""
    top = int(max(src.max(), dst.max()))
    if top < 4 * (src.size + dst.size) + (1 << 20):  # a presence table beats sorting
        present = np.zeros(top + 1, dtype=bool)
        present[src] = True
        present[dst] = True
        if present.all():
            return src, dst, top + 1, None
        original = np.flatnonzero(present).astype(np.int64)
        new_id = np.cumsum(present, dtype=np.int64) - 1
        return new_id[src], new_id[dst], original.size, original
    original, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    return inverse[:src.size], inverse[src.size:], original.size, original


def _class_ids(values: np.ndarray | list[str]) -> tuple[np.ndarray, list[str]]:
    """Class index per entry (classes in sorted order; numeric strings sort as numbers) and the class names."""
    names, inverse = np.unique(np.asarray(values), return_inverse=True)
    if names.dtype.kind in "US" and all(_is_int(v) for v in names):
        by_value = np.argsort([int(v) for v in names], kind="stable")
        rank = np.empty_like(by_value)
        rank[by_value] = np.arange(by_value.size)
        names, inverse = names[by_value], rank[inverse]
    return inverse.astype(np.int64).reshape(-1), [str(v) for v in names]


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def read_edgelist(file: str | Path, labels: str | Path | None = None, seed: int = 0) -> Graph:
    """Read a plain-text edge list (SNAP style), optionally with a ``node label`` file.

    Lines hold ``src dst`` (blank- or comma-separated); ``#`` / ``%`` comment lines, a header line
    (``id_1,id_2``) and extra columns are skipped (see :func:`read_int_pairs`). Edges are treated as
    undirected (directed input is symmetrised, duplicates and self-loops dropped). Node ids that are
    not exactly ``0..max`` are relabelled to ``0..N-1`` in increasing order of the original id, N being
    the number of distinct ids, and ``meta['original_ids']`` (int64 array, new id -> original id) is
    set; ids that already are ``0..max`` are kept and ``original_ids`` is absent. There are no features.

    With ``labels`` (lines ``node label``, same syntax), labels are mapped through the same relabelling,
    label values are renumbered ``0..C-1`` in increasing order (``meta['class_names']`` holds the original
    values as strings), nodes without a label get ``-1``, and the split is :func:`per_class_split` with
    ``seed`` (20 per class train, 30 val, the rest test).

    Raises:
        ValueError: a malformed line (file and line named), no edges, a labels line naming a node that is
            not in the edge list, or a node given two different labels.
    """
    file = _require(Path(file), "a text edge list (one 'src dst' pair per line)")
    pairs = read_int_pairs(file, "node ids")
    if pairs.shape[0] == 0:
        raise ValueError(f"{file} holds no edges (expected lines 'src dst'; '#'/'%' lines are comments)")
    src, dst, n, original = _relabel(pairs[:, 0], pairs[:, 1])
    del pairs
    y = masks = None
    num_classes, class_names = 0, None
    source = f"edgelist:{file.resolve()}"
    if labels is not None:
        labels = _require(Path(labels), "a text file of 'node label' lines")
        table = read_int_pairs(labels, "node ids and labels")
        nodes = table[:, 0]
        if original is None:
            absent = nodes >= n
            new = nodes
        else:
            new = np.minimum(np.searchsorted(original, nodes), n - 1)
            absent = original[new] != nodes
        if absent.any():
            first = int(np.flatnonzero(absent)[0])
            raise ValueError(f"{labels} labels node {int(nodes[first])}, which is not in the edge list {file} "
                             f"({int(absent.sum())} labelled node(s) are absent from it)")
        classes, class_names = _class_ids(table[:, 1])
        order = np.argsort(new, kind="stable")
        same_node = new[order][1:] == new[order][:-1]
        conflict = same_node & (classes[order][1:] != classes[order][:-1])
        if conflict.any():
            node = int(nodes[order][1:][conflict][0])
            raise ValueError(f"{labels} gives node {node} two different labels")
        y = np.full(n, -1, dtype=np.int64)
        y[new] = classes
        num_classes = len(class_names)
        masks = per_class_split(y, seed)
        source += f":{labels.resolve()}"
    graph = _build(src, dst, n, y=y, masks=masks, name=file.stem, num_classes=num_classes, source=source)
    if original is not None:
        graph.meta["original_ids"] = original
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph


# ------------------------------------------------------------------ musae
MUSAE_LABEL_COLUMNS = ("page_type", "ml_target", "target")


def _musae_prefix(folder: Path) -> str:
    if not folder.is_dir():
        raise FileNotFoundError(f"MUSAE directory {folder} does not exist; expected NAME_edges.csv, NAME.json "
                                "and NAME_target.csv in it")
    found = sorted(p.name[: -len("_edges.csv")] for p in folder.glob("*_edges.csv"))
    if len(found) != 1:
        raise ValueError(f"{folder} holds {len(found)} MUSAE edge files ({[f + '_edges.csv' for f in found]}); "
                         "a musae:DIR needs exactly one NAME_edges.csv with NAME.json and NAME_target.csv")
    return found[0]


def _musae_targets(path: Path) -> tuple[np.ndarray, list[str], str]:
    """``(node ids, label strings, label column)`` from a MUSAE ``*_target.csv``."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty; expected a header with 'id' and one of {MUSAE_LABEL_COLUMNS}")
        header = [h.strip() for h in header]
        column = next((c for c in MUSAE_LABEL_COLUMNS if c in header), None)
        if "id" not in header or column is None:
            raise ValueError(f"{path}: header {header} needs an 'id' column and a label column, one of "
                             f"{list(MUSAE_LABEL_COLUMNS)}")
        id_col, label_col = header.index("id"), header.index(column)
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
        bad = next(i for i, v in enumerate(ids) if not _is_int(v))
        raise ValueError(f"{path}: row {bad + 1}: node id {ids[bad]!r} is not an integer") from None
    return node_ids, values, column


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


def read_musae(folder: str | Path, seed: int = 0) -> Graph:
    """Read a MUSAE dataset (Rozemberczki et al.; e.g. the Facebook page-page network) with a seeded split.

    ``folder`` holds ``NAME_edges.csv`` (``id_1,id_2`` header, undirected), ``NAME.json`` (node id ->
    list of active feature ids) and ``NAME_target.csv`` (an ``id`` column and the label column
    ``page_type``, ``ml_target`` or ``target``). Features are the dense binary bag of features
    (float32 [N, max feature id + 1]); labels are the label values in sorted order (numbers sorted as
    numbers; the names in ``meta['class_names']``). MUSAE sets come without a standard split, so the
    split is :func:`per_class_split` with ``seed``: 20 nodes per class train, 30 val, the rest test.
    """
    folder = Path(folder)
    prefix = _musae_prefix(folder)
    edges_file = folder / f"{prefix}_edges.csv"
    target_file = _require(folder / f"{prefix}_target.csv", f"the MUSAE labels ({prefix}_target.csv)")
    features_file = _require(folder / f"{prefix}.json", f"the MUSAE features ({prefix}.json)")
    node_ids, values, column = _musae_targets(target_file)
    n = node_ids.size
    if n == 0 or not np.array_equal(np.sort(node_ids), np.arange(n)):
        raise ValueError(f"{target_file}: the 'id' column must list every node 0..N-1 exactly once "
                         f"({n} rows, ids {int(node_ids.min(initial=0))}..{int(node_ids.max(initial=-1))})")
    classes, class_names = _class_ids(values)
    y = np.empty(n, dtype=np.int64)
    y[node_ids] = classes
    edges = read_int_pairs(edges_file, "node ids")
    if edges.size and edges.max() >= n:
        raise ValueError(f"{edges_file} names node {int(edges.max())} but {target_file} has only {n} nodes")
    x = _musae_features(features_file, n)
    graph = _build(edges[:, 0], edges[:, 1], n, x=x, y=y, masks=per_class_split(y, seed), name=prefix,
                   num_classes=len(class_names), source=f"musae:{folder.resolve()}:{seed}")
    graph.meta["class_names"] = class_names
    graph.meta["label_column"] = column
    return graph


# ------------------------------------------------------------- dispatch
def _split_option(arg: str, accept) -> tuple[str, str | None]:
    """``PATH[:OPTION]``: take the part after the last colon as OPTION when ``accept(path, option)``."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and accept(head, tail):
        return head, tail
    return arg, None


def load_dataset(spec: str) -> Graph:
    """Load a dataset by spec (see :data:`DATASET_HELP`).

    Raises:
        ValueError: unknown spec form (the message lists the accepted forms) or malformed files.
        FileNotFoundError: a named directory or file, or a file inside it, is missing.
    """
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "cora" and not sep:
        graph = read_planetoid(cora_dir(), "cora")
        graph.meta["source"] = f"cora (bundled Planetoid files in {cora_dir()})"
        return graph
    if kind in synthetic.PARAMS:
        return synthetic.generate(f"{kind}:{arg}")
    readers = {"planetoid", "npz", "ogb", "edgelist", "musae", "graphdir"}
    if kind not in readers:
        raise ValueError(f"unknown dataset spec {spec!r}; accepted forms: {_accepted_forms()}")
    if not arg:
        raise ValueError(f"dataset spec {spec!r} needs a path: {kind}:PATH")
    if kind == "planetoid":
        folder, name = _split_option(arg, lambda d, n: Path(d).is_dir() and not Path(arg).is_dir())
        return read_planetoid(folder, name)
    if kind == "npz":
        file, seed = _split_option(arg, lambda f, s: s.isdigit() and not Path(arg).exists())
        return read_npz(file, int(seed or 0))
    if kind == "ogb":
        folder, split = _split_option(arg, lambda d, s: not Path(arg).exists() and Path(d).is_dir())
        return read_ogb(folder, split)
    if kind == "edgelist":
        file, labels = _split_option(arg, lambda f, lab: not Path(arg).exists() and Path(f).is_file())
        return read_edgelist(file, labels)
    if kind == "musae":
        folder, seed = _split_option(arg, lambda d, s: s.isdigit() and not Path(arg).exists())
        return read_musae(folder, int(seed or 0))
    return load_graph_dir(arg)


def untrainable_reason(spec: str, graph: Graph | None = None) -> str | None:
    """Why ``spec`` cannot be used for node classification, or ``None`` when it can.

    Without ``graph`` only the spec is looked at (an ``edgelist:`` never has node features), so a
    caller can fail before loading anything; with ``graph`` its features, labels and split are checked
    (also their values: :func:`node_data_problem`).
    """
    kind = spec.strip().partition(":")[0].lower()
    if kind == "edgelist" or (graph is not None and graph.x is None):
        hint = (" (a text edge list carries none; use it for `graphscale partition`, or train on a dataset with "
                "features such as npz:, ogb:, musae: or cora)" if kind == "edgelist" else "")
        return f"dataset {spec!r} has no node features, which training needs{hint}"
    if graph is not None and graph.y is None:
        return f"dataset {spec!r} has no node labels, which training needs"
    if graph is not None and (graph.train_mask is None or not bool(graph.train_mask.any())):
        return f"dataset {spec!r} has no training nodes (no train/val/test split); it cannot be trained on"
    problem = graph is not None and node_data_problem(graph.x, graph.y, graph.num_classes, graph.train_mask)
    return f"dataset {spec!r}: {problem}" if problem else None


#: feature rows checked at a time by :func:`node_data_problem`
SCAN_ROWS = 1 << 16


def node_data_problem(x, y, num_classes: int, train_mask=None, ids=None) -> str | None:
    """Why these node rows cannot be trained on, or ``None``.

    Problems: a feature row holding NaN or infinity (the first one is named; rows are scanned in chunks of
    :data:`SCAN_ROWS`, so a memory-mapped ``x`` is never loaded whole), labels that are not integers, a label
    outside ``[0, num_classes)`` other than ``-1`` (unlabelled), an unlabelled training node.

    Args:
        x, y: features ``[R, F]`` and labels ``[R]`` (tensors or arrays).
        num_classes: the class count ``C``.
        train_mask: bool ``[R]`` or ``None``.
        ids: how to name row ``i`` in the message: ``ids[i]`` (default ``i``).
    """
    def node(i: int) -> int:
        return int(ids[i]) if ids is not None else i

    for start in range(0, x.shape[0], SCAN_ROWS):
        bad = np.flatnonzero(~np.isfinite(np.asarray(x[start: start + SCAN_ROWS])).all(axis=1))
        if bad.size:
            return f"features of node {node(start + int(bad[0]))} are not finite (NaN or infinity)"
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer):
        return f"labels must be integers, got dtype {y.dtype}"
    bad = np.flatnonzero((y < -1) | (y >= num_classes))
    if bad.size:
        return f"node {node(int(bad[0]))} has label {int(y[bad[0]])}, outside [0, {num_classes}) and not -1"
    unlabelled = np.flatnonzero(np.asarray(train_mask) & (y == -1)) if train_mask is not None else []
    return f"training node {node(int(unlabelled[0]))} has no label (-1)" if len(unlabelled) else None


def describe_dataset(spec: str) -> dict:
    """Load ``spec`` and return its :meth:`Graph.summary` plus ``source`` (and ``class_names``,
    ``relabelled`` = how many nodes got new ids, where the reader records them)."""
    graph = load_dataset(spec)
    out = {**graph.summary(), "source": graph.meta.get("source", spec)}
    if "class_names" in graph.meta:
        out["class_names"] = ", ".join(graph.meta["class_names"])
    if "original_ids" in graph.meta:
        out["relabelled"] = int(np.count_nonzero(np.asarray(graph.meta["original_ids"]) != np.arange(graph.num_nodes)))
    return out


# ------------------------------------------------------------ PyG adapter
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


FEATURE_NORMS = ("auto", "row", "none")


def row_normalize(x: torch.Tensor) -> torch.Tensor:
    """Every row divided by its L1 norm (rows of zeros stay zero); row-local, so a worker can apply it to its
    own rows and get the rows of the whole normalised matrix."""
    return x / x.abs().sum(dim=1, keepdim=True).clamp(min=torch.finfo(x.dtype).tiny)


def normalize_features(graph: Graph, mode: str = "auto") -> Graph:
    """Row-normalise node features in place, the standard preprocessing of GCN/GAT on Planetoid data.

    ``row`` divides every row by its L1 norm (rows of zeros stay zero); ``none`` leaves features as they
    are; ``auto`` applies ``row`` when all features are non-negative (bag-of-words style, as in Kipf &
    Welling and Velickovic et al.) and leaves signed features (e.g. the SBM's Gaussian ones) unchanged.

    Returns:
        ``graph`` (for chaining). ``graph.meta['feature_norm']`` records what was applied.
    """
    if mode not in FEATURE_NORMS:
        raise ValueError(f"--feature-norm must be one of {', '.join(FEATURE_NORMS)}, got {mode!r}")
    applied = "none"
    if graph.x is not None and (mode == "row" or (mode == "auto" and bool((graph.x >= 0).all()))):
        graph.x = row_normalize(graph.x)
        applied = "row"
    graph.meta["feature_norm"] = applied
    return graph

"""Datasets by spec string: bundled Cora, Planetoid / npz / OGB directory readers, graph directories,
synthetic graphs, and the PyG ``Data`` adapter.

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
import gzip
import itertools
import pickle
from pathlib import Path

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
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(n), labels))
    sorted_labels = labels[order]
    starts = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts
    labelled = labels >= 0
    masks = {"train_mask": labelled & (rank < NPZ_TRAIN_PER_CLASS),
             "val_mask": labelled & (rank >= NPZ_TRAIN_PER_CLASS) & (rank < NPZ_TRAIN_PER_CLASS + NPZ_VAL_PER_CLASS),
             "test_mask": labelled & (rank >= NPZ_TRAIN_PER_CLASS + NPZ_VAL_PER_CLASS)}
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
    readers = {"planetoid", "npz", "ogb", "graphdir"}
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
    return load_graph_dir(arg)


def describe_dataset(spec: str) -> dict:
    """Load ``spec`` and return its :meth:`Graph.summary` plus ``source``."""
    graph = load_dataset(spec)
    return {**graph.summary(), "source": graph.meta.get("source", spec)}


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
        graph.x = graph.x / graph.x.abs().sum(dim=1, keepdim=True).clamp(min=torch.finfo(graph.x.dtype).tiny)
        applied = "row"
    graph.meta["feature_norm"] = applied
    return graph

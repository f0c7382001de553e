"""Datasets by spec string: bundled Cora, Planetoid / npz / OGB directory readers, text edge lists,
METIS graph files, MATLAB ``.mat`` graphs, MUSAE datasets, graph directories, synthetic graphs, and the
PyG ``Data`` adapter.

:func:`load_dataset` accepts the forms in :data:`DATASET_HELP`. Every reader
returns a :class:`Graph` that is symmetric, coalesced and free of self-loops
(sources are treated as undirected, as GNN training on them usually does),
with float32 ``x``, int64 ``y`` (``-1`` = unlabelled; a uint8 ``[N, C]`` 0/1
matrix for multi-label data, see :attr:`Graph.multilabel`), bool masks,
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
import re
import struct
import zipfile
import zlib
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
    ("npz:FILE[:SEED]", ("gnn-benchmark / PPNP .npz: CSR adjacency adj_{data,indices,indptr,shape} or "
                         "adj_matrix.{data,indices,indptr,shape}, features attr_* / attr_matrix.* (sparse) or a "
                         "dense attr_matrix (optional), labels; seeded split (SEED default 0): 20 per class train, "
                         "30 per class val, rest test")),
    ("ogb:DIR[:SPLIT]", ("an OGB node-property dataset read offline: DIR/raw/{edge,node-feat,node-label,"
                         "num-node-list}.csv.gz and DIR/split/SPLIT/{train,valid,test}.csv.gz (SPLIT defaults "
                         "to the only one); DIR may also be a folder holding exactly one such dataset")),
    ("edgelist:FILE[:LABELS]", ("a text edge list, one 'src dst' pair per line (SNAP style: blanks or commas, '#'/'%' "
                                "comments, an optional header line, extra columns ignored), symmetrised; ids not "
                                "exactly 0..max are relabelled 0..N-1 in increasing order (meta original_ids); no "
                                "features; LABELS: 'node label' lines, unlabelled nodes -1, seeded 20/30/rest split")),
    ("metis:FILE", ("a METIS graph file: header 'n m [fmt [ncon]]', '%' comments, then one line per vertex "
                    "listing its 1-based neighbours (after vertex sizes/weights, with edge weights as fmt says; "
                    "weights dropped); m counts each undirected edge once; no features or labels")),
    ("mat:FILE[:OPTIONS]", ("a MATLAB .mat graph (e.g. BlogCatalog, Flickr, Facebook100) read with scipy.io.loadmat; "
                            "OPTIONS adj=NAME,labels=NAME,features=NAME,column=K,seed=SEED; defaults: the square "
                            "matrix as adjacency (network, A, ...) and the one other N-row matrix as labels (group, "
                            "local_info, ...): class ids, one-hot or multi-label 0/1 (column=K takes column K as "
                            "class ids); features only from features=NAME; seeded 20/30/rest split (single-label)")),
    ("musae:DIR[:SEED|:OPTIONS]", ("a MUSAE dataset (e.g. Facebook page-page, Twitch): DIR/NAME_edges.csv, "
                                   "NAME_target.csv (id column new_id or id; label column detected, or OPTIONS "
                                   "label=COLUMN,seed=SEED; classes in sorted order), NAME.json or "
                                   "NAME_features.json (node -> feature ids, dense binary features; optional); no "
                                   "standard split: seeded (SEED default 0) 20 per class train, 30 per class val, "
                                   "rest test")),
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
    if y is not None:  # class ids [N] as int64, a multi-label 0/1 matrix [N, C] as uint8
        y = np.asarray(y)
        y = torch.as_tensor(y, dtype=torch.uint8 if y.ndim == 2 else torch.int64)
    graph = Graph.from_edges(src[keep], dst[keep], num_nodes, name=name,
                             x=None if x is None else torch.as_tensor(np.asarray(x), dtype=torch.float32), y=y,
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


#: the split training gives a multi-label graph that has none: fractions of its labelled nodes (seeded order)
MULTILABEL_SPLIT = (0.6, 0.2)


def multilabel_split(labels, seed: int = 0, fractions: tuple[float, float] = MULTILABEL_SPLIT) -> dict[str, np.ndarray]:
    """Seeded random split of a multi-label graph's labelled nodes (those with at least one label): in a random
    order drawn from ``seed``, the first ``fractions[0]`` train, the next ``fractions[1]`` validate, the rest test
    (the readers give multi-label graphs no split; training uses this one).

    Returns:
        ``{"train_mask", "val_mask", "test_mask"}`` as bool arrays.
    """
    labelled = np.flatnonzero(np.asarray(labels).reshape(len(labels), -1).any(axis=1))
    order = labelled[np.random.default_rng(seed).permutation(labelled.size)]
    n_train = round(fractions[0] * labelled.size)
    n_val = round(fractions[1] * labelled.size)
    masks = {name: np.zeros(len(labels), dtype=bool) for name in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][order[:n_train]] = True
    masks["val_mask"][order[n_train: n_train + n_val]] = True
    masks["test_mask"][order[n_train + n_val:]] = True
    return masks


def with_training_split(graph: Graph) -> Graph:
    """Give a multi-label graph without a split the seeded :func:`multilabel_split` (what training and
    ``graphscale partition`` use); other graphs are returned as they are."""
    if graph.multilabel and graph.train_mask is None:
        for name, mask in multilabel_split(graph.y.numpy()).items():
            setattr(graph, name, torch.from_numpy(mask))
    return graph


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


# What a file is, from its first bytes: (magic, kind, description).
_MAGIC = ((b"MATLAB 7.3", "mat73", "a MATLAB v7.3 (HDF5) .mat file"), (b"MATLAB", "mat", "a MATLAB .mat file"),
          (b"PK\x03\x04", "zip", "a zip archive (a .npz?)"), (b"PK\x05\x06", "zip", "a zip archive (a .npz?)"),
          (b"\x93NUMPY", "npy", "a single .npy array"), (b"\x89HDF\r\n\x1a\n", "hdf5", "an HDF5 file"),
          (b"\x1f\x8b", "gzip", "gzip-compressed"))
_SPEC_OF_KIND = {"mat": "mat", "zip": "npz"}


def _binary_kind(head: bytes) -> tuple[str, str]:
    """``(kind, description)`` of a file whose first bytes are ``head``; ``("", "")`` when none matches."""
    return next(((kind, text) for magic, kind, text in _MAGIC if head.startswith(magic)), ("", ""))


def _head(file: Path, what: str) -> bytes:
    try:
        with open(file, "rb") as f:
            return f.read(128)
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected {what}") from None


def _wrong_kind(file: Path, kind: str, text: str, expected: str) -> ValueError:
    """The error for ``file`` (of ``kind``, described by ``text``) given where ``expected`` was wanted."""
    if kind == "gzip":
        hint = "; decompress it first (gunzip)"
    elif kind in _SPEC_OF_KIND:
        hint = f"; read it with {_SPEC_OF_KIND[kind]}:{file}"
    elif kind == "mat73":
        hint = "; mat: reads .mat files up to v7 (scipy.io.loadmat), so re-save it in MATLAB with save(FILE, '-v7')"
    else:
        hint = ""
    return ValueError(f"{file} is {text}, not {expected}{hint}")


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
CSR_PARTS = ("data", "indices", "indptr", "shape")
# The two spellings of the gnn-benchmark layout: (adjacency key pattern, sparse feature key pattern).
NPZ_LAYOUTS = (("adj_{}", "attr_{}"), ("adj_matrix.{}", "attr_matrix.{}"))
_NPZ_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError)


def _npz_array(data, key: str, file: Path) -> np.ndarray:
    try:
        return data[key]
    except _NPZ_READ_ERRORS as err:
        raise ValueError(f"{file}: cannot read array {key!r} (a truncated or corrupt .npz?): {err}") from None


def _npz_csr(data, pattern: str, file: Path) -> sp.csr_matrix:
    """The CSR matrix stored as ``pattern.format(part)`` for the four CSR parts."""
    arrays = [_npz_array(data, pattern.format(part), file) for part in CSR_PARTS]
    shape = tuple(int(s) for s in np.asarray(arrays[3]).reshape(-1))
    if len(shape) != 2:
        raise ValueError(f"{file}: {pattern.format('shape')} must hold two numbers, got {shape}")
    try:
        return sp.csr_matrix(tuple(arrays[:3]), shape=shape)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{file}: inconsistent sparse arrays {pattern.format('*')}: {err}") from None


_CHOOSE_COLUMN = "; choose one column of class ids with column=K"


def _label_matrix(matrix, n: int, where: str, column: int | None = None,
                  choose: str = _CHOOSE_COLUMN) -> tuple[np.ndarray, int, list[str] | None]:
    """Node labels from a label matrix (dense or sparse): ``(y, num_classes, class_names or None)``.

    One column (or one row of ``n``, or column ``column`` of a wider matrix) holds class ids: integral values,
    renumbered ``0..C-1`` in increasing order (the values in ``class_names``), NaN = unlabelled. A wider 0/1
    matrix with at most one 1 per row is one-hot (a row of zeros = unlabelled, -1); one with several 1s in some
    row is multi-label and returned as a uint8 ``[n, C]`` matrix. ``choose`` ends the error for a wider matrix
    that is none of these.
    """
    m = matrix.tocsr() if sp.issparse(matrix) else np.asarray(matrix)
    if m.ndim == 1:
        m = m.reshape(-1, 1)
    if m.ndim != 2:
        raise ValueError(f"{where} has shape {m.shape}; expected a vector or matrix with one row per node ({n})")
    if m.shape[0] == 1 and m.shape[1] == n != 1:
        m = m.T.tocsr() if sp.issparse(m) else m.T
    if m.shape[0] != n:
        raise ValueError(f"{where} has shape {m.shape}; expected one row per node ({n})")
    if m.dtype.kind not in "biuf":
        raise ValueError(f"{where} holds {m.dtype} values; expected numbers (class ids or a 0/1 matrix)")
    if column is not None:
        if not 0 <= column < m.shape[1]:
            raise ValueError(f"{where} has {m.shape[1]} columns; column={column} is not one of 0..{m.shape[1] - 1}")
        m = m[:, [column]]
    if m.shape[1] == 1:
        values = (m.toarray() if sp.issparse(m) else m)[:, 0].astype(np.float64)
        labelled = ~np.isnan(values)
        if not np.array_equal(values[labelled], np.round(values[labelled])):
            raise ValueError(f"{where}: class ids must be integers (or NaN for unlabelled)")
        y = np.full(n, -1, dtype=np.int64)
        classes, names = _class_ids(values[labelled].astype(np.int64))
        y[labelled] = classes
        return y, len(names), names
    if sp.issparse(m):
        m = m.copy()
        m.eliminate_zeros()
        binary, per_row = bool((m.data == 1).all()), np.diff(m.indptr)
    else:
        binary, per_row = bool(np.isin(m, (0, 1)).all()), np.count_nonzero(m, axis=1)
    if not binary:
        raise ValueError(f"{where} is an [{n}, {m.shape[1]}] matrix that is neither one-hot nor 0/1 multi-label"
                         f"{choose}")
    if per_row.max(initial=0) <= 1:
        y = np.full(n, -1, dtype=np.int64)
        if sp.issparse(m):
            y[np.repeat(np.arange(n), per_row)] = m.indices
        else:
            y[per_row == 1] = np.argmax(m[per_row == 1], axis=1)
        return y, int(m.shape[1]), None
    return (m.astype(np.uint8).toarray() if sp.issparse(m) else m.astype(np.uint8)), int(m.shape[1]), None


def _npz_contents(data, file: Path) -> tuple[sp.csr_matrix, np.ndarray | None, np.ndarray, int, list | None]:
    """``(adjacency, features or None, labels, num_classes, class names or None)`` of an open gnn-benchmark
    ``.npz``; class ids that leave gaps (0..3 and 7) are renumbered ``0..C-1`` in increasing order, the original
    ids kept as the class names (``meta["class_names"]``)."""
    keys = set(data.files)
    adj_key, attr_key = next(((a, f) for a, f in reversed(NPZ_LAYOUTS) if any(a.format(p) in keys for p in CSR_PARTS)),
                             NPZ_LAYOUTS[0])
    needed = [adj_key.format(p) for p in CSR_PARTS]
    sparse_labels = [f"labels.{p}" for p in CSR_PARTS]
    missing = [k for k in needed if k not in keys] + ([] if "labels" in keys or set(sparse_labels) <= keys
                                                       else ["labels"])
    if missing:
        raise ValueError(f"{file} lacks {missing}; a gnn-benchmark .npz holds a CSR adjacency adj_{{data,indices,"
                         f"indptr,shape}} or adj_matrix.{{data,indices,indptr,shape}}, optional features and "
                         f"labels (found {sorted(keys)})")
    adj = _npz_csr(data, adj_key, file)
    if adj.shape[0] != adj.shape[1]:
        raise ValueError(f"{file}: {adj_key.format('shape')} must be square, got {adj.shape}")
    n = adj.shape[0]
    if attr_key.format("data") in keys:
        attr = _npz_csr(data, attr_key, file).toarray()
    else:
        attr = _npz_array(data, "attr_matrix", file) if "attr_matrix" in keys else None
    if attr is not None and (attr.ndim != 2 or attr.shape[0] != n):
        raise ValueError(f"{file}: features {attr.shape} must have one row per node ({n})")
    if "labels" in keys:
        labels = _npz_array(data, "labels", file)
    else:
        labels = _npz_csr(data, "labels.{}", file)
    if not sp.issparse(labels) and labels.ndim == 1:
        integral = labels.dtype.kind in "biu" or (labels.dtype.kind == "f" and
                                                  np.array_equal(labels, np.round(labels)))
        if labels.shape != (n,) or not integral:
            raise ValueError(f"{file}: labels must be {n} integer class ids (one per node), got {labels.dtype} "
                             f"{labels.shape}")
        labels = labels.astype(np.int64)
        used = np.unique(labels[labels >= 0])
        if used.size and used.size != int(used[-1]) + 1:  # ids with gaps: renumbered, no empty class trained
            y = np.full(n, -1, dtype=np.int64)
            y[labels >= 0] = np.searchsorted(used, labels[labels >= 0])
            return adj, attr, y, int(used.size), [str(v) for v in used]
        return adj, attr, labels, int(labels.max(initial=-1)) + 1, None
    labels, num_classes, names = _label_matrix(labels, n, f"{file}: labels", choose="")
    return adj, attr, labels, num_classes, names


def read_npz(file: str | Path, seed: int = 0) -> Graph:
    """Read a gnn-benchmark (Shchur et al.) / PPNP ``.npz`` graph with a seeded per-class split.

    Two spellings of one layout, told apart by the keys: ``adj_data, adj_indices, adj_indptr, adj_shape``
    (gnn-benchmark) or ``adj_matrix.data, adj_matrix.indices, adj_matrix.indptr, adj_matrix.shape``
    (PPNP, PPRGo, ...) for the CSR adjacency; features (optional) as ``attr_{data,indices,indptr,shape}``
    resp. ``attr_matrix.{data,...}`` or a dense ``attr_matrix``; ``labels`` as class ids, or a one-hot /
    multi-label matrix (dense ``labels`` or sparse ``labels.{data,indices,indptr,shape}``). Other keys
    (``idx_to_node``, ``class_names``, ...) are ignored. Split: within each class, in a random order drawn
    from ``seed``, the first 20 nodes train, the next 30 validate and the rest test (a class with fewer nodes
    fills train first, then val); multi-label graphs get no split.
    """
    file = Path(file)
    _require(file, "a gnn-benchmark .npz file")
    kind, text = _binary_kind(_head(file, "a gnn-benchmark .npz file"))
    if kind != "zip":
        if kind:
            raise _wrong_kind(file, kind, text, "a .npz archive")
        raise ValueError(f"{file} is not a readable .npz file: it does not start with a zip header (a .npz is a "
                         "zip archive of .npy arrays)")
    try:
        data = np.load(file, allow_pickle=False)
    except _NPZ_READ_ERRORS as err:
        raise ValueError(f"{file} is not a readable .npz file (truncated or corrupt?): {err}") from None
    with data:
        adj, attr, labels, num_classes, class_names = _npz_contents(data, file)
    adj = adj.tocoo()
    masks = None if labels.ndim == 2 else per_class_split(labels, seed)
    graph = _build(adj.row, adj.col, adj.shape[0], x=attr, y=labels, masks=masks, name=file.stem,
                   num_classes=num_classes, source=f"npz:{file.resolve()}:{seed}")
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph


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
    return _int_pairs(_text_bytes(file, what), file, what)


def _text_bytes(file: Path, what: str) -> bytes:
    """The bytes of a text file, without a UTF-8 BOM and ending with a newline (the scanners rely on a final
    newline instead of bounds checks); a directory or a known binary format (a ``.mat``, ``.npz``, gzip, ...)
    is refused with an error naming it."""
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected a text file of {what}") from None
    kind, text = _binary_kind(data[:128])
    if kind:
        raise _wrong_kind(file, kind, text, f"a text file of {what}")
    data = data.removeprefix(codecs.BOM_UTF8)
    return data if data.endswith(b"\n") else data + b"\n"


def _line_text(data: bytes, start: int) -> str:
    """The line of ``data`` that starts at byte ``start``, shortened for an error message."""
    end = data.find(b"\n", start)
    text = data[start: end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
    return text if len(text) <= 80 else text[:77] + "..."


def _int_pairs(data: bytes, file: Path, what: str) -> np.ndarray:
    """:func:`read_int_pairs` on the bytes of ``file`` (as :func:`_text_bytes` returns them)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    out = np.empty((data.count(b"\n"), 2), dtype=np.int64)
    count, status, line, start, header_line = _k_int_pairs(buf, out)
    if status:
        raise ValueError(f"{file}, line {line}: {_PAIR_ERRORS[status].format(what=what)}, got "
                         f"{_line_text(data, start)!r}")
    if header_line:  # a header names its columns: a line of numbers is data that is not two integers
        text = _nth_line(data, header_line)
        fields = [f for f in re.split(r"[\s,]+", text.strip()) if f][:2]
        if all(_is_number(f) for f in fields):
            raise ValueError(f"{file}, line {header_line}: expected two integers ({what}), got {text!r} (a first line "
                             "is skipped as a header only when it is not numeric)")
    return out[:count]


def _nth_line(data: bytes, number: int) -> str:
    """Line ``number`` (1-based) of ``data``, shortened for an error message."""
    start = 0
    for _ in range(number - 1):
        start = data.index(b"\n", start) + 1
    return _line_text(data, start)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


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
            not in the edge list, a node given two different labels, or a file that is a METIS graph (a header
            ``n m`` and ``n`` adjacency lines, see :func:`_is_metis`; read those with ``metis:``) or binary.
    """
    file = _require(Path(file), "a text edge list (one 'src dst' pair per line)")
    data = _text_bytes(file, "node ids")
    if _is_metis(data):
        raise ValueError(f"{file} is a METIS graph file (a header 'n m', then one line of neighbours per vertex), "
                         f"not an edge list; read it with metis:{file}")
    pairs = _int_pairs(data, file, "node ids")
    del data
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


# ------------------------------------------------------------------ metis
_METIS_ERRORS = {2: "expected integers", 3: "values must be non-negative", 4: "values must be below 2**63",
                 5: "the line ends before the vertex's {front} size/weight field(s) that fmt {fmt} puts first",
                 6: "more vertex lines than the {n} the header announces",
                 7: "a neighbour outside 1..{n} (METIS ids are 1-based)",
                 8: "more adjacency entries than the header's 2*m = {entries}",
                 9: "a neighbour without its edge weight (fmt {fmt} puts a weight after every neighbour)"}


@nb.njit(nogil=True, cache=True)
def _k_blank(buf, i):  # pragma: no cover - compiled
    """The first byte at or after ``i`` that is not a blank (space, tab, carriage return)."""
    c = buf[i]
    while c == 32 or c == 9 or c == 13:
        i += 1
        c = buf[i]
    return i


@nb.njit(nogil=True, cache=True)
def _k_count_lines(buf, i):  # pragma: no cover - compiled
    """``(lines, non-blank lines)`` of ``buf`` from byte ``i`` on, lines starting with '%' or '#' not counted."""
    lines, nonblank, n = 0, 0, buf.shape[0]
    while i < n:
        i = _k_blank(buf, i)
        c = buf[i]
        if c != 37 and c != 35:
            lines += 1
            nonblank += c != 10
        while buf[i] != 10:
            i += 1
        i += 1
    return lines, nonblank


@nb.njit(nogil=True, cache=True)
def _k_metis(buf, i, line, n, front, edge_weights, indptr, indices):  # pragma: no cover - compiled
    """Read the vertex lines of a METIS graph from byte ``i`` (after the header, which is line ``line``):
    ``front`` leading integers (vertex size and weights) are skipped, then 1-based neighbours, each followed
    by an edge weight when ``edge_weights``; neighbour ``j`` of vertex ``v`` becomes ``indices[...] = j - 1``
    and ``indptr[v + 1]`` ends the row. '%' lines are comments; a blank line is a vertex without neighbours;
    after ``n`` vertex lines only blank lines may follow. Returns ``(status, line, line_start, vertices,
    entries)``: status 0 or a code of ``_METIS_ERRORS`` for line ``line`` that starts at ``line_start``.
    """
    size, cap = buf.shape[0], indices.shape[0]
    v, e = 0, 0
    while i < size:
        line += 1
        start = i
        i = _k_blank(buf, i)
        if buf[i] == 37 or buf[i] == 35:  # a comment
            while buf[i] != 10:
                i += 1
            i += 1
            continue
        if v == n:
            if buf[i] != 10:
                return 6, line, start, v, e
            i += 1
            continue
        for _ in range(front):
            if buf[i] == 10:
                return 5, line, start, v, e
            _, status, i = _k_int_field(buf, i)
            if status != 0:
                return status, line, start, v, e
            i = _k_blank(buf, i)
        while buf[i] != 10:
            value, status, i = _k_int_field(buf, i)
            if status != 0:
                return status, line, start, v, e
            if value < 1 or value > n:
                return 7, line, start, v, e
            if e == cap:
                return 8, line, start, v, e
            indices[e] = value - 1
            e += 1
            i = _k_blank(buf, i)
            if edge_weights:
                if buf[i] == 10:
                    return 9, line, start, v, e
                _, status, i = _k_int_field(buf, i)
                if status != 0:
                    return status, line, start, v, e
                i = _k_blank(buf, i)
        v += 1
        indptr[v] = e
        i += 1
    return 0, line, 0, v, e


def _metis_header(data: bytes, file: Path | None) -> tuple[int, int, str, int, int, int]:
    """``(n, m, fmt as 3 digits, ncon, header line number, byte after the header line)`` of a METIS file; the
    header is the first line that is neither blank nor a '%' comment. ``file=None``: a malformed header raises
    a bare ValueError (for :func:`_is_metis`)."""
    pos, line = 0, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        line += 1
        text = data[pos:end].strip()
        if text and not text.startswith((b"%", b"#")):
            break
        pos = end + 1
    else:
        if file is None:
            raise ValueError
        raise ValueError(f"{file} holds no METIS header; expected a first line 'n m [fmt [ncon]]' (vertices, "
                         "edges, weight format, weights per vertex)")
    fields = text.split()
    valid = 2 <= len(fields) <= 4 and all(f.isdigit() for f in fields) and (
        len(fields) < 3 or (len(fields[2]) <= 3 and set(fields[2]) <= set(b"01")))
    if not valid:
        if file is None:
            raise ValueError
        raise ValueError(f"{file}, line {line}: expected a METIS header 'n m [fmt [ncon]]' (integers; fmt of up to "
                         f"three 0/1 digits), got {_line_text(data, pos)!r}")
    fmt = (fields[2].decode() if len(fields) >= 3 else "0").zfill(3)
    ncon = int(fields[3]) if len(fields) == 4 else 1
    return int(fields[0]), int(fields[1]), fmt, ncon, line, end + 1


def _metis_adjacency(data: bytes, file: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr [n+1], indices [2m], 0-based)`` of a METIS file; ``file=None``: any problem raises a bare
    ValueError (for :func:`_is_metis`), else an error naming the file, the line and what was expected."""
    n, m, fmt, ncon, line, pos = _metis_header(data, file)
    front = int(fmt[0]) + (ncon if fmt[1] == "1" else 0)
    hint = "" if file is None else f"; is it an edge list? (read those with edgelist:{file})"
    if 2 * m > len(data):  # every entry takes at least a digit and a separator
        if file is None:
            raise ValueError
        raise ValueError(f"{file}: the METIS header says {m:,} edges, more than its {len(data):,} bytes can "
                         f"list{hint}")
    buf = np.frombuffer(data, dtype=np.uint8)
    indptr, indices = np.zeros(n + 1, dtype=np.int64), np.empty(2 * m, dtype=np.int64)
    status, line, start, vertices, entries = _k_metis(buf, pos, line, n, front, fmt[2] == "1", indptr, indices)
    if file is None and (status or vertices != n or entries != 2 * m):
        raise ValueError
    if status:
        what = _METIS_ERRORS[status].format(n=n, entries=2 * m, front=front, fmt=fmt)
        raise ValueError(f"{file}, line {line}: {what}, got {_line_text(data, start)!r}"
                         f"{hint if status in (6, 7, 8) else ''}")
    if vertices != n:
        raise ValueError(f"{file}: the METIS header says {n:,} vertices but only {vertices:,} vertex lines follow"
                         f"{hint}")
    if entries != 2 * m:
        raise ValueError(f"{file}: the METIS header says {m:,} edges, so 2*m = {2 * m:,} adjacency entries (every "
                         f"undirected edge listed by both ends), but the vertex lines hold {entries:,}{hint}")
    return indptr, indices


def _is_metis(data: bytes) -> bool:
    """Whether the text ``data`` is a METIS graph: a header ``n m [fmt [ncon]]`` and exactly ``n`` vertex lines
    after it whose entries parse as 1-based neighbours, ``2*m`` of them, and either vary in number from line to
    line (an edge list has two ids on every line) or list every edge from both ends. Cheap for edge lists:
    only a file whose line count after the first line matches the first number is parsed."""
    try:
        n, _, _, _, _, pos = _metis_header(data, None)
    except ValueError:
        return False
    lines, nonblank = _k_count_lines(np.frombuffer(data, dtype=np.uint8), pos)
    if not nonblank <= n <= lines:
        return False
    try:
        indptr, indices = _metis_adjacency(data, None)
    except ValueError:
        return False
    degrees = np.diff(indptr)
    if degrees.size and degrees.min() != degrees.max():
        return True
    dst = np.repeat(np.arange(n, dtype=np.int64), degrees)
    return np.array_equal(np.sort(dst * n + indices), np.sort(indices * n + dst))


def read_metis(file: str | Path) -> Graph:
    """Read a METIS graph file (the input format of METIS / KaHIP / Chaco).

    The first line that is not a '%' comment is the header ``n m [fmt [ncon]]``: ``n`` vertices, ``m``
    undirected edges (each counted once), ``fmt`` up to three 0/1 digits ``[sizes][weights][edge weights]``
    (leading zeros may be left out: ``1`` = edge weights, ``11`` = vertex and edge weights, ``100`` = vertex
    sizes) and ``ncon`` weights per vertex (default 1). Then one line per vertex ``1..n``: its size and
    weights when ``fmt`` says so, then its neighbours (1-based), each followed by the edge's weight when
    ``fmt`` says so; a blank line is a vertex without neighbours. Sizes and weights are checked to be
    integers and dropped. The vertex lines must hold ``2*m`` neighbour entries (every edge from both ends);
    the graph is symmetrised, duplicates and self-loops dropped. There are no features or labels.

    Raises:
        ValueError: a malformed header or line (file and line named), a neighbour outside ``1..n``, fewer or
            more vertex lines than ``n``, or an entry count other than ``2*m``.
    """
    file = _require(Path(file), "a METIS graph file (a header 'n m [fmt [ncon]]', then one line per vertex)")
    data = _text_bytes(file, "a METIS graph")
    indptr, indices = _metis_adjacency(data, file)
    del data
    n = indptr.size - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return _build(indices, dst, n, name=file.stem, num_classes=0, source=f"metis:{file.resolve()}")


# ------------------------------------------------------------------ musae
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
        bad = next(i for i, v in enumerate(ids) if not _is_int(v))
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
    target_file = _require(folder / f"{prefix}_target.csv", f"the MUSAE labels ({prefix}_target.csv)")
    features_file = next((f for f in (folder / f"{prefix}.json", folder / f"{prefix}_features.json") if f.exists()),
                         None)
    node_ids, values, column, id_column = _musae_targets(target_file, label, folder)
    n = node_ids.size
    if n == 0 or not np.array_equal(np.sort(node_ids), np.arange(n)):
        raise ValueError(f"{target_file}: the {id_column!r} column must list every node 0..N-1 exactly once "
                         f"({n} rows, ids {int(node_ids.min(initial=0))}..{int(node_ids.max(initial=-1))})")
    classes, class_names = _class_ids(values)
    y = np.empty(n, dtype=np.int64)
    y[node_ids] = classes
    edges = read_int_pairs(edges_file, "node ids")
    if edges.size and edges.max() >= n:
        raise ValueError(f"{edges_file} names node {int(edges.max())} but {target_file} has only {n} nodes")
    x = None if features_file is None else _musae_features(features_file, n)
    options = f"{seed}" if label is None else f"label={label},seed={seed}"
    graph = _build(edges[:, 0], edges[:, 1], n, x=x, y=y, masks=per_class_split(y, seed), name=prefix,
                   num_classes=len(class_names), source=f"musae:{folder.resolve()}:{options}")
    graph.meta["class_names"] = class_names
    graph.meta["label_column"] = column
    return graph


# -------------------------------------------------------------------- mat
# Variable names the common .mat graphs use: BlogCatalog / Flickr / PPI / POS (network, group), Facebook100
# (A, local_info), and other spellings seen in the wild.
MAT_ADJACENCY_NAMES = ("network", "A", "adj", "adjacency", "net", "G", "W")
MAT_LABEL_NAMES = ("group", "labels", "label", "Label", "gnd", "y", "Y", "class", "local_info")
_MAT_READ_ERRORS = (ValueError, TypeError, OSError, EOFError, NotImplementedError, IndexError, KeyError,
                    zlib.error, struct.error)


def _mat_variables(file: Path) -> dict:
    """The variables of a MATLAB ``.mat`` file (v4 to v7) by name; other file kinds are refused by name."""
    import scipy.io
    from scipy.io.matlab import MatReadError

    kind, text = _binary_kind(_head(file, "a MATLAB .mat file"))
    if kind and kind != "mat":
        raise _wrong_kind(file, kind, text, "a MATLAB .mat file")
    try:
        raw = scipy.io.loadmat(file)
    except (*_MAT_READ_ERRORS, MatReadError) as err:
        raise ValueError(f"{file} is not a readable MATLAB .mat file (v4 to v7): {err}") from None
    return {k: v for k, v in raw.items() if not k.startswith("__")}


def _is_matrix(value) -> bool:
    return sp.issparse(value) or (isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "biuf")


def _mat_listing(variables: dict) -> str:
    def describe(value) -> str:
        if sp.issparse(value):
            return f"sparse {value.shape[0]}x{value.shape[1]}"
        if isinstance(value, np.ndarray):
            return f"{value.dtype} {'x'.join(map(str, value.shape))}"
        return type(value).__name__
    return ", ".join(f"{k} ({describe(v)})" for k, v in variables.items()) or "no variables"


def _mat_pick(file: Path, variables: dict, role: str, option: str, name: str | None, known: tuple[str, ...],
              fits, exclude: tuple) -> str | None:
    """The variable holding ``role``: ``name`` when given, else the one known name among the variables that
    ``fits``, else the one variable that fits; ``None`` when none fits and ``role`` is the labels."""
    if name is not None:
        if name not in variables:
            raise ValueError(f"{file} has no variable {name!r} (for {option}=); it holds {_mat_listing(variables)}")
        if not _is_matrix(variables[name]) or not fits(variables[name]):
            raise ValueError(f"{file}: variable {name!r} ({_mat_listing({name: variables[name]})}) cannot be the "
                             f"{role}")
        return name
    fitting = [k for k, v in variables.items() if k not in exclude and _is_matrix(v) and fits(v)]
    named = [k for k in known if k in fitting]
    if len(named) == 1 or len(fitting) == 1:
        return (named or fitting)[0]
    if not fitting and option == "labels":
        return None
    raise ValueError(f"{file}: cannot tell which variable is the {role}, {len(fitting)} fit; it holds "
                     f"{_mat_listing(variables)}; choose with mat:{file}:adj=NAME,labels=NAME")


def read_mat(file: str | Path, adj: str | None = None, labels: str | None = None, features: str | None = None,
             column: int | None = None, seed: int = 0) -> Graph:
    """Read a graph from a MATLAB ``.mat`` file (v4 to v7, through ``scipy.io.loadmat``).

    The adjacency is the variable ``adj``, else the square matrix (sparse or dense; non-zeros are edges)
    named like ``network`` (BlogCatalog, Flickr) or ``A`` (Facebook100), else the only square matrix. The
    labels are the variable ``labels``, else the N-row matrix (or 1 x N vector) other than the adjacency
    named like ``group`` or ``local_info``, else the only one; a file without one has no labels. Labels (see
    :func:`_label_matrix`) are one column of integral class ids (renumbered ``0..C-1`` in increasing order,
    the values in ``meta['class_names']``), a one-hot matrix (a row of zeros = unlabelled) or, when some row
    has several 1s, a multi-label 0/1 matrix kept as uint8 ``[N, C]`` (``Graph.multilabel``). ``column``
    takes column K (0-based) of the label matrix as class ids (Facebook100's ``local_info`` holds several
    attributes). Features come only from the variable ``features`` (float32, dense). Split: single-label
    graphs get :func:`per_class_split` with ``seed`` (20 per class train, 30 val, the rest test);
    multi-label graphs get none.

    Raises:
        ValueError: not a readable .mat (another kind of file is named as such), a variable that is absent or
            does not fit, or no unambiguous adjacency / labels (the message lists the variables).
    """
    file = _require(Path(file), "a MATLAB .mat file")
    variables = _mat_variables(file)
    adj_name = _mat_pick(file, variables, "adjacency (a square matrix)", "adj", adj, MAT_ADJACENCY_NAMES,
                         lambda v: v.shape[0] == v.shape[1] > 1, ())
    matrix = variables[adj_name]
    n = matrix.shape[0]
    label_name = _mat_pick(file, variables, f"labels (a matrix with {n} rows)", "labels", labels, MAT_LABEL_NAMES,
                           lambda v: v.shape[0] == n or v.shape == (1, n), (adj_name, features))
    x = None
    if features is not None:
        _mat_pick(file, variables, f"features (a matrix with {n} rows)", "features", features, (),
                  lambda v: v.shape[0] == n, ())
        x = variables[features]
        x = (x.toarray() if sp.issparse(x) else x).astype(np.float32)
    if sp.issparse(matrix):
        coo = matrix.tocoo()
        src, dst = coo.row, coo.col
    else:
        src, dst = np.nonzero(matrix)
    y = masks = class_names = None
    num_classes = 0
    if label_name is not None:
        y, num_classes, class_names = _label_matrix(variables[label_name], n, f"{file}: labels {label_name!r}",
                                                    column)
        masks = None if y.ndim == 2 else per_class_split(y, seed)
    elif column is not None:
        raise ValueError(f"{file}: column={column} given but no labels variable found; it holds "
                         f"{_mat_listing(variables)}")
    options = ",".join(f"{k}={v}" for k, v in (("adj", adj_name), ("labels", label_name), ("features", features),
                                               ("column", column), ("seed", seed)) if v is not None)
    graph = _build(src, dst, n, x=x, y=y, masks=masks, name=file.stem, num_classes=num_classes,
                   source=f"mat:{file.resolve()}:{options}")
    graph.meta["variables"] = {"adj": adj_name, "labels": label_name, "features": features}
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph


# ------------------------------------------------------------- dispatch
def _split_option(arg: str, accept) -> tuple[str, str | None]:
    """``PATH[:OPTION]``: take the part after the last colon as OPTION when ``accept(path, option)``."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and accept(head, tail):
        return head, tail
    return arg, None


# The options of the readers that take ``KIND:PATH:key=value,...`` (a bare number is the seed).
READER_OPTIONS = {"musae": {"label": str, "seed": int},
                  "mat": {"adj": str, "labels": str, "features": str, "column": int, "seed": int}}


def _split_options(arg: str) -> tuple[str, str | None]:
    """``PATH[:OPTIONS]`` where OPTIONS is a bare seed or ``key=value,...`` (unless ``arg`` names a file)."""
    return _split_option(arg, lambda path, option: (option.isdigit() or "=" in option) and not Path(arg).exists())


def _reader_options(spec: str, kind: str, text: str | None) -> dict:
    """``key=value,...`` (or a bare seed) of a ``kind:PATH:OPTIONS`` spec, values converted."""
    if not text:
        return {}
    allowed = READER_OPTIONS[kind]
    if text.isdigit():
        return {"seed": int(text)}
    out = {}
    for item in text.split(","):
        key, eq, value = (t.strip() for t in item.partition("="))
        if not eq or key not in allowed or not value:
            raise ValueError(f"dataset spec {spec!r}: bad option {item!r}; {kind}: takes "
                             f"{','.join(f'{k}=...' for k in allowed)} (or a bare seed)")
        if allowed[key] is int and not value.isdigit():
            raise ValueError(f"dataset spec {spec!r}: option {key} must be a non-negative integer, got {value!r}")
        out[key] = allowed[key](value)
    return out


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
    readers = {"planetoid", "npz", "ogb", "edgelist", "metis", "mat", "musae", "graphdir"}
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
    if kind == "metis":
        return read_metis(arg)
    if kind == "mat":
        file, options = _split_options(arg)
        return read_mat(file, **_reader_options(spec, kind, options))
    if kind == "musae":
        folder, options = _split_options(arg)
        return read_musae(folder, **_reader_options(spec, kind, options))
    return load_graph_dir(arg)


def untrainable_reason(spec: str, graph: Graph | None = None, features: str = "") -> str | None:
    """Why ``spec`` cannot be used for node classification, or ``None`` when it can.

    Without ``graph`` only the spec is looked at (an ``edgelist:`` or ``metis:`` never has node features,
    a ``mat:`` only with ``features=NAME``), so a caller can fail before loading anything; with ``graph``
    its features, labels and split are checked (also their values: :func:`node_data_problem`). ``features``
    is the run's ``--features``: with one, a graph needs no features of its own.
    """
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    featureless = {"edgelist": "a text edge list carries none", "metis": "a METIS graph file carries none",
                   "mat": "a .mat graph's features come only from a variable named as mat:FILE:features=NAME"}
    if not features and ((kind in ("edgelist", "metis") or (kind == "mat" and "features=" not in arg))
                         or (graph is not None and graph.x is None)):
        hint = ""
        if kind in featureless:
            hint = f" ({featureless[kind]})"
        elif kind == "musae":
            hint = " (its directory has no NAME.json or NAME_features.json)"
        return (f"dataset {spec!r} has no node features, which training needs{hint}; train on its structure with "
                "--features degree, onehot, random:D or learnable:D")
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
    outside ``[0, num_classes)`` other than ``-1`` (unlabelled), an unlabelled training node; for a multi-label
    ``[R, C]`` matrix, a value other than 0 or 1 or a width other than ``num_classes``.

    Args:
        x, y: features ``[R, F]`` (or ``None``: a learnable input) and labels ``[R]`` or ``[R, C]``.
        num_classes: the class count ``C``.
        train_mask: bool ``[R]`` or ``None``.
        ids: how to name row ``i`` in the message: ``ids[i]`` (default ``i``).
    """
    def node(i: int) -> int:
        return int(ids[i]) if ids is not None else i

    for start in range(0, 0 if x is None else x.shape[0], SCAN_ROWS):
        bad = np.flatnonzero(~np.isfinite(np.asarray(x[start: start + SCAN_ROWS])).all(axis=1))
        if bad.size:
            return f"features of node {node(start + int(bad[0]))} are not finite (NaN or infinity)"
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer):
        return f"labels must be integers, got dtype {y.dtype}"
    if y.ndim == 2:
        if y.shape[1] != num_classes:
            return f"the multi-label matrix has {y.shape[1]} columns but the graph has {num_classes} classes"
        bad = np.flatnonzero(((y != 0) & (y != 1)).any(axis=1))
        return f"node {node(int(bad[0]))} has a multi-label value other than 0 or 1" if bad.size else None
    bad = np.flatnonzero((y < -1) | (y >= num_classes))
    if bad.size:
        return f"node {node(int(bad[0]))} has label {int(y[bad[0]])}, outside [0, {num_classes}) and not -1"
    unlabelled = np.flatnonzero(np.asarray(train_mask) & (y == -1)) if train_mask is not None else []
    return f"training node {node(int(unlabelled[0]))} has no label (-1)" if len(unlabelled) else None


def describe_dataset(spec: str) -> dict:
    """Load ``spec`` and return its :meth:`Graph.summary` plus ``source`` (and ``labels`` for multi-label
    graphs, ``class_names``, ``relabelled`` = how many nodes got new ids, where the reader records them)."""
    graph = load_dataset(spec)
    out = {**graph.summary(), "source": graph.meta.get("source", spec)}
    if graph.multilabel:
        out["labels"] = f"multi-label: {int(graph.y.any(dim=1).sum())} labelled nodes, {int(graph.y.sum())} labels"
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

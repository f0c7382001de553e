"""The Planetoid reader (Kipf & Welling's / PyG's raw ``ind.NAME.*`` files and split) and the bundled Cora."""

from __future__ import annotations

import builtins
import codecs
import collections
import copyreg
import itertools
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, index_mask, require

PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


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
    require(path, f"a Planetoid file (a Planetoid directory holds ind.{prefix}.{{{','.join(PLANETOID_PARTS)}}})")
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
    masks = {"train_mask": index_mask(np.arange(n_train), n), "val_mask": index_mask(np.arange(n_train, n_train + 500), n),
             "test_mask": index_mask(test_index, n)}
    return build_graph(src, dst, n, x=features, y=labels, masks=masks, name=name, num_classes=ally.shape[1],
                  source=f"planetoid:{folder.resolve()}:{name}")


def cora_dir() -> Path:
    """The bundled Cora raw directory (``graphscale/data/cora/raw``)."""
    return Path(__file__).resolve().parent.parent / "cora" / "raw"


"""The gnn-benchmark / PPNP ``.npz`` reader (CSR adjacency, features, labels; seeded per-class split)."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphscale.data.graph import Graph
from graphscale.data.readers.common import binary_kind, build_graph, file_head, require, wrong_kind
from graphscale.data.readers.labels import label_matrix, per_class_split

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


def npz_layout(keys: set[str], file: Path) -> tuple[str, str]:
    """``(adjacency key pattern, sparse feature key pattern)`` of a gnn-benchmark ``.npz`` with these ``keys``;
    a missing adjacency part or missing labels is an error naming the keys found."""
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
    return adj_key, attr_key


def npz_labels(data, keys: set[str], n: int, file: Path) -> tuple[np.ndarray, int, list | None]:
    """``(labels, num_classes, class names or None)`` of an open gnn-benchmark ``.npz`` with ``n`` nodes; class ids
    that leave gaps (0..3 and 7) are renumbered ``0..C-1`` in increasing order, the original ids kept as the class
    names (``meta["class_names"]``); a label matrix is read by :func:`label_matrix`."""
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
            return y, int(used.size), [str(v) for v in used]
        return labels, int(labels.max(initial=-1)) + 1, None
    return label_matrix(labels, n, f"{file}: labels", choose="")


def _npz_contents(data, file: Path) -> tuple[sp.csr_matrix, np.ndarray | None, np.ndarray, int, list | None]:
    """``(adjacency, features or None, labels, num_classes, class names or None)`` of an open gnn-benchmark
    ``.npz`` (labels: :func:`npz_labels`)."""
    keys = set(data.files)
    adj_key, attr_key = npz_layout(keys, file)
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
    return (adj, attr, *npz_labels(data, keys, n, file))


def open_npz(file: Path):
    """``np.load`` of a gnn-benchmark ``.npz`` (lazy: members are read when indexed); a file that is missing, not a
    zip archive (another known format is named) or unreadable is a one-line error."""
    require(file, "a gnn-benchmark .npz file")
    kind, text = binary_kind(file_head(file, "a gnn-benchmark .npz file"))
    if kind != "zip":
        if kind:
            raise wrong_kind(file, kind, text, "a .npz archive")
        raise ValueError(f"{file} is not a readable .npz file: it does not start with a zip header (a .npz is a "
                         "zip archive of .npy arrays)")
    try:
        return np.load(file, allow_pickle=False)
    except _NPZ_READ_ERRORS as err:
        raise ValueError(f"{file} is not a readable .npz file (truncated or corrupt?): {err}") from None


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
    with open_npz(file) as data:
        adj, attr, labels, num_classes, class_names = _npz_contents(data, file)
    adj = adj.tocoo()
    masks = None if labels.ndim == 2 else per_class_split(labels, seed)
    graph = build_graph(adj.row, adj.col, adj.shape[0], x=attr, y=labels, masks=masks, name=file.stem,
                   num_classes=num_classes, source=f"npz:{file.resolve()}:{seed}")
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph



class NpzMember:
    """One array of a ``.npz`` read front to back a slice at a time, from its zip member (stored or deflated
    alike), never whole: ``shape``, ``dtype``, ``fortran_order`` and :meth:`read`. Use it as a context manager."""

    def __init__(self, file: Path, key: str) -> None:
        self.file, self.key = file, key
        self._zip = zipfile.ZipFile(file)
        try:
            names = set(self._zip.namelist())
            name = f"{key}.npy" if f"{key}.npy" in names else key
            self._f = self._zip.open(name)
            version = np.lib.format.read_magic(self._f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            self.shape, self.fortran_order, self.dtype = read_header(self._f)
        except (*_NPZ_READ_ERRORS, KeyError) as err:
            self.close()
            raise ValueError(f"{file}: cannot read array {key!r} (a truncated or corrupt .npz?): {err}") from None
        if self.dtype.hasobject:
            self.close()
            raise ValueError(f"{file}: array {key!r} holds Python objects; expected numbers")
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def read(self, count: int) -> np.ndarray:
        """The next ``count`` items (in storage order) as a flat array."""
        try:
            raw = self._f.read(count * self.dtype.itemsize)
        except _NPZ_READ_ERRORS as err:
            raise ValueError(f"{self.file}: cannot read array {self.key!r} (a truncated or corrupt .npz?): "
                             f"{err}") from None
        if len(raw) != count * self.dtype.itemsize:
            raise ValueError(f"{self.file}: array {self.key!r} ends early (a truncated or corrupt .npz?)")
        return np.frombuffer(raw, dtype=self.dtype)

    def close(self) -> None:
        if getattr(self, "_f", None) is not None:
            self._f.close()
        self._zip.close()

    def __enter__(self) -> NpzMember:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""On-disk graph directory (the binary edge stream lives in :mod:`graphscale.data.edge_stream`).

**Graph directory** (format ``graphscale-graph``, version 1)::

    DIR/meta.json        {"format", "version", "name", "num_nodes", "num_edges", "num_features",
                          "x_dtype", "num_classes", "arrays": [names of the .npy files present], "meta": {...},
                          "files": {"NAME.npy": {"bytes", "crc32"}, ...}}
    DIR/indptr.npy       int64 [N+1]   CSR by destination (see :mod:`graphscale.data.graph`)
    DIR/indices.npy      int64 [E]     source of every in-edge
    DIR/edge_weight.npy  float64 [E]   optional weight of every in-edge (aligned with indices; a conv's edge_weight)
    DIR/x.npy            float [N, F]  optional node features
    DIR/y.npy            int64 [N]     optional labels (-1 = unlabelled); uint8 [N, C] 0/1 when meta has label_width = C
    DIR/{train,val,test}_mask.npy  bool [N]  optional split

Arrays are plain ``.npy`` files, memory-mapped on load. ``meta.json`` also records, under ``files``, what every
array file was written with: ``{"indptr.npy": {"bytes": SIZE, "crc32": CRC}, ...}``, ``CRC`` being the CRC-32 of
the file's first and last MiB (:mod:`graphscale.data.integrity`). :func:`load_graph_dir` compares every file's
size and fingerprint with that record (reading at most 2 MiB per file, so loading stays fast) and refuses a file
that was truncated, extended or changed at either end since, naming it; a change confined to the middle of a file
larger than 2 MiB is caught only by ``verify=True`` checks of the values. A directory written before this record
existed loads without the check. A directory is written
into a sibling temporary directory and renamed into place, so a reader never
sees a half-written graph. :class:`GraphDirWriter` writes one in chunks
(destination rows in order, node rows in order) without holding the edge list
or the feature matrix in memory.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from graphscale.data.graph import Graph
from graphscale.data.integrity import check_files, file_fingerprint, reserve
from graphscale.data.siblings import _HOST, remove_dead_siblings, temp_sibling  # noqa: F401 - their home before

if TYPE_CHECKING:
    from typing_extensions import Self

GRAPH_FORMAT = "graphscale-graph"
GRAPH_FORMAT_VERSION = 1
NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask")
MASKS = ("train_mask", "val_mask", "test_mask")
FEATURE_DTYPES = ("float16", "float32", "float64")


# ---------------------------------------------------------------- helpers
def _json_value(value):
    return value.item() if isinstance(value, np.generic) else str(value)


def json_safe(value):
    """``value`` with every NaN or infinite float (also NumPy's) replaced by ``None``, so that it is written as
    ``null``: strict JSON has no ``NaN`` token (metrics are ``nan`` where undefined, e.g. a balance of nothing)."""
    if isinstance(value, dict):
        return {key: json_safe(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


def write_json_atomic(path: str | Path, payload, *, indent: int | None = 1, option: str = "") -> Path:
    """Write ``payload`` as strict JSON to ``path`` (:func:`graphscale.data.outputs.write_output`: a temporary
    sibling renamed over a regular file, so a reader never sees half a file; a FIFO or device written in place; a
    symlink's target replaced), ``option`` naming it in errors.

    The directory must exist (none is created). NumPy scalars are written as numbers, NaN and infinities as
    ``null`` (:func:`json_safe`), anything else JSON cannot hold as its ``str()``.
    """
    from graphscale.data.outputs import write_output

    text = json.dumps(json_safe(payload), indent=indent, default=_json_value, allow_nan=False)
    return Path(write_output(path, text.encode(), option=option))


def is_graph_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding a graphscale ``meta.json``."""
    meta = Path(path) / "meta.json"
    try:
        return json.loads(meta.read_text()).get("format") == GRAPH_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_output_dir(path: Path, overwrite: bool, kind: str, is_kind, overwrite_hint: str = "overwrite=True") -> None:
    """Refuse to write a ``kind`` directory over a file, a non-empty foreign directory, or (unless ``overwrite``) one.

    Args:
        path: the target directory.
        overwrite: whether an existing ``kind`` directory may be replaced.
        kind: what is written, for messages (e.g. ``"graph directory"``).
        is_kind: predicate recognising an existing ``kind`` directory.
        overwrite_hint: how the user allows overwriting, for messages.
    """
    if not path.exists():
        return
    if not path.is_dir():
        raise FileExistsError(f"{path} exists and is not a directory; refusing to write a {kind} there")
    if not any(path.iterdir()):
        return
    if not is_kind(path):
        raise FileExistsError(f"{path} exists, is not empty and is not a {kind} (no graphscale meta.json); "
                              "refusing to overwrite it")
    if not overwrite:
        raise FileExistsError(f"{kind} {path} already exists (pass {overwrite_hint} to replace it)")


def replace_dir(tmp: Path, path: Path) -> None:
    """Move the finished ``tmp`` directory to ``path``, replacing what was there (write-then-rename)."""
    if path.exists():
        old = temp_sibling(path, "old")
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(dtype),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _as_numpy(value) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _int_array(value, what: str, where: str) -> np.ndarray:
    """``value`` as a flat integer numpy array; anything else is an error naming ``what`` and ``where``."""
    array = _as_numpy(value).reshape(-1)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{where}: {what} must be integers, got dtype {array.dtype}")
    return array


def _json_meta(meta: dict) -> dict:
    """The JSON-serialisable entries of ``Graph.meta`` (tensors and arrays are not stored)."""
    out = {}
    for key, value in meta.items():
        if key == "num_classes":
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = value
    return out


# ------------------------------------------------------- graph directory
class GraphDirWriter:
    """Write a graph directory in chunks, atomically.

    Destination rows are appended in order with :meth:`append_rows`; node data
    (``x``, ``y``, masks) is appended in order with :meth:`append_nodes`, each
    array with its own cursor. Only the current chunk is held in memory: the
    CSR indices go straight to ``indices.npy`` and node arrays are written into
    ``np.lib.format.open_memmap`` files. :meth:`close` checks that every row was
    written, writes ``meta.json`` and renames the temporary directory into
    place; on an exception inside ``with`` the temporary directory is removed.

    Args:
        path: target directory; an existing graph directory is replaced, any other non-empty path is refused.
        num_nodes: ``N``.
        num_features: ``F``; ``0`` writes no ``x.npy``.
        x_dtype: feature dtype, one of ``float16``, ``float32``, ``float64``.
        labels: write ``y.npy``.
        masks: write the three split masks.
        num_classes: stored in ``meta.json`` (``None`` when unknown).
        name: graph name.
        meta: extra JSON-serialisable metadata (other entries are dropped).
        overwrite: replace an existing graph directory at ``path``.
        label_width: ``C`` > 0 writes ``y`` as a uint8 ``[N, C]`` multi-label matrix (``meta.json``:
            ``label_width``); 0 writes int64 class ids.
        edge_weight: write ``edge_weight.npy``: every :meth:`append_rows` gives its edges' weights.
    """

    def __init__(self, path: str | Path, num_nodes: int, *, num_features: int = 0, x_dtype: str = "float32",
                 labels: bool = True, masks: bool = True, num_classes: int | None = None, name: str = "graph",
                 meta: dict | None = None, overwrite: bool = True, label_width: int = 0,
                 edge_weight: bool = False) -> None:
        self.path = Path(path)
        if num_nodes < 0 or num_features < 0:
            raise ValueError(f"GraphDirWriter({self.path}): num_nodes and num_features must be >= 0, "
                             f"got {num_nodes} and {num_features}")
        if x_dtype not in FEATURE_DTYPES:
            raise ValueError(f"GraphDirWriter({self.path}): x_dtype must be one of {FEATURE_DTYPES}, got {x_dtype!r}")
        check_output_dir(self.path, overwrite, "graph directory", is_graph_dir)
        self.num_nodes, self.num_features, self.x_dtype = num_nodes, num_features, x_dtype
        self.num_classes, self.name, self.meta = num_classes, name, _json_meta(meta or {})
        self.label_width = int(label_width)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temp_sibling(self.path, "tmp")
        self._tmp.mkdir()
        try:
            self._indptr = np.lib.format.open_memmap(self._tmp / "indptr.npy", "w+", np.int64, (num_nodes + 1,))
            self._indptr[0] = 0
            self._indices = open(self._tmp / "indices.npy", "wb")  # noqa: SIM115 - closed by close()/abort()
            self._indices.write(_npy_header(np.dtype("<i8"), (0,)))
            self._weights = None
            if edge_weight:
                self._weights = open(self._tmp / "edge_weight.npy", "wb")  # noqa: SIM115 - closed by close()/abort()
                self._weights.write(_npy_header(np.dtype("<f8"), (0,)))
            shapes = {"x": ((num_nodes, num_features), x_dtype),
                      "y": ((num_nodes, self.label_width), "uint8") if self.label_width else ((num_nodes,), "int64")}
            shapes.update({m: ((num_nodes,), "bool") for m in MASKS})
            wanted = (["x"] if num_features else []) + (["y"] if labels else []) + (list(MASKS) if masks else [])
            self._nodes = {k: np.lib.format.open_memmap(self._tmp / f"{k}.npy", "w+", shapes[k][1], shapes[k][0])
                           for k in wanted}
            for key in ["indptr", *wanted]:
                reserve(self._tmp / f"{key}.npy")
        except BaseException:
            self.abort()
            raise
        self._node_cursor = dict.fromkeys(self._nodes, 0)
        self._rows = 0
        self._edges = 0
        self._closed = False
        self._csr_linked = False
        self._linked: list[str] = []

    def append_rows(self, counts, indices, weights=None) -> None:
        """Append the in-edges of the next ``len(counts)`` destination rows.

        Args:
            counts: in-degree of each of the next rows, shape ``[k]``.
            indices: their sources, row after row, shape ``[sum(counts)]``, ids in ``[0, N)``.
            weights: their weights ``[sum(counts)]`` (finite), given exactly when the writer has ``edge_weight``.
        """
        self._check_open()
        where = f"GraphDirWriter({self.path})"
        counts = _int_array(counts, "row counts", where).astype(np.int64, copy=False)
        indices = _int_array(indices, "source ids", where)
        k = counts.size
        if self._rows + k > self.num_nodes:
            raise ValueError(f"GraphDirWriter({self.path}): {self._rows + k} rows appended, "
                             f"but the graph has {self.num_nodes}")
        if k and counts.min() < 0:
            raise ValueError(f"GraphDirWriter({self.path}): negative row count")
        if int(counts.sum()) != indices.size:
            raise ValueError(f"GraphDirWriter({self.path}): counts sum to {int(counts.sum())} "
                             f"but {indices.size} indices were given")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= self.num_nodes):
            raise ValueError(f"GraphDirWriter({self.path}): source ids must lie in [0, {self.num_nodes}), got "
                             f"[{int(indices.min())}, {int(indices.max())}]")
        if (weights is None) != (self._weights is None):
            raise ValueError(f"{where}: edge weights must be given with every row exactly when the writer has "
                             f"edge_weight=True (it has {self._weights is not None})")
        if weights is not None:
            weights = _as_numpy(weights).astype("<f8", copy=False)
            if weights.shape != indices.shape or not np.isfinite(weights).all():
                raise ValueError(f"{where}: edge weights must be {indices.size} finite values, one per source id")
        self._indptr[self._rows + 1: self._rows + 1 + k] = self._edges + np.cumsum(counts)
        indices.astype("<i8", copy=False).tofile(self._indices)
        if weights is not None:
            weights.tofile(self._weights)
        self._rows += k
        self._edges += indices.size

    def link(self, source: str | Path, arrays=("indptr", "indices")) -> None:
        """Take whole arrays of the graph directory ``source`` (of this writer's ``num_nodes``) instead of writing
        them: the CSR (``indptr``, ``indices``; no row may have been appended) and node arrays whose shape and
        dtype match this writer's (none of their rows appended). Hard-linked where both lie on one file system
        (graph directories are never changed in place, so the files can be shared), else copied by the kernel."""
        self._check_open()
        source = Path(source)
        meta = _read_meta(source)
        where = f"GraphDirWriter({self.path}).link({source})"
        if meta["num_nodes"] != self.num_nodes:
            raise ValueError(f"{where}: the source has {meta['num_nodes']} rows, this writer {self.num_nodes}")
        if ("indptr" in arrays) != ("indices" in arrays) or ("edge_weight" in arrays) > ("indices" in arrays):
            raise ValueError(f"{where}: link indptr and indices together (and edge_weight with them)")
        if ("edge_weight" in arrays) != (self._weights is not None) and "indices" in arrays:
            raise ValueError(f"{where}: link edge_weight exactly when the writer has edge_weight=True")
        for name in arrays:
            target = self._tmp / f"{name}.npy"
            if name == "edge_weight":
                self._weights.close()
            elif name in ("indptr", "indices"):
                if self._rows:
                    raise ValueError(f"{where}: {self._rows} CSR rows were appended already")
                if name == "indices":
                    self._indices.close()
                    self._rows, self._edges, self._csr_linked = self.num_nodes, int(meta["num_edges"]), True
                self._indptr = None if name == "indptr" else self._indptr
            else:
                if name not in self._nodes or self._node_cursor[name]:
                    raise ValueError(f"{where}: node array {name!r} is not an empty array of this writer")
                expected = (self._nodes[name].shape, self._nodes[name].dtype)
                found = np.load(source / f"{name}.npy", mmap_mode="r")
                if (found.shape, found.dtype) != expected:
                    raise ValueError(f"{where}: {name} has shape {found.shape} and dtype {found.dtype}, this "
                                     f"writer's {expected[0]} and {expected[1]}")
                del self._nodes[name], self._node_cursor[name]
                self._linked.append(name)
            target.unlink()
            try:
                os.link(source / f"{name}.npy", target)
            except OSError:
                shutil.copyfile(source / f"{name}.npy", target)

    def append_nodes(self, **arrays) -> None:
        """Append the next rows of node arrays (``x``, ``y``, ``train_mask``, ``val_mask``, ``test_mask``)."""
        self._check_open()
        for key, value in arrays.items():
            if key not in self._nodes:
                raise ValueError(f"GraphDirWriter({self.path}): unknown or disabled node array {key!r}; "
                                 f"this writer accepts {sorted(self._nodes)}")
            target = self._nodes[key]
            value = _as_numpy(value)
            start = self._node_cursor[key]
            if value.shape[1:] != target.shape[1:] or start + len(value) > self.num_nodes:
                raise ValueError(f"GraphDirWriter({self.path}): {key} rows {start}..{start + len(value)} of shape "
                                 f"{value.shape[1:]} do not fit the array of shape {target.shape}")
            target[start: start + len(value)] = value
            self._node_cursor[key] = start + len(value)

    def close(self) -> Path:
        """Check completeness, write ``meta.json`` and move the directory into place; returns ``path``."""
        self._check_open()
        missing = [f"{k} ({c} of {self.num_nodes} rows)" for k, c in self._node_cursor.items() if c != self.num_nodes]
        if self._rows != self.num_nodes:
            missing.insert(0, f"CSR ({self._rows} of {self.num_nodes} rows)")
        if missing:
            self.abort()
            raise ValueError(f"GraphDirWriter({self.path}): incomplete graph, missing {', '.join(missing)}")
        try:
            if not self._csr_linked:
                self._indices.seek(0)
                self._indices.write(_npy_header(np.dtype("<i8"), (self._edges,)))
                self._indices.close()
                self._indptr.flush()
                if self._weights is not None:
                    self._weights.seek(0)
                    self._weights.write(_npy_header(np.dtype("<f8"), (self._edges,)))
                    self._weights.close()
            for array in self._nodes.values():
                array.flush()
            present = [k for k in NODE_ARRAYS if k in self._nodes or k in self._linked]
            meta = {"format": GRAPH_FORMAT, "version": GRAPH_FORMAT_VERSION, "name": self.name,
                    "num_nodes": self.num_nodes, "num_edges": self._edges, "num_features": self.num_features,
                    "x_dtype": self.x_dtype if "x" in present else None, "num_classes": self.num_classes,
                    "arrays": ["indptr", "indices", *(["edge_weight"] if self._weights is not None else []),
                               *present], "meta": self.meta,
                    **({"label_width": self.label_width} if self.label_width else {})}
            self._release()
            meta["files"] = {f"{k}.npy": file_fingerprint(self._tmp / f"{k}.npy") for k in meta["arrays"]}
            (self._tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            replace_dir(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return self.path

    def abort(self) -> None:
        """Discard everything written so far."""
        self._release()
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._closed = True

    def _release(self) -> None:
        for f in (getattr(self, "_indices", None), getattr(self, "_weights", None)):
            if f is not None and not f.closed:
                f.close()
        self._indptr = None
        self._nodes = {}

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"GraphDirWriter({self.path}) is already closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()


def writer_options(graph: Graph, path: str | Path) -> dict:
    """The :class:`GraphDirWriter` arguments (all but ``path``, ``num_nodes`` and ``overwrite``) that write ``graph``
    as :func:`save_graph_dir` does; a graph with only some split masks is refused (``path`` named)."""
    x_dtype = "float32" if graph.x is None else str(graph.x.dtype).removeprefix("torch.")
    present = [m for m in MASKS if getattr(graph, m) is not None]
    if present and len(present) != len(MASKS):
        raise ValueError(f"save_graph_dir({path}): the graph has only some split masks ({present}); "
                         "give all three or none")
    return {"num_features": graph.num_features, "x_dtype": x_dtype, "labels": graph.y is not None,
            "masks": bool(present),
            "num_classes": graph.num_classes if (graph.y is not None or "num_classes" in graph.meta) else None,
            "name": graph.name, "meta": graph.meta, "label_width": int(graph.y.shape[1]) if graph.multilabel else 0,
            "edge_weight": graph.edge_weight is not None}


def save_graph_dir(graph: Graph, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``graph`` as a graph directory (atomically; see the module docstring).

    Args:
        graph: the graph; ``meta`` entries that are not JSON-serialisable are not stored.
        path: target directory.
        overwrite: replace an existing graph directory (a non-graph directory is always refused).

    Returns:
        ``path``.
    """
    with GraphDirWriter(path, graph.num_nodes, overwrite=overwrite, **writer_options(graph, path)) as writer:
        writer.append_rows(graph.in_degrees(), graph.indices, graph.edge_weight)
        writer.append_nodes(**{k: getattr(graph, k) for k in NODE_ARRAYS
                               if getattr(graph, k) is not None and (k != "x" or graph.num_features)})
    return Path(path)


def _expected_arrays(meta: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    n, e = meta["num_nodes"], meta["num_edges"]
    width = int(meta.get("label_width") or 0)
    out = {"indptr": ((n + 1,), "int64"), "indices": ((e,), "int64"), "edge_weight": ((e,), "float64"),
           "y": ((n, width), "uint8") if width else ((n,), "int64"),
           "x": ((n, meta["num_features"]), meta.get("x_dtype") or "float32")}
    out.update({m: ((n,), "bool") for m in MASKS})
    return out


def read_versioned_meta(path: Path, fmt: str, version: int, what: str) -> dict:
    """``path/meta.json`` of a ``what`` (e.g. "graph directory"), checked to declare ``format`` and ``version``.

    Raises:
        FileNotFoundError: no ``meta.json``.
        ValueError: not JSON, another format, or an unsupported version.
    """
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file} is missing: {path} is not a {what}")
    try:
        meta = json.loads(meta_file.read_text())
    except ValueError as err:
        raise ValueError(f"{meta_file} is not valid JSON: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise ValueError(f"{meta_file}: 'format' must be {fmt!r}")
    if meta.get("version") != version:
        raise ValueError(f"{meta_file}: unsupported version {meta.get('version')!r}, "
                         f"this graphscale reads version {version}")
    return meta


def read_graph_meta(path: str | Path) -> dict:
    """The checked ``meta.json`` of graph directory ``path`` (sizes and array names; no array is opened)."""
    return _read_meta(Path(path))


def _read_meta(path: Path) -> dict:
    meta_file = path / "meta.json"
    if not path.is_dir():
        raise FileNotFoundError(f"graph directory {path} does not exist; expected a directory with meta.json, "
                                "indptr.npy, indices.npy and optionally x.npy, y.npy, *_mask.npy")
    meta = read_versioned_meta(path, GRAPH_FORMAT, GRAPH_FORMAT_VERSION, "graph directory")
    for key in ("num_nodes", "num_edges", "num_features", "arrays"):
        if key not in meta:
            raise ValueError(f"{meta_file}: required field {key!r} is missing")
    unknown = set(meta["arrays"]) - {"indptr", "indices", "edge_weight", *NODE_ARRAYS}
    if unknown or not {"indptr", "indices"} <= set(meta["arrays"]):
        raise ValueError(f"{meta_file}: 'arrays' must include indptr and indices and only name edge_weight, "
                         f"{', '.join(NODE_ARRAYS)}; got {meta['arrays']}")
    return meta


def load_graph_dir(path: str | Path, *, mmap: bool = True, verify: bool = False) -> Graph:
    """Load a graph directory, memory-mapping its arrays.

    Every array file's shape and dtype are checked against ``meta.json``, then its size and fingerprint against
    what ``meta.json`` records (:func:`~graphscale.data.integrity.check_files`).

    With ``mmap=True`` arrays are mapped copy-on-write (``mmap_mode='c'``): pages
    are read on first touch, and an in-place update of a tensor changes only
    this process's copy, never the file.

    Args:
        path: the directory.
        mmap: memory-map the arrays instead of reading them into memory.
        verify: also check the contents (``indptr`` non-decreasing, ids in range,
            labels below ``num_classes``); this reads every array once.

    Returns:
        The :class:`Graph`; ``meta`` holds the stored metadata, ``num_classes`` and ``source``.
    """
    path = Path(path)
    meta = _read_meta(path)
    expected = _expected_arrays(meta)
    arrays = {}
    for key in meta["arrays"]:
        file = path / f"{key}.npy"
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing but {path / 'meta.json'} lists {key!r}")
        try:
            array = np.load(file, mmap_mode="c" if mmap else None, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise ValueError(f"{file} is not a readable .npy file: {err}") from None
        shape, dtype = expected[key]
        if array.shape != shape or array.dtype != np.dtype(dtype):
            raise ValueError(f"{file} has shape {array.shape} and dtype {array.dtype}; meta.json expects "
                             f"shape {shape} and dtype {dtype}")
        arrays[key] = array
    check_files(path, meta)
    indptr = arrays["indptr"]
    if indptr[0] != 0 or indptr[-1] != meta["num_edges"]:
        raise ValueError(f"{path / 'indptr.npy'} must run from 0 to num_edges={meta['num_edges']}, "
                         f"got {indptr[0]}..{indptr[-1]}")
    if verify:
        _verify_arrays(path, meta, arrays)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    extra = dict(meta.get("meta") or {})
    if meta.get("num_classes") is not None:
        extra["num_classes"] = int(meta["num_classes"])
    extra.setdefault("source", f"graphdir:{path}")
    return Graph(tensors.pop("indptr"), tensors.pop("indices"), name=meta.get("name", path.name), meta=extra,
                 **tensors)


def _verify_arrays(path: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    n = meta["num_nodes"]
    if np.any(np.diff(arrays["indptr"]) < 0):
        raise ValueError(f"{path / 'indptr.npy'} is not non-decreasing")
    indices = arrays["indices"]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"{path / 'indices.npy'} has ids outside [0, {n})")
    y, classes = arrays.get("y"), meta.get("num_classes")
    if y is not None and y.ndim == 2 and y.size and y.max() > 1:
        raise ValueError(f"{path / 'y.npy'} is a multi-label matrix with values other than 0 and 1")
    if y is not None and y.ndim == 1 and y.size and (y.min() < -1 or (classes is not None and y.max() >= classes)):
        raise ValueError(f"{path / 'y.npy'} has labels outside [-1, {classes})")

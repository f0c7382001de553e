"""The partition store: one directory per partitioned graph, one sub-directory per partition.

Format ``graphscale-partitions``, version 1::

    DIR/meta.json          {"format", "version", "method", "params", "num_parts", "num_nodes", "num_edges",
                            "num_features", "x_dtype", "num_classes", "node_arrays", "vertex_cut_edges", "multilabel",
                            "source", "metrics": {...}, "parts": [{"num_inner", "num_halo", "num_edges"}, ...]}
    DIR/owner.npy          int16/int32 [N]  home partition of every original vertex
    DIR/perm.npy           int64 [N]        the PartitionBook: global id i is original vertex perm[i]
    DIR/boundaries.npy     int64 [p+1]      part s owns global ids [boundaries[s], boundaries[s+1])
    DIR/part-00000/        one per partition:
        meta.json          {"part", "num_parts", "num_inner", "num_halo", "num_local", "num_edges", "arrays"}
        indptr.npy         int64 [L+1]  local CSR by destination over the L = num_inner + num_halo local vertices
        indices.npy        int64 [nnz]  local source of every in-edge (rows sorted, no duplicates)
        orig_ids.npy       int64 [L]    original id of every local vertex
        global_ids.npy     int64 [L]    global (book) id of every local vertex
        degree.npy         int64 [L]    global in-degree (records with that vertex as destination)
        halo_owner.npy     int16/int32 [num_halo]  home partition of every halo vertex
        x.npy y.npy train_mask.npy val_mask.npy test_mask.npy   node data, local rows (when present; y is a
                           uint8 [L, num_classes] 0/1 matrix when meta.json says "multilabel": true); absent for
                           the arrays a store written by reference reads from its base graph directory instead
                           (meta.json "node_data_base": :mod:`graphscale.partition.store_base`)
        edge_weight.npy weighted_degree.npy   float64 [nnz], [L]: a weighted graph's (meta.json "weighted": true)
                           edge weights and weighted in-degrees (:mod:`graphscale.partition.store_weights`)

Local ids ``[0, num_inner)`` are the partition's inner (home) vertices in
global-id order (which is original-id order), so inner local ``i`` is global
``boundaries[s] + i``; local ids ``[num_inner, L)`` are the halo vertices in
global-id order. The local edge set holds every record ``u -> v`` with
``owner[v] = s`` (so an inner vertex's row is exactly its global in-neighbour
set), plus, for vertex-cut partitioners with ``vertex_cut_edges``, the records
the vertex cut placed on ``s``; then every record whose source is a halo vertex
is added reversed, so halo vertices see their edges too (SDT-GNN's
``to_bidirected``; for a symmetric graph an inner row is unchanged by this).
Masks are set only on inner vertices: halo replicas are never targets.
With ``halo_hops = K > 1`` (``meta.json`` records it) a part also holds every
record whose destination lies within ``K - 1`` in-hops of its home vertices
(found by ``K - 1`` streaming passes over 64-part bitsets, 8 bytes per vertex
per 64 parts), and nothing is added reversed: every local vertex within
``K - 1`` hops has its exact global in-neighbour row, so an ``L``-layer
forward with ``K = L`` is exact for home vertices (SDT-GNN's K-hop option).

Writing is :mod:`graphscale.partition.store_writer`'s. Reading (:func:`load_partition`) touches only the
store's ``meta.json`` and that partition's directory (and, for a store written by reference, that partition's
rows of its base graph directory, gathered into memory or into a private mapped file:
:mod:`graphscale.partition.store_rows_file`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphscale.data.formats import check_output_dir, read_versioned_meta
from graphscale.data.graph import Graph
from graphscale.partition.book import PartitionBook
from graphscale.partition.store_base import BASE_KEY, check_base, part_rows, referenced

STORE_FORMAT = "graphscale-partitions"
STORE_VERSION = 1
NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask")
MASKS = ("train_mask", "val_mask", "test_mask")
PART_ARRAYS = ("indptr", "indices", "orig_ids", "global_ids", "degree", "halo_owner")


def part_dir(path: str | Path, part: int) -> Path:
    """The directory of partition ``part`` inside a store."""
    return Path(path) / f"part-{part:05d}"


def is_partition_store(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding a partition store's ``meta.json``."""
    try:
        return json.loads((Path(path) / "meta.json").read_text()).get("format") == STORE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_store_target(path: str | Path, overwrite: bool) -> None:
    """Refuse to write a store over a file, a non-empty non-store directory, or (unless ``overwrite``) a store."""
    check_output_dir(Path(path), overwrite, "partition store", is_partition_store, "--overwrite / overwrite=True")


def read_store_meta(path: str | Path) -> dict:
    """The store's ``meta.json``, checked for format and version."""
    return read_versioned_meta(Path(path), STORE_FORMAT, STORE_VERSION, "partition store")


def load_book(path: str | Path) -> PartitionBook:
    """The store's :class:`PartitionBook` (reads ``perm.npy`` and ``boundaries.npy``)."""
    meta = read_store_meta(path)
    perm = torch.from_numpy(np.load(Path(path) / "perm.npy"))
    boundaries = torch.from_numpy(np.load(Path(path) / "boundaries.npy"))
    if perm.shape != (meta["num_nodes"],) or boundaries.shape != (meta["num_parts"] + 1,):
        raise ValueError(f"{path}: perm.npy / boundaries.npy do not match meta.json "
                         f"({meta['num_nodes']} nodes, {meta['num_parts']} parts)")
    inv_perm = torch.empty_like(perm)
    inv_perm[perm] = torch.arange(perm.numel())
    return PartitionBook(meta["num_parts"], perm, inv_perm, boundaries)


def _check_npy(file: Path, shape: tuple, dtype=None) -> None:
    """``file`` is a readable ``.npy`` of ``shape`` (and ``dtype``), judged from its header and size alone."""
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing")
    try:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"{file} is not a readable .npy file (truncated or corrupted?): {err}") from None
    if tuple(array.shape) != tuple(shape) or (dtype is not None and array.dtype != np.dtype(dtype)):
        raise ValueError(f"{file} has shape {tuple(array.shape)} and dtype {array.dtype}; the store's meta.json "
                         f"expects shape {tuple(shape)}" + (f" and dtype {np.dtype(dtype)}" if dtype else ""))


def check_partition_store(path: str | Path) -> dict:
    """Validate a whole store from its metadata and array headers (no array data is read); returns its meta.

    Checks the format and version, the book files, a referencing store's base directory
    (:func:`~graphscale.partition.store_base.check_base`: present and unchanged, its referenced arrays' headers),
    and for every partition its ``meta.json`` and the shape and dtype of every array it lists (a truncated file
    fails the memory-map size check).

    Raises:
        FileNotFoundError: a missing store, ``meta.json`` or array file; a referencing store's missing base.
        ValueError: another format or version, an array of the wrong shape, dtype or size, inconsistent counts;
            a referencing store's changed base.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"partition store {path} does not exist (write one with `graphscale partition`)")
    meta = read_store_meta(path)
    try:
        n, p = int(meta["num_nodes"]), int(meta["num_parts"])
        num_features, parts = int(meta.get("num_features") or 0), meta["parts"]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path / 'meta.json'}: missing or malformed field {err}") from None
    if len(parts) != p:
        raise ValueError(f"{path / 'meta.json'}: lists {len(parts)} parts but num_parts is {p}")
    _check_npy(path / "owner.npy", (n,))
    _check_npy(path / "perm.npy", (n,), np.int64)
    _check_npy(path / "boundaries.npy", (p + 1,), np.int64)
    base = check_base(path, meta)
    if base is not None:
        _check_base_arrays(meta, base)
    for s in range(p):
        folder = part_dir(path, s)
        part_meta_file = folder / "meta.json"
        if not part_meta_file.is_file():
            raise FileNotFoundError(f"{part_meta_file} is missing: partition {s} of {path} is incomplete")
        try:
            pm = json.loads(part_meta_file.read_text())
            n_local, n_halo, n_edges = int(pm["num_local"]), int(pm["num_halo"]), int(pm["num_edges"])
            listed = list(pm["arrays"])
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{part_meta_file} is not a valid partition meta.json: {err}") from None
        missing = [name for name in PART_ARRAYS if name not in listed]
        if missing:
            raise ValueError(f"{part_meta_file} does not list the arrays {missing}")
        shapes = {"indptr": ((n_local + 1,), np.int64), "indices": ((n_edges,), np.int64),
                  "orig_ids": ((n_local,), np.int64), "global_ids": ((n_local,), np.int64),
                  "degree": ((n_local,), np.int64), "halo_owner": ((n_halo,), None),
                  "edge_weight": ((n_edges,), np.float64), "weighted_degree": ((n_local,), np.float64),
                  "x": ((n_local, num_features), meta.get("x_dtype")),
                  "y": ((n_local, int(meta.get("num_classes") or 0)) if meta.get("multilabel") else (n_local,), None)}
        shapes.update({m: ((n_local,), np.bool_) for m in MASKS})
        for name in listed:
            if name not in shapes:
                raise ValueError(f"{part_meta_file} lists an unknown array {name!r}")
            _check_npy(folder / f"{name}.npy", *shapes[name])
    return meta


def node_rows(store: str | Path, meta: dict, part: int, name: str, start: int = 0,
              stop: int | None = None) -> np.ndarray | None:
    """Local rows ``[start, stop)`` of part ``part``'s node array ``name``, from whichever store holds it: a
    read-only memory-mapped slice of the part's own file, rows gathered from the base directory, or ``None``
    when the store has no such array."""
    folder = part_dir(store, part)
    if name in referenced(meta):
        base = Path(meta[BASE_KEY]["path"])
        orig = np.load(folder / "orig_ids.npy", mmap_mode="r")
        return part_rows(base, name, orig, int(meta["parts"][part]["num_inner"]), start, stop)
    file = folder / f"{name}.npy"
    return np.load(file, mmap_mode="r")[start:stop] if file.is_file() else None


class PartRows:
    """Rows ``[0, stop)`` of a part's node array, read when sliced (``rows[a:b]``, the way a chunked scan reads
    them): a referenced array is never gathered whole."""

    def __init__(self, store: str | Path, meta: dict, part: int, name: str, stop: int) -> None:
        self.store, self.meta, self.part, self.name = store, meta, part, name
        first = node_rows(store, meta, part, name, 0, 0)
        self.shape, self.dtype = (stop, *first.shape[1:]), first.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("PartRows reads contiguous slices of rows only")
        start, stop, _ = key.indices(self.shape[0])
        return node_rows(self.store, self.meta, self.part, self.name, start, max(start, stop))


def _check_base_arrays(meta: dict, base: Path) -> None:
    """The referenced base files have the shapes and dtypes the store's ``meta.json`` describes (headers only)."""
    n = int(meta["num_nodes"])
    shapes = {"x": ((n, int(meta.get("num_features") or 0)), meta.get("x_dtype")),
              "y": ((n, int(meta.get("num_classes") or 0)) if meta.get("multilabel") else (n,), None)}
    for name in referenced(meta):
        _check_npy(base / f"{name}.npy", *shapes.get(name, ((n,), np.bool_)))


@dataclass
class LocalPartition:
    """One partition as stored: a local graph (inner rows first) and its id maps.

    Attributes:
        part, num_parts: which partition of how many.
        graph: local CSR over inner + halo vertices with local node data (masks only on inner vertices).
        num_inner: inner (home) vertices; they are local ids ``[0, num_inner)``.
        orig_ids, global_ids: original / global (book) id of every local vertex.
        degree: global in-degree of every local vertex (float64 weighted in-degree in a weighted store).
        halo_owner: home partition of every halo vertex.
        base: the base graph directory its referenced node arrays are read from (``None``: a copying store).
        referenced: the node arrays read from ``base``.
    """

    part: int
    num_parts: int
    graph: Graph
    num_inner: int
    orig_ids: torch.Tensor
    global_ids: torch.Tensor
    degree: torch.Tensor
    halo_owner: torch.Tensor
    base: Path | None = None
    referenced: tuple[str, ...] = ()

    @property
    def num_halo(self) -> int:
        return self.graph.num_nodes - self.num_inner

    def inner_rows(self, name: str, directory: str | Path | None = None) -> torch.Tensor | None:
        """Node array ``name``'s rows of the inner vertices (``None`` when the store has none): a view of the
        graph's array, or, when it was opened without gathering a referenced array, those rows alone gathered
        from the base directory: into a private file in ``directory``, memory-mapped, when given
        (:mod:`~graphscale.partition.store_rows_file`), else into memory."""
        value = getattr(self.graph, name)
        if value is not None:
            return value[: self.num_inner]
        if name not in self.referenced:
            return None
        return torch.from_numpy(part_rows(self.base, name, self.orig_ids.numpy(), self.num_inner, 0, self.num_inner,
                                          directory=None if directory is None else Path(directory)))

    def global_to_local(self, global_ids) -> torch.Tensor:
        """Global ids -> local ids; ``-1`` for ids not in this partition."""
        global_ids = torch.as_tensor(global_ids, dtype=torch.int64)
        out = torch.full_like(global_ids, -1)
        if self.num_inner:
            first = int(self.global_ids[0])
            inner = (global_ids >= first) & (global_ids < first + self.num_inner)
            out[inner] = global_ids[inner] - first
        halo = self.global_ids[self.num_inner:]
        if halo.numel():
            pos = torch.searchsorted(halo, global_ids).clamp(max=halo.numel() - 1)
            found = (halo[pos] == global_ids) & (out < 0)
            out[found] = pos[found] + self.num_inner
        return out


def load_partition(path: str | Path, part: int, *, mmap: bool = True, gather: bool = True,
                   rows_dir: str | Path | None = None) -> LocalPartition:
    """Read one partition of a store (only the store's ``meta.json`` and that partition's directory).

    Args:
        path: the store directory.
        part: partition index.
        mmap: memory-map the arrays (copy-on-write) instead of reading them.
        gather: for a store written by reference, gather the part's rows of every referenced node array from
            the base directory now (in bounded blocks); ``False`` leaves them out of the graph, for
            :meth:`LocalPartition.inner_rows` to gather the inner rows alone.
        rows_dir: with ``gather``, gather the feature rows (``x``) into a private file in this directory and map
            it (:mod:`~graphscale.partition.store_rows_file`: file pages, as a copying store's rows are) instead
            of into memory.

    Raises:
        FileNotFoundError / ValueError: a referencing store's base directory is missing or changed.
    """
    meta = read_store_meta(path)
    base = check_base(path, meta)
    names = referenced(meta)
    if not 0 <= part < meta["num_parts"]:
        raise ValueError(f"{path}: part {part} is out of range [0, {meta['num_parts']})")
    folder = part_dir(path, part)
    part_meta_file = folder / "meta.json"
    if not part_meta_file.is_file():
        raise FileNotFoundError(f"{part_meta_file} is missing: partition {part} of {path} is incomplete")
    part_meta = json.loads(part_meta_file.read_text())
    arrays = {}
    for name in part_meta["arrays"]:
        file = folder / f"{name}.npy"
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing but {part_meta_file} lists {name!r}")
        arrays[name] = torch.from_numpy(np.load(file, mmap_mode="c" if mmap else None))
    n_inner = part_meta["num_inner"]
    if gather:
        orig = arrays["orig_ids"].numpy()
        directory = None if rows_dir is None else Path(rows_dir)
        arrays.update({name: torch.from_numpy(part_rows(base, name, orig, n_inner,
                                                        directory=directory if name == "x" else None))
                       for name in names})
    node = {k: arrays[k] for k in NODE_ARRAYS if k in arrays}
    extra = {"source": f"partition {part} of {path}"}
    if meta.get("num_classes") is not None:
        extra["num_classes"] = int(meta["num_classes"])
    graph = Graph(arrays["indptr"], arrays["indices"], name=f"{Path(path).name}/part-{part}", meta=extra,
                  edge_weight=arrays.get("edge_weight"), **node)
    return LocalPartition(part, meta["num_parts"], graph, n_inner, arrays["orig_ids"], arrays["global_ids"],
                          arrays.get("weighted_degree", arrays["degree"]), arrays["halo_owner"], base, names)

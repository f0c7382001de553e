"""Ingest: a dataset spec written as a graph directory in bounded memory.

:func:`ingest` writes the graph directory (:mod:`graphscale.data.formats`) whose arrays and ``meta.json`` equal
``save_graph_dir(load_dataset(spec), out_dir)``, holding per-vertex arrays (O(N)) and fixed-size chunks, never
the whole edge list or feature matrix, for the spec forms that can be large (:func:`streams`):

* ``edgelist:FILE[:LABELS]``: the text is parsed in blocks (the same lines, errors and METIS refusal as the
  reader); the pairs are spilled to a scratch file while the distinct ids are collected (a sorted array, O(N)),
  then read back, relabelled ``0..N-1`` when the ids are not exactly ``0..max`` (``searchsorted`` in that array),
  and fed to the out-of-core CSR builder (:class:`~graphscale.data.external_csr.ExternalCSR`: symmetrised,
  deduplicated, self-loops dropped). The labels file is per node and read whole.
* ``ogb:DIR[:SPLIT]``: labels and split (per node) read whole, ``raw/edge.csv.gz`` and ``raw/node-feat.csv.gz``
  in chunks of rows.
* ``npz:FILE[:SEED]``: the adjacency's ``indptr`` and the labels (per node) read whole, its ``indices`` and the
  features (sparse CSR parts or a dense C-order ``attr_matrix``) read from their zip members front to back, a
  chunk at a time, whether stored or compressed (a Fortran-order dense matrix is read whole).
* ``sbm:`` / ``rmat:``: :func:`graphscale.data.synthetic.generate_to_dir`.
* ``graphdir:DIR``: the directory is loaded memory-mapped (its integrity checked) and copied a chunk of rows at a
  time.

Every other spec (the bundled or small formats: ``cora``, ``planetoid:``, ``metis:``, ``mat:``, ``musae:``) is
loaded whole and saved. The output is written into a temporary sibling and renamed into place, the scratch files
lie in another sibling, and both are removed on any failure. Free disk space is checked up front against the
estimate ``N * (F * itemsize + 10) + E * 8`` bytes plus the scratch files (:func:`estimate_bytes`); a disk that
fills (or a file-size limit hit) while writing is a :class:`DiskFullError` naming the path and the bytes needed.
"""

from __future__ import annotations

import errno
import gzip
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from graphscale.data import synthetic
from graphscale.data.datasets import load_dataset, split_option, weighted_option
from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.external_csr import ExternalCSR
from graphscale.data.formats import (
    MASKS,
    GraphDirWriter,
    check_output_dir,
    is_graph_dir,
    load_graph_dir,
    read_graph_meta,
    save_graph_dir,
    temp_sibling,
    writer_options,
)
from graphscale.data.readers.common import require
from graphscale.data.readers.edgelist import node_labels
from graphscale.data.readers.labels import per_class_split
from graphscale.data.readers.metis import is_metis_file
from graphscale.data.readers.npz import NpzMember, npz_labels, npz_layout, open_npz
from graphscale.data.readers.ogb import iter_csv_gz, ogb_name, ogb_node_data, ogb_root, read_csv_gz
from graphscale.data.readers.text import iter_int_pairs
from graphscale.data.resplit import write_resplit
from graphscale.errors import RunError
from graphscale.metrics.units import format_bytes

#: the spec kinds :func:`ingest` writes in bounded memory
STREAMED_KINDS = ("edgelist", "ogb", "npz", "sbm", "rmat", "graphdir")
#: errno values of a full disk, a quota or a file-size limit
DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
#: bytes per vertex beyond its features in the estimate (indptr 8, label 8 or less, three masks... rounded)
BYTES_PER_VERTEX = 10

Progress = Callable[[str, int, int], None]


class DiskFullError(RunError):
    """The disk (or a quota, or a file-size limit) cannot hold the graph directory; the message names the path and
    the bytes needed, and nothing half-written is left behind."""


def streams(spec: str) -> bool:
    """Whether :func:`ingest` writes ``spec`` in bounded memory (its kind is one of :data:`STREAMED_KINDS`)."""
    kind, sep, _ = spec.strip().partition(":")
    return bool(sep) and kind.lower() in STREAMED_KINDS


def estimate_bytes(num_nodes: int, num_features: int, itemsize: int, edges: int) -> int:
    """About how many bytes a graph directory of these sizes takes: ``N * (F * itemsize + 10) + E * 8``."""
    return num_nodes * (num_features * itemsize + BYTES_PER_VERTEX) + edges * 8


class _Job:
    """One ingest's output, scratch directory, progress callback and disk budget."""

    def __init__(self, out_dir: Path, chunk_edges: int, progress: Progress | None, overwrite: bool) -> None:
        self.out_dir, self.chunk_edges, self.overwrite = out_dir, chunk_edges, overwrite
        self.progress = progress or (lambda step, done, total: None)
        self.need: int | None = None
        self.scratch = temp_sibling(out_dir, "scratch")

    def check_space(self, output: int, scratch: int = 0) -> None:
        """Refuse when the disk under the output has less free space than ``output + scratch`` bytes."""
        self.need = output + scratch
        free = shutil.disk_usage(_existing(self.out_dir.parent)).free
        if free < self.need:
            raise DiskFullError(f"not enough disk space for the graph directory {self.out_dir}: it needs about "
                                f"{self.need} bytes ({format_bytes(self.need)}; output {format_bytes(output)}, "
                                f"scratch {format_bytes(scratch)}) but {_existing(self.out_dir.parent)} has "
                                f"{free} bytes ({format_bytes(free)}) free")

    def csr(self, num_nodes: int, expected_records: int | None = None) -> ExternalCSR:
        return ExternalCSR(self.scratch / "csr", num_nodes, chunk_edges=self.chunk_edges,
                           expected_records=expected_records)

    def writer(self, num_nodes: int, **options) -> GraphDirWriter:
        return GraphDirWriter(self.out_dir, num_nodes, overwrite=self.overwrite, **options)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def ingest(spec: str, out_dir: str | Path, *, chunk_edges: int = DEFAULT_CHUNK_EDGES, progress: Progress | None = None,
           overwrite: bool = True, split: dict | None = None) -> Path:
    """Write the dataset ``spec`` as the graph directory ``out_dir`` in bounded memory (module docstring).

    Args:
        spec: a dataset spec (:data:`graphscale.data.datasets.DATASET_HELP`).
        out_dir: the graph directory to write.
        chunk_edges: records (and text, feature or node rows, in proportion) held in memory at a time.
        progress: ``progress(step, done, total)`` as work advances (``total`` 0 when unknown).
        overwrite: replace an existing graph directory at ``out_dir`` (any other non-empty path is refused).
        split: a new split for a ``graphdir:`` spec (:func:`graphscale.data.resplit.parse_split`): the
            directory's other arrays are shared, not copied (:mod:`graphscale.data.resplit`).

    Returns:
        ``out_dir``; its arrays and ``meta.json`` equal ``save_graph_dir(load_dataset(spec), out_dir)``'s.

    Raises:
        ValueError, FileNotFoundError: a bad spec or input file (one line naming it), as :func:`load_dataset`.
        FileExistsError: ``out_dir`` is not replaceable.
        DiskFullError: not enough disk space (checked up front, or found full while writing).
    """
    if not isinstance(chunk_edges, int) or chunk_edges < 1:
        raise ValueError(f"ingest: chunk_edges must be a positive integer, got {chunk_edges!r}")
    spec = spec.strip()
    out_dir = Path(out_dir)
    check_output_dir(out_dir, overwrite, "graph directory", is_graph_dir, "--overwrite, or overwrite=True")
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    job = _Job(out_dir, chunk_edges, progress, overwrite)
    if split is not None and (kind != "graphdir" or not arg):
        raise ValueError(f"--split: applies to a graph directory (graphdir:DIR), got {spec!r}; the synthetic "
                         "generators take train= and val= in their spec")
    try:
        if split is not None:
            job.check_space(3 * (read_graph_meta(arg)["num_nodes"] + 128) + 4096)  # masks and meta.json: the rest
            # is linked (copied, and not counted here, only where the output lies on another file system)
            job.progress("split", 0, 1)
            write_resplit(Path(arg), out_dir, split, overwrite=overwrite)
            job.progress("split", 1, 1)
        elif not streams(spec):
            save_graph_dir(load_dataset(spec), out_dir, overwrite=overwrite)
        elif kind in synthetic.PARAMS:
            _synthetic(job, f"{kind}:{arg}")
        elif not arg:
            raise ValueError(f"dataset spec {spec!r} needs a path: {kind}:PATH")
        elif kind == "graphdir":
            _graphdir(job, Path(arg))
        elif kind == "edgelist" and weighted_option(arg)[1]:  # a weighted edge list is read whole
            save_graph_dir(load_dataset(spec), out_dir, overwrite=overwrite)
        elif kind == "edgelist":
            file, labels = split_option(arg, lambda f, lab: not Path(arg).exists() and Path(f).is_file())
            _edgelist(job, Path(file), labels)
        elif kind == "ogb":
            folder, split = split_option(arg, lambda d, s: not Path(arg).exists() and Path(d).is_dir())
            _ogb(job, Path(folder), split)
        else:
            file, seed = split_option(arg, lambda f, s: s.isdigit() and not Path(arg).exists())
            _npz(job, Path(file), int(seed or 0))
    except OSError as err:
        if err.errno not in DISK_ERRNOS:
            raise
        where = Path(err.filename) if err.filename else out_dir
        if where.parent.name.startswith(f".{out_dir.name}.tmp-"):  # a file of the temporary output: its final name
            where = out_dir / where.name
        need = f"; it needs about {job.need} bytes ({format_bytes(job.need)})" if job.need else ""
        raise DiskFullError(f"{where}: {err.strerror or 'no space left'} while writing the graph directory {out_dir}"
                            f"{need}; nothing was left behind") from None
    finally:
        shutil.rmtree(job.scratch, ignore_errors=True)
    return out_dir


# ---------------------------------------------------------------- synthetic and graph directories
def _synthetic(job: _Job, spec: str) -> None:
    kind, params = synthetic.parse_spec(spec)
    n = params.get("nodes") or 2 ** (params.get("scale") or 14)
    records = 2 * params["edges"] if params.get("edges") else int(n * params["degree"])
    job.check_space(estimate_bytes(n, params["features"], 4, records), 8 * records)
    per_node = max(1, int(np.ceil(2 * (records / max(n, 1)))))
    job.progress("generate", 0, 0)
    synthetic.generate_to_dir(spec, job.out_dir, chunk_nodes=max(1, job.chunk_edges // per_node),
                              overwrite=job.overwrite)
    job.progress("generate", 1, 1)


def _graphdir(job: _Job, source: Path) -> None:
    graph = load_graph_dir(source)
    n = graph.num_nodes
    job.check_space(sum(f.stat().st_size for f in source.glob("*.npy")))
    indptr = graph.indptr.numpy()
    options = writer_options(graph, job.out_dir)
    with job.writer(n, **options) as writer:
        row = 0
        while row < n:
            end = max(row + 1, int(np.searchsorted(indptr, indptr[row] + job.chunk_edges, side="right")) - 1)
            end = min(end, n)
            writer.append_rows(np.diff(indptr[row: end + 1]), graph.indices.numpy()[indptr[row]: indptr[end]])
            row = end
            job.progress("copy CSR", row, n)
        names = (["x"] if options["num_features"] else []) + (["y"] if options["labels"] else []) + \
            (list(MASKS) if options["masks"] else [])
        for key in names:
            array = getattr(graph, key).numpy()
            step = _node_rows(job, array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)))
            for start in range(0, n, step):
                writer.append_nodes(**{key: array[start: start + step]})
                job.progress(f"copy {key}", min(start + step, n), n)


def _node_rows(job: _Job, row_bytes: int) -> int:
    """Node rows per chunk: about ``chunk_edges`` records' worth of bytes (8 each)."""
    return max(1, 8 * job.chunk_edges // max(row_bytes, 1))


# ---------------------------------------------------------------- edge lists
class _DistinctIds:
    """The sorted distinct ids seen so far, merged in amortised batches (O(distinct ids) memory)."""

    def __init__(self, batch: int) -> None:
        self.ids, self._pending, self._pending_size, self._batch = np.empty(0, np.int64), [], 0, batch

    def add(self, values: np.ndarray) -> None:
        values = np.unique(values)
        self._pending.append(values)
        self._pending_size += values.size
        if self._pending_size > max(self.ids.size, self._batch):
            self.merge()

    def merge(self) -> np.ndarray:
        if self._pending:
            self.ids = np.unique(np.concatenate([self.ids, *self._pending]))
            self._pending, self._pending_size = [], 0
        return self.ids


def _edgelist(job: _Job, file: Path, labels: str | None) -> None:
    file = require(file, "a text edge list (one 'src dst' pair per line)")
    block = max(64, 8 * job.chunk_edges)
    if is_metis_file(file, block):
        raise ValueError(f"{file} is a METIS graph file (a header 'n m', then one line of neighbours per vertex), "
                         f"not an edge list; read it with metis:{file}")
    size = file.stat().st_size
    job.scratch.mkdir(parents=True)
    raw = job.scratch / "pairs.bin"
    distinct = _DistinctIds(job.chunk_edges)
    pairs_total, done = 0, 0
    with open(raw, "wb") as out:
        for pairs in iter_int_pairs(file, "node ids", block):
            pairs.tofile(out)
            distinct.add(pairs)
            pairs_total += pairs.shape[0]
            done = min(size, done + block)
            job.progress("read edges", done, size)
    job.progress("read edges", size, size)
    if pairs_total == 0:
        raise ValueError(f"{file} holds no edges (expected lines 'src dst'; '#'/'%' lines are comments)")
    ids = distinct.merge()
    n = ids.size
    original = None if int(ids[-1]) == n - 1 else ids
    if original is None:
        del ids
    job.check_space(estimate_bytes(n, 0, 0, 2 * pairs_total), 16 * pairs_total)
    y, masks, num_classes, class_names, source = node_labels(file, labels, n, original)
    meta = {"num_classes": num_classes, "source": source, **({"class_names": class_names} if class_names else {})}
    with job.csr(n, pairs_total) as csr, open(raw, "rb") as f:
        done = 0
        while (pairs := np.fromfile(f, dtype=np.int64, count=2 * job.chunk_edges)).size:
            pairs = pairs.reshape(-1, 2)
            if original is not None:
                pairs = np.searchsorted(original, pairs)
            csr.add(pairs[:, 0], pairs[:, 1])
            done += pairs.shape[0]
            job.progress("spill edges", done, pairs_total)
        raw.unlink()
        _write(job, n, csr, y=y, masks=masks, num_classes=num_classes, name=file.stem, meta=meta)


def _write(job: _Job, n: int, csr: ExternalCSR, *, y, masks, num_classes: int, name: str, meta: dict,
           features: Iterator[np.ndarray] | None = None, num_features: int = 0,
           feature_error: Callable[[int], str] | None = None) -> None:
    """The graph directory from ``csr``'s rows, ``y``, ``masks`` and the feature row blocks ``features``."""
    label_width = int(y.shape[1]) if y is not None and y.ndim == 2 else 0
    with job.writer(n, num_features=num_features, labels=y is not None, masks=masks is not None,
                    num_classes=num_classes, name=name, meta=meta, label_width=label_width) as writer:
        csr.write(writer, job.progress)
        if y is not None:
            writer.append_nodes(y=y)
        if masks is not None:
            writer.append_nodes(**masks)
        rows = 0
        for block in features or ():
            if rows + block.shape[0] > n:
                raise ValueError(feature_error(rows + block.shape[0]))
            writer.append_nodes(x=block)
            rows += block.shape[0]
            job.progress("write features", rows, n)
        if num_features and rows != n:
            raise ValueError(feature_error(rows))


# ---------------------------------------------------------------- OGB
def _ogb(job: _Job, folder: Path, split: str | None) -> None:
    root = ogb_root(folder)
    raw = root / "raw"
    n, y, masks, split = ogb_node_data(root, split)
    edge_file = require(raw / "edge.csv.gz", "OGB edges (src,dst rows)")
    feat_file = raw / "node-feat.csv.gz"
    rows = max(1, job.chunk_edges)
    features = iter_csv_gz(feat_file, np.float32, _node_rows(job, 4 * _csv_width(feat_file))) \
        if feat_file.exists() else None
    first = next(features, None) if features is not None else None
    num_features = 0 if features is None else (first.shape[1] if first is not None and first.size else 0)
    if features is not None and num_features == 0 and n:
        raise ValueError(f"{feat_file} has 0 rows but the graph has {n} nodes")
    edges_hint = None
    if (raw / "num-edge-list.csv.gz").exists():
        edges_hint = int(read_csv_gz(raw / "num-edge-list.csv.gz", np.int64).reshape(-1)[0])
    job.check_space(estimate_bytes(n, num_features, 4, 2 * (edges_hint or 0)), 16 * (edges_hint or 0))
    job.scratch.mkdir(parents=True)
    with job.csr(n, edges_hint) as csr:
        done = 0
        for edges in iter_csv_gz(edge_file, np.int64, rows):
            if edges.size and edges.shape[1] != 2:
                raise ValueError(f"{edge_file}: expected 2 columns (src,dst), got {edges.shape[1]}")
            if edges.size and (edges.min() < 0 or edges.max() >= n):
                raise ValueError(f"{edge_file} has node ids outside [0, {n})")
            edges = edges.reshape(-1, 2)
            csr.add(edges[:, 0], edges[:, 1])
            done += edges.shape[0]
            job.progress("read edges", done, edges_hint or 0)
        blocks = None if features is None else _chained(first, features)
        _write(job, n, csr, y=y, masks=masks, num_classes=int(y.max(initial=-1)) + 1, name=ogb_name(root),
               meta={"num_classes": int(y.max(initial=-1)) + 1, "source": f"ogb:{root.resolve()}:{split}"},
               features=blocks, num_features=num_features,
               feature_error=lambda got: f"{feat_file} has {got} rows but the graph has {n} nodes")


def _csv_width(file: Path) -> int:
    """Columns of the first line of a ``.csv.gz`` (1 when it cannot be read: the chunked read names the error)."""
    try:
        with gzip.open(file, "rt") as f:
            return max(1, f.readline().count(",") + 1)
    except (OSError, EOFError, UnicodeDecodeError):
        return 1


def _chained(first: np.ndarray | None, rest: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    if first is not None:
        yield first
    yield from rest


# ---------------------------------------------------------------- npz
def _npz(job: _Job, file: Path, seed: int) -> None:
    with open_npz(file) as data:
        keys = set(data.files)
        adj_key, attr_key = npz_layout(keys, file)
        shape = tuple(int(s) for s in np.asarray(data[adj_key.format("shape")]).reshape(-1))
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"{file}: {adj_key.format('shape')} must hold two equal numbers (a square "
                             f"adjacency), got {shape}")
        n = shape[0]
        indptr = np.asarray(data[adj_key.format("indptr")], dtype=np.int64).reshape(-1)
        labels, num_classes, class_names = npz_labels(data, keys, n, file)
        sparse_attr = attr_key.format("data") in keys
        attr_indptr = attr_shape = None
        if sparse_attr:
            attr_shape = tuple(int(s) for s in np.asarray(data[attr_key.format("shape")]).reshape(-1))
            attr_indptr = np.asarray(data[attr_key.format("indptr")], dtype=np.int64).reshape(-1)
    with NpzMember(file, adj_key.format("indices")) as indices, NpzMember(file, adj_key.format("data")) as values:
        nnz = indices.size
        if values.size != nnz:
            raise ValueError(f"{file}: inconsistent sparse arrays {adj_key.format('*')}: {values.size} data values "
                             f"for {nnz} indices")
        if indptr.size != n + 1 or indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
            raise ValueError(f"{file}: inconsistent sparse arrays {adj_key.format('*')}: indptr must run from 0 to "
                             f"the {nnz} indices over {n} rows, non-decreasing")
        feature_members, num_features, dense = _npz_features(file, keys, attr_key, sparse_attr, attr_shape,
                                                              attr_indptr, n)
        itemsize = 4
        job.check_space(estimate_bytes(n, num_features, itemsize, 2 * nnz), 16 * nnz)
        job.scratch.mkdir(parents=True)
        masks = None if labels.ndim == 2 else per_class_split(labels, seed)
        meta = {"num_classes": num_classes, "source": f"npz:{file.resolve()}:{seed}",
                **({"class_names": class_names} if class_names is not None else {})}
        with job.csr(n, nnz) as csr:
            for start in range(0, nnz, job.chunk_edges):
                cols = indices.read(min(job.chunk_edges, nnz - start)).astype(np.int64)
                if cols.size and (cols.min() < 0 or cols.max() >= n):
                    raise ValueError(f"{file}: {adj_key.format('indices')} has ids outside [0, {n})")
                rows = np.searchsorted(indptr, np.arange(start, start + cols.size), side="right") - 1
                csr.add(rows, cols)
                job.progress("read edges", start + cols.size, nnz)
            blocks = None
            if feature_members is not None:
                step = _node_rows(job, 4 * max(num_features, 1))
                blocks = (_dense_blocks if dense else _sparse_blocks)(feature_members, attr_indptr, n,
                                                                       num_features, step)
            try:
                _write(job, n, csr, y=labels, masks=masks, num_classes=num_classes, name=file.stem, meta=meta,
                       features=blocks, num_features=num_features,
                       feature_error=lambda got: f"{file}: features must have one row per node ({n}), got {got}")
            finally:
                for member in feature_members or ():
                    member.close()


def _npz_features(file: Path, keys: set[str], attr_key: str, sparse: bool, shape, indptr, n: int):
    """``(open members, F, dense)`` of the features of a ``.npz`` (``(None, 0, False)`` without features)."""
    if sparse:
        if len(shape) != 2 or shape[0] != n or indptr.size != n + 1:
            raise ValueError(f"{file}: features {shape} must have one row per node ({n})")
        members = [NpzMember(file, attr_key.format("indices")), NpzMember(file, attr_key.format("data"))]
        if members[0].size != members[1].size or indptr[0] != 0 or indptr[-1] != members[0].size:
            for member in members:
                member.close()
            raise ValueError(f"{file}: inconsistent sparse arrays {attr_key.format('*')}")
        return members, shape[1], False
    if "attr_matrix" not in keys:
        return None, 0, False
    member = NpzMember(file, "attr_matrix")
    if len(member.shape) != 2 or member.shape[0] != n:
        member.close()
        raise ValueError(f"{file}: features {member.shape} must have one row per node ({n})")
    return [member], member.shape[1], True


def _sparse_blocks(members, indptr: np.ndarray, n: int, num_features: int, step: int) -> Iterator[np.ndarray]:
    import scipy.sparse as sp

    indices, values = members
    for start in range(0, n, step):
        end = min(n, start + step)
        ptr = indptr[start: end + 1] - indptr[start]
        count = int(ptr[-1])
        block = sp.csr_matrix((values.read(count), indices.read(count), ptr), shape=(end - start, num_features))
        yield block.toarray().astype(np.float32)


def _dense_blocks(members, _indptr, n: int, num_features: int, step: int) -> Iterator[np.ndarray]:
    (member,) = members
    if member.fortran_order:  # stored column by column: rows cannot be read in order
        whole = member.read(member.size).reshape(member.shape, order="F")
        for start in range(0, n, step):
            yield np.asarray(whole[start: start + step], dtype=np.float32)
        return
    for start in range(0, n, step):
        rows = min(step, n - start)
        yield member.read(rows * num_features).reshape(rows, num_features).astype(np.float32)

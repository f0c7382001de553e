"""Writing a partition store (the format is :mod:`graphscale.partition.store`'s): routing the records to their
partitions (K-hop reach included), building each partition's local CSR, and copying node data in chunks.

:func:`write_partition_store` streams the records once, in chunks,
spilling each partition's records to a scratch file, then builds one partition
at a time (its local CSR by an external bucket sort over ranges of rows, so
memory is O(|V|) id maps plus a few buffers of ``chunk_edges`` keys, whatever the
partition's size) and copies node data in chunks of at most
``feature_chunk_bytes`` (from arrays, or from ``.npy`` files through a memory
map opened per chunk; output rows are appended with plain writes), or, given the graph directory they come
from (``node_base``), records that directory instead of copying them (:mod:`graphscale.partition.store_base`).
Everything goes to a temporary sibling directory that is renamed into place at the end; an error leaves nothing
behind.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import torch

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.formats import replace_dir, temp_sibling
from graphscale.partition.base import validate_num_parts
from graphscale.partition.csr_source import chunk_reader
from graphscale.partition.metrics import MetricsAccumulator, PartitionMetrics, validate_assignment
from graphscale.partition.store import (
    MASKS,
    NODE_ARRAYS,
    PART_ARRAYS,
    STORE_FORMAT,
    STORE_VERSION,
    check_store_target,
    part_dir,
)
from graphscale.partition.store_base import BASE_KEY, base_record, block_rows
from graphscale.partition.streaming import ProgressFn, StreamRunner, as_edge_source, npy_header

DEFAULT_FEATURE_CHUNK_BYTES = 64 << 20


@numba.njit(nogil=True, cache=True)
def _route(src, dst, owner, edge_part, use_edge_part, deg, target, out_src, out_dst):  # pragma: no cover - numba
    """Copies of every record with their partitions; returns how many (one, or two for a vertex-cut copy)."""
    k = 0
    for i in range(src.size):
        u, v = src[i], dst[i]
        deg[v] += 1
        s = owner[v]
        target[k], out_src[k], out_dst[k] = s, u, v
        k += 1
        if use_edge_part and edge_part[i] != s:
            target[k], out_src[k], out_dst[k] = edge_part[i], u, v
            k += 1
    return k


@numba.njit(nogil=True, cache=True)
def _reach_pass(src, dst, cur, nxt):  # pragma: no cover - numba
    """One hop of in-neighbourhood growth: a record ``u -> v`` puts ``u`` in every set holding ``v``."""
    for i in range(src.size):
        u, v = src[i], dst[i]
        for w in range(cur.shape[1]):
            nxt[u, w] |= cur[v, w]


@numba.njit(nogil=True, cache=True)
def _route_reach(src, dst, reach, edge_part, use_edge_part, deg, count_only, target, out_src, out_dst):  # pragma: no cover - numba
    """Copies of every record ``u -> v`` for each partition whose set in ``reach[v]`` (bitsets of 64) holds
    ``v``, plus its vertex-cut partition; returns the number of copies (``count_only``: counts, writes nothing)."""
    k = 0
    for i in range(src.size):
        u, v = src[i], dst[i]
        if not count_only:
            deg[v] += 1
        for w in range(reach.shape[1]):
            bits = reach[v, w]
            b = 0
            while bits != 0:
                if bits & np.uint64(1):
                    if not count_only:
                        target[k], out_src[k], out_dst[k] = w * 64 + b, u, v
                    k += 1
                bits = bits >> np.uint64(1)
                b += 1
        if use_edge_part:
            s = edge_part[i]
            if (reach[v, s // 64] >> np.uint64(s % 64)) & np.uint64(1) == 0:
                if not count_only:
                    target[k], out_src[k], out_dst[k] = s, u, v
                k += 1
    return k


def _hop_sets(runner: StreamRunner, owner: np.ndarray, p: int, hops: int) -> np.ndarray:
    """``[N, ceil(p / 64)]`` uint64 bitsets: bit ``s`` of row ``v`` is set when ``v`` lies within ``hops``
    in-hops of a vertex partition ``s`` owns (``hops`` streaming passes; 8 bytes per vertex per 64 parts)."""
    n = owner.size
    cur = np.zeros((n, (p + 63) // 64), np.uint64)
    cur[np.arange(n), owner // 64] = np.left_shift(np.uint64(1), (owner % 64).astype(np.uint64))
    for hop in range(hops):
        nxt = cur.copy()
        for _, src, dst in runner.chunks(f"halo hop {hop + 1}"):
            _reach_pass(src, dst, cur, nxt)
        cur = nxt
    return cur


def _spill(files: list, target: np.ndarray, pairs: np.ndarray) -> None:
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(len(files) + 1))
    pairs = pairs[order]
    for s in np.flatnonzero(np.diff(bounds)):
        pairs[bounds[s]:bounds[s + 1]].tofile(files[s])


def _as_array(value) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


class _NodeArray:
    """A node-data source: an array / tensor (sliced directly) or a ``.npy`` path (a short-lived memory map per
    chunk, so pages read do not pile up in the resident set)."""

    def __init__(self, name: str, value, n: int) -> None:
        self.name = name
        if isinstance(value, (str, Path)):
            self.path, self.value = Path(value), None
            try:
                probe = np.load(self.path, mmap_mode="r")
            except (OSError, ValueError) as err:
                raise ValueError(f"node_data[{name!r}]: {self.path} is not a readable .npy file: {err}") from None
            self.shape, self.dtype = probe.shape, probe.dtype
            del probe
        else:
            self.path, self.value = None, value
            self.shape, self.dtype = tuple(value.shape), np.dtype(_as_array(value[:0]).dtype)
        if self.shape[:1] != (n,):
            raise ValueError(f"node_data[{name!r}] must have {n} rows, got shape {self.shape}")

    def whole(self) -> np.ndarray:
        """All rows: the array itself, or a memory map of the file (its pages are the file's, not the process's)."""
        if self.path is not None:
            return np.load(self.path, mmap_mode="r")
        return _as_array(self.value)

    def take(self, rows: np.ndarray) -> np.ndarray:
        if self.path is not None:
            mapped = np.load(self.path, mmap_mode="r")
            out = np.asarray(mapped[rows])
            del mapped
            return out
        if isinstance(self.value, torch.Tensor):
            return _as_array(self.value[torch.from_numpy(np.asarray(rows, np.int64))])
        return np.asarray(self.value[rows])


def _write_rows(source: _NodeArray, rows: np.ndarray, file: Path, chunk_bytes: int, dtype=None,
                zero_from: int | None = None) -> None:
    """Write ``source[rows]`` as a ``.npy`` file in chunks of about ``chunk_bytes`` (rows from ``zero_from`` on
    are written as zeros)."""
    dtype = np.dtype(dtype or source.dtype)
    shape = (rows.size, *source.shape[1:])
    step = block_rows(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize, chunk_bytes, source.path is not None)
    stop = rows.size if zero_from is None else zero_from
    with open(file, "wb") as f:
        f.write(npy_header(dtype, shape))
        for first in range(0, rows.size, step):
            last = min(first + step, rows.size)
            if last <= stop:  # (one chunk-sized copy: the gathered rows, written as they are)
                block = np.ascontiguousarray(source.take(rows[first:last]), dtype)
            else:
                block = np.zeros((last - first, *shape[1:]), dtype)
                if first < stop:
                    block[:stop - first] = source.take(rows[first:stop])
            f.write(memoryview(block.reshape(-1)).cast("B"))


@dataclass
class StoreSummary:
    """What :func:`write_partition_store` wrote: the path, the metrics, and the time it took."""

    path: Path
    metrics: PartitionMetrics
    seconds: float


@numba.njit(nogil=True, cache=True)
def _ranks(owner, rank, counts):  # pragma: no cover - numba
    """``rank[v]``: how many vertices before ``v`` its partition owns (``v``'s place in the partition's block of
    the book's permutation); ``counts[s]`` gains partition ``s``'s vertices."""
    for v in range(owner.size):
        s = owner[v]
        rank[v] = counts[s]
        counts[s] += 1


def _book(owner: np.ndarray, p: int, perm_file: Path, id_dtype) -> tuple[np.ndarray, np.ndarray]:
    """The partition book without its two int64 ``[N]`` permutations: ``perm.npy`` (the stable order of the
    vertices by partition, :class:`~graphscale.partition.book.PartitionBook`'s ``perm``) is written a partition at
    a time; returns ``(boundaries, rank)``, ``rank`` in ``id_dtype``: a vertex's global id (``inv_perm``) is
    ``boundaries[owner[v]] + rank[v]``."""
    rank, counts = np.empty(owner.size, id_dtype), np.zeros(p, np.int64)
    _ranks(owner, rank, counts)
    boundaries = np.zeros(p + 1, np.int64)
    np.cumsum(counts, out=boundaries[1:])
    with open(perm_file, "wb") as f:
        f.write(npy_header(np.int64, (owner.size,)))
        for s in range(p):
            np.flatnonzero(owner == s).tofile(f)
    return boundaries, rank


@numba.njit(nogil=True, cache=True)
def _mark_halo(pairs, owner, s, mark):  # pragma: no cover - numba
    """Mark the endpoints of ``pairs`` outside partition ``s``."""
    for i in range(pairs.shape[0]):
        u, v = pairs[i, 0], pairs[i, 1]
        if owner[u] != s:
            mark[u] = 1
        if owner[v] != s:
            mark[v] = 1


@numba.njit(nogil=True, cache=True)
def _local_keys(pairs, owner, s, lut, n_local, keys, reverse):  # pragma: no cover - numba
    """``dst_local * L + src_local`` of every record, plus (``reverse``) the reverse of every record whose
    source is halo."""
    k = 0
    for i in range(pairs.shape[0]):
        u, v = pairs[i, 0], pairs[i, 1]
        lu, lv = np.int64(lut[u]), np.int64(lut[v])
        keys[k] = lv * n_local + lu
        k += 1
        if reverse and owner[u] != s:
            keys[k] = lu * n_local + lv
            k += 1
    return k


@numba.njit(nogil=True, cache=True)
def _dedupe_rows(keys, n_local, counts):  # pragma: no cover - numba
    """Sorted keys of whole rows -> ``keys[:m]`` become the distinct sources row by row, ``counts[row]`` gains
    each row's distinct sources; returns ``m``."""
    m, prev = 0, -1
    for i in range(keys.size):
        key = keys[i]
        if key == prev:
            continue
        prev = key
        row = key // n_local
        counts[row] += 1
        keys[m] = key - row * n_local
        m += 1
    return m


@numba.njit(nogil=True, cache=True)
def _count_rows(keys, n_local, counts):  # pragma: no cover - numba
    for i in range(keys.size):
        counts[keys[i] // n_local] += 1


def _spill_chunks(spill: Path, id_dtype, chunk: int):
    """The spilled ``(u, v)`` records of a partition, ``chunk`` at a time."""
    with open(spill, "rb") as f:
        while True:
            pairs = np.fromfile(f, dtype=id_dtype, count=2 * chunk).reshape(-1, 2)
            if not pairs.shape[0]:
                return
            yield pairs


def _row_ranges(counts: np.ndarray, budget: int) -> np.ndarray:
    """Bounds ``[r_0 = 0, r_1, ..., L]`` of consecutive row ranges holding at most ``budget`` keys each (a row
    with more alone)."""
    bounds, row, total = [0], 0, np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=total[1:])
    while row < counts.size:
        row = max(row + 1, int(np.searchsorted(total, total[row] + budget, side="right")) - 1)
        bounds.append(min(row, counts.size))
    return np.asarray(bounds, np.int64)


def _local_csr(spill: Path, id_dtype, owner: np.ndarray, s: int, lut: np.ndarray, n_local: int, reverse: bool,
               chunk: int, out: Path) -> tuple[np.ndarray, int]:
    """Partition ``s``'s local CSR from its spilled records, in memory bounded by ``chunk`` keys (an external
    bucket sort by row ranges): ``indices.npy`` is written to ``out``; returns ``(indptr, num_edges)``."""
    width = np.int64(max(n_local, 1))
    keys = np.empty(2 * chunk, np.int64)
    keys_bytes = keys.nbytes  # also the copy buffer of indices.npy
    indptr = np.zeros(n_local + 1, np.int64)
    counts = indptr[1:]  # (the row counts, summed in place into the row pointers at the end)
    for pairs in _spill_chunks(spill, id_dtype, chunk):
        k = _local_keys(pairs, owner, s, lut, width, keys, reverse)
        _count_rows(keys[:k], width, counts)
    bounds = _row_ranges(counts, chunk)
    buckets = bounds.size - 1
    bucket_files = [out / f".keys-{b}.bin" for b in range(buckets)]
    held = []
    for pairs in _spill_chunks(spill, id_dtype, chunk):
        k = _local_keys(pairs, owner, s, lut, width, keys, reverse)
        if buckets == 1:
            held.append(keys[:k].copy())
            continue
        bucket = np.searchsorted(bounds, keys[:k] // width, side="right") - 1
        order = np.argsort(bucket, kind="stable")
        edges = np.searchsorted(bucket[order], np.arange(buckets + 1))
        part = keys[:k][order]
        for b in np.flatnonzero(np.diff(edges)):
            with open(bucket_files[b], "ab") as f:
                part[edges[b]:edges[b + 1]].tofile(f)
    del keys
    counts[:] = 0
    raw, m = out / ".indices.bin", 0
    with open(raw, "wb") as f:
        for b in range(buckets):
            if buckets == 1:
                block = np.concatenate(held) if held else np.empty(0, np.int64)
                held = []
            elif bucket_files[b].is_file():
                block = np.fromfile(bucket_files[b], np.int64)
                bucket_files[b].unlink()
            else:
                continue
            block.sort()
            got = _dedupe_rows(block, width, counts)
            block[:got].tofile(f)
            m += got
    np.cumsum(counts, out=counts)
    with open(out / "indices.npy", "wb") as f, open(raw, "rb") as src:
        f.write(npy_header(np.int64, (m,)))
        shutil.copyfileobj(src, f, max(keys_bytes, 1 << 16))
    raw.unlink()
    return indptr, m


def _build_part(s: int, spill: Path, id_dtype, owner: np.ndarray, book: tuple[np.ndarray, np.ndarray],
                deg: np.ndarray, scratch: tuple[np.ndarray, np.ndarray], node_data: dict, out: Path,
                feature_chunk_bytes: int, reverse: bool, chunk: int, referenced: tuple[str, ...] = ()) -> dict:
    """Build partition ``s`` from its spilled records, ``chunk`` records at a time: O(|V|) id maps plus a few
    buffers of ``chunk`` keys (node arrays in ``referenced`` are not copied: readers gather them from the base).
    ``book`` is :func:`_book`'s ``(boundaries, rank)``; the part's own arrays are built and saved one at a time."""
    boundaries, rank = book
    mark, lut = scratch
    for pairs in _spill_chunks(spill, id_dtype, chunk):
        _mark_halo(pairs, owner, s, mark)
    start, end = (int(b) for b in boundaries[s:s + 2])
    inner = np.flatnonzero(owner == s)  # (= the book's perm[start:end])
    halo = np.flatnonzero(mark)
    mark[halo] = 0
    halo_global = boundaries[owner[halo]] + rank[halo]  # (= the book's inv_perm[halo])
    order = np.argsort(halo_global)
    halo, halo_global = halo[order], halo_global[order]
    del order
    n_inner, n_local = inner.size, inner.size + halo.size
    orig = np.concatenate([inner, halo], dtype=id_dtype)  # (written as int64)
    del inner, halo, halo_global  # (orig[n_inner:] holds the halo, in this order, while the CSR is built)
    lut[orig] = np.arange(n_local, dtype=lut.dtype)
    out.mkdir()
    indptr, m = _local_csr(spill, id_dtype, owner, s, lut, n_local, reverse, chunk, out)
    lut[orig] = -1
    spill.unlink()
    np.save(out / "indptr.npy", indptr)
    del indptr
    np.save(out / "orig_ids.npy", orig.astype(np.int64))
    halo = orig[n_inner:]
    np.save(out / "global_ids.npy", np.concatenate([np.arange(start, end, dtype=np.int64),
                                                    boundaries[owner[halo]] + rank[halo]]))
    np.save(out / "degree.npy", deg[orig].astype(np.int64))
    np.save(out / "halo_owner.npy", owner[halo])
    for name, source in node_data.items():
        if name in referenced:
            continue
        if name in MASKS:
            _write_rows(source, orig, out / f"{name}.npy", feature_chunk_bytes, bool, zero_from=n_inner)
        else:
            _write_rows(source, orig, out / f"{name}.npy", feature_chunk_bytes)
    meta = {"part": s, "num_parts": boundaries.size - 1, "num_inner": n_inner, "num_halo": n_local - n_inner,
            "num_local": n_local, "num_edges": int(m),
            "arrays": [*PART_ARRAYS, *(name for name in node_data if name not in referenced)]}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return {k: meta[k] for k in ("num_inner", "num_halo", "num_edges")}


def _node_data(node_data: dict | None, n: int) -> dict[str, _NodeArray]:
    out = {}
    for name, value in (node_data or {}).items():
        if value is None:
            continue
        if name not in NODE_ARRAYS:
            raise ValueError(f"node_data: unknown array {name!r}; accepted: {', '.join(NODE_ARRAYS)}")
        out[name] = _NodeArray(name, value, n)
    return out


def write_partition_store(path: str | Path, stream, owner, num_parts: int, *, edge_part=None, node_data=None,
                          num_vertices: int | None = None, method: str = "", params: dict | None = None,
                          num_classes: int | None = None, source_name: str = "",
                          chunk_edges: int = DEFAULT_CHUNK_EDGES,
                          feature_chunk_bytes: int = DEFAULT_FEATURE_CHUNK_BYTES, overwrite: bool = False,
                          progress: ProgressFn | None = None, extra_meta: dict | None = None,
                          halo_hops: int = 1, node_base: str | Path | None = None) -> StoreSummary:
    """Write a partition store (format in the module docstring), atomically.

    Args:
        path: target directory.
        stream: the records (``EdgeStream``, ``Graph`` or stream path), read in chunks.
        owner: home partition of every vertex (``[N]``).
        num_parts: ``p``.
        edge_part: vertex-cut partition of every record (``[E]``, may be a memory map); its records are
            stored in that partition too.
        node_data: optional ``x``, ``y``, ``train_mask``, ``val_mask``, ``test_mask``: ``[N, ...]`` arrays or
            tensors, or paths of ``.npy`` files (read through a memory map opened per chunk).
        num_vertices: vertex count (default the stream's).
        method: recorded in ``meta.json``.
        params: recorded in ``meta.json``.
        num_classes: recorded in ``meta.json``.
        source_name: recorded in ``meta.json``.
        extra_meta: recorded in ``meta.json``.
        chunk_edges: records per chunk of the routing pass.
        feature_chunk_bytes: bound on one copy step of node data.
        overwrite: replace an existing partition store.
        progress: callback ``(step_name, done, total)``.
        halo_hops: ``K``; each part holds the ``K``-hop in-neighbourhood of its home vertices, with the full
            in-edge rows of every vertex within ``K - 1`` hops (so an ``L``-layer forward with ``K = L`` is
            exact for home vertices; ``K - 1`` extra streaming passes). ``K = 1`` (default) is SDT-GNN's
            store, where halo vertices also see their edges to home vertices reversed.
        node_base: reference node data instead of copying it: the graph directory whose ``.npy`` files
            ``node_data`` names (arrays given as files of ``node_base`` are recorded by fingerprint, not copied;
            :mod:`graphscale.partition.store_base`); ``None`` copies every array.

    Returns:
        The :class:`StoreSummary` (its metrics come from the routing pass).

    Raises:
        ValueError: bad sizes or ranges, a record outside ``[0, N)``; FileExistsError: a target that is not a
            store (or an existing one without ``overwrite``). Nothing is left behind on any error.
    """
    start_time = time.perf_counter()
    path = Path(path)
    source = as_edge_source(stream)
    n = source.num_vertices if num_vertices is None else int(num_vertices)
    validate_num_parts(num_parts, n)
    owner = validate_assignment(owner, n, num_parts, "owner")
    if edge_part is not None:
        edge_part = validate_assignment(edge_part, source.num_edges, num_parts, "edge_part", copy=False)
    nodes = _node_data(node_data, n)
    referenced = _referenced(nodes, node_base)
    check_store_target(path, overwrite)
    if feature_chunk_bytes < 1:
        raise ValueError(f"feature_chunk_bytes must be >= 1, got {feature_chunk_bytes}")
    if isinstance(halo_hops, bool) or not isinstance(halo_hops, int) or halo_hops < 1:
        raise ValueError(f"halo_hops must be an integer >= 1, got {halo_hops!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path, "tmp")
    tmp.mkdir()
    try:
        base = {BASE_KEY: base_record(node_base, referenced)} if referenced else {}
        metrics, parts = _write(tmp, source, n, owner, num_parts, edge_part, nodes, chunk_edges,
                                feature_chunk_bytes, progress, halo_hops, referenced)
        weighted = getattr(getattr(source, "graph", None), "edge_weight", None) is not None
        if weighted:  # a weighted graph's parts hold their edges' weights (graphscale.partition.store_weights)
            from graphscale.partition.store_weights import write_store_weights

            write_store_weights(tmp, source.graph, num_parts)
        book_meta = {"format": STORE_FORMAT, "version": STORE_VERSION, "method": method, "params": params or {},
                     "num_parts": num_parts, "num_nodes": n, "num_edges": int(source.num_edges),
                     "num_features": int(nodes["x"].shape[1]) if "x" in nodes and len(nodes["x"].shape) > 1 else 0,
                     "x_dtype": str(nodes["x"].dtype) if "x" in nodes else None, "num_classes": num_classes,
                     "node_arrays": list(nodes), "vertex_cut_edges": edge_part is not None,
                     "multilabel": "y" in nodes and len(nodes["y"].shape) == 2,
                     "source": source_name, "halo_hops": halo_hops, "metrics": metrics.to_dict(), "parts": parts,
                     **({"weighted": True} if weighted else {}), **base,
                     **(extra_meta or {})}
        (tmp / "meta.json").write_text(json.dumps(book_meta, indent=1))
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StoreSummary(path, metrics, time.perf_counter() - start_time)


def _referenced(nodes: dict[str, _NodeArray], node_base: str | Path | None) -> tuple[str, ...]:
    """The node arrays read from files of the graph directory ``node_base`` (those a store references)."""
    if node_base is None:
        return ()
    base = Path(node_base).resolve()
    if not (base / "meta.json").is_file():
        raise ValueError(f"node_base {node_base} is not a graph directory (it has no meta.json)")
    return tuple(name for name, source in nodes.items()
                 if source.path is not None and source.path.resolve() == base / f"{name}.npy")


def _write(tmp: Path, source, n: int, owner: np.ndarray, p: int, edge_part, nodes: dict, chunk_edges: int,
           feature_chunk_bytes: int, progress: ProgressFn | None, halo_hops: int,
           referenced: tuple[str, ...]) -> tuple[PartitionMetrics, list[dict]]:
    id_dtype = np.int32 if n <= 2**31 - 1 else np.int64
    np.save(tmp / "owner.npy", owner)
    book = _book(owner, p, tmp / "perm.npy", id_dtype)
    np.save(tmp / "boundaries.npy", book[0])
    spill_dir = tmp / ".spill"
    spill_dir.mkdir()
    train = nodes.get("train_mask")
    acc = MetricsAccumulator(owner, p, None if train is None else train.whole())
    deg = np.zeros(n, np.int32 if source.num_edges < 2**31 else np.int64)
    pairs_ = np.empty(0, id_dtype)
    runner = StreamRunner(source, n, chunk_edges, progress)
    reach = _hop_sets(runner, owner, p, halo_hops - 1) if halo_hops > 1 else None
    files = [open(spill_dir / f"{s}.bin", "wb") for s in range(p)]  # noqa: SIM115 - closed below
    try:
        read = None if edge_part is None else chunk_reader(edge_part)
        for first, src, dst in runner.chunks("route records"):
            ep = None if read is None else read(first, src.size)
            acc.update(src, dst, ep)
            ep_ = owner[:0] if ep is None else ep
            if reach is None:
                k = 2 * src.size if ep is not None else src.size
            else:
                k = _route_reach(src, dst, reach, ep_, ep is not None, deg, True, owner[:0], pairs_[:0], pairs_[:0])
            target = np.empty(k, owner.dtype)
            pairs = np.empty((k, 2), id_dtype)
            if reach is None:
                k = _route(src, dst, owner, ep_, ep is not None, deg, target, pairs[:, 0], pairs[:, 1])
            else:
                k = _route_reach(src, dst, reach, ep_, ep is not None, deg, False, target, pairs[:, 0], pairs[:, 1])
            _spill(files, target[:k], pairs[:k])
            del target, pairs  # (a chunk's buffers, not kept through the partitions' builds)
    finally:
        for f in files:
            f.close()
    metrics = acc.result()
    del acc, reach
    parts = []
    scratch = (np.zeros(n, np.uint8), np.full(n, -1, id_dtype))
    for s in range(p):
        parts.append(_build_part(s, spill_dir / f"{s}.bin", id_dtype, owner, book, deg, scratch, nodes,
                                 part_dir(tmp, s), feature_chunk_bytes, halo_hops == 1, chunk_edges, referenced))
        if progress is not None:
            progress("write partitions", s + 1, p)
    spill_dir.rmdir()
    return metrics, parts

"""Partition stores of a run: written from a graph (in memory, or a graph directory read in chunks), opened as the
partition-local handle, and checked to hold what training needs (:func:`graphscale.prepare.prepare_data` uses them for
``--partitions`` and the cache's stores; tests and benches call them directly)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data.formats import read_graph_meta
from graphscale.data.graph import Graph
from graphscale.data.handle import PARTITION_LOCAL, DataHandle
from graphscale.partition.build import build_vertex_partitioner


def short_list(ids, limit: int = 10) -> str:
    """``[0, 1, 2]``, or ``[0, 1, ..., 799] (800 in all)`` for a list longer than ``limit`` (for messages)."""
    ids = [int(i) for i in ids]
    if len(ids) <= limit:
        return str(ids)
    head = ", ".join(map(str, ids[: limit - 1]))
    return f"[{head}, ..., {ids[-1]}] ({len(ids)} in all)"


def write_training_store(graph: Graph | str | Path, path: str | Path, parts: int, partitioner: str = "metis",
                         seed: int = 0, balance: str = "", dataset: str = "", extra: dict | None = None,
                         halo_hops: int = 1, host_memory: str = "") -> dict:
    """Partition ``graph`` into ``parts`` with ``partitioner`` / ``balance`` and write a store (every part non-empty).

    ``graph`` is an in-memory :class:`Graph` (its node rows copied into the store) or a graph directory, which is
    partitioned reading its records in chunks (:func:`graphscale.partition.build.partition_graph_dir`,
    :func:`~graphscale.partition.build.write_graph_dir_store`: O(|V|) memory, record chunks that keep within
    ``host_memory``, ``--host-memory``; METIS checks its memory estimate against it first); its node rows are
    copied in chunks, so that a worker maps them (a store referencing them, :mod:`graphscale.partition.store_base`,
    would have a graph-parallel worker gather its inner rows into its own memory).

    Returns:
        the store's checked ``meta.json``.

    Raises:
        ValueError: the partitioner left a part empty (names the parts and the fix); METIS would not fit.
    """
    from graphscale.partition.build import node_data_of, partition_graph_dir, write_graph_dir_store
    from graphscale.partition.store import check_partition_store
    from graphscale.partition.store_writer import write_partition_store
    from graphscale.partition.streaming import GraphEdges

    folder = None if isinstance(graph, Graph) else Path(graph)
    if folder is not None:
        meta = read_graph_meta(folder)
        n, name = int(meta["num_nodes"]), meta.get("name", folder.name)
    else:
        n, name = graph.num_nodes, graph.name
    if parts > n:
        raise ValueError(f"{parts} parts (--parts, or --workers when --parts is not given) exceed the "
                         f"{n:,} vertices of {dataset or name}; every part needs at least one vertex: use fewer")
    if folder is not None:
        owner = torch.from_numpy(partition_graph_dir(folder, partitioner, parts, seed=seed, balance=balance,
                                                     host_memory=host_memory or None))
    else:
        owner = build_vertex_partitioner(partitioner, balance).partition(graph, parts, seed=seed)
    sizes = torch.bincount(owner, minlength=parts)
    if bool((sizes == 0).any()):
        raise ValueError(f"partitioner {partitioner!r} left part(s) {short_list(torch.nonzero(sizes == 0).flatten())} "
                         f"empty for {parts} workers; use fewer workers or --partitioner random")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    options = {"method": partitioner, "params": {"balance": balance} if balance else {}, "overwrite": True,
               "extra_meta": {"dataset": dataset, "name": name, "seed": seed, **(extra or {})},
               "halo_hops": halo_hops}
    if folder is not None:
        source = (meta.get("meta") or {}).get("source")
        write_graph_dir_store(folder, path, owner.numpy(), parts, source_name=source or dataset or name,
                              host_memory=host_memory or None, **options)
    else:
        write_partition_store(path, GraphEdges(graph), owner.numpy(), parts, node_data=node_data_of(graph),
                              num_classes=graph.num_classes if graph.y is not None else None,
                              source_name=graph.meta.get("source", dataset or graph.name), **options)
    return check_partition_store(path)


def store_handle(path: str | Path, feature_norm: str = "none", dtype: str = "float32",
                 meta: dict | None = None, learnable: bool = False, task: str = "node") -> DataHandle:
    """The partition-local handle of a store, checked to hold what training needs.

    Args:
        path: the store.
        feature_norm: ``row``, ``none`` or ``auto`` (decided by scanning the stored inner feature rows).
        dtype: the run's feature dtype.
        meta: the store's meta when already checked (else :func:`check_partition_store` runs).
        learnable: the run's input is a learnable table (``--features learnable:D``): no features needed.
        task: ``--task``; ``link`` supervises pairs, so it needs no node labels or training vertices.
    """
    from graphscale.partition.store import check_partition_store

    path = Path(path)
    meta = check_partition_store(path) if meta is None else meta
    summary = _summary_of_store(path, meta)
    where = f"partition store {path}"
    if not learnable and (summary["features"] == 0 or "x" not in meta.get("node_arrays", [])):
        raise ValueError(f"{where} has no node features, which training needs (partition without --no-features, "
                         "or train with --features learnable:D)")
    if task != "link" and ("y" not in meta.get("node_arrays", []) or summary["classes"] == 0):
        raise ValueError(f"{where} has no node labels, which training needs")
    if task != "link" and summary["train"] == 0:
        raise ValueError(f"{where} has no training vertices in any part")
    if learnable:
        feature_norm = "none"
    elif feature_norm == "auto":
        feature_norm = "row" if _store_is_nonnegative(path, meta) else "none"
    return DataHandle(PARTITION_LOCAL, summary, path=str(path), feature_norm=feature_norm, dtype=dtype)


def _summary_of_store(path: Path, meta: dict) -> dict:
    """Whole-graph counts of a store: nodes, edges, features, classes and split sizes (summed inner masks)."""
    from graphscale.partition.store import node_rows

    counts = {"train": 0, "val": 0, "test": 0}
    part_train = []
    for s, part in enumerate(meta["parts"]):
        for split in counts:
            rows = node_rows(path, meta, s, f"{split}_mask", 0, part["num_inner"])
            found = 0 if rows is None else int(rows.sum())
            counts[split] += found
            if split == "train":
                part_train.append(found)
    return {"name": meta.get("name") or path.name, "nodes": int(meta["num_nodes"]), "edges": int(meta["num_edges"]),
            "features": int(meta.get("num_features") or 0), "classes": int(meta.get("num_classes") or 0), **counts,
            "multilabel": bool(meta.get("multilabel")), "parts": len(meta["parts"]), "part_train": part_train,
            "halo_hops": int(meta.get("halo_hops", 1)), **({"weighted": True} if meta.get("weighted") else {})}


def _store_is_nonnegative(path: Path, meta: dict) -> bool:
    """Whether every stored inner feature row is non-negative (``--feature-norm auto``), scanned in chunks."""
    from graphscale.data.datasets import SCAN_ROWS
    from graphscale.partition.store import node_rows

    for s, part in enumerate(meta["parts"]):
        for start in range(0, part["num_inner"], SCAN_ROWS):
            if (node_rows(path, meta, s, "x", start, min(start + SCAN_ROWS, part["num_inner"])) < 0).any():
                return False
    return True


def check_store_node_data(path: Path, meta: dict) -> None:
    """Features finite, labels in range, training nodes labelled, on every part's inner rows (memory-mapped; the
    first bad node is named by its original id).

    Raises:
        ValueError: names the store, the part and the node.
    """
    from graphscale.data.datasets import node_data_problem
    from graphscale.partition.store import PartRows, node_rows, part_dir

    for s, part in enumerate(meta["parts"]):
        folder, n = part_dir(path, s), part["num_inner"]
        arrays = {name: node_rows(path, meta, s, name, 0, n) for name in ("y", "train_mask")}
        arrays["x"] = PartRows(path, meta, s, "x", n) if "x" in meta.get("node_arrays", []) else None
        problem = node_data_problem(arrays["x"], arrays["y"], int(meta["num_classes"]), arrays["train_mask"],
                                    ids=np.load(folder / "orig_ids.npy", mmap_mode="r")[:n])
        if problem:
            raise ValueError(f"partition store {path}, part {s}: {problem}")
        problem = _structure_problem(folder, int(part["num_inner"]) + int(part.get("num_halo", 0)),
                                     int(part["num_edges"]))
        if problem:
            raise ValueError(f"partition store {path}, part {s}: {problem} (a damaged store: write it again with "
                             "`graphscale partition`)")


#: edges of a part read at a time by :func:`_structure_problem`
_CHECK_CHUNK = 1 << 24


def _structure_problem(folder: Path, rows: int, edges: int) -> str | None:
    """What is wrong with a part's adjacency (``indptr.npy``, ``indices.npy``, memory-mapped): lengths that do not
    match its metadata, a decreasing ``indptr``, or neighbour ids outside ``[0, rows)`` (``rows``: inner and halo
    vertices); ``None`` when it is sound."""
    files = {name: folder / f"{name}.npy" for name in ("indptr", "indices")}
    if not all(f.is_file() for f in files.values()):
        return None  # a store without a CSR here: its reader checks what it has
    indptr = np.load(files["indptr"], mmap_mode="r")
    indices = np.load(files["indices"], mmap_mode="r")
    if len(indptr) != rows + 1 or len(indices) != edges:
        return (f"indptr.npy has {len(indptr)} entries and indices.npy {len(indices)}, but its metadata says "
                f"{rows} vertices ({rows + 1} indptr entries) and {edges} edges")
    if rows and (int(indptr[0]) != 0 or int(indptr[-1]) != edges or bool((np.diff(indptr) < 0).any())):
        return "indptr.npy is not a CSR row pointer (it must rise from 0 to the edge count)"
    for start in range(0, edges, _CHECK_CHUNK):
        chunk = np.asarray(indices[start: start + _CHECK_CHUNK])
        low, high = int(chunk.min()), int(chunk.max())
        if low < 0 or high >= rows:
            bad = start + int(np.flatnonzero((chunk < 0) | (chunk >= rows))[0])
            return (f"neighbour id {int(indices[bad])} at edge {bad} of indices.npy is out of range [0, {rows}) (its "
                    f"{rows} inner and halo vertices)")
    return None



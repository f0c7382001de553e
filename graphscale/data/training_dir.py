"""A training run's graph directory derived from a dataset's, in bounded memory.

What a run trains on is the dataset with ``--features`` applied (computed features, or none for a learnable
input), a multi-label graph's seeded split added, the features row-normalised (``--feature-norm``) and cast to the
run's dtype (:func:`graphscale.prepare.load_training_graph` does this in memory). :func:`write_training_dir` does
the same from the dataset's graph directory (memory-mapped) into a new one: the CSR is hard-linked (or copied by
the kernel), and so are the features when they stay as stored; other node rows are read, computed, normalised and
cast :data:`CHUNK_ROWS` at a time, so the process holds
O(|V|) bytes of per-vertex arrays (labels, masks) plus one chunk of feature rows, never the feature matrix. Its
arrays equal those of the in-memory path exactly (every step is row-local; ``auto`` normalisation scans the rows
once first), so a run gives the same results whichever path prepared its data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data.datasets import node_data_problem, row_normalize
from graphscale.data.features import (
    ONEHOT_MAX_NODES,
    RANDOM_STREAM,
    compute_features,
    effective_norm,
    keyed_normal,
    parse_features,
)
from graphscale.data.formats import GraphDirWriter, load_graph_dir, read_graph_meta
from graphscale.data.graph import Graph
from graphscale.data.readers.labels import multilabel_split

#: feature rows read, computed, normalised and written at a time
CHUNK_ROWS = 1 << 15


def _row_chunks(n: int, chunk_rows: int):
    for start in range(0, n, chunk_rows):
        yield start, min(start + chunk_rows, n)


def _feature_rows(graph: Graph, features: str, seed: int, start: int, stop: int,
                  whole: torch.Tensor | None = None) -> torch.Tensor | None:
    """Rows ``start:stop`` of the input features ``--features`` gives ``graph`` (its own rows for ``""``), as
    :func:`graphscale.data.features.compute_features` computes them for the whole graph (``whole``: computed so
    already, ``spectral:D``'s eigenvectors, which no row chunk can be computed without)."""
    mode, dim = parse_features(features)
    if whole is not None:
        return whole[start:stop]
    if mode == "":
        return None if graph.x is None else torch.from_numpy(np.array(graph.x[start:stop].numpy()))
    if mode == "degree":
        degrees = np.diff(graph.indptr[start: stop + 1].numpy())
        return torch.log1p(torch.from_numpy(degrees).double()).to(torch.float32).reshape(-1, 1)
    if mode == "onehot":
        rows = torch.zeros(stop - start, graph.num_nodes, dtype=torch.float32)
        rows[torch.arange(stop - start), torch.arange(start, stop)] = 1.0
        return rows
    if mode == "random":
        return keyed_normal(torch.arange(start, stop), dim, seed, RANDOM_STREAM).to(torch.float32)
    return None  # learnable: the model's input is the table


def feature_width(features: str, num_features: int, num_nodes: int) -> int:
    """The width of the stored input features ``--features`` gives a graph of ``num_nodes`` vertices and
    ``num_features`` features of its own (0: none, a learnable input)."""
    mode, dim = parse_features(features)
    return {"": num_features, "degree": 1, "onehot": num_nodes, "random": dim, "spectral": dim, "fastrp": dim,
            "learnable": 0}[mode]


def _all_nonnegative(graph: Graph, features: str, seed: int, chunk_rows: int) -> bool:
    for start, stop in _row_chunks(graph.num_nodes, chunk_rows):
        rows = _feature_rows(graph, features, seed, start, stop)
        if rows is not None and not bool((rows >= 0).all()):
            return False
    return True


def write_training_dir(source: str | Path, out: str | Path, *, features: str = "", seed: int = 0,
                       feature_norm: str = "none", dtype: str | None = None, spec: str = "",
                       chunk_rows: int = CHUNK_ROWS, task: str = "node") -> Path:
    """Write the graph directory a run trains on (module docstring) from the dataset's graph directory ``source``.

    Args:
        source: the dataset's graph directory.
        out: where to write (atomically; an existing graph directory there is replaced).
        features: ``--features`` (``""``: the dataset's own).
        seed: the run's seed (``random:D`` features).
        feature_norm: ``--feature-norm`` (``auto``, ``row``, ``none``).
        dtype: the features' dtype (``float32``, ``float64``; ``None``: the computed or stored one).
        spec: the dataset spec, for messages.
        chunk_rows: feature rows per chunk.
        task: ``--task``; ``link`` needs no labelled training vertex (a link dataset's vertices may have no split).

    Returns:
        ``out``.

    Raises:
        ValueError: the graph cannot be trained on (as :func:`graphscale.data.datasets.untrainable_reason`:
            no features without ``--features``, no labels, no training vertex, non-finite features, labels out of
            range), ``onehot`` on a large graph.
    """
    if chunk_rows < 1:
        raise ValueError(f"write_training_dir: chunk_rows must be >= 1, got {chunk_rows}")
    graph = load_graph_dir(source)
    where = spec or f"graphdir:{source}"
    mode, _ = parse_features(features)
    if mode == "onehot" and graph.num_nodes > ONEHOT_MAX_NODES:
        raise ValueError(f"--features onehot would make a dense [{graph.num_nodes}, {graph.num_nodes}] matrix "
                         f"({graph.num_nodes:,} vertices, more than {ONEHOT_MAX_NODES:,}); use --features "
                         "learnable:D (a trainable [N, D] table, the scalable equivalent) or random:D")
    width = feature_width(features, graph.num_features, graph.num_nodes)
    if width == 0 and mode != "learnable":
        raise ValueError(f"dataset {where!r} has no node features, which training needs; train on its structure "
                         "with --features fastrp:D, spectral:D, degree, onehot, random:D or learnable:D")
    whole = compute_features(graph, features, seed) if mode in ("spectral", "fastrp") else None
    y = None if graph.y is None else graph.y.numpy()
    if y is None:
        raise ValueError(f"dataset {where!r} has no node labels, which training needs")
    masks = {m: getattr(graph, m) for m in ("train_mask", "val_mask", "test_mask")}
    if graph.multilabel and masks["train_mask"] is None:
        masks = {k: torch.from_numpy(v) for k, v in multilabel_split(np.asarray(y)).items()}
    if task == "link":  # the pairs are supervised, not the vertices
        masks = {m: torch.zeros(graph.num_nodes, dtype=torch.bool) if v is None else v for m, v in masks.items()}
    elif masks["train_mask"] is None or not bool(masks["train_mask"].any()):
        raise ValueError(f"dataset {where!r} has no training nodes (no train/val/test split); it cannot be trained on")
    applied = effective_norm(features, feature_norm)
    if applied == "auto":
        applied = "row" if width and _all_nonnegative(graph, features, seed, chunk_rows) else "none"
    meta = dict(read_graph_meta(source).get("meta") or {})  # as stored (not load_graph_dir's defaults)
    if mode:
        meta["features"] = features
    meta["feature_norm"] = applied if width else "none"
    stored = dtype or ("float32" if mode else str(graph.x.dtype).removeprefix("torch."))
    num_classes = graph.num_classes
    with GraphDirWriter(out, graph.num_nodes, num_features=width, x_dtype=stored, labels=True, masks=True,
                        num_classes=num_classes, name=graph.name, meta=meta, overwrite=True,
                        label_width=int(y.shape[1]) if y.ndim == 2 else 0, edge_weight=graph.weighted) as writer:
        same_rows = mode == "" and width and applied == "none" and stored == str(graph.x.dtype).removeprefix("torch.")
        csr = ("indptr", "indices", "edge_weight") if graph.weighted else ("indptr", "indices")
        writer.link(source, (*csr, "x") if same_rows else csr)
        for start, stop in _row_chunks(graph.num_nodes, chunk_rows):
            rows = _feature_rows(graph, features, seed, start, stop, whole)
            if rows is not None and not same_rows:
                if applied == "row":
                    rows = row_normalize(rows)
                writer.append_nodes(x=rows.to(getattr(torch, stored)))
            labels = y[start:stop]
            problem = node_data_problem(None if rows is None else rows.numpy(), labels, num_classes,
                                        masks["train_mask"][start:stop].numpy(), ids=np.arange(start, stop))
            if problem:
                raise ValueError(f"dataset {where!r}: {problem}")
            writer.append_nodes(y=labels, **{m: v[start:stop] for m, v in masks.items()})
    return Path(out)

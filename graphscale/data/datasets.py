"""Datasets by spec string: the spec forms, dispatch to the readers (one module per format in
:mod:`graphscale.data.readers`: bundled Cora / Planetoid, npz, OGB, text edge lists, METIS graph files, MATLAB
``.mat`` graphs, MUSAE; plus graph directories and synthetic graphs), whether a dataset can be trained on, and
feature normalisation.

:func:`load_dataset` accepts the forms in :data:`DATASET_HELP`. Every reader
returns a :class:`Graph` that is symmetric, coalesced and free of self-loops
(sources are treated as undirected, as GNN training on them usually does),
with float32 ``x``, int64 ``y`` (``-1`` = unlabelled; a uint8 ``[N, C]`` 0/1
matrix for multi-label data, see :attr:`Graph.multilabel`), bool masks,
``meta['num_classes']`` and ``meta['source']`` (where it came from). Nothing
is downloaded: every reader works on files already on disk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data import synthetic
from graphscale.data.formats import load_graph_dir
from graphscale.data.graph import Graph
from graphscale.data.readers.edgelist import read_edgelist
from graphscale.data.readers.labels import multilabel_split
from graphscale.data.readers.mat import read_mat
from graphscale.data.readers.metis import read_metis
from graphscale.data.readers.musae import read_musae
from graphscale.data.readers.npz import read_npz
from graphscale.data.readers.ogb import read_ogb
from graphscale.data.readers.ogbl import read_ogbl
from graphscale.data.readers.planetoid import cora_dir, read_planetoid

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
    ("ogbl:DIR[:SPLIT]", ("an OGB link-property dataset read offline (--task link): DIR/raw/{edge,node-feat,"
                          "num-node-list}.csv.gz and DIR/split/SPLIT/{train,valid,test}.pt (SPLIT defaults to the "
                          "only one); its split and negatives are the run's; no node labels")),
    ("edgelist:FILE[:LABELS][:weighted]", ("a text edge list, one 'src dst' pair per line (SNAP style: blanks or "
                                           "commas, '#'/'%' comments, an optional header line, extra columns "
                                           "ignored), symmetrised; ids not exactly 0..max are relabelled 0..N-1 in "
                                           "increasing order (meta original_ids); no features; LABELS: 'node label' "
                                           "lines, unlabelled nodes -1, seeded 20/30/rest split; weighted: lines "
                                           "'src dst weight', the third column the edge's weight (read whole)")),
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


# ------------------------------------------------------------- dispatch
def split_option(arg: str, accept) -> tuple[str, str | None]:
    """``PATH[:OPTION]``: take the part after the last colon as OPTION when ``accept(path, option)``."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and accept(head, tail):
        return head, tail
    return arg, None


def weighted_option(arg: str) -> tuple[str, bool]:
    """``PATH[:weighted]`` (an edge list's ``:weighted``, last): the rest and whether it was given (unless ``arg``
    itself names a file)."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and tail == "weighted" and not Path(arg).exists():
        return head, True
    return arg, False


# The options of the readers that take ``KIND:PATH:key=value,...`` (a bare number is the seed).
READER_OPTIONS = {"musae": {"label": str, "seed": int},
                  "mat": {"adj": str, "labels": str, "features": str, "column": int, "seed": int}}


def _split_options(arg: str) -> tuple[str, str | None]:
    """``PATH[:OPTIONS]`` where OPTIONS is a bare seed or ``key=value,...`` (unless ``arg`` names a file)."""
    return split_option(arg, lambda path, option: (option.isdigit() or "=" in option) and not Path(arg).exists())


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
    readers = {"planetoid", "npz", "ogb", "ogbl", "edgelist", "metis", "mat", "musae", "graphdir"}
    if kind not in readers:
        raise ValueError(f"unknown dataset spec {spec!r}; accepted forms: {_accepted_forms()}")
    if not arg:
        raise ValueError(f"dataset spec {spec!r} needs a path: {kind}:PATH")
    if kind == "planetoid":
        folder, name = split_option(arg, lambda d, n: Path(d).is_dir() and not Path(arg).is_dir())
        return read_planetoid(folder, name)
    if kind == "npz":
        file, seed = split_option(arg, lambda f, s: s.isdigit() and not Path(arg).exists())
        return read_npz(file, int(seed or 0))
    if kind == "ogb":
        folder, split = split_option(arg, lambda d, s: not Path(arg).exists() and Path(d).is_dir())
        return read_ogb(folder, split)
    if kind == "ogbl":
        folder, split = split_option(arg, lambda d, s: not Path(arg).exists() and Path(d).is_dir())
        return read_ogbl(folder, split)
    if kind == "edgelist":
        arg, weighted = weighted_option(arg)
        file, labels = split_option(arg, lambda f, lab: not Path(arg).exists() and Path(f).is_file())
        return read_edgelist(file, labels, weighted=weighted)
    if kind == "metis":
        return read_metis(arg)
    if kind == "mat":
        file, options = _split_options(arg)
        return read_mat(file, **_reader_options(spec, kind, options))
    if kind == "musae":
        folder, options = _split_options(arg)
        return read_musae(folder, **_reader_options(spec, kind, options))
    return load_graph_dir(arg)


def with_training_split(graph: Graph) -> Graph:
    """Give a multi-label graph without a split the seeded :func:`multilabel_split` (what training and
    ``graphscale partition`` use); other graphs are returned as they are."""
    if graph.multilabel and graph.train_mask is None:
        for name, mask in multilabel_split(graph.y.numpy()).items():
            setattr(graph, name, torch.from_numpy(mask))
    return graph


#: why a dataset kind carries no node features (from its spec alone)
FEATURELESS_KINDS = {"edgelist": "a text edge list carries none", "metis": "a METIS graph file carries none",
                     "mat": "a .mat graph's features come only from a variable named as mat:FILE:features=NAME"}


def featureless_spec(spec: str) -> bool:
    """Whether dataset ``spec`` has no node features, from the spec alone (no graph loaded): an ``edgelist:`` or
    ``metis:``, a ``mat:`` without ``features=NAME``, a ``graphdir:`` whose ``meta.json`` records none. Other
    kinds are known only once loaded (:func:`untrainable_reason` with the graph)."""
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind in ("edgelist", "metis") or (kind == "mat" and "features=" not in arg):
        return True
    if kind == "graphdir":
        from graphscale.data.formats import is_graph_dir, read_graph_meta

        return is_graph_dir(arg) and not int(read_graph_meta(arg).get("num_features") or 0)
    return False


def untrainable_reason(spec: str, graph: Graph | None = None, features: str = "", task: str | None = None) -> str | None:
    """Why ``spec`` cannot be used for node classification, or ``None`` when it can.

    Without ``graph`` only the spec is looked at, so a caller can fail before loading anything; with ``graph``
    its features, labels and split are checked (also their values: :func:`node_data_problem`). ``features``
    is the run's ``--features``: with one, a graph needs no features of its own (a run resolves an empty
    ``--features`` of a dataset :func:`featureless_spec` names to
    :data:`~graphscale.data.features.DEFAULT_FEATURELESS` before this is asked; a graph found featureless only
    once loaded is refused here). A dataset that carries its own
    link split (``ogbl:``, :mod:`graphscale.data.link_pairs`) needs no labels or node split; it trains link
    prediction only (``task`` ``node`` refused; ``None``: not known yet).
    """
    kind = spec.strip().partition(":")[0].lower()
    if not features and (featureless_spec(spec) or (graph is not None and graph.x is None)):
        hint = ""
        if kind in FEATURELESS_KINDS:
            hint = f" ({FEATURELESS_KINDS[kind]})"
        elif kind == "musae":
            hint = " (its directory has no NAME.json or NAME_features.json)"
        return (f"dataset {spec!r} has no node features, which training needs{hint}; train on its structure with "
                "--features fastrp:D, spectral:D, degree, onehot, random:D or learnable:D")
    from graphscale.data.link_pairs import has_given_pairs

    link_data = kind == "ogbl" or (graph is not None and has_given_pairs(graph.meta))
    if link_data and task == "node":
        return (f"dataset {spec!r} is a link-prediction dataset (its own edge split, no node labels to train on); "
                "train it with --task link")
    if link_data:
        return None
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


FEATURE_NORMS = ("auto", "row", "none")


#: rows per block of :func:`row_normalize`'s norms (its only temporary is one block's absolute values)
NORM_BLOCK_ROWS = 1 << 14


def row_normalize(x: torch.Tensor) -> torch.Tensor:
    """Every row divided by its L1 norm (rows of zeros stay zero); row-local, so a worker can apply it to its
    own rows and get the rows of the whole normalised matrix. The norms are summed one row block at a time, so the
    result is the only ``[N, F]`` tensor it makes (``x`` may be a memory-mapped store's rows)."""
    norms = torch.empty((x.shape[0], 1), dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[0], NORM_BLOCK_ROWS):
        rows = slice(start, start + NORM_BLOCK_ROWS)
        torch.sum(x[rows].abs(), dim=1, keepdim=True, out=norms[rows])
    return x / norms.clamp_(min=torch.finfo(x.dtype).tiny)


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

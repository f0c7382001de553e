"""Input features for graphs that have none (or to replace theirs): ``--features``.

``--features`` takes one of:

* ``""`` (the default): the dataset's own features; a dataset without any (known so from its spec:
  :func:`graphscale.data.datasets.featureless_spec`) trains on :data:`DEFAULT_FEATURELESS` (``fastrp:128``; the
  run says so on stderr), one found featureless only once loaded is refused with a hint at the modes below;
* ``fastrp:D``: FastRP structural features (:mod:`graphscale.data.fastrp`): a seeded very sparse random projection
  of the vertices propagated over the graph, computed in row chunks of the CSR (a mapped graph directory is never
  loaded whole), ``O(|E| D)`` per propagation step;
* ``degree``: one column, ``log(1 + in-degree)`` of every vertex (the graph is symmetric, so in = out);
* ``onehot``: the ``[N, N]`` identity (each vertex its own indicator); refused above :data:`ONEHOT_MAX_NODES`
  vertices (dense), where ``learnable:D`` is the scalable equivalent;
* ``random:D``: ``D`` columns drawn from a standard normal, keyed by ``(--seed, vertex id, column)``;
* ``spectral:D``: the ``D`` leading eigenvectors of the symmetrically normalised adjacency with self-loops
  ``D^-1/2 (A + I) D^-1/2`` (:func:`spectral_features`): every vertex's position in the graph's community
  structure, what a featureless multi-label graph such as BlogCatalog is learnt from (module notes below);
* ``learnable:D``: a trainable ``[N, D]`` embedding table (:class:`graphscale.nn.embedding.LearnableInput`),
  the model's input, updated by the optimiser; a partition-local strategy holds only the rows its worker owns.

``degree``, ``onehot``, ``random:D``, ``spectral:D`` and ``fastrp:D`` are computed by the parent while it prepares
the data (:func:`compute_features`), before any store or graph directory is written, so every strategy sees them as
ordinary features; they are deterministic (a pure function of the graph, the vertex ids and the seed).
``--feature-norm auto`` leaves computed features unnormalised (row normalisation would turn the single degree
column into ones).

Random values are counter-based: the value of column ``c`` of vertex ``v`` is a hash of ``(seed, stream, v, c)``
(the keyed-dropout hash of :mod:`graphscale.nn.dropout`) mapped to a normal deviate by Box-Muller, so any subset of
rows, in any order or partition, gets the same values.

Spectral features are computed on the whole graph in memory (ARPACK through ``scipy.sparse.linalg.eigsh``, from a
fixed start vector, so a graph gets the same features every time): ``O(|E| + N D)`` memory; BlogCatalog's at
``D = 64`` took 265 s on a 2-core machine shared with other jobs (load about 20), ARPACK's work growing with ``D``. On BlogCatalog (10,312 vertices, 39 labels, no features), a 2-layer GCN with the model defaults reaches
test micro-F1 0.202 from ``spectral:64`` against the label-frequency predictor's 0.164 (0.1425 from ``degree`` or
``learnable:64`` when the multi-label loss was averaged over the labels); with ``--hidden 128 --dropout 0
--weight-decay 0`` it reaches 0.268. The
leading eigenvectors are what propagation keeps (``A_hat u = lambda u``), and they separate the graph's communities,
which the labels follow (docs/data-formats.md has the measurements).

FastRP features (:mod:`graphscale.data.fastrp`) need no eigensolver and no whole-graph matrix. On BlogCatalog with
no options (``fastrp:128``, the model defaults, seed 0, 200 epochs) the GCN reaches test micro-F1 0.208 (validation
0.185 against the predictor's 0.159), ``fastrp:256`` the same; a logistic regression on the ``fastrp:128`` rows
0.314 (seed 1: 0.323), on ``fastrp:256`` 0.353: the model defaults (hidden 16 for 39 labels) take less from the
features than they hold (``--hidden 64``: 0.258; ``--hidden 128 --dropout 0 --weight-decay 0``: 0.305).
"""

from __future__ import annotations

import math

import torch

#: the ``--features`` modes (``random`` and ``learnable`` take ``:D``)
MODES = ("degree", "onehot", "random", "spectral", "fastrp", "learnable")
#: the modes computed from the graph by the parent (the others: the dataset's own features, or a learnable table)
COMPUTED = ("degree", "onehot", "random", "spectral", "fastrp")
#: the most vertices ``--features onehot`` accepts (a dense ``[N, N]`` float32 matrix: 100 MB at 5,000)
ONEHOT_MAX_NODES = 5000
#: what a run computes for a dataset without node features when ``--features`` is not given
DEFAULT_FEATURELESS = "fastrp:128"
#: hash streams of the keyed normal values
RANDOM_STREAM, LEARNABLE_STREAM = 0x2545F491, 0x5851F42D


def parse_features(text: str) -> tuple[str, int]:
    """``"random:64"`` -> ``("random", 64)``, ``"degree"`` -> ``("degree", 0)``, ``""`` -> ``("", 0)``.

    Raises:
        ValueError: names ``--features`` and the accepted forms.
    """
    text = (text or "").strip()
    if not text:
        return "", 0
    mode, sep, dim = text.partition(":")
    forms = "fastrp:D, spectral:D, degree, onehot, random:D or learnable:D (D a positive integer)"
    if mode not in MODES:
        raise ValueError(f"--features must be one of {forms}; got {text!r}")
    if mode in ("degree", "onehot"):
        if sep:
            raise ValueError(f"--features {mode} takes no width; got {text!r}")
        return mode, 0
    if not dim.isdigit() or int(dim) < 1:
        raise ValueError(f"--features {mode} needs a width: {mode}:D with D a positive integer (e.g. {mode}:64); "
                         f"got {text!r}")
    return mode, int(dim)


def default_features(spec: str, features: str) -> str:
    """``features``, or :data:`DEFAULT_FEATURELESS` when it is empty and dataset ``spec`` has no node features by
    its spec (:func:`graphscale.data.datasets.featureless_spec`)."""
    from graphscale.data.datasets import featureless_spec

    return features or (DEFAULT_FEATURELESS if spec and featureless_spec(spec) else "")


def default_notice(what: str, option: str = "--features") -> str:
    """The one line saying that ``what`` (a dataset) is trained on :data:`DEFAULT_FEATURELESS` and how to choose."""
    return (f"{what} has no node features: training on {option} {DEFAULT_FEATURELESS} (FastRP structural "
            f"features computed from the graph); choose others with {option} fastrp:D, spectral:D, degree, "
            "onehot, random:D or learnable:D")


def is_computed(text: str) -> bool:
    """Whether ``--features`` asks the parent to compute the feature matrix (:data:`COMPUTED`)."""
    return parse_features(text)[0] in COMPUTED


def learnable_dim(text: str) -> int:
    """``D`` of ``learnable:D``, else 0."""
    mode, dim = parse_features(text)
    return dim if mode == "learnable" else 0


def input_width(text: str, num_features: int) -> int:
    """The model's input width: ``D`` for ``learnable:D``, else the (possibly computed) feature count."""
    return learnable_dim(text) or int(num_features)


def effective_norm(text: str, feature_norm: str) -> str:
    """``--feature-norm`` as applied: ``auto`` means ``none`` for generated features (computed or learnable)."""
    return "none" if parse_features(text)[0] and feature_norm == "auto" else feature_norm


def keyed_normal(ids: torch.Tensor, dim: int, seed: int, stream: int) -> torch.Tensor:
    """Standard normal float64 ``[len(ids), dim]``: element ``(i, c)`` a pure function of ``(seed, stream, ids[i],
    c)`` (Box-Muller on two counter-based uniforms, :func:`graphscale.data.hashing.keyed_uniform`), so any row
    subset or order gets the same rows."""
    from graphscale.data.hashing import keyed_uniform

    u1, u2 = keyed_uniform(ids, dim, seed, stream, 0), keyed_uniform(ids, dim, seed, stream, 1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)


def compute_features(graph, text: str, seed: int = 0) -> torch.Tensor:
    """The float32 feature matrix ``--features text`` gives ``graph`` (``degree``, ``onehot``, ``random:D``,
    ``spectral:D`` or ``fastrp:D``).

    Raises:
        ValueError: ``onehot`` on more than :data:`ONEHOT_MAX_NODES` vertices (suggests ``learnable:D``),
            ``spectral:D`` with ``D`` not below the vertex count, or a mode that is not computed.
    """
    mode, dim = parse_features(text)
    n = graph.num_nodes
    if mode == "degree":
        return torch.log1p(graph.in_degrees().double()).to(torch.float32).reshape(n, 1)
    if mode == "onehot":
        if n > ONEHOT_MAX_NODES:
            raise ValueError(f"--features onehot would make a dense [{n}, {n}] matrix ({n:,} vertices, more than "
                             f"{ONEHOT_MAX_NODES:,}); use --features learnable:D (a trainable [N, D] table, the "
                             "scalable equivalent) or random:D")
        return torch.eye(n, dtype=torch.float32)
    if mode == "random":
        return keyed_normal(torch.arange(n), dim, seed, RANDOM_STREAM).to(torch.float32)
    if mode == "spectral":
        return spectral_features(graph, dim)
    if mode == "fastrp":
        from graphscale.data.fastrp import fastrp_features

        return fastrp_features(graph.indptr, graph.indices, n, dim, seed)
    raise ValueError(f"--features {text!r} is not computed from the graph")


def spectral_features(graph, dim: int) -> torch.Tensor:
    """``[N, dim]`` float32: the ``dim`` eigenvectors of ``D^-1/2 (A + I) D^-1/2`` (``A`` the graph's adjacency made
    symmetric, ``D`` its degrees with the self-loop) of the largest eigenvalues, in decreasing order, each scaled to
    a root mean square of 1 and signed so that its entry of largest magnitude is positive (an eigenvector's sign is
    arbitrary; this fixes it).

    Raises:
        ValueError: ``dim`` not below the vertex count minus one (ARPACK's limit; names ``--features``).
    """
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigsh

    n = graph.num_nodes
    if dim >= n - 1:
        raise ValueError(f"--features spectral:{dim}: D must be below the vertex count minus one ({n - 1:,}); "
                         "use a smaller D")
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
    adjacency = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(n, n))
    adjacency = (adjacency + adjacency.T + sp.eye(n, format="csr")).astype(bool).astype(np.float64)
    scale = 1.0 / np.sqrt(np.asarray(adjacency.sum(axis=1)).ravel())
    normalised = sp.diags(scale) @ adjacency @ sp.diags(scale)
    values, vectors = eigsh(normalised, k=dim, which="LA", v0=np.full(n, 1.0 / np.sqrt(n)))
    vectors = vectors[:, np.argsort(-values, kind="stable")] * np.sqrt(n)
    peaks = np.abs(vectors).argmax(axis=0)
    vectors *= np.where(vectors[peaks, np.arange(dim)] < 0, -1.0, 1.0)
    return torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))


def apply_features(graph, text: str, seed: int = 0):
    """Replace ``graph.x`` by the computed features of ``--features text`` (``degree``, ``onehot``, ``random:D``,
    ``spectral:D``, ``fastrp:D``);
    for ``learnable:D`` drop it (the model's input is the table); for ``""`` leave it. Returns ``graph``."""
    mode, _ = parse_features(text)
    if mode in COMPUTED:
        graph.x = compute_features(graph, text, seed)
        graph.meta["features"] = text
    elif mode == "learnable":
        graph.x = None
        graph.meta["features"] = text
    return graph

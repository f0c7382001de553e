"""FastRP structural features (``--features fastrp:D``, the default of a featureless dataset).

FastRP (Chen et al., "Fast and Accurate Network Embeddings via Very Sparse Random Projection", CIKM 2019)
embeds every vertex by propagating a very sparse random projection of the vertices over the graph:

* ``R [N, D]``: entry ``(v, c)`` is ``+sqrt(3)`` or ``-sqrt(3)`` with probability 1/6 each, else 0 (Achlioptas'
  very sparse projection: mean 0, variance 1), keyed by ``(--seed, v, c)`` through the counter-based hash of
  :func:`graphscale.data.hashing.keyed_uniform`, so any rows of ``R`` are drawn without drawing the others;
  row ``v`` is scaled by ``deg(v)^BETA`` (:data:`BETA` < 0: a hub's own projection weighs less);
* ``X_0 = R``, ``X_k = D^-1 A X_{k-1}`` (the random-walk transition matrix: each vertex the mean of its
  neighbours' rows; ``A`` the stored CSR, edge weights ignored as for ``spectral:D``);
* ``E = sum_k WEIGHTS[k-1] * X_k / |X_k|`` (each iterate's rows L2-normalised), and the output is ``E``'s rows
  L2-normalised and scaled by ``sqrt(D)`` (a root mean square of 1 per entry, the scale of the model's other
  inputs; a vertex without neighbours gets a zero row).

Vertices whose ``k``-hop neighbourhoods overlap get correlated rows (a random projection keeps inner products),
so the rows place every vertex in the graph's community structure as ``spectral:D`` does, without an
eigensolver: ``len(WEIGHTS)`` sparse-dense products, ``O(|E| D)`` each. :func:`fastrp_features` reads the CSR
in row chunks (a memory-mapped graph directory's arrays are never loaded whole) and holds three ``[N, D]``
float32 matrices (the previous and the current iterate and the sum); a chunk's rows depend on that chunk's CSR
rows only, so the result is the same for every chunk size.

Measured on BlogCatalog (10,312 vertices, 333,983 edges, 39 labels, no features; seed 0, 200 epochs, test
micro-F1 at the best validation epoch): see :mod:`graphscale.data.features`.
"""

from __future__ import annotations

import numpy as np
import torch

from graphscale.data.hashing import keyed_uniform

#: the weights of the propagated iterates ``X_1 .. X_K`` (``K = len(WEIGHTS)``)
WEIGHTS = (1.0, 1.0, 1.0, 1.0)
#: the exponent of the degree scaling of ``R``'s rows
BETA = -0.5
#: Achlioptas' sparsity: an entry of ``R`` is non-zero with probability ``1 / SPARSITY``
SPARSITY = 3
#: hash stream of ``R``'s entries
FASTRP_STREAM = 0x1E3779B9
#: CSR rows multiplied at a time
CHUNK_ROWS = 1 << 15


def projection_rows(ids: torch.Tensor, dim: int, seed: int) -> np.ndarray:
    """Rows ``ids`` of the very sparse random projection ``R`` (module docstring), float32 ``[len(ids), dim]``,
    before the degree scaling."""
    u = keyed_uniform(ids, dim, seed, FASTRP_STREAM).numpy()
    tail = 1.0 / (2 * SPARSITY)
    out = np.where(u < tail, 1.0, np.where(u > 1.0 - tail, -1.0, 0.0)) * np.sqrt(SPARSITY)
    return out.astype(np.float32)


def _normalised(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x * np.float32(scale), norm, out=np.zeros_like(x), where=norm > 0)


def fastrp_features(indptr, indices, num_nodes: int, dim: int, seed: int = 0,
                    chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """FastRP features ``[num_nodes, dim]`` float32 of the CSR ``(indptr, indices)`` (module docstring).

    Args:
        indptr, indices: the graph's CSR (tensors or arrays, possibly memory-mapped); read ``chunk_rows`` rows
            at a time.
        num_nodes, dim: ``N`` and ``D``.
        seed: keys the random projection (the run's ``--seed``).
        chunk_rows: CSR rows multiplied at a time (the result does not depend on it).

    Raises:
        ValueError: ``chunk_rows`` or ``dim`` below 1.
    """
    import scipy.sparse as sp

    if chunk_rows < 1 or dim < 1:
        raise ValueError(f"fastrp_features: dim and chunk_rows must be >= 1, got {dim} and {chunk_rows}")
    n = int(num_nodes)
    indptr = np.asarray(indptr)
    degrees = np.diff(indptr).astype(np.float64)
    x = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        scale = np.power(np.maximum(degrees[start:stop], 1.0), BETA).astype(np.float32)
        x[start:stop] = projection_rows(torch.arange(start, stop), dim, seed) * scale[:, None]
    total = np.zeros((n, dim), dtype=np.float32)
    step = np.empty_like(x)
    for weight in WEIGHTS:
        for start in range(0, n, chunk_rows):
            stop = min(start + chunk_rows, n)
            lo, hi = int(indptr[start]), int(indptr[stop])
            cols = np.asarray(indices[lo:hi]).astype(np.int64)
            rows = sp.csr_matrix((np.ones(hi - lo, dtype=np.float32), cols, indptr[start: stop + 1] - lo),
                                 shape=(stop - start, n))
            mean = (rows @ x) / np.maximum(degrees[start:stop], 1.0).astype(np.float32)[:, None]
            step[start:stop] = mean
            total[start:stop] += np.float32(weight) * _normalised(mean)
        x, step = step, x
    return torch.from_numpy(_normalised(total, float(np.sqrt(dim))))

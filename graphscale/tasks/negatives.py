"""Keyed negative pairs: a pure function of (seed, epoch, positive edge id), so that every strategy, whichever
worker scores a pair, draws the same negatives (the idea of the keyed dropout, :mod:`graphscale.data.hashing`).

* training: one negative per positive pair ``(u, v)`` with edge id ``e``: ``(u, t)``, uniform tail corruption with
  ``t = hash(seed, epoch, e) mod N``;
* evaluation: :data:`EVAL_CANDIDATES` candidate tails per positive pair, ``hash(seed, e, j) mod N`` for ``j < C``,
  the same at every evaluation (fixed seeded negatives): candidate 0 of every pair is the evaluation's shared
  negative set (AUC, Hits@K), the ``C`` candidates of a pair its per-source list (MRR).

A negative can be a true edge (probability about ``degree / N``), as with uniform corruption in OGB's and PyG's
training loops. ``mod N`` of a 32-bit hash is uniform within ``N / 2^32``.
"""

from __future__ import annotations

import torch

from graphscale.data.hashing import _M32, _fold_t, site_state

#: the hash streams of the training negatives and the evaluation candidates (distinct from the dropout streams)
TRAIN_STREAM = 0x510E527F
EVAL_STREAM = 0x9B05688C
#: candidate tails per positive pair at evaluation (MRR ranks a positive among them: OGB's ogbl-citation2 uses 1000)
EVAL_CANDIDATES = 100


def train_tails(edge_ids: torch.Tensor, num_nodes: int, seed: int, epoch: int) -> torch.Tensor:
    """int64 ``[P]``: the negative tail of each positive pair ``edge_ids`` in epoch ``epoch``."""
    h = site_state(seed, epoch, 0, TRAIN_STREAM)
    return _fold_t(h, edge_ids.to(torch.int64)) % num_nodes


def eval_tails(edge_ids: torch.Tensor, num_nodes: int, seed: int, count: int = EVAL_CANDIDATES) -> torch.Tensor:
    """int64 ``[P, count]``: the fixed evaluation candidate tails of each positive pair ``edge_ids``."""
    h = _fold_t(site_state(seed, 0, 0, EVAL_STREAM), edge_ids.to(torch.int64))
    j = torch.arange(count, dtype=torch.int64, device=edge_ids.device)
    return _fold_t(h[:, None] & _M32, j[None, :]) % num_nodes

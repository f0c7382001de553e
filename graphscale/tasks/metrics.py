"""Link-prediction metrics with OGB's definitions (``ogb.linkproppred.Evaluator``).

* AUC: the area under the ROC curve of the positives' scores against the negatives' (ties count one half: the
  Mann-Whitney statistic, which is ``sklearn.metrics.roc_auc_score``'s value, ogbl-vessel's metric);
* Hits@K: the fraction of positives scored strictly above the K-th highest negative, 1 when there are fewer than K
  negatives (ogbl-collab, ogbl-ddi, ogbl-ppa);
* MRR: the mean reciprocal rank of each positive among its own negatives, a tie counting as the mean of the
  optimistic and the pessimistic rank (ogbl-citation2).
"""

from __future__ import annotations

import torch

#: rows of a ``[P, C]`` score matrix ranked at a time by :func:`reciprocal_ranks`
RANK_ROWS = 65536


def auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC of scores ``pos [P]`` (label 1) against ``neg [Q]`` (label 0); NaN when either is empty."""
    p, q = pos.numel(), neg.numel()
    if not p or not q:
        return float("nan")
    scores = torch.cat([pos.flatten(), neg.flatten()]).double()
    _, inverse, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    mean_rank = ends - (counts.double() - 1) / 2  # the 1-based ranks of a tie group, averaged
    rank_sum = float(mean_rank[inverse[:p]].sum())
    return (rank_sum - p * (p + 1) / 2) / (p * q)


def hits_at_k(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """Hits@``k`` of ``pos [P]`` against the shared negatives ``neg [Q]``; NaN when ``pos`` is empty."""
    if not pos.numel():
        return float("nan")
    if neg.numel() < k:
        return 1.0
    kth = torch.topk(neg.flatten(), k).values[-1]
    return float((pos > kth).sum()) / pos.numel()


def reciprocal_ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """float64 ``[P]``: the reciprocal rank of each ``pos [P]`` among its row of ``neg [P, C]`` (ties as in
    :func:`mrr`), :data:`RANK_ROWS` rows at a time (no ``[P, C]`` temporary)."""
    pos = pos.reshape(-1, 1)
    out = torch.empty(pos.shape[0], dtype=torch.float64, device=pos.device)
    for start in range(0, pos.shape[0], RANK_ROWS):
        p, n = pos[start:start + RANK_ROWS], neg[start:start + RANK_ROWS]
        rank = 0.5 * ((n > p).sum(dim=1) + (n >= p).sum(dim=1)).double() + 1
        out[start:start + RANK_ROWS] = 1.0 / rank
    return out


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """Mean reciprocal rank of each ``pos [P]`` among its row of ``neg [P, C]``; NaN when ``pos`` is empty."""
    if not pos.numel():
        return float("nan")
    return float(reciprocal_ranks(pos, neg).mean())

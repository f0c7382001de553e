"""Link-prediction metrics over pairs spread across workers, without any worker holding every pair's summary.

Each worker holds, per split, the :func:`~graphscale.tasks.link.score_summary` of the pairs it scores: ``pos``
(the positives' scores), ``shared`` (the shared negatives': every positive's first candidate) and the reciprocal
ranks (or ``None``). :func:`distributed_metrics` returns what :func:`~graphscale.tasks.link.summary_metrics` returns
over every worker's pairs, with OGB's definitions (:mod:`graphscale.tasks.metrics`), from reductions:

* AUC: the Mann-Whitney statistic ``U = sum over positives of (#negatives below + #negatives equal / 2)``, counted by
  each worker for its own positives against every worker's shared negatives, which pass by in sorted blocks of
  :data:`AUC_BLOCK` per worker; ``2U`` is an integer, so the sum is exact and ``U / (P Q)`` is ``single``'s value to
  the last bit;
* Hits@K: each worker's top ``max K`` shared negatives are gathered (``W max K`` scores), the K-th highest of them is
  the global one; the positives above it are counted and summed;
* MRR and the loss: sums of the reciprocal ranks and of the BCE terms, over the global counts (``single``'s means,
  summed in another order).

A worker holds its own summaries, their sorted negatives and one gathered block: memory that follows its share of
the pairs. The reductions move ``O(Q)`` bytes per split in all (category ``link``, evaluation only).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from graphscale.distributed.comm import CONTROL, Comm

#: shared negatives each worker contributes to one sorted block of the AUC's count
AUC_BLOCK = 1 << 18


def _sum(comm: Comm, value, dtype: torch.dtype, device) -> torch.Tensor:
    return comm.all_reduce(torch.tensor([value], dtype=dtype, device=device), CONTROL)


def auc_twice_u(comm: Comm, pos: torch.Tensor, shared: torch.Tensor, category: str, block: int = AUC_BLOCK) -> int:
    """``2U`` over every worker's positives ``pos`` and shared negatives ``shared`` (module docstring), ``block``
    of each worker's negatives at a time; a collective."""
    device = pos.device
    shared = torch.sort(shared.double()).values
    mine = torch.tensor([-(-shared.numel() // block)], dtype=torch.int64, device=device)
    blocks = int(comm.all_reduce(mine, CONTROL, dist.ReduceOp.MAX))
    pos, twice = pos.double(), 0
    for b in range(blocks):
        gathered = torch.sort(torch.cat(comm.all_gather_v(shared[b * block:(b + 1) * block], category))).values
        below = torch.searchsorted(gathered, pos, right=False)
        at_or_below = torch.searchsorted(gathered, pos, right=True)
        twice += int((below + at_or_below).sum())
    return int(_sum(comm, twice, torch.int64, device))


def split_metrics(comm: Comm, split: str, pos: torch.Tensor, shared: torch.Tensor, ranks: torch.Tensor | None,
                  hits_k, category: str, block: int = AUC_BLOCK) -> dict[str, float]:
    """One split's metrics over every worker's summaries (module docstring; ``block``: the AUC's, per worker); a
    collective."""
    device, nan = pos.device, float("nan")
    pos, shared = pos.double(), shared.double()
    p = int(_sum(comm, pos.numel(), torch.int64, device))
    q = int(_sum(comm, shared.numel(), torch.int64, device))
    out = {}
    twice_u = auc_twice_u(comm, pos, shared, category, block)
    out[f"{split}_acc"] = out[f"{split}_auc"] = (twice_u / 2) / (p * q) if p and q else nan
    if hits_k:
        top = torch.topk(shared, min(max(hits_k), shared.numel())).values
        top = torch.cat(comm.all_gather_v(top, category))
        for k in hits_k:
            if not p:
                out[f"{split}_hits@{k}"] = nan
            elif q < k:
                out[f"{split}_hits@{k}"] = 1.0
            else:
                kth = torch.topk(top, k).values[-1]
                out[f"{split}_hits@{k}"] = float(_sum(comm, int((pos > kth).sum()), torch.int64, device)) / p
    if ranks is not None:
        out[f"{split}_mrr"] = float(_sum(comm, float(ranks.double().sum()), torch.float64, device)) / p if p else nan
    bce = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
           + F.binary_cross_entropy_with_logits(shared, torch.zeros_like(shared), reduction="sum"))
    out[f"{split}_loss"] = float(_sum(comm, float(bce), torch.float64, device)) / (p + q) if p else nan
    return out


def distributed_metrics(comm: Comm, summaries: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
                        hits_k, category: str, block: int = AUC_BLOCK) -> dict[str, float]:
    """Every split's metrics from this worker's :func:`~graphscale.tasks.link.score_summary` by split, over every
    worker's (module docstring; ``block``: the AUC's, per worker): the same on every worker; a collective."""
    out = {}
    for split, (pos, shared, ranks) in summaries.items():
        out.update(split_metrics(comm, split, pos, shared, ranks, hits_k, category, block))
    return out

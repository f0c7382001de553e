"""Link metrics computed by reductions over the workers' per-pair summaries
(:mod:`graphscale.strategies.link_metrics`) equal ``single``'s over all the pairs
(:func:`graphscale.tasks.link.summary_metrics`): AUC and Hits@K exactly, MRR and the loss to rounding, with ties
across workers, a worker without pairs, fewer negatives than K, and the AUC's negatives in several blocks."""

from __future__ import annotations

import math

import pytest
import torch

from graphscale.distributed.comm import Comm
from graphscale.strategies.link_metrics import distributed_metrics
from graphscale.tasks.link import summary_metrics
from graphscale.testing import run_distributed

WORKERS = 3
HITS_K = [1, 5, 40]


def summaries(seed: int, sizes: list[int], ranked: bool) -> list[dict]:
    """Per worker, two splits' summaries of ``sizes[i]`` pairs: scores on a coarse grid (ties within and across
    workers), float32 as a run's."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        pos = (torch.randint(0, 12, (n,), generator=g) / 4).float()
        shared = (torch.randint(-4, 8, (n,), generator=g) / 4).float()
        ranks = 1.0 / torch.randint(1, 30, (n,), generator=g).double() if ranked else None
        out.append({"test": (pos, shared, ranks), "train": (pos.flip(0), shared * 0.5, None)})
    return out


def _worker(env, per_worker: list[dict], block: int) -> dict:
    return distributed_metrics(Comm(env), per_worker[env.rank], HITS_K, "link", block)


def whole(per_worker: list[dict]) -> dict:
    """``single``'s metrics: every worker's summaries concatenated."""
    joined = {}
    for split in per_worker[0]:
        parts = [w[split] for w in per_worker]
        joined[split] = tuple(None if p[0] is None else torch.cat(p) for p in zip(*parts))
    return summary_metrics(joined, HITS_K)


@pytest.mark.parametrize("sizes", [[17, 0, 9], [3, 2, 1]])
def test_distributed_link_metrics_equal_the_whole(sizes):
    per_worker = summaries(0, sizes, ranked=True)
    expected = whole(per_worker)
    results = run_distributed(_worker, WORKERS, per_worker, 4)  # blocks of 4 negatives per worker
    for got in results:
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            if key.endswith(("_mrr", "_loss")):  # sums in another order
                assert got[key] == pytest.approx(value, rel=1e-12), key
            else:
                assert got[key] == value, key  # exact: counts
    assert expected["test_hits@40"] == 1.0  # fewer negatives than K
    assert 0 < expected["test_auc"] < 1 and not math.isnan(expected["test_mrr"])

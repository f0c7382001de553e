"""Evaluation of the averaged model (``--evaluation``), without loading the whole graph anywhere.

Every worker counts the predictions of its partitions' *home* vertices that lie in a split (train, val or test);
the counts are all-reduced (Ledger ``control``). What differs is the neighbourhood a home vertex is computed on:

* ``exact`` (the default): its full ``L``-hop in-neighbourhood (``L`` = ``--layers``), so the metrics are the
  model's, equal to ``single``'s evaluation of the same weights. Where the store holds a ``K >= L`` hop halo
  (``--halo-hops``) the partition's local forward is already exact (spec §3 reason 2, tested as T4) and nothing
  moves. Otherwise the blocks are built as :mod:`.correction` builds its samples, with fanout ``-1`` (every
  in-neighbour): each frontier vertex's row comes from the worker that owns it (its home partition holds its
  exact in-neighbour row, with global in-degrees), and so do the input rows, all through ``all_to_all`` under
  Ledger category ``evaluation`` (per layer: 8 bytes per requested id, 8 per returned count, 24 per returned
  neighbour; then 8 per requested input row and ``F s`` per returned one). Targets go in batches of
  :data:`BATCH`; the batch count is all-reduced (``MAX``, ``control``) so every worker serves in lockstep.
* ``halo``: exact from the store's halo alone, no traffic; the store must hold ``K >= L`` hops (a one-line error
  before any worker starts otherwise).
* ``truncated``: the partition's local forward whatever its halo (what training sees: halo rows computed from
  truncated neighbourhoods, so for ``L > K`` the metrics are *not* the model's); SDT-GNN's partition-local
  evaluation, cheaper, labelled ``truncated`` in the report.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from graphscale.distributed.comm import CONTROL, Comm
from graphscale.partition.store import LocalPartition
from graphscale.strategies.base import COUNTS_PER_SPLIT, SPLITS, split_counts
from graphscale.strategies.model_averaging.correction import RowServer, fetch_features, sample_blocks
from graphscale.strategies.options.model_averaging import EVALUATIONS

#: Ledger category of the exact evaluation's rows fetched from other workers
EVALUATION = "evaluation"
#: home vertices evaluated per fetched batch
BATCH = 1024


def check_evaluation(value: str) -> None:
    if value not in EVALUATIONS:
        raise ValueError(f"--evaluation must be one of {', '.join(EVALUATIONS)}, got {value!r}")


def evaluation_mode(evaluation: str, halo_hops: int, layers: int) -> str:
    """What the run does for ``--evaluation``: ``fetch`` (exact, remote rows), ``local`` (exact from the halo) or
    ``truncated`` (the local forward, not exact for ``layers > halo_hops``).

    Raises:
        ValueError: ``--evaluation halo`` with a halo shallower than the model.
    """
    check_evaluation(evaluation)
    if evaluation == "truncated":
        return "truncated"
    if halo_hops >= layers:
        return "local"
    if evaluation == "halo":
        raise ValueError(f"--evaluation halo needs a store with a halo of >= {layers} hops (--layers {layers}), this "
                         f"one holds {halo_hops}: partition with --halo-hops {layers}, or use --evaluation exact "
                         "(fetches the missing rows)")
    return "fetch"


def eval_targets(local: LocalPartition) -> tuple[np.ndarray, torch.Tensor, dict[str, torch.Tensor]]:
    """A partition's home vertices in any split as ``[n, 3]`` triples (original id, global id, in-degree),
    ascending, with their labels and their split masks."""
    g, n = local.graph, local.num_inner
    masks = {}
    for split in SPLITS:
        mask = getattr(g, f"{split}_mask")
        masks[split] = torch.zeros(n, dtype=torch.bool, device="cpu") if mask is None else mask[:n].bool()
    rows = torch.nonzero(masks["train"] | masks["val"] | masks["test"]).flatten()
    triples = torch.stack([local.orig_ids[rows], local.global_ids[rows], local.degree[rows]], dim=1)
    return triples.numpy().astype(np.int64), g.y[rows].clone(), {s: m[rows] for s, m in masks.items()}


def fetched_counts(comm: Comm, server: RowServer, model: torch.nn.Module, targets: np.ndarray, labels: torch.Tensor,
                   masks: dict[str, torch.Tensor], layers: int, device: torch.device,
                   batch: int = BATCH) -> torch.Tensor:
    """This worker's split counts of ``targets`` (:func:`eval_targets` of its partitions, concatenated), each
    computed on its full ``layers``-hop in-neighbourhood; a collective: every worker calls it."""
    mine = torch.tensor([math.ceil(targets.shape[0] / batch)], dtype=torch.int64, device=device)
    rounds = int(comm.all_reduce(mine, CONTROL, op=dist.ReduceOp.MAX).item())
    counts = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64, device=device)
    for i in range(rounds):
        at = slice(i * batch, (i + 1) * batch)
        chunk = np.ascontiguousarray(targets[at])
        blocks, inputs = sample_blocks(comm, server, chunk, [-1] * layers, 0, 0, EVALUATION)
        x = fetch_features(comm, server, inputs, EVALUATION).to(device)
        if chunk.shape[0]:
            logits = model([b.to(device) for b in blocks], x)
            counts += split_counts(logits, labels[at].to(device), {s: m[at].to(device) for s, m in masks.items()}
                                   ).to(device)
    return counts

"""Sampled evaluation (``--eval-fanouts``) of the mini-batch strategies: ``single --minibatch``, ``data-parallel``
and ``split-parallel``.

Exact evaluation is layer-wise inference over every vertex (:mod:`graphscale.strategies.evaluation`): every edge
is read once per layer, which at scale costs far more than a sampled epoch. With ``--eval-fanouts F,F,...`` the
vertices of the three splits (ascending ids) are evaluated ``--batch-size`` at a time, batch ``i`` being the ids
``[i * B, (i + 1) * B)`` of that list, each batch's neighbourhood sampled with the evaluation fanouts under batch key
``i`` (the same samples at every evaluation), its input rows read as training reads them (the host-row cache), and
the model run on the sampled blocks (``model.eval()``: no dropout). Fanouts of ``-1`` take every neighbour: the
exact evaluation up to float reassociation.

**Across workers** (``data-parallel``, ``split-parallel``: every worker holds the whole model) worker ``r`` of
``W`` evaluates the batches ``i`` with ``i % W == r``, into row ``i`` of a ``[K, COUNTS_PER_SPLIT * 3]`` float64
table (:func:`~graphscale.strategies.base.split_counts`; zero rows for the batches of the other workers); one
all-reduce (``control``, ring model) sums the tables, and each worker adds the rows up in batch order. Each entry
of the reduced table has one non-zero term, so the sum is exact, and the metrics are bit for bit those of one
worker evaluating every batch (``single --minibatch --eval-fanouts`` with the same fanouts, batch size and seed).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from graphscale.data.graph import Graph
from graphscale.data.row_cache import prefetched
from graphscale.data.sampler import NeighborSampler
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.strategies.base import COUNTS_PER_SPLIT, SPLITS, counts_to_metrics, split_counts


class SampledEvaluator:
    """The sampled evaluation of one worker (module docstring).

    Args:
        graph: the graph training samples from (its CSR is read by the sampler).
        fanouts: the evaluation fanouts, input layer first (``-1``: every neighbour).
        batch_size: split vertices per evaluation batch.
        seed: the run's seed (the sampler's).
        degrees: the ``[N]`` degrees training's sampler carries into its blocks (shared, not recomputed).
        y, masks: labels and the three split masks, ``[N]`` each, on the host.
        host_rows: reads ``x[ids]`` on the host (in the prefetch thread), or ``None``.
        device_rows: turns the batch's input ids and the host rows (``None`` without ``host_rows``) into the
            model's input on the device.
    """

    def __init__(self, graph: Graph, fanouts: list[int], batch_size: int, seed: int, degrees: torch.Tensor,
                 y: torch.Tensor, masks: dict[str, torch.Tensor],
                 host_rows: Callable[[torch.Tensor], torch.Tensor] | None,
                 device_rows: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]) -> None:
        self.sampler = NeighborSampler(graph, fanouts, seed=seed, degrees=degrees)
        self.batch_size = batch_size
        self.y, self.masks = y, {split: masks[split].cpu() for split in SPLITS}
        self.ids = torch.nonzero(self.masks["train"] | self.masks["val"] | self.masks["test"]).flatten()
        self.num_batches = -(-self.ids.numel() // batch_size)
        self.host_rows, self.device_rows = host_rows, device_rows

    @torch.no_grad()
    def counts(self, model: torch.nn.Module, device: torch.device, rank: int = 0, world_size: int = 1) -> torch.Tensor:
        """The ``[K, COUNTS_PER_SPLIT * 3]`` float64 table of per-batch split counts: the rows of the batches
        ``i % world_size == rank``, zeros elsewhere."""
        model.eval()
        mine = range(rank, self.num_batches, world_size)
        table = torch.zeros(self.num_batches, COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64)

        def gather(k: int):  # sampling and host rows one batch ahead, in the prefetch thread
            i = mine[k]
            targets = self.ids[i * self.batch_size: (i + 1) * self.batch_size]
            blocks = self.sampler.sample(targets, batch_key=i)
            return i, targets, blocks, None if self.host_rows is None else self.host_rows(blocks[0].src_ids)

        for i, targets, blocks, rows in prefetched(gather, len(mine)):
            blocks = [b.to(device) for b in blocks]
            logits = model(blocks, self.device_rows(blocks[0].src_ids, rows))
            masks = {split: m[targets].to(device) for split, m in self.masks.items()}
            table[i] = split_counts(logits, self.y[targets.to(self.y.device)].to(device), masks).cpu()
        return table

    def evaluate(self, model: torch.nn.Module, device: torch.device, comm: Comm | None = None) -> dict[str, float]:
        """The metrics of every batch: this worker's share (all of them without ``comm``), the tables all-reduced,
        the rows summed in batch order."""
        if comm is None or comm.world_size == 1:
            table = self.counts(model, device)
        else:
            table = comm.all_reduce(self.counts(model, device, comm.rank, comm.world_size), CONTROL).cpu()
        total = torch.zeros(table.shape[1], dtype=torch.float64)
        for row in table:  # in batch order: the one worker's running sum
            total += row
        return counts_to_metrics(total)

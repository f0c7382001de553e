"""Edge mini-batches of link prediction (PyG ``LinkNeighborLoader`` semantics, seeded).

An epoch cuts the training pairs' edge ids (:meth:`graphscale.tasks.split.LinkSplit.ids`) into batches of
``--batch-size`` positives with :class:`~graphscale.data.sampler.MiniBatchLoader` (the same seeded per-epoch shuffle
as node mini-batches: a function of ``(seed, epoch)`` only). A batch of positives ``(u_i, v_i)`` with edge ids
``e_i`` scores ``2b`` pairs: the positives, then their keyed negatives ``(u_i, t_i)``,
``t_i = train_tails(e_i, N, seed, epoch)`` (:mod:`graphscale.tasks.negatives`), labels 1 then 0. Its *seeds* are
the distinct endpoints of those pairs, ascending: the targets whose neighbourhoods a strategy samples with the
fan-outs over the split's message-passing graph (so no held-out edge is ever sampled); each pair's source and
destination are rows of the seeds (:attr:`EdgeBatch.src_pos`, :attr:`EdgeBatch.dst_pos`). The batch's loss is the
summed BCE of its ``2b`` pairs divided by ``2b`` (one optimiser step per batch, as node mini-batches divide by the
batch size).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.sampler import MiniBatchLoader
from graphscale.tasks.negatives import train_tails
from graphscale.tasks.split import LinkSplit


@dataclass
class EdgeBatch:
    """One edge mini-batch (module docstring).

    Attributes:
        edge_ids: int64 ``[b]``: the positives' edge ids.
        seeds: int64 ``[S]``: the distinct endpoints of the batch's pairs, ascending (the sampler's targets).
        src_pos: int64 ``[2b]``: each pair's source as a row of ``seeds`` (positives first, then negatives).
        dst_pos: int64 ``[2b]``: each pair's destination as a row of ``seeds``.
        label: float ``[2b]``: 1 for the positives, 0 for the negatives.
    """

    edge_ids: torch.Tensor
    seeds: torch.Tensor
    src_pos: torch.Tensor
    dst_pos: torch.Tensor
    label: torch.Tensor

    @property
    def num_pairs(self) -> int:
        """``2b``: the pairs scored (the loss's normaliser)."""
        return self.src_pos.numel()


class EdgeBatchLoader:
    """The edge mini-batches of ``split``'s training pairs (module docstring).

    Args:
        split: the edge split.
        batch_size: positives per batch, ``>= 1``.
        seed: the run's seed (the shuffle and the negatives' key).
    """

    def __init__(self, split: LinkSplit, batch_size: int, seed: int) -> None:
        self.pairs, self.num_nodes, self.seed = split.pairs, split.num_nodes, int(seed)
        self.loader = MiniBatchLoader(split.ids("train"), batch_size, seed=seed)

    @property
    def num_positives(self) -> int:
        """The training positives of an epoch."""
        return self.loader.train_ids.numel()

    def __len__(self) -> int:
        return len(self.loader)

    def batch_key(self, epoch: int, index: int) -> int:
        """The sampling key of batch ``index`` of ``epoch`` (:meth:`MiniBatchLoader.batch_key`)."""
        return self.loader.batch_key(epoch, index)

    def edge_ids(self, epoch: int) -> list[torch.Tensor]:
        """The positives' edge ids of every batch of ``epoch``."""
        return self.loader.batches(epoch)

    def batch(self, edge_ids: torch.Tensor, epoch: int) -> EdgeBatch:
        """The pairs and seeds of the positives ``edge_ids`` in epoch ``epoch`` (any subset of an epoch's batch,
        e.g. one worker's micro-batch)."""
        u, v = self.pairs[0, edge_ids], self.pairs[1, edge_ids]
        t = train_tails(edge_ids, self.num_nodes, self.seed, epoch)
        src, dst = torch.cat([u, u]), torch.cat([v, t])
        seeds, inverse = torch.unique(torch.cat([src, dst]), sorted=True, return_inverse=True)
        b = edge_ids.numel()
        label = torch.cat([torch.ones(b), torch.zeros(b)])
        return EdgeBatch(edge_ids, seeds, inverse[:2 * b], inverse[2 * b:], label)

    def batches(self, epoch: int) -> list[EdgeBatch]:
        """Every batch of ``epoch``."""
        return [self.batch(ids, epoch) for ids in self.edge_ids(epoch)]

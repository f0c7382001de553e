"""``--task link`` under model averaging: each partition trains on its local edges (SDT-GNN's local training, with
pairs instead of vertices); approximate, like node classification under this strategy.

**The data.** For ``--task link`` the parent draws the split from the whole graph, writes the partition store of
its *message-passing* graph (the held-out pairs removed) and the split next to it, in the link folder graph-parallel
reads (:mod:`graphscale.tasks.link_store`). Every worker reads the split back whole (every part's pairs and the
given negatives, :func:`~graphscale.tasks.link_store.read_link_split`: O(E) per worker; the graph itself stays
partitioned).

**Training.** Partition ``j`` trains on the training pairs ``(u, v)`` whose ``v`` is one of its home vertices
(``u``, an in-neighbour of ``v`` in the message-passing graph, is in its halo), against one negative each: the
pair's keyed tail (:func:`graphscale.tasks.negatives.train_tails`, a function of the seed, the epoch and the edge
id only) drawn among the partition's home vertices, so that a negative's embedding is one the partition computes
from its full in-neighbourhood. The loss is the mean BCE over the partition's ``2 P_j`` pairs, and ``alpha_j`` in
the averaging is ``P_j / P`` (its share of the training pairs).

**Evaluation.** The averaged model's embedding of every home vertex (exact: on the partition's local graph when its
halo has ``K >= L`` hops, else layer by layer, :class:`.evaluation.LayerwiseEvaluation`; ``--evaluation truncated``
the local forward), gathered on every worker (Ledger ``evaluation``: each worker receives every other's rows,
``N d`` values), then scored as ``single`` scores them (:class:`graphscale.tasks.link.LinkTask`), against the same
fixed candidates.
"""

from __future__ import annotations

import numpy as np
import torch

from graphscale.distributed.comm import CONTROL, Comm
from graphscale.partition.store import LocalPartition
from graphscale.strategies.model_averaging.evaluation import EVALUATION
from graphscale.tasks.link import LinkTask
from graphscale.tasks.link_store import is_link_folder, link_folder, read_link_split
from graphscale.tasks.negatives import train_tails


def link_refusal(config) -> str:
    """Why model averaging cannot run ``config`` with ``--task link`` (completing "it ..."), or empty."""
    sc = config.strategy
    if sc.minibatch:
        return "runs link prediction full-neighbour only (drop --minibatch)"
    if sc.correction_steps:
        return "runs link prediction without --correction-steps (drop them)"
    if sc.partitions:
        return ("runs link prediction on the partition store it writes of the message-passing graph (drop "
                "--partitions)")
    return ""


def all_home_targets(local: LocalPartition) -> tuple[np.ndarray, torch.Tensor, dict[str, torch.Tensor]]:
    """Every home vertex of a partition as ``[n, 3]`` triples (original id, global id, in-degree), ascending, as
    :func:`.evaluation.eval_targets` gives them (labels and masks unused: link evaluation takes the outputs)."""
    n = local.num_inner
    triples = torch.stack([local.orig_ids[:n], local.global_ids[:n], local.degree[:n]], dim=1)
    none = torch.zeros(n, dtype=torch.bool)
    return triples.numpy().astype(np.int64), torch.zeros(n, dtype=torch.int64), {s: none for s in
                                                                                    ("train", "val", "test")}


class LinkPartitions:
    """The split, each partition's training pairs, their loss and the evaluation (module docstring).

    Args:
        store: the partition store's directory (its link folder beside it holds the split).
        decoder: the model's decoder.
        config: the run's configuration.
        device: where the pairs live.
    """

    def __init__(self, store: str, decoder: torch.nn.Module, config, device: torch.device) -> None:
        folder = link_folder(store)
        if not is_link_folder(folder):
            raise ValueError(f"--task link: partition store {store} has no link split next to it ({folder.name}); "
                             "it was not written by a --task link run")
        self.split = read_link_split(folder)
        self.task = LinkTask(self.split, decoder, config.seed, config.hits_k, device)
        self.seed, self.device = config.seed, device
        self._pairs: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def pairs(self, part: int, orig_ids: torch.Tensor, num_inner: int) -> tuple[torch.Tensor, ...]:
        """``(edge ids, local u, local v)`` of partition ``part``'s training pairs (those with a home ``v``)."""
        if part not in self._pairs:
            ids = self.split.ids("train")
            local = torch.full((self.split.num_nodes,), -1, dtype=torch.int64)
            local[orig_ids.cpu()] = torch.arange(orig_ids.numel())
            u, v = local[self.split.pairs[0, ids]], local[self.split.pairs[1, ids]]
            keep = (v >= 0) & (v < num_inner) & (u >= 0)
            self._pairs[part] = tuple(t[keep].to(self.device) for t in (ids, u, v))
        return self._pairs[part]

    def part_counts(self, comm: Comm, num_parts: int, local: dict) -> list[int]:
        """``2 P_j`` of every partition (``local``: this worker's partitions' data, with ``orig_ids`` and
        ``num_inner``), all-reduced under ``control``."""
        counts = torch.zeros(num_parts, dtype=torch.float64, device=self.device)
        for part, data in local.items():
            counts[part] = 2 * self.pairs(part, data.orig_ids, data.num_inner)[0].numel()
        return [int(c) for c in comm.all_reduce(counts, CONTROL).cpu()]

    def loss_sum(self, z: torch.Tensor, part: int, orig_ids: torch.Tensor, num_inner: int, epoch: int) -> torch.Tensor:
        """The summed BCE of partition ``part``'s training pairs and their keyed home-vertex negatives, from its
        local rows ``z``."""
        ids, u, v = self.pairs(part, orig_ids, num_inner)
        t = train_tails(ids, num_inner, self.seed, epoch)
        label = torch.cat([torch.ones(ids.numel()), torch.zeros(ids.numel())]).to(z.device)
        return self.task.loss_sum(z[torch.cat([u, u])], z[torch.cat([v, t])], label)

    def evaluate(self, comm: Comm, ids: torch.Tensor, rows: torch.Tensor) -> dict[str, float]:
        """Every split's metrics from this worker's home vertices' embeddings ``rows`` (original ids ``ids``),
        gathered from every worker (a collective)."""
        all_ids = torch.cat(comm.all_gather_v(ids.to(self.device), EVALUATION))
        all_rows = torch.cat(comm.all_gather_v(rows.to(self.device), EVALUATION))
        z = all_rows.new_zeros((self.split.num_nodes, all_rows.shape[1]))
        z[all_ids] = all_rows
        return self.task.evaluate(z)

    def evaluate_averaged(self, strategy) -> dict[str, float]:
        """Every split's metrics of a model-averaging ``strategy``'s averaged model (in eval mode): its home
        vertices' embeddings, exact as its evaluation mode gives them (a collective)."""
        if strategy.eval_mode == "fetch":
            rows = strategy.layerwise.outputs(strategy.model, strategy._local_inputs)
            return self.evaluate(strategy.comm, strategy.layerwise.first_ids[: rows.shape[0]], rows)
        ids, rows = [], []
        for part in strategy.parts:
            data = strategy._data(part)
            rows.append(strategy.model(data.block, data.x)[: data.num_inner])
            ids.append(data.orig_ids[: data.num_inner])
        return self.evaluate(strategy.comm, torch.cat(ids), torch.cat(rows))

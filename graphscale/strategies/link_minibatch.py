"""Link prediction under the multi-worker mini-batch strategies (``split-parallel``, ``data-parallel``).

**Setup** (:func:`setup_link`). Every worker splits the graph's edges as ``single`` does
(:func:`~graphscale.tasks.split.split_edges`, seeded: the same split everywhere) and trains on the split's
message-passing graph: the sampler, the split plan's in-degrees and the layer-wise evaluation read it, so no held-out
edge is ever sampled or aggregated. The training positives are cut into edge batches by
:class:`~graphscale.tasks.edge_batches.EdgeBatchLoader`; a batch's seeds (the endpoints of its positives and
their keyed negatives) are the sampler's targets.

**Scoring a split batch** (:class:`PairExchange`, ``split-parallel``). Every worker holds the embeddings of the seeds
it owns (the split's owner of each seed). Pair ``p = (s, t)`` is scored on the owner of its source ``s``; when
``t`` is owned elsewhere, its owner ships ``z_t`` once per (destination seed, scoring worker) in one all-to-all
(category :data:`PAIR_ROWS`), and the backward returns its gradient the same way. Every list ``j -> i`` is in
ascending seed order, known to both sides because every worker holds the whole batch. Bytes per batch, summed over
workers, with ``d`` the embedding width and ``s`` bytes per element::

    pair_rows = 2 * |{(t, i) : some pair (s, t) with owner(s) = i != owner(t)}| * d * s

(forward and backward). The summed losses of the workers' pairs, divided by the batch's ``2b`` pairs, and the
gradient all-reduce make the step ``single --minibatch``'s on the same batch up to float reassociation.

**Evaluation** (:func:`evaluate_link`): each worker's owned vertices' embeddings by the distributed layer-wise
inference (:class:`~graphscale.strategies.evaluation.LayerwiseEvaluator`, over the message-passing graph), gathered
on every worker (their ids under ``control``, the rows under ``eval_halo``), then every split's pairs scored by
:meth:`~graphscale.tasks.link.LinkTask.evaluate`: the same metrics on every worker, those of ``single``'s
full-graph inference.
"""

from __future__ import annotations

import torch

from graphscale.data.graph import Graph
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.functional import all_to_all_v
from graphscale.strategies.evaluation import EVAL_HALO, LayerwiseEvaluator
from graphscale.tasks.edge_batches import EdgeBatch, EdgeBatchLoader
from graphscale.tasks.link import LinkTask
from graphscale.tasks.split import split_edges

#: Ledger category of the seed embeddings shipped to the worker that scores their pairs (forward and backward)
PAIR_ROWS = "pair_rows"


def setup_link(graph: Graph, model: torch.nn.Module, config, device) -> tuple[Graph, LinkTask, EdgeBatchLoader]:
    """``(message_graph, task, loader)`` of a ``--task link`` run on ``graph`` (module docstring)."""
    split = split_edges(graph, config.link_split, config.seed)
    task = LinkTask(split, model.link_decoder, config.seed, config.hits_k, device)
    return split.message_graph, task, EdgeBatchLoader(split, config.strategy.batch_size, config.seed)


class PairExchange:
    """Which of an edge batch's pairs a worker scores and the seed embeddings it exchanges for them (module
    docstring), computed alike on every worker from the whole batch.

    Args:
        owner: int64 ``[S]``: the worker owning each seed.
        own_pos: int64 ``[S]``: each seed's row among its owner's embeddings.
        batch: the edge batch.
        rank: this worker.
        world: the workers ``W``.

    Attributes:
        pairs: int64: the batch's pairs this worker scores (its sources' owner is ``rank``), ascending.
        send_index: int64: rows of this worker's embeddings it ships, grouped by receiver.
        send_counts, recv_counts: rows to / from each worker.
        src_rows, dst_rows: each scored pair's source / destination as a row of ``[own embeddings; received]``.
    """

    def __init__(self, owner: torch.Tensor, own_pos: torch.Tensor, batch: EdgeBatch, rank: int, world: int) -> None:
        s = owner.numel()
        scorer = owner[batch.src_pos]
        need = torch.zeros(world, s, dtype=torch.bool)  # need[i, t]: worker i scores a pair ending at seed t
        need[scorer, batch.dst_pos] = True
        need[owner, torch.arange(s)] = False  # an owner reads its own seeds
        sent = [torch.nonzero(need[i] & (owner == rank)).flatten() for i in range(world)]
        got = [torch.nonzero(need[rank] & (owner == j)).flatten() for j in range(world)]
        self.send_counts = [t.numel() for t in sent]
        self.recv_counts = [t.numel() for t in got]
        self.send_index = own_pos[torch.cat(sent)] if sent else torch.zeros(0, dtype=torch.int64)
        own_count = int((owner == rank).sum())
        row = torch.full((s,), -1, dtype=torch.int64)
        mine = owner == rank
        row[mine] = own_pos[mine]
        received = torch.cat(got) if got else torch.zeros(0, dtype=torch.int64)
        row[received] = own_count + torch.arange(received.numel())
        self.pairs = torch.nonzero(scorer == rank).flatten()
        self.src_rows = row[batch.src_pos[self.pairs]]
        self.dst_rows = row[batch.dst_pos[self.pairs]]
        self.label = batch.label[self.pairs]

    def rows_shipped(self) -> int:
        """Embedding rows this worker ships forward."""
        return sum(self.send_counts)

    def loss_sum(self, comm: Comm, z: torch.Tensor, task: LinkTask) -> torch.Tensor:
        """The summed BCE of this worker's pairs from its seeds' embeddings ``z`` (a collective: the exchange, whose
        backward every worker joins, also one scoring no pair)."""
        device = z.device
        received = all_to_all_v(z.index_select(0, self.send_index.to(device)), comm, self.send_counts,
                                self.recv_counts, PAIR_ROWS)
        table = torch.cat([z, received])
        loss = task.loss_sum(table[self.src_rows.to(device)], table[self.dst_rows.to(device)], self.label.to(device))
        return loss + 0.0 * received.sum()


@torch.no_grad()
def evaluate_link(comm: Comm, evaluator: LayerwiseEvaluator, task: LinkTask) -> dict[str, float]:
    """Every split's link metrics from the distributed layer-wise embeddings (module docstring; a collective)."""
    z_own = evaluator.logits()
    ids = torch.cat(comm.all_gather_v(evaluator.owned.to(z_own.device), CONTROL))
    rows = torch.cat(comm.all_gather_v(torch.as_tensor(z_own).contiguous(), EVAL_HALO))
    z = rows.new_empty((task.num_nodes, *rows.shape[1:]))
    z[ids] = rows
    return task.evaluate(z)

"""Link prediction where every worker holds the embeddings of the vertices it owns: each supervised pair is
scored on the worker that owns its source vertex (:mod:`graphscale.tasks.link_store`), which fetches the
destination embeddings other workers own and returns their gradients.

**The exchange** (:class:`RowFetch`, Ledger category :data:`LINK`). For a list of destination vertices a worker
asks each owner for the distinct ones it does not own: one ``all_to_all_v`` of its request counts (one int64 per
peer), one of the requested ids (int64), one of the rows (``d`` elements each, the embedding width), and in the
backward one of their gradients, which each owner adds into its own rows. Training scores the epoch's positives
and their keyed negatives (:func:`~graphscale.tasks.negatives.train_tails`: the same on every worker as in
``single``), so per training epoch, summed over workers (``W`` workers, ``R_i`` the distinct destinations of
worker ``i``'s training pairs that another worker owns, ``b`` bytes per element)::

    link = sum_i  [ 8 (W - 1) + R_i (8 + 2 d b) ]          (no bytes on one worker)

The loss is the sum of BCE over the worker's pairs divided by the global pair count ``2 P`` (the parent's
``counts``), so the all-reduced gradients are ``single``'s. Evaluation scores the worker's pairs a block at a time
(:data:`EVAL_CANDIDATES_PER_BLOCK` candidates: the block's keyed candidates are drawn, the rows of its positives'
destinations and candidates fetched, no backward, and the block's scores reduced to per-pair summaries: each pair's
score, its first candidate's and its reciprocal rank among its candidates), then computes the metrics over all
workers' summaries by reductions (:mod:`graphscale.strategies.link_metrics`), equal to ``single``'s
(:func:`~graphscale.tasks.link.summary_metrics`). A worker holds its own pairs, the rows it fetched for one step or
block and the summaries of its own pairs: nothing of the whole graph but the owner of every vertex.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.functional import all_to_all_v
from graphscale.strategies.link_metrics import distributed_metrics
from graphscale.tasks.link import candidate_scores, score_summary, table_loss_sum
from graphscale.tasks.link_store import LinkPart
from graphscale.tasks.negatives import EVAL_CANDIDATES, eval_tails, train_tails
from graphscale.tasks.split import SPLIT_NAMES

#: the Ledger category of the scoring exchange
LINK = "link"
#: the exchange's collectives in one training epoch (on more than one worker): the request counts, the ids and the
#: rows forward, their gradients backward
LINK_COLLECTIVES = 4
#: candidates (pairs times candidates per pair) a worker scores at a time in evaluation: bounds the keyed candidates,
#: the fetched ids and their temporaries, whatever the candidate count
EVAL_CANDIDATES_PER_BLOCK = 1 << 20


def link_bytes_per_epoch(remote_rows: Sequence[int], width: int, element_size: int) -> int:
    """The closed-form scoring exchange of one training epoch, summed over workers (module docstring):
    ``remote_rows[i]`` is ``R_i``."""
    workers = len(remote_rows)
    if workers < 2:
        return 0
    return sum(8 * (workers - 1) + int(r) * (8 + 2 * width * element_size) for r in remote_rows)


def keyed_pairs(ids: torch.Tensor, pairs: torch.Tensor, num_nodes: int, seed: int,
                epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, label)``: the training positives ``pairs`` (edge ids ``ids``) in epoch ``epoch``, then their
    keyed negatives."""
    u, v = pairs
    t = train_tails(ids, num_nodes, seed, epoch)
    label = torch.cat([torch.ones(ids.numel()), torch.zeros(ids.numel())]).to(u.device)
    return torch.cat([u, u]), torch.cat([v, t]), label


def train_pairs(part: LinkPart, seed: int, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src, dst, label)``: the training positives of ``part`` in epoch ``epoch``, then their keyed negatives."""
    positions = part.split_ids("train")
    return keyed_pairs(part.ids[positions], part.pairs[:, positions], part.num_nodes, seed, epoch)


def remote_rows(part: LinkPart, owner: torch.Tensor, rank: int, seed: int, epoch: int) -> int:
    """``R_i`` of the closed form (module docstring): the distinct destinations of worker ``rank``'s training pairs
    ``part`` in epoch ``epoch`` that another worker owns (``owner``: the worker of every vertex)."""
    need = torch.unique(train_pairs(part, seed, epoch)[1])
    return int((owner[need] != rank).sum())


#: the epoch whose keyed negatives a prediction's ``link`` bytes are (they vary with the epoch)
LINK_BYTES_EPOCH = 0


def predict_head(data, model, config, workers: int, owner: torch.Tensor | None = None) -> dict:
    """``--task link``: what scoring the pairs adds to a prediction of a run whose worker ``i`` scores the pairs
    whose source it owns (``owner``: the worker of every vertex; ``None``: the partition store's book) and fetches
    the other destinations' rows (:mod:`graphscale.strategies.link_scoring`), over epoch
    :data:`LINK_BYTES_EPOCH`'s keyed negatives: ``bytes`` (the ``link`` closed form), ``collectives``, ``memory``
    per worker (:func:`graphscale.cost.link.head_bytes`), ``seconds(machine, i)`` (worker ``i``'s scoring,
    :func:`graphscale.cost.link.head_seconds`), ``epoch`` and ``notes``. Graph-parallel reads the pairs from the
    link folder beside its store (one part per worker), offload from the one beside its graph directory."""
    from graphscale.cost.link import head_bytes, head_seconds
    from graphscale.cost.pricing import element_size
    from graphscale.tasks.link import embedding_width
    from graphscale.tasks.link_store import link_folder, read_link_part, store_owner
    from graphscale.tasks.pair_scores import fusable

    elem, width = element_size(model), embedding_width(model, config)
    chunked = fusable(model.link_decoder)  # scored from the embedding table in chunks (LinkScorer)
    if owner is None:
        folder = data.shared or link_folder(data.path)
        owner, pairs = store_owner(data.path), [read_link_part(folder, i) for i in range(workers)]
    else:
        whole = read_link_part(link_folder(data.path), 0)
        pairs = [whole.owned_by(owner, i) for i in range(workers)]
    scored = [2 * p.split_ids("train").numel() for p in pairs]
    remote = [remote_rows(p, owner, i, config.seed, LINK_BYTES_EPOCH) for i, p in enumerate(pairs)]
    link = link_bytes_per_epoch(remote, width, elem)
    return {"bytes": {LINK: link} if link else {}, "collectives": LINK_COLLECTIVES if workers > 1 else 0,
            "memory": [head_bytes(n, width, elem, config.decoder, chunked) for n in scored],
            "seconds": lambda machine, i: head_seconds(machine, scored[i], width, config.decoder, workers),
            "epoch": LINK_BYTES_EPOCH,
            "notes": [(f"link: link_bytes_per_epoch over epoch {LINK_BYTES_EPOCH}'s keyed negatives; the scoring's "
                       "memory and time: graphscale.cost.link")]}


class RowFetch:
    """The rows of any vertices, from the worker's own rows and, for the others, from their owners (module
    docstring).

    Args:
        comm: the worker's Comm.
        inner_ids: the original ids of the worker's own rows, ascending.
        owner: int64 ``[N]``, the worker of every vertex.
    """

    def __init__(self, comm: Comm, inner_ids: torch.Tensor, owner: torch.Tensor) -> None:
        self.comm, self.inner_ids, self.owner = comm, inner_ids, owner.to(inner_ids.device)
        self.num_nodes = int(owner.numel())

    def local(self, ids: torch.Tensor) -> torch.Tensor:
        """The positions of own vertices ``ids`` among the worker's rows."""
        return torch.searchsorted(self.inner_ids, ids)

    def table(self, rows: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(table, index)``: ``table[index]`` are the rows of vertices ``ids`` (``rows``: the worker's own, in
        :attr:`inner_ids` order); a collective (every worker calls it, with its own ``ids``)."""
        comm, world = self.comm, self.comm.world_size
        need, inverse = torch.unique(ids, return_inverse=True)  # ids == need[inverse]
        owner = self.owner[need]
        remote = torch.nonzero(owner != comm.rank).flatten()  # positions in need, ascending by id
        remote = remote[torch.argsort(owner[remote], stable=True)]  # by owner, then id
        send = torch.bincount(owner[remote], minlength=world).tolist()
        ones = [1] * world
        recv = comm.all_to_all_v(torch.tensor(send, dtype=torch.int64, device=ids.device), ones, ones, LINK).tolist()
        asked = comm.all_to_all_v(need[remote], send, recv, LINK)  # the ids the others want from this worker
        fetched = all_to_all_v(rows.index_select(0, self.local(asked)), comm, recv, send, LINK)
        del asked
        table = torch.cat([rows, fetched])
        slot = torch.empty_like(need)  # the row of table each distinct vertex is at
        own = owner == comm.rank
        slot[own] = self.local(need[own])
        slot[remote] = rows.shape[0] + torch.arange(remote.numel(), device=ids.device)
        return table, slot[inverse]


class LinkScorer:
    """The pairs one worker scores, their loss and their metrics (module docstring).

    Args:
        part: the worker's pairs.
        fetch: the worker's :class:`RowFetch`.
        decoder: the model's decoder.
        seed: the run's seed (the negatives' key).
        hits_k: the K of the reported Hits@K.
    """

    def __init__(self, part: LinkPart, fetch: RowFetch, decoder: torch.nn.Module, seed: int, hits_k) -> None:
        device = fetch.inner_ids.device
        self.fetch, self.decoder, self.seed, self.hits_k = fetch, decoder, seed, list(hits_k)
        self.num_nodes = part.num_nodes
        #: the global pair count of the loss (positives and their negatives)
        self.normaliser = 2 * part.num_train
        positions = {name: part.split_ids(name) for name in SPLIT_NAMES}
        #: the pairs by split (the part's arrays are not kept: one copy of the worker's pairs)
        self.ids = {name: part.ids[p].to(device) for name, p in positions.items()}
        self.pairs = {name: part.pairs[:, p].to(device) for name, p in positions.items()}

    def train_pairs(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(src, dst, label)``: this worker's training positives of epoch ``epoch``, then their keyed
        negatives."""
        return keyed_pairs(self.ids["train"], self.pairs["train"], self.num_nodes, self.seed, epoch)

    def loss_sum(self, z: torch.Tensor, epoch: int) -> torch.Tensor:
        """The summed BCE of this worker's training pairs of epoch ``epoch`` (divide by :attr:`normaliser`), from
        its own rows ``z``; a collective (the destinations' rows and, in the backward, their gradients)."""
        src, dst, label = self.train_pairs(epoch)
        table, index = self.fetch.table(z, dst)
        return table_loss_sum(self.decoder, z, self.fetch.local(src), table, index, label)

    @staticmethod
    def candidate_count(split: str) -> int:
        """The evaluation candidates per pair of ``split``: the training split's first only."""
        return 1 if split == "train" else EVAL_CANDIDATES

    @classmethod
    def block_pairs(cls, split: str) -> int:
        """The pairs of ``split`` in one evaluation block (:data:`EVAL_CANDIDATES_PER_BLOCK` candidates)."""
        return max(EVAL_CANDIDATES_PER_BLOCK // cls.candidate_count(split), 1)

    def block_summary(self, z: torch.Tensor, split: str, block: int) -> tuple[torch.Tensor, ...]:
        """``(pos, shared, reciprocal ranks)`` of block ``block`` (:meth:`block_pairs` pairs) of this worker's pairs
        of ``split``: their scores summarised (:func:`~graphscale.tasks.link.score_summary`) against their fixed
        candidates; a collective (every worker calls it for every block, some with none of its own)."""
        size = self.block_pairs(split)
        start = block * size
        ids, (u, v) = self.ids[split][start:start + size], self.pairs[split][:, start:start + size]
        candidates = eval_tails(ids, self.num_nodes, self.seed, count=self.candidate_count(split))
        table, index = self.fetch.table(z, torch.cat([v, candidates.flatten()]))
        z_u = z[self.fetch.local(u)]
        pos = self.decoder(z_u, table[index[: v.numel()]])
        neg = candidate_scores(self.decoder, z_u, table, index[v.numel():].view(candidates.shape))
        return score_summary(pos, neg)

    @torch.no_grad()
    def evaluate(self, z: torch.Tensor) -> dict[str, float]:
        """Every split's metrics over every worker's pairs, from this worker's rows ``z``; a collective (the same
        on every worker). Each worker scores its pairs a block at a time (:meth:`block_pairs`; the most blocks of
        any worker, agreed under ``control``), reduces their candidate scores to what the metrics need of them
        (:func:`~graphscale.tasks.link.score_summary`: per pair, its score, its first candidate's and its
        reciprocal rank) and the metrics come from reductions over the workers' summaries
        (:func:`~graphscale.strategies.link_metrics.distributed_metrics`): ``single``'s metrics, without any worker
        holding every pair's summary, nor the candidates of more than a block."""
        comm, summaries = self.fetch.comm, {}
        mine = torch.tensor([-(-self.ids[name].numel() // self.block_pairs(name)) for name in SPLIT_NAMES],
                            dtype=torch.int64)
        blocks = comm.all_reduce(mine.to(self.fetch.inner_ids.device), CONTROL, dist.ReduceOp.MAX).tolist()
        for split, count in zip(SPLIT_NAMES, blocks):
            parts = [self.block_summary(z, split, b) for b in range(max(int(count), 1))]
            summaries[split] = tuple(None if part[0] is None else torch.cat(part) for part in zip(*parts))
        return distributed_metrics(comm, summaries, self.hits_k, LINK)

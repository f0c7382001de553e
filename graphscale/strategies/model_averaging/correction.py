"""Global correction after model averaging (``--correction-steps N``; beyond SDT-GNN, after LLCG, ICLR 2022).

Local training ignores the edges that leave a partition, so periodic averaging keeps a residual error. After
every averaging round the workers take ``N`` synchronous mini-batch steps on the averaged model with
neighbourhoods sampled over the **whole** graph, across partitions:

* **The batch** of step ``i`` after epoch ``e``: every partition ``j`` draws ``ceil(B c_j / C)`` of its ``c_j``
  training vertices (``B = --batch-size``, ``C`` all training vertices) by a permutation seeded with
  ``(seed, e, i, j)``, so the batch does not depend on which worker holds the partition.
* **Sampling** is DistDGL's: a frontier vertex's in-neighbours are drawn by the worker that owns it (its home
  partition holds its exact in-neighbour row), with :func:`~graphscale.data.sampler.sample_neighbors` keyed on
  original ids over the row sorted as the whole graph sorts it, so every draw equals the single-process
  :class:`~graphscale.data.sampler.NeighborSampler` draw for that vertex (``--fanouts``). Requests and replies
  go through ``all_to_all`` (Ledger ``correction``: 8 bytes per requested id, 24 per returned neighbour), and
  so do the input rows of the sampled sources (``F s`` bytes each).
* **The step**: each worker's loss sum over its targets, divided by the global batch size, is back-propagated;
  the gradients are summed in one all-reduce (Ledger ``allreduce``) and a correction Adam optimiser, identical
  on every worker, steps. Its state persists across rounds (and in checkpoints).

The result equals, for any ``q``, the single-process reference :func:`reference_step` (the test's oracle).
Serving rows needs every partition a worker holds: they are memory-mapped (file-backed; only the rows asked for
are read), so a worker's resident set still holds one partition's training data at a time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.data.datasets import row_normalize
from graphscale.data.graph import Graph
from graphscale.data.sampler import NeighborSampler, relabel, sample_neighbors
from graphscale.distributed.comm import Comm
from graphscale.partition.store import LocalPartition
from graphscale.strategies.base import allreduce_gradients, masked_loss_sum

#: Ledger category of the correction step's sampling requests, replies and input rows
CORRECTION = "correction"


def batch_sizes(part_train: list[int], batch_size: int) -> list[int]:
    """Targets each partition contributes to a correction batch: ``ceil(B c_j / C)``, at most ``c_j``."""
    total = sum(part_train)
    return [min(c, math.ceil(batch_size * c / total)) for c in part_train]


def partition_picks(num_train: int, count: int, seed: int, epoch: int, step: int, part: int) -> torch.Tensor:
    """Which ``count`` of partition ``part``'s ``num_train`` training vertices (positions in its home training
    vertices, ascending) step ``step`` after epoch ``epoch`` takes."""
    key = seed
    for value in (epoch, step, part):
        key = (key * 1_000_003 + value) % (1 << 63)
    return torch.randperm(num_train, generator=torch.Generator().manual_seed(key))[:count]


def home_targets(local: LocalPartition) -> tuple[np.ndarray, torch.Tensor]:
    """A partition's home training vertices as ``[c, 3]`` triples (original id, global id, in-degree), ascending,
    and their labels."""
    rows = torch.nonzero(local.graph.train_mask[: local.num_inner]).flatten()
    triples = torch.stack([local.orig_ids[rows], local.global_ids[rows], local.degree[rows]], dim=1)
    return triples.numpy().astype(np.int64), local.graph.y[rows].clone()


def step_key(epoch: int, step: int, steps: int) -> int:
    """The sampler's batch key of correction step ``step`` after epoch ``epoch``."""
    return epoch * steps + step


class RowServer:
    """The home vertices of a worker's partitions, memory-mapped: their in-neighbour rows, degrees and features.

    Ids on the wire are global (book) ids; partition ``s`` owns ``[boundaries[s], boundaries[s + 1])`` and lives on
    worker ``s mod q``.
    """

    def __init__(self, locals_: dict[int, LocalPartition], boundaries: torch.Tensor, world_size: int,
                 feature_norm: str, dtype: torch.dtype) -> None:
        self.locals, self.world_size = locals_, world_size
        self.boundaries = boundaries.numpy()
        self.feature_norm, self.dtype = feature_norm, dtype

    def part_of(self, global_ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.boundaries, global_ids, side="right") - 1

    def worker_of(self, global_ids: np.ndarray) -> np.ndarray:
        return self.part_of(global_ids) % self.world_size

    def rows(self, global_ids: np.ndarray, fanout: int, seed: int, key: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Sampled in-neighbours of home vertices ``global_ids``: ``(counts [n], [nnz, 3])`` with the columns
        (original id, global id, global in-degree), each row in ascending original id."""
        counts, owners, triples = np.zeros(global_ids.size, np.int64), [], []
        parts = self.part_of(global_ids)
        for s in np.unique(parts):
            at = np.flatnonzero(parts == s)
            local = self.locals[int(s)]
            orig_ids, rows = local.orig_ids.numpy(), global_ids[at] - self.boundaries[s]
            indptr, indices = local.graph.indptr.numpy(), local.graph.indices.numpy()
            lengths = indptr[rows + 1] - indptr[rows]
            sub_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            flat = indices[np.repeat(indptr[rows] - sub_ptr[:-1], lengths) + np.arange(int(sub_ptr[-1]))]
            # each row in the whole graph's order (ascending original id), then the whole-graph draws
            flat = flat[np.lexsort((orig_ids[flat], np.repeat(np.arange(rows.size), lengths)))]
            ptr, picked = sample_neighbors((sub_ptr, np.arange(flat.size, dtype=np.int64)), np.arange(rows.size),
                                           fanout, seed, key, layer, keys=orig_ids[rows])
            chosen, sizes = flat[picked.numpy()], np.diff(ptr.numpy())
            counts[at] = sizes
            owners.append(np.repeat(at, sizes))
            triples.append(np.stack([orig_ids[chosen], local.global_ids.numpy()[chosen], local.degree.numpy()[chosen]],
                                    axis=1))
        if not triples:
            return counts, np.zeros((0, 3), np.int64)
        order = np.argsort(np.concatenate(owners), kind="stable")  # request order, each row's draws in order
        return counts, np.concatenate(triples)[order]

    def triples(self, global_ids: np.ndarray) -> np.ndarray:
        """``[n, 3]`` (original id, global id, global in-degree) of home vertices ``global_ids``."""
        out = np.empty((global_ids.size, 3), np.int64)
        parts = self.part_of(global_ids)
        for s in np.unique(parts):
            at = np.flatnonzero(parts == s)
            local, rows = self.locals[int(s)], global_ids[at] - self.boundaries[s]
            out[at, 0], out[at, 2] = local.orig_ids.numpy()[rows], local.degree.numpy()[rows]
        out[:, 1] = global_ids
        return out

    def features(self, global_ids: np.ndarray) -> torch.Tensor:
        """Input rows of home vertices ``global_ids`` (row-normalised when the run normalises)."""
        parts = self.part_of(global_ids)
        first = next(iter(self.locals.values())).graph.x
        out = torch.empty(global_ids.size, first.shape[1], dtype=self.dtype, device=first.device)  # host rows
        for s in np.unique(parts):
            at = np.flatnonzero(parts == s)
            rows = torch.from_numpy(global_ids[at] - self.boundaries[s])
            x = self.locals[int(s)].graph.x[rows]
            out[torch.from_numpy(at)] = (row_normalize(x) if self.feature_norm == "row" else x).to(self.dtype)
        return out


def _dev(comm: Comm, array: np.ndarray) -> torch.Tensor:
    """A host array as a tensor on the run's device (NCCL exchanges device tensors only)."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(comm.env.device)


def _host(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy()


def _ask(comm: Comm, server: RowServer, ids: np.ndarray,
         category: str = CORRECTION) -> tuple[np.ndarray, list[int], list[int], np.ndarray]:
    """Send ``ids`` to their home workers: returns the order that groups them by worker, the counts sent and
    received, and the ids this worker was asked for (grouped by asking worker)."""
    dest = server.worker_of(ids)
    order = np.argsort(dest, kind="stable")
    send_counts = np.bincount(dest, minlength=comm.world_size).tolist()
    recv_counts = comm.exchange_counts(send_counts)
    asked = _host(comm.all_to_all_v(_dev(comm, ids[order]), send_counts, recv_counts, category))
    return order, send_counts, recv_counts, asked


def _segment_sums(values: np.ndarray, counts: list[int]) -> list[int]:
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cs = np.concatenate([[0], np.cumsum(values)])
    return [int(v) for v in cs[bounds[1:]] - cs[bounds[:-1]]]


def sample_blocks(comm: Comm, server: RowServer, targets: np.ndarray, fanouts: list[int], seed: int,
                  key: int, category: str = CORRECTION) -> tuple[list[Block], np.ndarray]:
    """The blocks of a mini-batch whose targets are home vertices ``targets`` (``[n, 3]`` triples: original id,
    global id, in-degree), sampled across partitions (fanout ``-1``: every in-neighbour, the exact evaluation's
    blocks); returns them and the global ids of the input rows. Every byte goes under Ledger ``category``."""
    dst = targets
    blocks = []
    for layer in range(len(fanouts) - 1, -1, -1):
        order, send_counts, recv_counts, asked = _ask(comm, server, dst[:, 1], category)
        counts, table = server.rows(asked, fanouts[layer], seed, key, layer)
        # replies travel back in the order the requests arrived: counts first, then the neighbour triples
        got_counts = _host(comm.all_to_all_v(_dev(comm, counts), recv_counts, send_counts, category))
        got = _host(comm.all_to_all_v(_dev(comm, table), _segment_sums(counts, recv_counts),
                                      _segment_sums(got_counts, send_counts), category))
        # request i (sorted by worker) is dst row order[i]: gather every dst row's neighbours in dst order
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        row_counts = got_counts[position]
        starts = np.concatenate([[0], np.cumsum(got_counts)])[position]
        indptr = np.concatenate([[0], np.cumsum(row_counts)]).astype(np.int64)
        gather = np.repeat(starts - indptr[:-1], row_counts) + np.arange(int(indptr[-1]))
        nbrs = got[gather]
        src_orig, local = relabel(torch.from_numpy(np.ascontiguousarray(dst[:, 0])),
                                  torch.from_numpy(np.ascontiguousarray(nbrs[:, 0])), int(server.boundaries[-1]))
        src = np.zeros((src_orig.numel(), 3), np.int64)
        src[: dst.shape[0]] = dst
        src[local.numpy()] = nbrs
        blocks.append(Block(torch.from_numpy(indptr), local, src_orig, torch.from_numpy(np.ascontiguousarray(src[:, 2]))))
        dst = src
    blocks.reverse()
    return blocks, np.ascontiguousarray(dst[:, 1])


def fetch_features(comm: Comm, server: RowServer, global_ids: np.ndarray, category: str = CORRECTION) -> torch.Tensor:
    """Input rows of ``global_ids`` from their home workers."""
    order, send_counts, recv_counts, asked = _ask(comm, server, global_ids, category)
    got = comm.all_to_all_v(server.features(asked).to(comm.env.device), recv_counts, send_counts, category)
    out = torch.empty_like(got)
    out[torch.from_numpy(order).to(got.device)] = got
    return out


def correction_step(comm: Comm, server: RowServer, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    targets: np.ndarray, labels: torch.Tensor, batch_total: int, fanouts: list[int], seed: int,
                    key: int, device: torch.device) -> float:
    """One synchronous correction step; returns the worker's loss sum over its targets."""
    blocks, inputs = sample_blocks(comm, server, targets, fanouts, seed, key)
    x = fetch_features(comm, server, inputs).to(device)
    optimizer.zero_grad(set_to_none=True)
    logits = model([b.to(device) for b in blocks], x)
    every = torch.ones(targets.shape[0], dtype=torch.bool, device=logits.device)
    loss_sum = masked_loss_sum(logits, labels.to(logits.device), every)
    (loss_sum / batch_total).backward()
    allreduce_gradients(comm, [p for p in model.parameters() if p.requires_grad])
    optimizer.step()
    return float(loss_sum.detach())


def reference_step(graph: Graph, model: torch.nn.Module, optimizer: torch.optim.Optimizer, targets: torch.Tensor,
                   fanouts: list[int], seed: int, key: int) -> float:
    """The single-process semantics of :func:`correction_step` on the whole graph (the tests' oracle)."""
    blocks = NeighborSampler(graph, fanouts, seed=seed).sample(targets, key)
    optimizer.zero_grad(set_to_none=True)
    logits = model(blocks, graph.x[blocks[0].src_ids])
    loss_sum = masked_loss_sum(logits, graph.y[targets], torch.ones(targets.numel(), dtype=torch.bool))
    (loss_sum / targets.numel()).backward()
    optimizer.step()
    return float(loss_sum.detach())

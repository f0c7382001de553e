"""Evaluation of the averaged model (``--evaluation``), without loading the whole graph anywhere.

Every worker counts the predictions of its partitions' *home* vertices that lie in a split (train, val or test);
the counts are all-reduced (Ledger ``control``). What differs is the neighbourhood a home vertex is computed on:

* ``exact`` (the default): its full ``L``-hop in-neighbourhood (``L`` = ``--layers``), so the metrics are the
  model's, equal to ``single``'s evaluation of the same weights. Where the store holds a ``K >= L`` hop halo
  (``--halo-hops``) the partition's local forward is already exact (spec §3 reason 2, tested as T4) and nothing
  moves. Otherwise the model runs **one layer at a time** (:class:`LayerwiseEvaluation`), as graph-parallel
  does with its halo exchange: the first layer on each of the worker's partitions in turn, from the partition's
  own store (its 1-hop halo holds every home vertex's input neighbourhood: nothing moves); every later layer
  ``l`` over the home vertices some target needs at that depth, the previous layer's rows of their remote
  in-neighbours fetched from their owners, one hop at a time. A worker holds one partition's rows plus one
  hop of remote hidden rows per layer, whatever ``L``.

  The needed sets, with ``T`` the home vertices in a split on any worker: ``G_L = T``,
  ``G_{l-1} = G_l ∪ N_in(G_l)``; worker ``w`` computes ``N_l^w = H_w ∩ G_l`` (``H_w`` its home vertices) at
  layer ``l`` and, for ``l >= 2``, fetches ``R_l^w = N_in(N_l^w) - H_w`` (the rows not home here). The plan is
  agreed once, at setup, layer by layer from ``L`` down to 2 (every worker asks the owners for the ids of
  ``R_l^w``, who add them to ``N_{l-1}``): 8 bytes per id of ``R_l^w``. Each evaluation then moves
  ``d_{l-1} s`` bytes per row of ``R_l^w`` at every layer ``l >= 2`` (``d_{l-1}``: the hidden width entering
  layer ``l``); both under Ledger category ``evaluation``. A PyG model with its own forward
  (:class:`~graphscale.nn.pyg_forward.ForwardGNN`, ``own_forward``) runs that forward on the rows ``N_0^w`` (their
  input rows read from the worker's own partitions), so the plan covers layer 1 too (``L`` fetch rounds, layer
  ``l``'s conv on the plan's block; the later levels are prefixes of ``N_0^w``).
* ``halo``: exact from the store's halo alone, no traffic; the store must hold ``K >= L`` hops (a one-line error
  before any worker starts otherwise).
* ``truncated``: the partition's local forward whatever its halo (what training sees: halo rows computed from
  truncated neighbourhoods, so for ``L > K`` the metrics are *not* the model's); SDT-GNN's partition-local
  evaluation, cheaper, labelled ``truncated`` in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.distributed.comm import Comm
from graphscale.options.model_averaging import EVALUATIONS
from graphscale.partition.store import LocalPartition
from graphscale.strategies.base import SPLITS, split_counts
from graphscale.strategies.model_averaging.correction import RowServer

#: Ledger category of the exact evaluation's rows fetched from other workers
EVALUATION = "evaluation"
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


def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` sits in ``keys`` (distinct, every wanted one present): int64."""
    order = np.argsort(keys, kind="stable")
    return order[np.searchsorted(keys[order], wanted)].astype(np.int64)


@dataclass
class LayerPlan:
    """One layer of the layer-wise evaluation: the block (destinations ``N_l``, a prefix of its sources; sources
    ``N_{l-1}`` then the fetched rows ``R_l``) and the row exchange (rows of ``N_{l-1}`` other workers asked for,
    grouped by asking worker)."""

    block: Block
    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]


class LayerwiseEvaluation:
    """Exact evaluation of a worker's targets, one layer at a time (module docstring); the constructor and
    :meth:`counts` are collectives (every worker calls them).

    Attributes:
        plans: the :class:`LayerPlan` of layers ``2..L`` (the first layer runs on each partition's own store).
        first: per partition of this worker, the positions in ``N_1`` of its home rows there and their rows in
            the partition's local graph.
    """

    def __init__(self, comm: Comm, server: RowServer, targets: np.ndarray, labels: torch.Tensor,
                 masks: dict[str, torch.Tensor], layers: int, device: torch.device, own_forward: bool = False) -> None:
        self.comm, self.server, self.device = comm, server, device
        self.labels, self.masks = labels.to(device), {s: m.to(device) for s, m in masks.items()}
        self.num_targets = targets.shape[0]
        self.own_forward = own_forward
        plans, dst = [], targets  # N_L: [n, 3] (original id, global id, in-degree)
        for _ in range(layers if own_forward else layers - 1):
            plan, dst = self._plan_layer(dst)
            plans.append(plan)
        plans.reverse()
        self.plans, self.num_first = plans, dst.shape[0]
        parts = server.part_of(dst[:, 1])
        self.first = {int(s): (torch.from_numpy(np.flatnonzero(parts == s)).to(device),
                               torch.from_numpy(dst[parts == s, 1] - server.boundaries[s]).to(device))
                      for s in server.locals}
        self.first_ids = torch.from_numpy(dst[:, 0].copy()).to(device)
        self.first_global = dst[:, 1]

    def _plan_layer(self, dst: np.ndarray) -> tuple[LayerPlan, np.ndarray]:
        """Layer ``l``'s plan from ``N_l`` (``dst``); returns it and ``N_{l-1}`` (``N_l`` first)."""
        comm, server = self.comm, self.server
        counts, nbrs = server.rows(dst[:, 1], -1, 0, 0, 0)  # every in-neighbour, rows in dst order
        remote = server.worker_of(nbrs[:, 1]) != comm.rank
        # the remote rows, grouped by owner (then by id): asked for once each
        ids, first = np.unique(nbrs[remote, 1], return_index=True)
        fetched = nbrs[remote][first]
        order = np.argsort(server.worker_of(ids), kind="stable")
        fetched, ids = fetched[order], ids[order]
        ask_counts = np.bincount(server.worker_of(ids), minlength=comm.world_size).tolist()
        asked_counts = comm.exchange_counts(ask_counts)
        asked = comm.all_to_all_v(torch.from_numpy(ids).to(comm.env.device), ask_counts, asked_counts,
                                  EVALUATION).cpu().numpy()
        # N_{l-1}: N_l, then the other home rows read here or asked for by other workers, ascending
        more = np.setdiff1d(np.union1d(nbrs[~remote, 1], asked), dst[:, 1])
        src = np.concatenate([dst, server.triples(more)]) if more.size else dst
        sources = np.concatenate([src, fetched])
        indices = torch.from_numpy(_positions(sources[:, 1], nbrs[:, 1]))
        indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        block = Block(indptr, indices, torch.from_numpy(sources[:, 0].copy()),
                      torch.from_numpy(sources[:, 2].copy())).to(self.device)
        send_index = torch.from_numpy(_positions(sources[:, 1], asked)).to(self.device)
        return LayerPlan(block, send_index, asked_counts, ask_counts), src

    def counts(self, model: torch.nn.Module, partition: Callable[[int], tuple[Block, torch.Tensor]]) -> torch.Tensor:
        """This worker's split counts of its targets on the model's exact forward (a collective).

        Args:
            model: the model (in eval mode).
            partition: ``part -> (block, x)``: a partition's local graph as one block and its input rows; asked
                for one partition at a time.
        """
        return split_counts(self.outputs(model, partition), self.labels, self.masks).to(self.device)

    def outputs(self, model: torch.nn.Module, partition: Callable[[int], tuple[Block, torch.Tensor]]) -> torch.Tensor:
        """The model's exact outputs of this worker's targets, in their order (a collective; :meth:`counts`'
        arguments)."""
        if self.own_forward:
            logits = model.run(self.server.features(self.first_global).to(self.device), self.first_ids,
                               lambda layer, h: self._forward_layer(model, layer, h))
            return logits[: self.num_targets]
        h = h0 = None
        for part, (at, rows) in self.first.items():  # layer 1 on each partition's own 1-hop halo: nothing moves
            block, x = partition(part)
            z = model.input_map(model.upcast(x) if model.learned_input_map else x, block.src_ids)
            out = model.step(0, block, z, z[: block.num_dst] if model.needs_h0 else None)[rows]
            if h is None:
                h = out.new_empty((self.num_first, out.shape[1]))
                h0 = z.new_empty((self.num_first, z.shape[1])) if model.needs_h0 else None
            h[at] = out
            if h0 is not None:
                h0[at] = z[rows]
            del block, x, z, out
        for layer, plan in enumerate(self.plans, start=1):
            fetched = self.comm.all_to_all_v(h[plan.send_index], plan.send_counts, plan.recv_counts, EVALUATION)
            h = model.step(layer, plan.block, torch.cat([h, fetched]), None if h0 is None else h0[: plan.block.num_dst])
        return model.output_map(h, self.first_ids[: self.num_targets])

    def _forward_layer(self, model: torch.nn.Module, layer: int, h: torch.Tensor) -> torch.Tensor:
        """Conv call ``layer`` of a model with its own forward: the remote rows its plan reads, fetched, then the
        conv on the plan's block (its sources: the first rows of ``h``, then the fetched rows)."""
        plan = self.plans[layer]
        fetched = self.comm.all_to_all_v(h[plan.send_index], plan.send_counts, plan.recv_counts, EVALUATION)
        local = plan.block.num_src - fetched.shape[0]
        return model.step(layer, plan.block, torch.cat([h[:local], fetched]))

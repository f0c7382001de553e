"""Split-parallel mini-batch training (GSplit): one sample of all B targets, split by owner at every layer.

**Offline.** The parent partitions the graph with
``config.strategy.partitioner`` (METIS by default) before the workers start
(:mod:`graphscale.prepare`); every worker memory-maps the host-shared graph
and the owner array. :class:`~graphscale.strategies.split_parallel.plan.SplitPlan` gives the
parts contiguous, degree-sorted split ids (built once by the parent, :meth:`SplitParallel.prepare_shared`, and
memory-mapped by every worker); worker ``i`` caches the
``min(cap, |part i|)`` highest-degree vertices of its part, ``cap =
floor(cache_fraction * N)`` (the caches are disjoint).

**Online** (per mini-batch). Every worker draws the *same* sample as
``single`` (the same loader, seed and batch key; the sampler is rank-agnostic)
and splits it for all workers with
:func:`~graphscale.strategies.split_parallel.split.split_minibatch` (numba, O(1) per vertex and
edge); it keeps its own :class:`~graphscale.strategies.split_parallel.split.LocalSplit`. (GSplit
runs sampling and splitting in separate sampler processes and hands each
trainer its split; here each worker repeats that deterministic work itself, a
shared-seed schedule that needs no sampler-to-trainer channel.)
Its input rows come from its cache (hits) or the host (its global misses: each
row of ``V^(0)`` is loaded by exactly one worker, once).

**Cooperative training.** Each layer performs one coalesced shuffle (a
differentiable all-to-all, category ``shuffle``) forward and its mirror
backward:

* GraphSAGE (``preagg``): the source's owner sums its rows of every reference
  vertex (after ``lin_l`` when ``d_in > d_out``: the linear map commutes with
  the sum) and ships one partial sum per (reference vertex, sender); the owner
  adds them to its local sums and divides by the full sampled in-degree.
* GAT (``halo``, projected): a source's owner ships the projected rows
  ``W drop(h_u)`` (``heads * hidden`` wide) once per (source, receiver); the
  receiver runs the unmodified attention (scores, max-subtracted segment
  softmax, edge-keyed dropout) on its augmented local block.
* Other models (``halo``): the layer input rows are shipped and
  ``model.step`` runs on the augmented local block. A PyG model with its own forward
  (:class:`~graphscale.nn.pyg_forward.ForwardGNN`) runs that forward on the worker's own rows of ``V^(0)``
  (``gids``; its rows of every later level are their prefixes), each conv call being this halo step.

The loss of worker ``i`` is ``sum_{t in targets_i} loss_t / B`` (``B`` = targets
of the mini-batch); gradients are summed with one all-reduce, so the step equals
``single``'s step on the same mini-batch up to float reassociation. Every worker
issues the same collectives in the same order (forward shuffles ``l = 0..L-1``,
backward shuffles in reverse, then the all-reduce), also when it owns no
targets or ships no rows: its (possibly empty) outputs stay on the autograd path.

**Link prediction** (``--task link``): the mini-batches are edge batches (:mod:`graphscale.tasks.edge_batches`), their
seeds sampled and split as targets are; the seeds' embeddings come out on their owners and each pair is scored on its
source's owner, the destination embeddings it lacks exchanged under ``pair_rows``
(:class:`~graphscale.strategies.link_minibatch.PairExchange`, whose docstring gives the bytes); the workers' summed
pair losses / ``2b`` and the all-reduce make ``single --minibatch``'s step (tested, with ``pair_rows`` against its
closed form). The other categories are recorded as below, the seeds standing for the targets.

**Closed forms** (bytes per epoch summed over workers; ``s`` bytes per element,
``d`` features, ``P`` parameter elements, ``K`` mini-batches, ``C`` the union of
the caches, ``rows_{k,l}`` = ``sum_{i != j}`` of layer ``l``'s ref / halo lists)::

    h2d       = sum_k |V0_k \\ C| * d * s                       (every missing row once)
    shuffle   = sum_k sum_l rows_{k,l} * h_l * s * (1 + back_l)
    allreduce = K * 2 (W - 1) * P * s                            (ring model)
    control   = 2 (W - 1) * 8                                    (the epoch's loss sum)

with ``h_l`` the shipped width (SAGE: ``d_out`` if ``d_in > d_out`` else ``d_in``;
GAT: ``heads * hidden``; others: ``model.layer_widths()[l]``) and ``back_l = 1``
when the shipped tensor depends on parameters (every layer ``l >= 1``; at
``l = 0`` SAGE with the linear map first, GAT, and models with a learned input
map). Edges computed: ``sum_k sum_l |E^(l)_k|``, each once (no redundancy).
``h2d_struct`` counts each worker's split index arrays. Evaluation is
distributed layer-wise inference over each worker's part
(:mod:`graphscale.strategies.evaluation`), equal to ``single``'s full-graph
inference. With ``--eval-fanouts`` the workers share the sampled evaluation
batches instead (:mod:`graphscale.strategies.sampled_evaluation`), equal to ``single --minibatch --eval-fanouts``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from graphscale.config import RunConfig
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.data.handle import DataHandle
from graphscale.data.sampler import MiniBatchLoader
from graphscale.data.superbatch import superbatched
from graphscale.distributed.comm import CONTROL
from graphscale.distributed.env import DistEnv
from graphscale.distributed.functional import all_to_all_v
from graphscale.metrics.stats import EpochStats
from graphscale.nn.layers import GATLayer, SAGELayer
from graphscale.nn.models import GNN
from graphscale.nn.ops import Topology, segment_softmax, spmm, spmm_heads, topology
from graphscale.options import option_names
from graphscale.options.split_parallel import SplitParallelOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import allreduce_gradients, masked_loss_sum, optimizer_tensors
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.link_minibatch import PairExchange
from graphscale.strategies.minibatch_common import (
    SHUFFLE,
    MiniBatchStrategy,
    load_host_rows,
    record_structure,
    to_device_rows,
)
from graphscale.strategies.split_parallel.plan import SplitPlan
from graphscale.strategies.split_parallel.split import (
    HALO,
    PREAGG,
    LocalLayer,
    LocalSplit,
    SplitWorkspace,
    split_minibatch,
)
from graphscale.tasks.edge_batches import EdgeBatch

#: How a layer is split: GraphSAGE pre-aggregates, GAT ships projected rows, anything else ships its inputs.
SAGE, GAT, GENERIC = "sage", "gat", "generic"


def layer_kinds(model: torch.nn.Module) -> list[str]:
    """``sage`` / ``gat`` / ``generic`` for every layer of ``model``."""
    kinds = []
    for layer in model.layers:
        kinds.append(SAGE if type(layer) is SAGELayer else GAT if type(layer) is GATLayer else GENERIC)
    return kinds


def split_modes(kinds: list[str]) -> list[str]:
    """The split mode of each layer kind: ``preagg`` for GraphSAGE, ``halo`` otherwise."""
    return [PREAGG if k == SAGE else HALO for k in kinds]


def shipped_widths(model: torch.nn.Module) -> list[int]:
    """``h_l``: the width of the rows each layer ships (module docstring)."""
    widths = model.layer_widths()
    out = []
    for l, (kind, layer) in enumerate(zip(layer_kinds(model), model.layers)):
        if kind == SAGE:
            out.append(min(layer.in_dim, layer.out_dim))
        elif kind == GAT:
            out.append(layer.agg_dim)
        else:
            out.append(int(widths[l]))
    return out


def shuffle_backward(model: torch.nn.Module) -> list[bool]:
    """``back_l``: whether layer ``l``'s shipped rows depend on parameters (then the backward shuffle runs).

    Every layer ``l >= 1`` ships rows computed from parameters. At ``l = 0``: SAGE ships ``lin_l(x)``
    partial sums when ``d_in > d_out`` (raw feature sums otherwise), GAT ships projected rows, and the
    other models ship ``input_map(x)``, which is learned exactly when the model overrides the identity map.
    """
    kinds = layer_kinds(model)
    first = model.layers[0]
    if kinds[0] == SAGE:
        back0 = first.in_dim > first.out_dim
    elif kinds[0] == GAT:
        back0 = True
    else:
        back0 = type(model).input_map is not GNN.input_map
    return [back0] + [True] * (len(kinds) - 1)


def gat_aggregate_projected(layer: GATLayer, block: Block, z: torch.Tensor) -> torch.Tensor:
    """``GATLayer.aggregate`` from already projected source rows ``z = lin(x_src)`` (``[S, H, F]``).

    The same operations as :meth:`GATLayer.aggregate` after its projection: scores, LeakyReLU,
    max-subtracted segment softmax with the self-loop, edge-keyed attention dropout, weighted sum.
    """
    topo = topology(block)
    d, nh = block.num_dst, layer.heads
    a_src = (z * layer.att_src).sum(-1)
    a_dst = (z[:d] * layer.att_dst).sum(-1)
    scores = a_src.index_select(0, topo.indices) + a_dst.index_select(0, topo.edge_dst())
    scores = F.leaky_relu(scores, layer.negative_slope)
    self_scores = F.leaky_relu(a_src[:d] + a_dst, layer.negative_slope)
    alpha, alpha_self = segment_softmax(topo, scores, self_scores)
    alpha, alpha_self = layer.attn_dropout(block, alpha, alpha_self)
    return spmm_heads(topo, z, alpha, alpha_self).reshape(d, nh * layer.out_dim)


@STRATEGIES.register("split-parallel")
class SplitParallel(MiniBatchStrategy):
    """GSplit split-parallel mini-batch training (see the module docstring)."""

    name = "split-parallel"
    exact = True
    #: no ``cache``: split-parallel always uses its own non-overlapping per-part caches, sized by ``cache_fraction``
    edge_weights = True  # halo-mode splits keep their edges' weights (graphscale.strategies.split_parallel.split)
    options = option_names(SplitParallelOptions)

    @classmethod
    def needs_vertex_partition(cls, config: RunConfig) -> bool:
        return True

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        return ""  # edge batches split like node batches, pairs scored on their source's owner

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        return {"cache_fraction": config.strategy.cache_fraction}

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        """The parent builds the :class:`SplitPlan` once; every worker memory-maps it (one copy per host)."""
        SplitPlan.build(owner, graph.out_degrees(), config.strategy.workers,
                        config.strategy.cache_fraction).save(folder)

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        self.in_degrees = self.sampler.degrees  # the in-degrees, computed once
        self.owner = self.vertex_owner()
        self.plan = SplitPlan.load(self.data.require_shared(config.strategy.name))
        self.cache_x = load_host_rows(self.comm, self.host_rows, self.plan.cached_ids(env.rank), env.device)  # at setup
        self.kinds = layer_kinds(model)
        self.modes = split_modes(self.kinds)
        self.loader = (MiniBatchLoader(self.train_ids, config.strategy.batch_size, seed=config.seed)
                       if self.link is None else self.edge_loader)
        self.workspace = SplitWorkspace()
        self.tracker.track("cache", self.cache_x)
        self._tally = {"shuffle_fwd": [0] * len(self.kinds), "shuffle_bwd": [0] * len(self.kinds)}

    # ---------------------------------------------------------------- one mini-batch
    def split(self, targets: torch.Tensor, batch_key: int) -> LocalSplit:
        """Sample the mini-batch of ``targets`` (as ``single`` does) and return this worker's split."""
        blocks = self.sampler.sample(targets, batch_key)
        return split_minibatch(blocks, self.plan, self.modes, self.workspace).local(self.env.rank)

    def sample_split(self, targets: torch.Tensor, batch_key: int) -> tuple[LocalSplit, torch.Tensor]:
        """This worker's split of the mini-batch (:meth:`split`) and its global misses' ids, computed without a
        collective (so it can run ahead, in the prefetch thread; :meth:`gather_split` gathers their rows)."""
        local = self.split(targets, batch_key)
        return local, local.miss_ids

    def gather_split(self, targets: torch.Tensor, batch_key: int) -> tuple[LocalSplit, torch.Tensor]:
        """:meth:`sample_split` with the misses' host rows gathered."""
        local, miss_ids = self.sample_split(targets, batch_key)
        return local, self.host_rows.gather(miss_ids)

    def sample_link(self, batch: EdgeBatch, batch_key: int) -> tuple[tuple[LocalSplit, PairExchange], torch.Tensor]:
        """:meth:`sample_split` of an edge batch (its seeds sampled as ``single`` samples them), with the
        :class:`~graphscale.strategies.link_minibatch.PairExchange` of its pairs."""
        whole = split_minibatch(self.sampler.sample(batch.seeds, batch_key), self.plan, self.modes, self.workspace)
        s = batch.seeds.numel()
        owner, own_pos = torch.from_numpy(whole.owner[:s].copy()), torch.from_numpy(whole.own_pos[:s].copy())
        pairs = PairExchange(owner, own_pos, batch, self.env.rank, self.env.world_size)
        local = whole.local(self.env.rank)
        return (local, pairs), local.miss_ids

    def load_inputs(self, local: LocalSplit, miss_x: torch.Tensor | None = None) -> torch.Tensor:
        """This worker's input rows: cache hits from its cache, global misses from the host (``h2d``; ``miss_x``:
        those rows already gathered by :meth:`gather_split`)."""
        device = self.env.device
        if miss_x is None:
            miss_x = self.host_rows.gather(local.miss_ids)
        x = torch.empty(local.own_counts[0], self.host_rows.num_features, dtype=self.host_rows.dtype, device=device)
        x[local.hit_pos.to(device)] = self.cache_x[local.hit_slot.to(device)]
        x[local.miss_pos.to(device)] = to_device_rows(self.comm, miss_x, device)
        return x

    def forward(self, local: LocalSplit, x: torch.Tensor) -> torch.Tensor:
        """Logits of this worker's targets (a collective: one shuffle per layer)."""
        model = self.model
        if not getattr(model, "layer_sequential", True):  # a PyG model with its own forward, on the own rows
            out = model.run(x, local.gids, lambda l, h: self._halo_step(
                l, local.layers[l], h[: local.layers[l].num_src], local.ids(l), None))
            return out[: local.num_targets]
        h = model.input_map(x, local.gids)
        h0 = h if model.needs_h0 else None
        for l, lay in enumerate(local.layers):
            ids = local.ids(l)
            if self.kinds[l] == SAGE:
                h = self._sage_step(l, lay, h, ids)
            elif self.kinds[l] == GAT:
                h = self._gat_step(l, lay, h, ids)
            else:
                h = self._halo_step(l, lay, h, ids, None if h0 is None else h0[: lay.num_dst])
        return model.output_map(h, local.ids(len(local.layers)))

    def _shuffle(self, l: int, rows: torch.Tensor, lay: LocalLayer) -> torch.Tensor:
        """The coalesced all-to-all of layer ``l`` (its backward returns the gradients to the senders)."""
        row_bytes = rows.shape[1] * rows.element_size()
        self._tally["shuffle_fwd"][l] += row_bytes * sum(c for j, c in enumerate(lay.send_counts) if j != self.env.rank)
        if rows.requires_grad:
            self._tally["shuffle_bwd"][l] += row_bytes * sum(c for j, c in enumerate(lay.recv_counts)
                                                             if j != self.env.rank)
        return all_to_all_v(rows, self.comm, lay.send_counts, lay.recv_counts, SHUFFLE)

    def _sage_step(self, l: int, lay: LocalLayer, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        model, sage = self.model, self.model.layers[l]
        z = model.pre(l, h, ids)
        lin_first = sage.in_dim > sage.out_dim
        y = F.linear(z, sage.lin_l.weight) if lin_first else z
        agg = spmm(Topology(lay.indptr, lay.indices, lay.num_src), y)
        partial = spmm(Topology(lay.xptr, lay.xidx, lay.num_src), y)
        received = self._shuffle(l, partial, lay)
        agg = agg.index_add(0, lay.recv_pos, received)
        mean = agg / lay.deg.clamp_min(1).to(agg.dtype)[:, None]
        if lin_first:
            out = mean if sage.lin_l.bias is None else mean + sage.lin_l.bias
        else:
            out = sage.lin_l(mean)
        return model.post(l, out + sage.lin_r(z[: lay.num_dst]))

    def _local_block(self, lay: LocalLayer, ids: torch.Tensor) -> Block:
        src_ids = torch.cat([ids, lay.halo_ids])
        return Block(lay.indptr, lay.indices, src_ids, self.in_degrees[src_ids.cpu()].to(src_ids.device),
                     lay.edge_weight)

    def _gat_step(self, l: int, lay: LocalLayer, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        model, gat = self.model, self.model.layers[l]
        projected = gat.lin(model.pre(l, h, ids))
        received = self._shuffle(l, projected.index_select(0, lay.send_index), lay)
        z = torch.cat([projected, received]).view(-1, gat.heads, gat.out_dim)
        agg = gat_aggregate_projected(gat, self._local_block(lay, ids), z)
        return model.post(l, gat.update(agg))

    def _halo_step(self, l: int, lay: LocalLayer, h: torch.Tensor, ids: torch.Tensor,
                   h0_dst: torch.Tensor | None) -> torch.Tensor:
        received = self._shuffle(l, h.index_select(0, lay.send_index), lay)
        return self.model.step(l, self._local_block(lay, ids), torch.cat([h, received]), h0_dst)

    def step(self, targets: torch.Tensor, batch_key: int,
             gathered: tuple[LocalSplit, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor, LocalSplit]:
        """One training step on the mini-batch ``targets``: forward, backward, all-reduce, optimiser step
        (``gathered``: its :meth:`gather_split`, when a prefetch made it already).

        Returns:
            ``(loss_sum, logits, local)``: this worker's summed loss over its targets (detached), its
            targets' logits (detached) and its split.
        """
        device = self.env.device
        local, miss_x = self.gather_split(targets, batch_key) if gathered is None else gathered
        record_structure(self.comm, local.tensors())
        local = local.to(device)
        x = self.load_inputs(local, miss_x)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.forward(local, x)
        labels = self.y[local.ids(len(local.layers)).cpu()].to(device)
        every = torch.ones(labels.shape[0], dtype=torch.bool, device=device)
        loss = masked_loss_sum(logits, labels, every)
        (loss / targets.numel() + 0.0 * logits.sum()).backward()
        allreduce_gradients(self.comm, self.params, self.tracker)
        self.optimizer.step()
        return loss.detach(), logits.detach(), local

    def link_step(self, batch: EdgeBatch, gathered: tuple[LocalSplit, torch.Tensor, PairExchange]) -> tuple[
            torch.Tensor, LocalSplit]:
        """One training step on an edge batch: the seeds' embeddings (:meth:`forward`), this worker's pairs scored
        (:class:`PairExchange`), the loss sum / ``2b``, backward, all-reduce, optimiser step.

        Returns:
            ``(loss_sum, local)``: this worker's summed loss over its pairs (detached) and its split.
        """
        device = self.env.device
        local, miss_x, pairs = gathered
        record_structure(self.comm, local.tensors())
        local = local.to(device)
        x = self.load_inputs(local, miss_x)
        self.optimizer.zero_grad(set_to_none=True)
        z = self.forward(local, x)
        loss = pairs.loss_sum(self.comm, z, self.link)
        (loss / batch.num_pairs + 0.0 * z.sum()).backward()
        allreduce_gradients(self.comm, self.params, self.tracker)
        self.optimizer.step()
        return loss.detach(), local

    # ---------------------------------------------------------------- epochs
    def train_epoch(self, epoch: int) -> EpochStats:
        run = Epoch(self.model, epoch, self.env, self.tracker)
        self._tally = {"shuffle_fwd": [0] * len(self.kinds), "shuffle_bwd": [0] * len(self.kinds)}
        loss_sum = torch.zeros((), dtype=torch.float64)
        counts = {"targets": 0, "input_rows": 0, "cache_hit_rows": 0, "host_rows": 0, "edges": 0,
                  **({"pairs": 0} if self.link is not None else {})}
        with self.tracker.epoch():
            batches = self.loader.batches(epoch)
            if self.link is None:
                ahead = superbatched(lambda i: self.sample_split(batches[i], self.loader.batch_key(epoch, i)),
                                     self.host_rows.gather, len(batches), self.host_rows)
            else:
                ahead = ((local, miss_x, pairs) for (local, pairs), miss_x in superbatched(
                    lambda i: self.sample_link(batches[i], self.loader.batch_key(epoch, i)), self.host_rows.gather,
                    len(batches), self.host_rows))
            for i, (targets, gathered) in enumerate(zip(batches, ahead)):
                if self.link is None:
                    loss, _, local = self.step(targets, self.loader.batch_key(epoch, i), gathered)
                else:
                    loss, local = self.link_step(targets, gathered)
                    counts["pairs"] += gathered[2].pairs.numel()
                self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
                self.tracker.untrack("gradients")
                loss_sum += loss.double().cpu()
                counts["targets"] += local.num_targets
                counts["input_rows"] += local.own_counts[0]
                counts["cache_hit_rows"] += local.hit_pos.numel()
                counts["host_rows"] += local.miss_pos.numel()
                counts["edges"] += sum(int(lay.indices.numel()) + (0 if lay.xidx is None else int(lay.xidx.numel()))
                                       for lay in local.layers)
        total = self.comm.all_reduce(loss_sum.reshape(1).to(self.env.device), CONTROL)
        extra = {"iterations": len(self.loader), **counts, "cache_rows": self.plan.cache_size(self.env.rank),
                 **{k: list(v) for k, v in self._tally.items()}}
        return run.stats(float(total) / self.num_train, extra)

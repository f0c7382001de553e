"""Data-parallel mini-batch training (DGL / PaGraph / Quiver-like): one micro-batch per worker per step.

**Schedule** (:class:`MicroBatchSchedule`, identical on every worker by
construction). An epoch has ``K = ceil(|T| / B)`` iterations, ``B =
config.strategy.batch_size``. In iteration ``k`` worker ``r`` trains on a
micro-batch ``T_{k,r}`` of about ``B / W`` targets:

* ``--cache none`` / ``quiver``: the ``k``-th global mini-batch of ``single``'s
  loader (same seed, same shuffle) cut into ``W`` near-equal slices;
* ``--cache pagraph``: PaGraph partitions the training vertices: worker ``r``
  owns those of its part of ``config.strategy.partitioner`` (METIS by default),
  reshuffles them every epoch and cuts them into the same ``K`` near-equal slices.

Every worker runs exactly ``K`` iterations, also when its slice is empty (it
then computes nothing but still takes part in every collective: peer reads,
gradient all-reduce). Each micro-batch is sampled on its own, with batch key
``(epoch * K + k) * W + r``: a vertex in two micro-batches gets two independent
neighbourhood samples, as in DGL.

**Step.** Worker ``r`` gathers its input rows ``V0_{k,r}`` (own cache, peer
cache, host: :mod:`graphscale.data.feature_cache`), runs the model on its
blocks, and backpropagates ``sum_{t in T_{k,r}} loss_t / B_k`` with
``B_k = sum_r |T_{k,r}|``; the gradients are summed with one all-reduce and every
worker applies the same Adam step. This is exactly one single-process step
over the union of the ``W`` micro-batches with the loss normalised by ``B_k``
(:func:`reference_step` is that step; the tests compare against it).

**Link prediction** (``--task link``; :mod:`graphscale.strategies.link_minibatch`): the schedule cuts the training
positives' edge ids instead of vertices (PaGraph: worker ``r`` owns the edges whose source its part holds, and its
cache reaches out from their endpoints); a micro-batch's seeds (the endpoints of its positives and their keyed
negatives, :mod:`graphscale.tasks.edge_batches`) are sampled with the same key, and worker ``r`` backpropagates its
pairs' summed BCE over the iteration's ``2 b_k`` pairs: one single-process step over the union of the micro-batches
(:func:`link_reference_step`; tested). Its bytes are recorded as below, a micro-batch's seeds standing for its
targets (the tests check the node-classification closed forms only).

**Closed forms** (bytes per epoch summed over workers; ``s`` bytes per
element, ``d`` features, ``P`` parameter elements, ``C_r`` worker ``r``'s cache,
``C = union_r C_r``)::

    h2d        = sum_{k,r} |V0_{k,r} \\ D_r| * d * s     D_r = {} (none), C_r (pagraph), C (quiver)
    p2p        = sum_{k,r} |V0_{k,r} ∩ (C \\ C_r)| * d * s                        (quiver; else 0)
    allreduce  = K * 2 (W - 1) * P * s                                             (ring model)
    control    = 2 (W - 1) * 8  (+ quiver: K * W (W - 1) * 8 + 8 * sum_{k,r} |V0_{k,r} ∩ (C \\ C_r)|)
    h2d_struct = sum_{k,r} bytes of the micro-batch's blocks (indptr, indices, src_ids, src_deg)

Edges computed per epoch: ``sum_{k,r} |E_{k,r}|`` (redundant across workers
where micro-batches overlap). Evaluation is distributed layer-wise inference
over each worker's vertices (:mod:`graphscale.strategies.evaluation`), equal to
``single``'s full-graph inference. With ``--eval-fanouts`` the workers share the sampled evaluation
batches instead (:mod:`graphscale.strategies.sampled_evaluation`), equal to ``single --minibatch --eval-fanouts``.
"""

from __future__ import annotations

import torch

from graphscale.config import RunConfig
from graphscale.data.feature_cache import FeatureCache
from graphscale.data.graph import Graph
from graphscale.data.handle import DataHandle
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.data.superbatch import held_bytes, superbatched
from graphscale.distributed.comm import CONTROL
from graphscale.distributed.env import DistEnv
from graphscale.metrics.stats import EpochStats
from graphscale.options import option_names
from graphscale.options.shared import DataParallelOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import allreduce_gradients, masked_loss_sum, optimizer_tensors
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.minibatch_common import (
    P2P,
    MiniBatchStrategy,
    load_host_rows,
    record_structure,
    to_device_rows,
)
from graphscale.strategies.optimizers import moment_count
from graphscale.tasks.edge_batches import EdgeBatch, EdgeBatchLoader
from graphscale.tasks.link import LinkTask


class MicroBatchSchedule:
    """The micro-batches of every worker in every iteration (module docstring).

    Args:
        train_ids: int64 training vertex ids.
        batch_size: the global mini-batch size ``B``.
        world_size: workers ``W``.
        seed: shuffling seed (the global loader uses it as ``single`` does).
        owner: when given (PaGraph), the part of every vertex: worker ``r`` trains on the training
            vertices of part ``r``.
    """

    def __init__(self, train_ids: torch.Tensor, batch_size: int, world_size: int, seed: int,
                 owner: torch.Tensor | None = None) -> None:
        self.world_size = int(world_size)
        self.loader = MiniBatchLoader(train_ids, batch_size, seed=seed)
        self.num_iterations = len(self.loader)
        self.partitioned = owner is not None
        if self.partitioned:
            train = self.loader.train_ids
            self.own = [train[owner[train] == r] for r in range(self.world_size)]
            self.own_loaders = [MiniBatchLoader(ids, max(1, ids.numel()), seed=seed * self.world_size + r)
                                for r, ids in enumerate(self.own)]

    def iterations(self, epoch: int) -> list[list[torch.Tensor]]:
        """``[K][W]`` target tensors: worker ``r``'s micro-batch of iteration ``k``."""
        w, k = self.world_size, self.num_iterations
        if not self.partitioned:
            return [list(torch.tensor_split(batch, w)) for batch in self.loader.batches(epoch)]
        per_worker = []
        for loader in self.own_loaders:
            order = loader.batches(epoch)
            ids = order[0] if order else torch.zeros(0, dtype=torch.int64)
            per_worker.append(list(torch.tensor_split(ids, k)))
        return [[per_worker[r][i] for r in range(w)] for i in range(k)]

    def batch_key(self, epoch: int, iteration: int, rank: int) -> int:
        """Sampling key of worker ``rank``'s micro-batch: ``(epoch * K + k) * W + r``."""
        return (int(epoch) * self.num_iterations + int(iteration)) * self.world_size + int(rank)


def pair_loss_sum(task: LinkTask, z: torch.Tensor, pairs: EdgeBatch) -> torch.Tensor:
    """The summed BCE of an edge micro-batch's pairs from its seeds' embeddings ``z``."""
    device = z.device
    return task.loss_sum(z[pairs.src_pos.to(device)], z[pairs.dst_pos.to(device)], pairs.label.to(device))


def link_reference_step(model: torch.nn.Module, sampler: NeighborSampler, x: torch.Tensor, task: LinkTask,
                        loader: EdgeBatchLoader, epoch: int, micro: list[torch.Tensor],
                        keys: list[int]) -> torch.Tensor:
    """:func:`reference_step` of ``--task link``: the summed BCE of the pairs of every edge micro-batch (each's
    seeds sampled on their own with its key) over the union's ``2 b_k`` pairs; runs ``backward``, returns the loss."""
    total = 2 * sum(t.numel() for t in micro)
    loss = torch.zeros((), dtype=x.dtype)
    for edge_ids, key in zip(micro, keys):
        if edge_ids.numel():
            pairs = loader.batch(edge_ids, epoch)
            blocks = sampler.sample(pairs.seeds, key)
            loss = loss + pair_loss_sum(task, model(blocks, x[blocks[0].src_ids]), pairs) / total
    loss.backward()
    return loss.detach()


def reference_step(model: torch.nn.Module, sampler: NeighborSampler, x: torch.Tensor, y: torch.Tensor,
                   micro: list[torch.Tensor], keys: list[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The single-process semantics of one data-parallel step: loss over the union of the micro-batches / B_k.

    Runs ``backward`` (gradients accumulate into ``model``'s parameters) and returns the loss and
    the logits of every micro-batch.
    """
    total = sum(t.numel() for t in micro)
    loss = torch.zeros((), dtype=x.dtype)
    logits_all = []
    for targets, key in zip(micro, keys):
        if targets.numel() == 0:
            logits_all.append(torch.zeros(0))
            continue
        blocks = sampler.sample(targets, key)
        logits = model(blocks, x[blocks[0].src_ids])
        every = torch.ones(targets.numel(), dtype=torch.bool)
        loss = loss + masked_loss_sum(logits, y[targets], every) / total
        logits_all.append(logits.detach())
    loss.backward()
    return loss.detach(), logits_all


@STRATEGIES.register("data-parallel")
class DataParallel(MiniBatchStrategy):
    """Data-parallel mini-batch training with ``none`` / ``pagraph`` / ``quiver`` feature caches."""

    name = "data-parallel"
    exact = True
    #: the partitioner splits PaGraph's training vertices and, for every cache, the evaluation's ownership
    options = option_names(DataParallelOptions)
    edge_weights = True  # the sampler's blocks carry a weighted graph's edge weights

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        return {"cache_fraction": "with --cache none"} if config.strategy.cache == "none" else {}

    @classmethod
    def needs_vertex_partition(cls, config: RunConfig) -> bool:
        return True  # PaGraph's training split, and every policy's evaluation ownership

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        return ""  # edge micro-batches (module docstring)

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        graph = self.graph
        rank, world, policy = env.rank, env.world_size, config.strategy.cache
        owner = self.vertex_owner() if policy == "pagraph" else None
        self.owner = owner
        train_owner = owner  # link: a training edge belongs to its source's part
        if owner is not None and self.link is not None:
            train_owner = owner[self.link.pairs[0].cpu()]
        self.schedule = MicroBatchSchedule(self.train_ids, config.strategy.batch_size, world, config.seed, train_owner)
        own_train = self.schedule.own[rank] if owner is not None else None
        if own_train is not None and self.link is not None:  # the cache reaches out from the own edges' endpoints
            own_train = torch.unique(self.link.pairs[:, own_train.to(self.link.pairs.device)].cpu())
        self.cache = FeatureCache.build(policy, graph, rank, world, config.strategy.cache_fraction,
                                        own_train=own_train, hops=model.num_layers)
        self.cache_x = load_host_rows(self.comm, self.host_rows, self.cache.ids, env.device)  # filled once, at setup
        self.tracker.track("cache", self.cache_x, self.cache.holder, self.cache.slot)

    # ---------------------------------------------------------------- inputs
    def sample_batch(self, epoch: int, k: int, micro: list[torch.Tensor]) -> tuple[dict, torch.Tensor]:
        """What iteration ``k`` needs before it trains, computed without a collective (so it can run ahead, in the
        prefetch thread): this worker's blocks and input ids, their split into own cache, peer cache and host
        (:meth:`FeatureCache.classify`); and the ids of the host rows to gather (:attr:`host_rows`, into
        ``"host_x"``)."""
        targets, pairs = micro[self.env.rank], None
        if targets.numel() and self.link is not None:  # an edge micro-batch: its seeds' neighbourhoods sampled
            pairs = self.edge_loader.batch(targets, epoch)
        if targets.numel():
            blocks = self.sampler.sample(targets if pairs is None else pairs.seeds,
                                         self.schedule.batch_key(epoch, k, self.env.rank))
            ids = blocks[0].src_ids
        else:
            blocks, ids = None, torch.zeros(0, dtype=torch.int64)
        parts = self.cache.classify(ids)
        return {"micro": micro, "pairs": pairs, "blocks": blocks, "ids": ids, "parts": parts}, ids[parts["host_pos"]]

    def load_inputs(self, batch: dict) -> tuple[torch.Tensor, dict[str, int]]:
        """Input rows of a sampled batch (:meth:`sample_batch`, its host rows in ``"host_x"``): own cache, peer caches (Quiver; a collective), host
        rows (recorded under ``h2d``). Returns rows and counts."""
        device, ids, parts = self.env.device, batch["ids"], batch["parts"]
        x = torch.empty(ids.numel(), self.host_rows.num_features, dtype=self.host_rows.dtype, device=device)
        x[parts["own_pos"].to(device)] = self.cache_x[parts["own_slot"].to(device)]
        host_pos = parts["host_pos"]
        x[host_pos.to(device)] = to_device_rows(self.comm, batch["host_x"], device)
        if self.cache.policy == "quiver":
            x[parts["peer_pos"].to(device)] = self._peer_rows(parts["peer_holder"], parts["peer_slot"])
        return x, {"own": parts["own_pos"].numel(), "peer": parts["peer_pos"].numel(), "host": host_pos.numel()}

    def _peer_rows(self, holder: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """Read rows from the peers' caches: send slot requests (``control``), get rows back (``p2p``)."""
        comm, device = self.comm, self.env.device
        order = torch.argsort(holder, stable=True)
        req_counts = torch.bincount(holder, minlength=comm.world_size).tolist()
        wanted_counts = comm.exchange_counts(req_counts)
        wanted = comm.all_to_all_v(slot[order].to(device), req_counts, wanted_counts, CONTROL)
        rows = comm.all_to_all_v(self.cache_x.index_select(0, wanted), wanted_counts, req_counts, P2P)
        out = torch.empty_like(rows)
        out[order.to(device)] = rows
        return out

    # ---------------------------------------------------------------- training
    def train_epoch(self, epoch: int) -> EpochStats:
        model = self.model
        run = Epoch(model, epoch, self.env, self.tracker)
        rank, device = self.env.rank, self.env.device
        loss_sum = torch.zeros((), dtype=torch.float64)
        totals = {"edges": 0, "input_rows": 0, "own": 0, "peer": 0, "host": 0, "targets": 0}
        with self.tracker.epoch():
            iterations = self.schedule.iterations(epoch)
            ahead = superbatched(lambda k: self.sample_batch(epoch, k, iterations[k]), self.host_rows.gather,
                                 len(iterations), self.host_rows)
            for batch, host_x in ahead:
                batch["host_x"] = host_x
                micro, blocks, ids = batch["micro"], batch["blocks"], batch["ids"]
                batch_total = sum(t.numel() for t in micro) * (1 if self.link is None else 2)  # targets or pairs
                targets = micro[rank]
                self.optimizer.zero_grad(set_to_none=True)
                if blocks is not None:
                    record_structure(self.comm, [t for b in blocks for t in (b.indptr, b.indices, b.src_ids,
                                                                           b.src_deg)])
                x, counts = self.load_inputs(batch)
                if blocks is not None:
                    blocks = [b.to(device) for b in blocks]
                    logits = model(blocks, x)
                    if batch["pairs"] is None:
                        labels = self.y[targets].to(device)
                        every = torch.ones(targets.numel(), dtype=torch.bool, device=device)
                        loss = masked_loss_sum(logits, labels, every)
                    else:
                        loss = pair_loss_sum(self.link, logits, batch["pairs"])
                    (loss / batch_total).backward()
                    loss_sum += loss.detach().double().cpu()
                    totals["edges"] += sum(b.num_edges for b in blocks)
                allreduce_gradients(self.comm, self.params, self.tracker)
                self.optimizer.step()
                self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
                self.tracker.untrack("gradients")
                totals["input_rows"] += ids.numel()
                totals["targets"] += targets.numel()
                for key in ("own", "peer", "host"):
                    totals[key] += counts[key]
        total = self.comm.all_reduce(loss_sum.reshape(1).to(device), CONTROL)
        extra = {"iterations": self.schedule.num_iterations, "edges": totals["edges"],
                 "input_rows": totals["input_rows"], "cache_hit_rows": totals["own"],
                 "peer_rows": totals["peer"], "host_rows": totals["host"], "targets": totals["targets"],
                 "cache_rows": self.cache.ids.numel()}
        return run.stats(float(total) / self.num_train, extra)


def predict(data, model, config, machine, epoch: int = 0):
    """The prediction of a ``data-parallel`` run (:mod:`graphscale.cost.prediction`): the module docstring's closed
    forms evaluated by replaying epoch ``epoch``'s seeded schedule and sampler on the host-shared structure (the
    micro-batches' input rows and blocks are a function of the seed; no feature row is read), each worker's
    cache classified as its setup builds it. The workers step in lock-step (a gradient all-reduce per iteration),
    so each iteration costs its slowest worker's micro-batch: its layers, each over its own block
    (:func:`~graphscale.cost.pricing.block_seconds`), and its sampling (the profile's
    ``sample_call_s`` / ``sample_edge_s``); ``events``: the ``samples`` (micro-batches, each sampled by its
    worker alone) and ``sampled_edges`` of the worker with the most sampled edges. The input rows a worker reads
    from host memory cross the host-device link on CUDA (``h2d_bandwidth``) and are row gathers on CPU, priced at the
    profile's ``host_transfer_bandwidth``. Those rows come through the hot-row cache of ``--host-memory``
    (:class:`~graphscale.cost.host_rows.HostRowPrice`: its rows and per-vertex arrays in the memory, its hit rate
    over the replayed reads, the misses of a table beyond its share read from disk in the time). ``--task link``: the schedule of the epoch's edge micro-batches over the
    split's message-passing graph, each sampled from its seeds, with the scoring's memory and time
    (:mod:`graphscale.cost.link`)."""
    from graphscale.cost.dims import dims
    from graphscale.cost.host_rows import HostRowPrice
    from graphscale.cost.link import head_bytes, head_seconds
    from graphscale.cost.prediction import Prediction
    from graphscale.cost.pricing import (
        activation_bytes,
        block_seconds,
        element_size,
        host_seconds,
        lockstep_seconds,
        node_data_bytes,
        num_params,
        prediction_time,
        state_bytes,
    )
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch
    from graphscale.tasks.link import embedding_width

    sc, world = config.strategy, config.strategy.workers
    graph = data.open_graph()
    elem, params, d = element_size(model), num_params(model), dims(model, config, data)
    width = embedding_width(model, config)
    owner = data.vertex_owner(world) if sc.cache == "pagraph" else None
    edge_loader = None
    if config.task == "link":  # edge micro-batches over the split's message-passing graph, as the setup cuts them
        from graphscale.tasks.edge_batches import EdgeBatchLoader
        from graphscale.tasks.split import split_edges

        edge_split = split_edges(graph, config.link_split, config.seed)
        graph, edge_loader = edge_split.message_graph, EdgeBatchLoader(edge_split, sc.batch_size, config.seed)
        train_ids = edge_loader.loader.train_ids
        train_owner = owner[edge_split.pairs[0]] if owner is not None else None
    else:
        train_ids, train_owner = torch.nonzero(graph.train_mask).flatten(), owner
    schedule = MicroBatchSchedule(train_ids, sc.batch_size, world, config.seed, train_owner)
    own = [schedule.own[r] if owner is not None else None for r in range(world)]
    if edge_loader is not None and owner is not None:  # the cache reaches out from the own edges' endpoints
        own = [torch.unique(edge_split.pairs[:, o]) for o in own]
    caches = [FeatureCache.build(sc.cache, graph, r, world, sc.cache_fraction, own_train=own[r],
                                 hops=model.num_layers) for r in range(world)]
    sampler = NeighborSampler(graph, sc.fanouts, seed=config.seed)
    host = HostRowPrice(data, config, elem)  # the hot-row cache over the mapped features, and its misses
    row = data.num_features * elem
    out = {"h2d": sum(c.ids.numel() for c in caches) * row, "h2d_struct": 0, P2P: 0,
           CONTROL: allreduce_bytes_per_epoch(1, world, 8)}
    sampled_edges = [0] * world  # per worker, over its micro-batches
    samples = [0] * world  # per worker: the micro-batches it samples
    steps = []  # per iteration: each worker's micro-batch (its blocks' rows and edges, its sampled edges)
    busiest, most_pairs = 0, 0
    out["h2d"] = 0  # the cache fill happens at setup, outside every epoch
    iterations = schedule.iterations(epoch)
    widths, outs = list(d.widths), list(d.out)
    for k, micro in enumerate(iterations):
        steps.append([None] * world)
        for r, targets in enumerate(micro):
            if not targets.numel():
                continue
            pairs = 2 * targets.numel() if edge_loader is not None else 0  # its positives and their negatives
            most_pairs = max(most_pairs, pairs)
            seeds = edge_loader.batch(targets, epoch).seeds if edge_loader is not None else targets
            blocks = sampler.sample(seeds, schedule.batch_key(epoch, k, r))
            out["h2d_struct"] += sum(t.numel() * t.element_size() for b in blocks
                                     for t in (b.indptr, b.indices, b.src_ids, b.src_deg) if t is not None)
            parts = caches[r].classify(blocks[0].src_ids)
            out["h2d"] += parts["host_pos"].numel() * row
            host.read(blocks[0].src_ids[parts["host_pos"]], r, held_bytes(blocks))
            if sc.cache == "quiver":
                out[P2P] += parts["peer_pos"].numel() * row
                out[CONTROL] += 8 * parts["peer_pos"].numel()
            sampled = sum(b.num_edges for b in blocks)
            steps[k][r] = ([(b.num_dst, b.num_src, b.num_edges + b.num_dst) for b in blocks], sampled, pairs)
            sampled_edges[r] += sampled
            samples[r] += 1
            busiest = max(busiest, blocks[0].src_ids.numel())
    if sc.cache == "quiver":
        out[CONTROL] += len(iterations) * world * (world - 1) * 8
    out["allreduce"] = len(iterations) * allreduce_bytes_per_epoch(params, world, elem)
    out = {k: v for k, v in out.items() if v}
    host_tracked, host_resident = host.worker_bytes(config.device)
    mem = [node_data_bytes(c.ids.numel(), data.num_features, elem) + activation_bytes(busiest, widths, outs, elem)
           + host_tracked
           + busiest * data.num_features * elem + state_bytes(params, elem, moment_count(config.optim))
           + (head_bytes(most_pairs, width, elem, config.decoder) if edge_loader is not None else 0) for c in caches]

    def step_seconds(layers, sampled: int, pairs: int) -> float:  # one worker's micro-batch: sample, layers, scoring
        return (block_seconds(machine, layers, widths, outs, workers=world)
                + host_seconds(machine, machine.sample_call_s, machine.sample_edge_s, 1, sampled, world)
                + (head_seconds(machine, pairs, width, config.decoder, world) if pairs else 0.0))

    seconds = lockstep_seconds(steps, step_seconds)  # a gradient all-reduce per iteration
    # the input rows a worker reads from host memory: over the host-device link on CUDA; on CPU row gathers, at
    # the profile's measured rate of offload's host-array gathers (not a plain copy's)
    gather = machine.h2d_bandwidth or machine.host_transfer_bandwidth or machine.memory_bandwidth
    busiest_worker = max(range(world), key=lambda r: (sampled_edges[r], samples[r]))
    seconds += max(host.disk_seconds(r) for r in range(world))  # the misses read from disk, a superbatch at a time
    seconds = prediction_time(machine, seconds + out.get("h2d", 0) / world / gather,
                              sum(out.values()) / world - out.get("h2d", 0) / world, len(iterations) + 1,
                              len(iterations))
    return Prediction("data-parallel", world, {"cache": sc.cache, "batch_size": sc.batch_size}, max(mem), mem, out,
                      seconds, exact=False, semantics="sampled mini-batch training (equal to single --minibatch "
                      "over the union of the micro-batches, not to full-graph training)",
                      notes=[f"bytes: the closed forms over epoch {epoch}'s replayed schedule and samples"],
                      bytes_epoch=epoch, collectives=len(iterations) + 1,
                      events={"samples": samples[busiest_worker], "sampled_edges": sampled_edges[busiest_worker]},
                      worker_host_memory=host_resident, host_cache=host.summary())

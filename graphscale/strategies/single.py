"""The single-process reference strategy: the oracle every other strategy is tested against.

Full-graph mode runs the model on one block holding the whole graph; the loss is
the mean cross-entropy over the training vertices. Mini-batch mode
(``config.strategy.minibatch``) samples blocks with the uniform neighbour
sampler for batches of training vertices (one optimiser step per batch, loss
normalised by the batch size). Evaluation is exact full-graph inference.

``--task link`` (:mod:`graphscale.tasks.link`) trains over the edge split's message-passing graph: full-graph, every
training pair scored on the whole graph's embeddings; with ``--minibatch``, on edge mini-batches
(:mod:`graphscale.tasks.edge_batches`: a batch's positives and keyed negatives, the neighbourhoods of their endpoints
sampled, the summed BCE over the batch's pairs / their count). Evaluation scores every split's pairs on the whole
graph's embeddings (layer-wise on a mapped graph directory).

**Mini-batch runs read from disk.** With ``--minibatch`` (features not learnable, a coupled model, features stored
in the run's dtype) the run's data is the host-shared view (:meth:`SingleStrategy.data_view_for`): the memory-mapped
graph directory the multi-worker strategies get, never loaded whole. The sampler reads the mapped CSR; the input
rows of each batch come through a :class:`~graphscale.data.row_cache.HotRowCache` sized from ``--host-memory`` (its
misses read from the file a superbatch at a time, :mod:`graphscale.data.superbatch`; the cache then holds the rows
epoch 0's batches read most, counted at setup by :func:`first_epoch_reads`), the next batch sampled and
gathered in a background thread while the current one trains; evaluation is the layer-wise
inference of :class:`~graphscale.strategies.evaluation.LayerwiseEvaluator` (one worker owning every vertex), its
per-layer tables in a temporary file when they exceed their share of ``--host-memory``. The blocks, losses and
parameters are bit for bit those of the in-memory run (a graph handed over in memory keeps the memory view).
"""

from __future__ import annotations

import functools

import torch

from graphscale.config import stored_feature_dtype
from graphscale.data.block import Block
from graphscale.data.features import learnable_dim
from graphscale.data.handle import HOST_SHARED, MEMORY
from graphscale.data.row_cache import count_reads
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.data.superbatch import held_bytes, superbatched
from graphscale.distributed.comm import Comm
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.nn.models import is_decoupled
from graphscale.options import option_names
from graphscale.options.shared import SingleOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    Strategy,
    check_gradients,
    counts_to_metrics,
    masked_loss_sum,
    optimizer_tensors,
    split_counts,
    unused_feature_options,
)
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.evaluation import LayerwiseEvaluator
from graphscale.strategies.minibatch_common import evaluation_tables, host_row_cache
from graphscale.strategies.optimizers import moment_count
from graphscale.strategies.sampled_evaluation import SampledEvaluator
from graphscale.tasks.edge_batches import EdgeBatch, EdgeBatchLoader
from graphscale.tasks.link import LinkTask
from graphscale.tasks.split import split_edges


@STRATEGIES.register("single")
class SingleStrategy(Strategy):
    """One process, full-graph or sampled mini-batch training."""

    data_view = MEMORY
    edge_weights = True
    predict_refusal = ""
    learnable_input = True
    decoupled_models = True
    options = option_names(SingleOptions)

    @classmethod
    def data_view_for(cls, config) -> str:
        """``host-shared`` for ``--minibatch`` (module docstring) unless the input is a learnable table, the model is
        decoupled or ``--feature-dtype`` stores the features in another dtype than the run's; else ``memory``."""
        if (config.strategy.minibatch and not learnable_dim(config.data.features) and not is_decoupled(config)
                and stored_feature_dtype(config) == config.dtype):
            return HOST_SHARED
        return MEMORY

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        unused = unused_feature_options(config)
        return unused if config.strategy.minibatch else {**unused, "fanouts": "without --minibatch",
                                                         "batch_size": "without --minibatch",
                                                         "eval_fanouts": "without --minibatch"}

    @classmethod
    def link_refusal(cls, config) -> str:
        return ""

    def setup(self, data, model, env, config) -> None:
        super().setup(data, model, env, config)
        graph = self.data.open_graph()
        if env.world_size != 1:
            raise ValueError(f"strategy 'single' runs on one worker, got --workers {env.world_size}")
        device = env.device
        self.tracker = MemoryTracker(env)
        self.tracker.track_module("model", model)
        self.mapped = self.data.view == HOST_SHARED  # mini-batch training from a memory-mapped graph directory
        self.rows = self.evaluator = self.link = self.eval_sampler = None
        self.y = graph.y.to(device)
        self.masks = {"train": graph.train_mask.to(device), "val": graph.val_mask.to(device),
                      "test": graph.test_mask.to(device)}
        if config.task == "link":  # message passing over the training graph; the held-out pairs scored
            split = split_edges(graph, config.link_split, config.seed)
            graph = split.message_graph
            self.link = LinkTask(split, model.link_decoder, config.seed, config.hits_k, device)
        strategy = config.strategy
        if strategy.minibatch:  # the options were checked in the parent (graphscale.validation)
            self.sampler = NeighborSampler(graph, strategy.fanouts, seed=config.seed)
            if self.link is not None:  # edge batches: positives and their keyed negatives, both endpoints sampled
                self.loader = EdgeBatchLoader(self.link.split, strategy.batch_size, config.seed)
            else:
                train_ids = torch.nonzero(graph.train_mask).flatten()
                self.loader = MiniBatchLoader(train_ids, strategy.batch_size, seed=config.seed)
        elif self.mapped:
            raise ValueError("strategy 'single' trains full-graph on an in-memory graph; a host-shared graph "
                             "directory needs --minibatch")
        if self.mapped:  # rows read through the hot-row cache, never the whole table (ranked by epoch 0's reads)
            self.graph = graph
            self.rows = host_row_cache(self.data, graph, self.feature_dtype(), config,
                                       lambda: first_epoch_reads(self.sampler, self.loader, self.link is not None,
                                                                 graph.num_nodes))
            self.tracker.track("cache", self.rows.rows, self.rows.slot)
            self.rows.on_stage = lambda *staged: self.tracker.track("stage", *staged, category="cache")
        else:
            if learnable_dim(config.data.features):  # the input is a trainable [N, D] table
                self.x = self.learnable_table(torch.arange(graph.num_nodes))
            else:
                self.x = graph.x.to(device=device, dtype=self.feature_dtype())
            self.block = Block.full(graph).to(device)
            self.tracker.track("graph", self.x, self.y, *self.masks.values(), self.block.indptr, self.block.indices,
                               self.block.src_ids, self.block.src_deg)

    def train_epoch(self, epoch: int) -> EpochStats:
        run = Epoch(self.model, epoch, self.env, self.tracker)
        with self.tracker.epoch():
            if self.config.strategy.minibatch:
                loss = self._minibatch_epoch(epoch)
            elif self.link is not None:
                loss = self._link_step(epoch)
            else:
                loss = self._step(self.block, self.x, self.masks["train"], int(self.masks["train"].sum()))
        return run.stats(loss)

    def _step(self, blocks, x, target_mask, normaliser: int) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(blocks, x)
        dst = (blocks[-1] if isinstance(blocks, list) else blocks).dst_ids
        loss = masked_loss_sum(logits, self.y[dst], target_mask) / normaliser
        loss.backward()
        check_gradients([p.grad for p in self.model.parameters()], loss)  # before the step can spoil the parameters
        self.optimizer.step()
        self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
        return loss.item()

    def _link_step(self, epoch: int) -> float:
        """One full-graph step of link prediction (:mod:`graphscale.tasks.link`)."""
        self.optimizer.zero_grad(set_to_none=True)
        z = self.model(self.block, self.x)
        src, dst, label = self.link.train_pairs(epoch)
        loss = self.link.table_loss_sum(z, src, dst, label) / self.link.normaliser
        loss.backward()
        check_gradients([p.grad for p in self.model.parameters()], loss)
        self.optimizer.step()
        self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
        return loss.item()

    def _link_batch_step(self, blocks, x, batch: EdgeBatch) -> float:
        """One optimiser step on an edge batch: its seeds' embeddings, the BCE of its pairs / their count."""
        self.optimizer.zero_grad(set_to_none=True)
        z = self.model(blocks, x)
        device = z.device
        loss = self.link.loss_sum(z[batch.src_pos.to(device)], z[batch.dst_pos.to(device)],
                                  batch.label.to(device)) / batch.num_pairs
        loss.backward()
        check_gradients([p.grad for p in self.model.parameters()], loss)
        self.optimizer.step()
        self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
        return loss.item()

    def _minibatch_epoch(self, epoch: int) -> float:
        """One epoch of mini-batches: of training vertices, or (``--task link``) of training edges, whose seeds'
        neighbourhoods are sampled (:mod:`graphscale.tasks.edge_batches`)."""
        count, sample_batch = epoch_samples(self.sampler, self.loader, self.link is not None, epoch)
        device = self.env.device

        # fixed input rows on the host are gathered ahead too; a learnable table's (autograd) and a device's are not
        if self.rows is not None:
            ahead = self.rows.gather
        elif not isinstance(self.x, torch.nn.Parameter) and self.x.device.type == "cpu":
            ahead = functools.partial(self.x.index_select, 0)
        else:
            ahead = None

        def sample(i: int):  # the batch's blocks and input ids: runs ahead, in the prefetch thread
            batch, blocks = sample_batch(i)
            return (batch, blocks), blocks[0].src_ids

        total, seen = 0.0, 0
        for (batch, blocks), x in superbatched(sample, ahead, count, self.rows):
            blocks = [b.to(device) for b in blocks]
            x = self.x[blocks[0].src_ids] if x is None else x.to(device)
            if self.link is not None:
                size = batch.num_pairs
                total += self._link_batch_step(blocks, x, batch) * size
            else:
                size = batch.numel()
                every = torch.ones(size, dtype=torch.bool, device=device)
                total += self._step(blocks, x, every, size) * size
            seen += size
        return total / max(seen, 1)

    def _sampled_evaluation(self) -> dict[str, float]:
        """``--eval-fanouts`` (:mod:`graphscale.strategies.sampled_evaluation`): the splits' vertices,
        ``--batch-size`` at a time, on neighbourhoods sampled with a fixed key, their input rows read as training
        reads them."""
        if self.eval_sampler is None:
            if self.rows is not None:
                host_rows, device_rows = self.rows.gather, lambda ids, rows: rows.to(self.env.device)
            else:
                host_rows, device_rows = None, lambda ids, rows: self.x[ids.to(self.x.device)]
            self.eval_sampler = SampledEvaluator(self.sampler.graph, self.config.strategy.eval_fanouts,
                                                 self.config.strategy.batch_size, self.config.seed,
                                                 self.sampler.degrees, self.y, self.masks, host_rows, device_rows)
        return self.eval_sampler.evaluate(self.model, self.env.device)

    @torch.no_grad()
    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole graph's logits in one forward (an in-memory graph)."""
        if self.mapped:
            raise ValueError("strategy 'single' predicts on an in-memory graph; a host-shared graph directory is "
                             "evaluated in row batches, which keep no outputs")
        self.model.eval()
        logits = self.model(self.block, self.x)
        return torch.arange(logits.shape[0]), logits

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        if self.config.strategy.minibatch and self.config.strategy.eval_fanouts and self.link is None:
            return self._sampled_evaluation()
        if self.mapped:  # layer by layer over row batches, its tables within --host-memory
            if self.evaluator is None:
                self.evaluator = LayerwiseEvaluator(Comm(self.env), self.graph, self.model,
                                                    tables=evaluation_tables(self.config))
            if self.link is not None:  # every vertex's embedding, layer by layer, then the pairs scored
                return self.link.evaluate(self.evaluator.logits())
            return self.evaluator.evaluate()
        self.model.eval()
        logits = self.model(self.block, self.x)
        if self.link is not None:
            return self.link.evaluate(logits)
        return counts_to_metrics(split_counts(logits, self.y, self.masks))


def predict(data, model, config, machine, epoch: int = 0):
    """The prediction of a ``single`` run (:mod:`graphscale.cost.prediction`): no bytes move. Full-graph: the whole
    graph's rows and edges on one worker; ``--task link``: plus the scoring of the split's training pairs
    (:mod:`graphscale.cost.link`). ``--minibatch``: :func:`predict_minibatch`."""
    if config.strategy.minibatch:
        return predict_minibatch(data, model, config, machine, epoch)
    from graphscale.cost.dims import dims
    from graphscale.cost.prediction import Prediction
    from graphscale.cost.pricing import (
        activation_bytes,
        element_size,
        layer_seconds,
        node_data_bytes,
        num_params,
        prediction_time,
        state_bytes,
    )

    d, elem = dims(model, config, data), element_size(model)
    n, e = data.num_nodes, int(data.summary["edges"])
    compute = layer_seconds(machine, n, e + n, list(d.widths), list(d.out))
    peak = (node_data_bytes(n, data.num_features, elem) + 8 * (n + 1 + e)
            + activation_bytes(n, list(d.widths), list(d.out), elem)
            + state_bytes(num_params(model), elem, moment_count(config.optim)))
    if config.task == "link":  # every training pair scored on the whole graph's embeddings
        from graphscale.cost.link import head_bytes, head_seconds
        from graphscale.tasks.link import embedding_width
        from graphscale.tasks.pair_scores import fusable

        pairs = 2 * split_edges(data.open_graph(), config.link_split, config.seed).ids("train").numel()
        width = embedding_width(model, config)
        # the full-graph step scores dot / distmult from the embedding table in chunks (tasks.pair_scores)
        peak += head_bytes(pairs, width, elem, config.decoder, fusable(model.link_decoder))
        compute += head_seconds(machine, pairs, width, config.decoder)
    return Prediction("single", 1, {}, peak, [peak], {}, prediction_time(machine, compute, 0, 0, 1),
                      exact=True, semantics="exact (the full-graph reference)", notes=["bytes: none (one worker)"])


def epoch_samples(sampler: NeighborSampler, loader, link: bool, epoch: int):
    """``(count, sample)``: epoch ``epoch``'s batch count and ``sample(i)``, its ``i``-th ``(batch, blocks)`` as
    the run draws them: the loader's seeded batch (``link``: an :class:`EdgeBatch`, its seeds sampled) and the
    sampler's blocks under the batch's key."""
    if not link:
        batches = loader.batches(epoch)
        count = len(batches)

        def sample(i: int):
            return batches[i], sampler.sample(batches[i], batch_key=epoch * count + i)
    else:
        edge_ids = loader.edge_ids(epoch)
        count = len(edge_ids)

        def sample(i: int):
            batch: EdgeBatch = loader.batch(edge_ids[i], epoch)
            return batch, sampler.sample(batch.seeds, batch_key=epoch * count + i)
    return count, sample


def first_epoch_reads(sampler: NeighborSampler, loader, link: bool, num_rows: int) -> torch.Tensor:
    """int64 ``[num_rows]``: how many times epoch 0's batches read each host row (their input rows), replayed
    with the run's seeded loader and sampler (:func:`epoch_samples`; no feature row is read)."""
    count, sample = epoch_samples(sampler, loader, link, 0)
    return count_reads((sample(i)[1][0].src_ids for i in range(count)), num_rows)


def predict_minibatch(data, model, config, machine, epoch: int = 0):
    """The prediction of a ``single --minibatch`` run, by replaying epoch ``epoch``'s seeded loader and sampler as
    the run does (:meth:`SingleStrategy._minibatch_epoch`; no feature row is read); no bytes move.

    * **time**: per batch, its layers over its own blocks (:func:`~graphscale.cost.pricing.block_seconds`), its
      sampling (the profile's ``sample_call_s`` / ``sample_edge_s``; ``events``: ``samples`` and
      ``sampled_edges``) and, ``--task link``, its pairs' scoring; the batch's input rows gathered on the host at
      the profile's ``host_transfer_bandwidth`` (the link's on CUDA); one optimiser step per batch.
    * **host rows**: on a memory-mapped graph directory (:meth:`SingleStrategy.data_view_for`) the input rows come
      through the hot-row cache of ``--host-memory`` (:class:`~graphscale.cost.host_rows.HostRowPrice`: its rows and
      slot map in the tracked memory, the per-vertex arrays beside it, its hit rate over the replayed reads, the
      misses of a table beyond the cache's share read from disk in the time); an in-memory run holds the graph.
    * **memory**: the largest batch's input rows and activations, the parameters and optimiser state, and the
      cache (mapped) or the whole graph's tensors (in memory); ``--task link``: the largest batch's pair scoring.
    """
    from graphscale.cost.dims import dims
    from graphscale.cost.host_rows import HostRowPrice
    from graphscale.cost.prediction import Prediction
    from graphscale.cost.pricing import (
        activation_bytes,
        block_seconds,
        element_size,
        host_seconds,
        node_data_bytes,
        num_params,
        prediction_time,
        state_bytes,
    )

    sc, graph = config.strategy, data.open_graph()
    d, elem = dims(model, config, data), element_size(model)
    widths, outs = list(d.widths), list(d.out)
    link = config.task == "link"
    if link:  # edge batches over the split's message-passing graph, their seeds sampled (tasks.edge_batches)
        split = split_edges(graph, config.link_split, config.seed)
        graph, loader = split.message_graph, EdgeBatchLoader(split, sc.batch_size, config.seed)
    else:
        loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), sc.batch_size, seed=config.seed)
    sampler = NeighborSampler(graph, sc.fanouts, seed=config.seed)
    count, sample_batch = epoch_samples(sampler, loader, link, epoch)
    mapped = SingleStrategy.data_view_for(config) == HOST_SHARED
    host = HostRowPrice(data, config, elem, graph=graph, mapped=mapped,
                        reads=lambda: first_epoch_reads(sampler, loader, link, graph.num_nodes))
    compute, sampled, inputs, busiest, most_pairs = 0.0, 0, 0, 0, 0
    width = 0
    if link:
        from graphscale.cost.link import head_bytes, head_seconds
        from graphscale.tasks.link import embedding_width

        width = embedding_width(model, config)
    for i in range(count):
        batch, blocks = sample_batch(i)
        if link:
            most_pairs = max(most_pairs, batch.num_pairs)
            compute += head_seconds(machine, batch.num_pairs, width, config.decoder)
        src = blocks[0].src_ids
        host.read(src, 0, held_bytes((batch, blocks)))  # a superbatch holds the run's (batch, blocks)
        inputs += src.numel()
        busiest = max(busiest, src.numel())
        sampled += sum(b.num_edges for b in blocks)
        compute += block_seconds(machine, [(b.num_dst, b.num_src, b.num_edges + b.num_dst) for b in blocks],
                                 widths, outs)
    row = data.num_features * elem
    gather = machine.h2d_bandwidth or machine.host_transfer_bandwidth or machine.memory_bandwidth
    compute += (host_seconds(machine, machine.sample_call_s, machine.sample_edge_s, count, sampled)
                + inputs * row / gather + host.disk_seconds(0))
    n, e = data.num_nodes, int(data.summary["edges"])
    if mapped:
        held, _ = host.worker_bytes(config.device)
    else:  # the whole graph's features, labels, masks and block, as the in-memory run tracks them
        held = node_data_bytes(n, data.num_features, elem) + 8 * (n + 1 + e)
    peak = (held + busiest * row + activation_bytes(busiest, widths, outs, elem)
            + state_bytes(num_params(model), elem, moment_count(config.optim))
            + (head_bytes(most_pairs, width, elem, config.decoder) if link else 0))
    return Prediction("single", 1, {"minibatch": True, "batch_size": sc.batch_size}, peak, [peak], {},
                      prediction_time(machine, compute, 0, 0, count), exact=False,
                      semantics="sampled mini-batch training (neighbour sampling: not full-graph gradients)",
                      notes=["bytes: none (one worker)", f"time and host reads: epoch {epoch}'s replayed samples"],
                      bytes_epoch=epoch, events={"samples": count, "sampled_edges": sampled},
                      worker_host_memory=host.worker_bytes(config.device)[1] if mapped else 0,
                      host_cache=host.summary() if mapped else {})

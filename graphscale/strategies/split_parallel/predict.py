"""The prediction of a ``split-parallel`` run (:mod:`graphscale.cost.prediction`): the strategy module's closed
forms evaluated by replaying epoch ``epoch``'s seeded loader and sampler and splitting every mini-batch with the
run's :class:`~.split.SplitPlan` (:func:`~.split.split_minibatch`, the strategy's own split), on the host-shared
structure; no feature row is read. The workers step in lock-step (shuffles and a gradient all-reduce per
mini-batch), so each mini-batch costs its slowest worker's split: each layer over its own rows of the layer's
source and destination levels and the edges it computes there (a partition's share, uneven on a skewed graph;
:func:`~graphscale.cost.pricing.block_seconds`), and its sampling of the whole mini-batch (the seeded
sampler is rank-agnostic: each worker samples the whole mini-batch before splitting it; ``events``: ``samples``
calls of the sampler, ``sampled_edges`` in the blocks they return), priced at the profile's ``sample_call_s`` /
``sample_edge_s``; plus the transfers. Each worker's host rows (its global misses) come through the hot-row
cache of ``--host-memory`` (:class:`~graphscale.cost.host_rows.HostRowPrice`: its rows and per-vertex arrays in the
memory, its hit rate over the replayed reads, the misses of a table beyond its share read from disk in the time).
``--task link``: the epoch's edge batches (:mod:`graphscale.tasks.edge_batches`)
over the split's message-passing graph, their seeds the sampled targets, each batch's pairs scored as the strategy
scores them (:func:`link_pairs`: the ``pair_rows`` exchange) with the scoring's memory and time
(:mod:`graphscale.cost.link`)."""

from __future__ import annotations

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
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.data.superbatch import held_bytes
from graphscale.strategies.link_minibatch import PAIR_ROWS, PairExchange
from graphscale.strategies.optimizers import moment_count
from graphscale.strategies.split_parallel.plan import SplitPlan
from graphscale.strategies.split_parallel.split import split_minibatch
from graphscale.strategies.split_parallel.strategy import layer_kinds, shipped_widths, shuffle_backward, split_modes
from graphscale.tasks.link import embedding_width


def link_pairs(split, batch, world: int) -> list[PairExchange]:
    """Every worker's :class:`~graphscale.strategies.link_minibatch.PairExchange` of an edge batch whose seeds'
    mini-batch split is ``split``, as the strategy builds it (:meth:`~.strategy.SplitParallel.sample_link`)."""
    import torch

    s = batch.seeds.numel()
    owner, own_pos = torch.from_numpy(split.owner[:s].copy()), torch.from_numpy(split.own_pos[:s].copy())
    return [PairExchange(owner, own_pos, batch, r, world) for r in range(world)]


def predict(data, model, config, machine, epoch: int = 0):
    import torch

    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch

    sc, world = config.strategy, config.strategy.workers
    graph = data.open_graph()
    elem, params, d = element_size(model), num_params(model), dims(model, config, data)
    plan = SplitPlan.load(data.require_shared("split-parallel"))  # the run's plan, built by the parent
    modes, widths, back = split_modes(layer_kinds(model)), shipped_widths(model), shuffle_backward(model)
    link = config.task == "link"
    if link:  # edge batches over the split's message-passing graph, their seeds the targets (link_minibatch)
        from graphscale.tasks.edge_batches import EdgeBatchLoader
        from graphscale.tasks.split import split_edges

        edge_split = split_edges(graph, config.link_split, config.seed)
        graph, loader = edge_split.message_graph, EdgeBatchLoader(edge_split, sc.batch_size, config.seed)
    else:
        loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), sc.batch_size, seed=config.seed)
    sampler = NeighborSampler(graph, sc.fanouts, seed=config.seed)
    host = HostRowPrice(data, config, elem)  # the hot-row cache over the mapped features, and its misses
    row = data.num_features * elem
    out = {"h2d": 0, "h2d_struct": 0, "shuffle": 0, **({PAIR_ROWS: 0} if link else {})}
    edges, busiest, scored = 0, 0, [0] * world
    steps = []  # per mini-batch: each worker's split (its rows and computed edges per layer, the sampled edges)
    batches = loader.batches(epoch)
    for i, batch in enumerate(batches):
        blocks = sampler.sample(batch.seeds if link else batch, loader.batch_key(epoch, i))
        split = split_minibatch(blocks, plan, modes)
        sampled = sum(b.num_edges for b in blocks)
        steps.append([])
        pairs = link_pairs(split, batch, world) if link else [None] * world
        for r in range(world):
            local = split.local(r)
            out["h2d"] += local.miss_ids.numel() * row
            host.read(local.miss_ids, r, held_bytes(local))
            out["h2d_struct"] += local.structure_bytes()
            own = local.own_counts  # own rows per level: a layer's sources, then its destinations
            layers = [(own[l + 1], own[l], int(lay.computed[r]) + own[l + 1]) for l, lay in enumerate(split.layers)]
            steps[-1].append((layers, sampled, pairs[r]))
            if link:  # the seed rows it ships to their pairs' scorers, forward and backward
                out[PAIR_ROWS] += 2 * pairs[r].rows_shipped() * embedding_width(model, config) * elem
                scored[r] = max(scored[r], pairs[r].pairs.numel())
        out["shuffle"] += sum(lay.shuffle_rows() * widths[l] * elem * (2 if back[l] else 1)
                              for l, lay in enumerate(split.layers))
        edges += sampled
        busiest = max(busiest, blocks[0].src_ids.numel())
    out["allreduce"] = len(batches) * allreduce_bytes_per_epoch(params, world, elem)
    out["control"] = allreduce_bytes_per_epoch(1, world, 8)
    out = {k: v for k, v in out.items() if v}
    w, o = list(d.widths), list(d.out)
    cached = [plan.cached_ids(r).numel() for r in range(world)]
    host_tracked, host_resident = host.worker_bytes(config.device)
    mem = [node_data_bytes(c, data.num_features, elem) + activation_bytes(busiest / world, w, o, elem) + host_tracked
           + state_bytes(params, elem, moment_count(config.optim))
           + (head_bytes(n, embedding_width(model, config), elem, config.decoder) if link else 0)
           for c, n in zip(cached, scored)]

    def step_seconds(layers, sampled: int, pairs) -> float:  # one worker's split: sample, layers, its pairs scored
        return (block_seconds(machine, layers, w, o, workers=world)
                + host_seconds(machine, machine.sample_call_s, machine.sample_edge_s, 1, sampled, world)
                + (head_seconds(machine, pairs.pairs.numel(), embedding_width(model, config), config.decoder, world)
                   if pairs is not None else 0.0))

    compute = lockstep_seconds(steps, step_seconds)  # shuffles and a gradient all-reduce per mini-batch
    compute += max(host.disk_seconds(r) for r in range(world))  # the misses read from disk, a superbatch at a time
    # per mini-batch: a shuffle per layer forward and per layer whose backward ships gradients, the gradient
    # all-reduce (link: the pair exchange forward and backward); per epoch: the loss all-reduce
    collectives = len(batches) * (len(back) + sum(1 for b in back if b) + 1 + (2 if link else 0)) + 1
    events = {"samples": len(batches), "sampled_edges": edges}  # every worker samples every mini-batch whole
    seconds = prediction_time(machine, compute, sum(out.values()) / world, collectives, len(batches))
    return Prediction("split-parallel", world, {"batch_size": sc.batch_size}, max(mem), mem, out, seconds,
                      exact=False, semantics="sampled mini-batch training (equal to single --minibatch, not to "
                      "full-graph training)", notes=[(f"bytes: the closed forms over epoch {epoch}'s replayed "
                                                      "samples and their splits")], bytes_epoch=epoch,
                      collectives=collectives, events=events, worker_host_memory=host_resident,
                      host_cache=host.summary())

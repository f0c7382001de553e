"""The prediction of a ``task-parallel`` run (:mod:`graphscale.cost.prediction`).

The plan is the run's (the parent's scheduling-model choice written with the shared data, or ``--t-workers``);
bytes are :func:`~.chain.epoch_bytes` (the closed form the tests hold the Ledger to). Time is the chain's, measured
to be serial: a segment waits for the rows of the one before it (forward) and for the gradients of the one after
it (backward), so on the 20k-vertex SBM with 2 workers an epoch took the sum of the T worker's and the P worker's
busy time, each waiting for the other about half of it. It is the whole graph's layers priced on the profile
(:func:`~graphscale.cost.pricing.layer_seconds`: the dense half at the T groups' mean size, the sparse half at
the P groups'), plus the busiest P member's blocks, rebuilt from the host-shared graph for every subgraph in every
epoch (:func:`block_builds`, priced per block and per edge at the profile's ``block_call_s`` / ``block_edge_s``:
about 40% of that epoch), plus the chain's transfers, priced with the loss all-reduce (the one collective) and the
busiest worker's receives (:func:`worker_receives`). (The discrete-event simulator, :func:`~.simulate.simulate` with
:func:`~.simulate.modelled_costs` at the profile's rates, gave makespans about 100x below the other strategies'
predictions on Cora, so it is not used until calibrated.)
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from graphscale.cost.dims import dims
from graphscale.cost.prediction import Prediction, synchronising_waits
from graphscale.cost.pricing import activation_bytes, element_size, node_data_bytes, num_params, state_bytes
from graphscale.strategies.optimizers import moment_count
from graphscale.strategies.task_parallel.chain import (
    build_segments,
    epoch_bytes,
    num_chunks,
    resolve_plan,
    run_chunk_of,
)
from graphscale.strategies.task_parallel.chunks import layout
from graphscale.strategies.task_parallel.exchange import Exchange
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy
from graphscale.strategies.task_parallel.tasks import P, task_split


def worker_receives(model, config, plan, rank: int, epoch: int = 1) -> int:
    """Blocking receives of ``rank`` in training epoch ``epoch``: for every segment it works in and every
    subgraph, one from each peer holding the subgraph's chunks in the segment before (forward) and in the segment
    after (gradients), routed as the run routes them (:meth:`.exchange.Exchange._route` over the epoch's
    :func:`~.chunks.layout`; a group of several ranks splits the chunks by the shuffle)."""
    sc = config.strategy
    segments = build_segments(task_split(model), plan)
    lay = layout(num_chunks(config, plan), sc.subgraphs, config.seed, epoch, sc.shuffle)
    router = SimpleNamespace(num_chunks=lay.num_chunks, plan=plan, env=SimpleNamespace(rank=rank))
    owners = {seg.index: Exchange._owner(router, seg, lay) for seg in segments}
    count = 0
    for seg in segments:
        if rank not in seg.group:
            continue
        for other in [segments[i] for i in (seg.index - 1, seg.index + 1) if 0 <= i < len(segments)]:
            count += sum(len(Exchange._route(router, other, seg, owners, lay, s, False))
                         for s in range(lay.num_subgraphs))
    return count


def chunk_edges(graph, config, plan, data) -> tuple[list[int], list[int]]:
    """Rows and CSR edges of every chunk (``chunk_of`` as the run's setup assigns it: the parent's for
    ``--chunking partitioner``, contiguous ranges otherwise)."""
    import numpy as np
    import torch

    m = num_chunks(config, plan)
    shared = data.require_shared("task-parallel") if config.strategy.chunking == "partitioner" else None
    chunk_of = run_chunk_of(graph, config, plan, shared)
    degree = torch.as_tensor(np.diff(np.asarray(graph.indptr)), dtype=torch.int64)
    rows = torch.bincount(chunk_of, minlength=m)
    edges = torch.zeros(m, dtype=torch.int64).index_add_(0, chunk_of, degree)
    return rows.tolist(), edges.tolist()


def block_builds(model, config, plan, rows: list[int], edges: list[int], rank: int,
                 epoch: int = 1) -> tuple[int, int]:
    """``(blocks, edges)`` ``rank`` builds in training epoch ``epoch``: every P segment it works in builds, for every
    subgraph where it owns rows, one block of those rows with all their CSR edges
    (:meth:`.exchange.Exchange._p_prepare`); ownership as the run routes it (:meth:`.exchange.Exchange._owner` over
    the epoch's :func:`~.chunks.layout`). ``rows`` / ``edges`` per chunk: :func:`chunk_edges`."""
    sc = config.strategy
    lay = layout(num_chunks(config, plan), sc.subgraphs, config.seed, epoch, sc.shuffle)
    router = SimpleNamespace(num_chunks=lay.num_chunks, plan=plan, env=SimpleNamespace(rank=rank))
    blocks = built = 0
    for seg in build_segments(task_split(model), plan):
        if seg.kind != P or rank not in seg.group:
            continue
        owner, me = Exchange._owner(router, seg, lay), seg.group.index(rank)
        for s in range(lay.num_subgraphs):
            mine = [c for c in lay.chunks(s) if int(owner[c]) == me]
            if sum(rows[c] for c in mine):
                blocks, built = blocks + 1, built + sum(edges[c] for c in mine)
    return blocks, built


def predict(data, model, config, machine):
    from graphscale.strategies.task_parallel.chain import PLAN_FILE

    sc = config.strategy
    if TaskParallelStrategy.shared_data_key(config) is None:  # --t-workers with --chunking contiguous
        q = sc.t_workers
    else:  # the parent's choice
        q = int(json.loads((data.require_shared("task-parallel") / PLAN_FILE).read_text())["t_workers"])
    plan = resolve_plan(config, q)
    elem, params, d = element_size(model), num_params(model), dims(model, config, data)
    n, e = data.num_nodes, int(data.summary["edges"])
    out = {k: v for k, v in epoch_bytes(model, plan, n, data.num_features, elem, sc.t_recompute).items() if v}
    w, o = list(d.widths), list(d.out)
    from graphscale.cost.pricing import host_seconds, layer_seconds, prediction_time

    def mean_size(groups):
        return sum(len(g) for g in groups) / len(groups)

    # the chain is serial (module docstring): the dense half at the T groups' size, the sparse half at the P groups'
    dense = layer_seconds(machine, n, 0, w, o, calls=max(sc.subgraphs, 1), workers=sc.workers)
    sparse = layer_seconds(machine, 0, e + n, w, o, calls=0, workers=sc.workers)
    rows_of, edges_of = chunk_edges(data.open_graph(), config, plan, data)
    builds = [block_builds(model, config, plan, rows_of, edges_of, rank) for rank in range(sc.workers)]
    busiest = max(builds, key=lambda b: host_seconds(machine, machine.block_call_s, machine.block_edge_s, *b))
    blocks = host_seconds(machine, machine.block_call_s, machine.block_edge_s, *busiest, sc.workers)
    compute = dense / mean_size(plan.t_groups) + sparse / mean_size(plan.p_groups) + blocks
    collectives, waits = 1, [worker_receives(model, config, plan, rank) for rank in range(sc.workers)]
    seconds = prediction_time(machine, compute, sum(out.values()) / plan.workers,
                              synchronising_waits(collectives, waits))
    peak = (node_data_bytes(n, data.num_features, elem) // max(len(plan.t_ranks), 1)
            + activation_bytes(n / max(sc.subgraphs, 1), w, o, elem) + n * max(w + o) * elem
            + state_bytes(params, elem, moment_count(config.optim)))
    return Prediction("task-parallel", sc.workers, {"t_workers": q, "subgraphs": sc.subgraphs}, int(peak),
                      [int(peak)] * sc.workers, out, seconds, exact=sc.dependency == "full",
                      semantics=("exact propagation (--dependency full)" if sc.dependency == "full" else
                                 f"subgraph propagation drops edges (--dependency {sc.dependency}); decoupled "
                                 "model by default"),
                      notes=["bytes: task_parallel.chain.epoch_bytes",
                             ("time: the serial chain's layers, the P blocks rebuilt per subgraph and epoch, the "
                              "transfers")],
                      collectives=collectives, waits=waits,
                      events={"blocks": busiest[0], "block_edges": busiest[1]})

"""The prediction of a ``task-parallel`` run (:mod:`graphscale.advise.predict`).

The plan is the run's (the parent's scheduling-model choice written with the shared data, or ``--t-workers``);
bytes are :func:`~.chain.epoch_bytes` (the closed form the tests hold the Ledger to); time is the whole graph's
layers priced on the profile (:func:`~graphscale.advise.predict.layer_seconds`) spread over the workers, plus the
chain's transfers, priced with the loss all-reduce (the one collective) and the busiest worker's receives
(:func:`worker_receives`). (The discrete-event simulator, :func:`~.simulate.simulate` with :func:`~.simulate.modelled_costs`
at the profile's rates, gave makespans about 100x below the other strategies' predictions on Cora, so it is not
used until calibrated.)
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from graphscale.advise.predict import (
    Prediction,
    activation_bytes,
    dims,
    element_size,
    node_data_bytes,
    num_params,
    state_bytes,
    synchronising_waits,
)
from graphscale.strategies.task_parallel.chain import build_segments, epoch_bytes, num_chunks, resolve_plan
from graphscale.strategies.task_parallel.chunks import layout
from graphscale.strategies.task_parallel.exchange import Exchange
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy
from graphscale.strategies.task_parallel.tasks import task_split


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
    from graphscale.advise.predict import layer_seconds, prediction_time

    compute = layer_seconds(machine, n / plan.workers, (e + n) / plan.workers, w, o, calls=max(sc.subgraphs, 1),
                            workers=sc.workers)
    collectives, waits = 1, [worker_receives(model, config, plan, rank) for rank in range(sc.workers)]
    seconds = prediction_time(machine, compute, sum(out.values()) / plan.workers,
                              synchronising_waits(collectives, waits))
    peak = (node_data_bytes(n, data.num_features, elem) // max(len(plan.t_ranks), 1)
            + activation_bytes(n / max(sc.subgraphs, 1), w, o, elem) + n * max(w + o) * elem
            + state_bytes(params, elem))
    return Prediction("task-parallel", sc.workers, {"t_workers": q, "subgraphs": sc.subgraphs}, int(peak),
                      [int(peak)] * sc.workers, out, seconds, exact=sc.dependency == "full",
                      semantics=("exact propagation (--dependency full)" if sc.dependency == "full" else
                                 f"subgraph propagation drops edges (--dependency {sc.dependency}); decoupled "
                                 "model by default"),
                      notes=["bytes: task_parallel.chain.epoch_bytes", "time: task_parallel.simulate makespan"],
                      collectives=collectives, waits=waits)

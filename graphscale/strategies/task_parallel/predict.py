"""The prediction of a ``task-parallel`` run (:mod:`graphscale.advise.predict`).

The plan is the run's (the parent's scheduling-model choice written with the shared data, or ``--t-workers``);
bytes are :func:`~.chain.epoch_bytes` (the closed form the tests hold the Ledger to); time is the whole graph's
layers priced on the profile (:func:`~graphscale.advise.predict.layer_seconds`) spread over the workers, plus the
chain's transfers. (The discrete-event simulator, :func:`~.simulate.simulate` with :func:`~.simulate.modelled_costs`
at the profile's rates, gave makespans about 100x below the other strategies' predictions on Cora, so it is not
used until calibrated.)
"""

from __future__ import annotations

import json

from graphscale.advise.predict import (
    Prediction,
    activation_bytes,
    dims,
    element_size,
    node_data_bytes,
    num_params,
    state_bytes,
)
from graphscale.strategies.task_parallel.chain import epoch_bytes, resolve_plan
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy


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
    seconds = prediction_time(machine, compute,
                              sum(out.values()) / plan.workers, 2 * sc.subgraphs * len(w) + 1)
    peak = (node_data_bytes(n, data.num_features, elem) // max(len(plan.t_ranks), 1)
            + activation_bytes(n / max(sc.subgraphs, 1), w, o, elem) + n * max(w + o) * elem
            + state_bytes(params, elem))
    return Prediction("task-parallel", sc.workers, {"t_workers": q, "subgraphs": sc.subgraphs}, int(peak),
                      [int(peak)] * sc.workers, out, seconds, exact=sc.dependency == "full",
                      semantics=("exact propagation (--dependency full)" if sc.dependency == "full" else
                                 f"subgraph propagation drops edges (--dependency {sc.dependency}); decoupled "
                                 "model by default"),
                      notes=["bytes: task_parallel.chain.epoch_bytes", "time: task_parallel.simulate makespan"],
                      collectives=1)

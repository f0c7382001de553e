"""The prediction of a ``pipeline`` run (:mod:`graphscale.cost.prediction`; the pure pipeline, ``--hybrid-width 1``).

Bytes of a training epoch that refreshes no history (epoch 0 adds ``pipe_init``, a refresh epoch its exact
forward): ``pipe_fwd = pipe_bwd`` half of :func:`~.plan.pipeline_bytes_per_epoch` over the stage boundaries of
:func:`~.plan.stage_layers`, and ``control``: each boundary's send times (``K`` float64 each way) and the loss
broadcast from the last stage (8 bytes to each other worker). Time: the slowest stage's layers over every vertex,
their input side over every chunk's sources (the chunk's rows and the neighbour rows its block gathers from other
chunks, :func:`~.plan.halo_rows`: with 8 chunks 1.38 and 1.31 times the vertices on the 200k-vertex SBM and R-MAT), plus the GPipe bubble (``(S - 1) / K`` of a stage's time) and the boundary transfers, priced with the loss
broadcast (the one collective) and the busiest stage's receives (:func:`stage_receives`).
"""

from __future__ import annotations

from graphscale.cost.dims import dims
from graphscale.cost.prediction import Prediction, synchronising_waits
from graphscale.cost.pricing import (
    activation_bytes,
    element_size,
    layer_seconds,
    node_data_bytes,
    num_params,
    prediction_time,
    state_bytes,
)
from graphscale.strategies.optimizers import moment_count
from graphscale.strategies.pipeline.plan import halo_rows, pipeline_bytes_per_epoch, stage_layers
from graphscale.strategies.pipeline.strategy import num_chunks, num_stages, read_chunks


def stage_receives(stage: int, stages: int, chunks: int) -> int:
    """Blocking receives of a worker of ``stage`` in a training epoch that refreshes no history: per chunk, its
    activations from the stage before (every stage but the first) and its gradient from the stage after (every
    stage but the last), plus one trade of send times with each neighbour stage (a hybrid group's ghost rows move
    in collectives, not receives)."""
    return (chunks + 1) * (int(stage > 0) + int(stage < stages - 1))


def predict(data, model, config, machine):
    sc = config.strategy
    if sc.hybrid_width != 1:
        raise ValueError("advise predicts the pure pipeline only (--hybrid-width 1)")
    stages, chunks, world = num_stages(config), num_chunks(config), sc.workers
    elem, params, d = element_size(model), num_params(model), dims(model, config, data)
    widths, outs = list(d.widths), list(d.out)
    n, e = data.num_nodes, int(data.summary["edges"])
    layers = stage_layers(model.num_layers, stages)
    halo = sum(chunk_halo_rows(data))  # rows the chunks' blocks gather from other chunks, per layer pass
    pipe = pipeline_bytes_per_epoch(n, [widths[r.start] for r in layers[1:]], elem, bool(d.needs_h0))
    out = {"pipe_fwd": pipe // 2, "pipe_bwd": pipe // 2,
           "control": 2 * (stages - 1) * 8 * chunks + 8 * (world - 1)}
    out = {k: v for k, v in out.items() if v}
    peaks, times = [], []
    for s, r in enumerate(layers):
        w, o = widths[r.start:r.stop], outs[r.start:r.stop]
        # every stage keeps the historical rows of its layers' inputs for all N vertices, plus one chunk's autograd
        keep = n * sum(w) * elem + activation_bytes(n, w, o, elem)
        data_rows = node_data_bytes(n, data.num_features, elem) if s == 0 else 0
        peaks.append(keep + data_rows + 8 * (n + 1 + e) + state_bytes(params, elem, moment_count(config.optim)))
        times.append(layer_seconds(machine, n, e + n, w, o, calls=chunks, workers=world, input_grad=s > 0,
                                   sources=n + halo))
    compute = max(times) * (1 + (stages - 1) / chunks)
    # the sends are asynchronous: a worker waits on its receives and on the loss broadcast, the one collective
    collectives, waits = 1, [stage_receives(rank // sc.hybrid_width, stages, chunks) for rank in range(world)]
    seconds = prediction_time(machine, compute, sum(out.values()) / max(stages - 1, 1),
                              synchronising_waits(collectives, waits))
    return Prediction("pipeline", world, {"chunks": chunks}, max(peaks), peaks, out, seconds, exact=False,
                      semantics=f"stale cross-chunk rows (GNNPipe historical embeddings, refreshed every "
                                f"{sc.history_period} epochs)",
                      notes=["bytes: pipeline_bytes_per_epoch over the stage boundaries (+ send times, loss)"],
                      collectives=collectives, waits=waits)


def chunk_halo_rows(data) -> list[int]:
    """:func:`~.plan.halo_rows` of the run's chunks (the parent's, in the strategy's shared folder)."""
    chunk_of, _ = read_chunks(data.require_shared("pipeline"))
    return halo_rows(data.open_graph(), chunk_of)

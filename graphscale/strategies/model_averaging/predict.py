"""The prediction of a ``model-averaging`` run (:mod:`graphscale.cost.prediction`) from its store's per-part counts.

Bytes of an averaging epoch (``(epoch + 1) % --average-every == 0``; other epochs move only ``control``): the ring
all-reduce (:func:`~graphscale.strategies.graph_parallel.allreduce_bytes_per_epoch`) of the floating state
(:func:`.averaging.float_tensors`; with ``--optimizer-state averaged``, the default, the optimiser's moments too) and
of the loss sum (``control``). Partition ``j`` trains on worker ``j mod q``, one after another: a worker's time is
the sum of its parts'; its memory the largest part's. A part's step runs the model on its whole local graph (one
block over every local vertex: :meth:`.strategy.ModelAveraging._open`), so its layers are priced over the local
rows (home and halo vertices, :func:`trained_rows`) and the local graph's edges, not over the home rows alone; the
workers do not wait for each other until the epoch's all-reduces, so their side-by-side compute is priced with the
profile's ``corun_free``, not the lock-step ``corun_slowdown`` (:func:`~graphscale.cost.pricing.worker_scale`). ``--correction-steps`` is not modelled (its bytes depend on the samples).
"""

from __future__ import annotations

from graphscale.cost.dims import dims
from graphscale.cost.link import head_bytes, head_seconds
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
from graphscale.strategies.model_averaging.averaging import float_tensors
from graphscale.strategies.model_averaging.strategy import optimizer_state
from graphscale.strategies.optimizers import moment_count
from graphscale.tasks.link import embedding_width


def predict(data, model, config, machine):
    from graphscale.partition.store import read_store_meta
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch

    sc, world = config.strategy, config.strategy.workers
    if sc.correction_steps:
        raise ValueError("advise does not predict --correction-steps (its bytes depend on the samples)")
    parts = read_store_meta(data.path)["parts"]
    elem, params, d = element_size(model), num_params(model), dims(model, config, data)
    moments = optimizer_state(sc) == "averaged"  # the optimiser's moments averaged too (the default)
    averaged = sum(t.numel() for t in float_tensors(model)) + (moment_count(config.optim) * params if moments else 0)
    out = {k: v for k, v in {"allreduce": allreduce_bytes_per_epoch(averaged, world, elem),
                             "control": allreduce_bytes_per_epoch(1, world, 8)}.items() if v}
    w, o = list(d.widths), list(d.out)
    pairs = link_pairs(data, len(parts), config) if config.task == "link" else None
    peaks, times = [0] * world, [0.0] * world
    for j, p in enumerate(parts):
        local, edges = trained_rows(p), int(p["num_edges"])
        need = (node_data_bytes(local, data.num_features, elem) + 8 * (local + 1 + edges)
                + activation_bytes(local, w, o, elem) + state_bytes(params, elem, moment_count(config.optim)))
        head = 0.0
        if pairs is not None:  # partition j scores its own training pairs and their negatives
            width = embedding_width(model, config)
            need += head_bytes(pairs[j], width, elem, config.decoder)
            head = head_seconds(machine, pairs[j], width, config.decoder, world)
        peaks[j % world] = max(peaks[j % world], need)
        times[j % world] += (layer_seconds(machine, local, edges, w, o, workers=world, independent=True) + head
                             + machine.step_s)
    seconds = prediction_time(machine, max(times), sum(out.values()) / world, 2, 0)
    return Prediction("model-averaging", world, {"parts": len(parts), "average_every": sc.average_every},
                      max(peaks), peaks, out, seconds, exact=False,
                      semantics="each partition trains on its own subgraph (edges between partitions dropped), "
                                f"models averaged every {sc.average_every} epoch(s) (SDT-GNN)",
                      notes=[("bytes: allreduce_bytes_per_epoch of the floating state and the loss, on averaging "
                             "epochs")], collectives=2)


def link_pairs(data, parts: int, config) -> list[int]:
    """``--task link``: the pairs each partition scores in a training epoch, ``2 P_j`` (its training pairs, those
    whose destination is one of its home vertices, and one negative each: :mod:`.link`), from the split beside
    the store."""
    import torch

    from graphscale.tasks.link_store import link_folder, read_link_split, store_owner

    split = read_link_split(link_folder(data.path))
    home = store_owner(data.path)[split.pairs[1, split.ids("train")]]
    return [2 * int(n) for n in torch.bincount(home, minlength=parts)]


def trained_rows(part: dict) -> int:
    """Destination rows of a part's training step (full-neighbour): every local vertex, home and halo, as the
    strategy's block over the partition's local graph has (``meta.json``'s ``num_inner + num_halo``)."""
    return int(part["num_inner"]) + int(part["num_halo"])

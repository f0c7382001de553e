"""The prediction of an ``offload`` run (:mod:`graphscale.cost.prediction`).

The layout is the run's: the parent's chunk sets and worker plans (``prepare_shared``), memory-mapped as the
strategy's setup maps them, one worker's plan at a time, with the per-layer modes :func:`~.cost.layer_modes` picks
(the strategy's default bandwidths, as the run's); memory is :func:`~.memory.modelled_peaks` (the ``--memory-budget`` model); time prices the chunk passes' rows and
edges on the machine profile plus the transfers at the profile's host-device bandwidth (CUDA) or, on CPU, its
``host_transfer_bandwidth``: the host arrays' row gathers and scatters through the strategy's own transfer pipeline,
measured at about 3 GB/s on a 2-core host against 25 GB/s for a plain copy (the memory bandwidth the model used
before), scaled like the workers' other CPU work (:func:`~graphscale.cost.pricing.worker_scale`).

``host_memory`` is the host arrays (:func:`~.host.host_array_specs`: ``H^0..H^L``, ``G^1..G^L``, ...; on CPU the
input array is the graph's own mapped features, :func:`~.host.shares_input`, and not counted): shared-memory
files every worker maps and, gathering its batches' rows and zeroing and writing its own, touches whole, so the
OS counts all of them in every worker's resident set (``RssShmem``: 85.5 MiB of a worker's 989 MiB peak on the
200k-vertex SBM, exactly the arrays' bytes), while the device-side ``memory`` leaves them out.
"""

from __future__ import annotations

import torch

from graphscale.cost.dims import dims as model_dims
from graphscale.cost.prediction import Prediction
from graphscale.cost.pricing import element_size, layer_seconds, num_params, state_bytes, worker_scale
from graphscale.strategies.offload.cost import (
    H2D_DST,
    Bandwidths,
    epoch_bytes,
    layer_modes,
    layer_pass_rows,
    modelled_seconds,
)
from graphscale.strategies.offload.host import host_array_bytes, host_array_specs, input_array, shares_input
from graphscale.strategies.offload.memory import fit_phases, modelled_peaks
from graphscale.strategies.offload.plan import ChunkSets, WorkerPlan, check_dedup, plan_folder
from graphscale.strategies.optimizers import moment_count


def predict(data, model, config, machine):
    from graphscale.strategies.link_scoring import predict_head

    sc, world = config.strategy, config.strategy.workers
    graph = data.open_graph()
    elem, params = element_size(model), num_params(model)
    dims = model_dims(model, config, data)
    dedup = check_dedup(sc.dedup)
    shared = data.require_shared("offload")  # the run's layout and plans, written by the parent
    sets = ChunkSets.load(shared)
    modes = layer_modes(sc.recompute, dims, layer_pass_rows(sets, dedup), graph.num_nodes, elem, Bandwidths())
    out = {k: v for k, v in epoch_bytes(sets, dedup, modes, dims, elem, params).items() if v}
    fits = fit_phases(model, dims, modes)
    peaks, batches = [], 0
    for rank in range(world):  # each worker's plan mapped, one at a time
        plan = WorkerPlan.load(plan_folder(shared, rank))
        peaks.append(int(modelled_peaks([plan], dims, modes, elem, params, fits, moment_count(config.optim))[0]))
        batches = max(batches, len(plan.batches))
    head = predict_head(data, model, config, world, sets.owner) if config.task == "link" else None
    if head is not None:  # the scoring after the chunks (offload/link.py): its exchange, memory and time
        owned = torch.bincount(sets.owner, minlength=world).tolist()
        out = {**out, **head["bytes"], H2D_DST: graph.num_nodes * dims.out[-1] * elem}  # own H^L rows read back
        state = state_bytes(params, elem, moment_count(config.optim))
        peaks = [max(p, state + 2 * n * dims.out[-1] * elem + m)  # a phase of its own: rows, embeddings, scoring
                 for p, n, m in zip(peaks, owned, head["memory"])]
    if machine.h2d_bandwidth:
        link = machine.h2d_bandwidth
    else:  # CPU: the host traffic is the worker's own gathers and scatters
        link = (machine.host_transfer_bandwidth or machine.memory_bandwidth) / worker_scale(machine, world)
    bw = Bandwidths(host=link, peer=machine.collective_bandwidth, reuse=machine.memory_bandwidth)
    n, e = graph.num_nodes, graph.num_edges
    recomputes = sum(1 for m in modes if m == "recompute")
    compute = layer_seconds(machine, n / world, (e + n) / world, list(dims.widths), list(dims.out),
                            calls=sets.num_chunks, workers=world)
    compute *= 1 + recomputes / (3 * max(len(modes), 1))
    # link: the scoring exchange and the barrier after every worker's G^L rows are written (offload/link.py)
    collectives = (offload_collectives(batches, dims, dedup, world)
                   + (head["collectives"] + 1 if head and world > 1 else 0))
    if head is not None:
        compute += (max(head["seconds"](machine, r) for r in range(world))
                    + sum(head["bytes"].values()) / world / machine.collective_bandwidth)
    seconds = (compute + modelled_seconds(out, bw) / world + machine.step_s
               + collectives * (machine.sync_s or machine.collective_latency_s))
    specs = host_array_specs(n, dims, modes)
    if shares_input(graph.x, getattr(torch, config.dtype), "cuda" if machine.h2d_bandwidth else "cpu"):
        specs.pop(input_array(dims))  # the graph's own mapped features: the page cache's, not the arrays'
    host = host_array_bytes(specs, elem)
    return Prediction("offload", world, {"chunks": sets.num_chunks, "dedup": dedup}, max(peaks), peaks, out,
                      seconds, notes=[f"bytes: offload.cost.epoch_bytes with modes {modes}",
                                      "memory: offload.memory.modelled_peaks (device side), host arrays apart"],
                      collectives=collectives, host_memory=host, bytes_epoch=head["epoch"] if head else None)


def offload_collectives(batches: int, dims, dedup: str, world: int) -> int:
    """Synchronising collectives of one worker's training epoch (:class:`~.passes.OffloadPasses`): per layer
    forward, a row exchange per batch and the closing barrier; per layer backward, a row exchange per batch, the
    gradient push per batch where the layer's sources need gradients (with ``--dedup baseline`` a barrier per
    rank instead) and the closing barrier; the learned input's passes likewise; the gradient and loss
    all-reduces. ``batches``: the most batches a worker runs."""
    if world < 2:
        return 0
    layers = range(len(dims.widths))
    push = world if dedup == "baseline" else 1
    forward = len(layers) * (batches + 1)
    backward = sum(batches * (1 + (push if dims.needs_src_grad(layer) else 0)) + 1 for layer in layers)
    learned = 2 * (batches + 1) if dims.learned_input else 0
    return forward + backward + learned + 2


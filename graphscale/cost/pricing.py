"""The pricing primitives every strategy's ``predict`` (:data:`graphscale.registry.PREDICTORS`) builds its
:class:`~graphscale.cost.prediction.Prediction` from, over the figures of a
:class:`~graphscale.cost.machine.Machine` profile: :func:`layer_seconds` prices one worker's rows, edges and widths
through the layers, :func:`block_seconds` a mini-batch's blocks, :func:`host_seconds` host-side work per event,
:func:`transfer_seconds` the bytes and synchronising messages between workers, :func:`lockstep_seconds` workers
that step together, :func:`worker_scale` the threads and co-running workers; :func:`activation_bytes` /
:func:`state_bytes` / :func:`node_data_bytes` a worker's memory.
"""

from __future__ import annotations


def element_size(model) -> int:
    return next(model.parameters()).element_size()


def num_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def prediction_time(machine, compute: float, nbytes: float, messages: int, steps: int = 1) -> float:
    """An epoch's time: the slowest worker's compute, its transfers and ``steps`` optimiser steps (each the
    profile's fixed ``step_s``)."""
    return compute + transfer_seconds(machine, nbytes, messages) + steps * machine.step_s


def layer_seconds(machine, rows: float, edges: float, widths: list[int], outs: list[int],
                  backward: bool = True, calls: float = 1, workers: int = 1, input_grad: bool = False,
                  sources: float | None = None, independent: bool = False) -> float:
    """One worker's compute time for ``rows`` destination rows over ``edges`` edges through every layer, in
    ``calls`` passes (chunks, mini-batches), when ``workers`` workers share the host's cores: a dense product
    ``2 rows d o`` FLOPs at the GEMM rate, the sparse product at the SpMM cost per edge and per edge-column, in the
    order :func:`graphscale.nn.order.cheaper_to_transform_first` picks (what the GCN and SAGE layers run; the other
    layers, whose order is fixed, are priced with the same choice): the dense product over the sources and the
    sparse one at the output width when it transforms first, and the
    elementwise passes (keyed dropout, activation, allocations) at the profile's measured cost per element of the
    layer's input and output rows. Backward costs twice the forward's products, except in the first layer, whose input needs no
    gradient (its weight gradient only: one product more, no elementwise pass over the input; ``input_grad``: it
    does, as a later pipeline stage's).
    The elementwise cost is calibrated against this formula (:func:`graphscale.advise.profile.measure`).
    Every pass of every layer adds the profile's fixed ``layer_call_s`` (a third of it forward only).
    ``sources``: the rows entering each layer where they outnumber the destination rows (a chunked block's
    sources: its destinations and the neighbour rows it gathers from other chunks, summed over the calls;
    ``None``: ``rows``): the input side's elementwise passes run over them, and so does the dense product of a
    layer that transforms first.
    The data-proportional part is scaled by :func:`worker_scale` (``independent``: workers that do not
    synchronise inside the work priced)."""
    from graphscale.nn.order import cheaper_to_transform_first

    scale = worker_scale(machine, workers, independent)
    src = rows if sources is None else sources
    total = 0.0
    for i, (d, o) in enumerate(zip(widths, outs)):
        first = i == 0 and not input_grad
        transform = cheaper_to_transform_first(int(edges), int(src), int(rows), d, o, backward and not first,
                                               backward, machine.device)
        dense = (src if transform else rows) * d * o
        products = (2.0 * dense / machine.gemm_flops
                    + edges * (machine.spmm_edge_s + machine.spmm_edge_col_s * (o if transform else d)))
        into, out_of = src * d * machine.elementwise_s, rows * o * machine.elementwise_s
        if backward:
            total += products * (2.0 if first else 3.0) + into * (1.0 if first else 3.0) + 3.0 * out_of
        else:
            total += products + into + out_of
    fixed = calls * len(widths) * machine.layer_call_s / (1.0 if backward else 3.0)
    return scale * total + fixed * machine.load_factor


def block_seconds(machine, layers, widths: list[int], outs: list[int], workers: int = 1) -> float:
    """One worker's forward and backward over a mini-batch's blocks, each layer priced over its own block:
    ``layers`` holds each layer's ``(destination rows, source rows, edges)`` (:func:`layer_seconds` per layer, every
    layer but the first with its input's gradient)."""
    return sum(layer_seconds(machine, dst, edges, [d], [o], input_grad=i > 0, sources=src, workers=workers)
               for i, ((dst, src, edges), d, o) in enumerate(zip(layers, widths, outs)))


def lockstep_seconds(steps, step_seconds) -> float:
    """An epoch of workers that step in lock-step (a collective per step): the sum over ``steps`` of the slowest
    worker's ``step_seconds(*work)``, ``steps`` holding each worker's work of the step (``None``: none)."""
    return sum(max((step_seconds(*work) for work in step if work is not None), default=0.0) for step in steps)


def host_seconds(machine, call_s: float, edge_s: float, calls: float, edges: float, workers: int = 1) -> float:
    """One worker's time for ``calls`` repetitions of a host-side step over ``edges`` edges in all, at the profile's
    cost per call ``call_s`` and per edge ``edge_s`` (the profile's host costs, :mod:`graphscale.advise.host_costs`: a task-parallel P block,
    a sampled mini-batch), scaled by :func:`worker_scale` like the layers' data-proportional work."""
    return (calls * call_s + edges * edge_s) * worker_scale(machine, workers)


def worker_threads(machine, workers: int) -> int:
    """Torch threads of one of ``workers`` workers on the host (what the launcher gives: ``cores // workers``)."""
    return max(1, machine.cores // max(workers, 1))


def worker_scale(machine, workers: int, independent: bool = False) -> float:
    """Time of a worker's data-proportional work relative to the profile's rates (measured with ``threads``
    threads, one worker alone): ``threads`` over the worker's threads' speed, the speed of ``t`` threads
    interpolated linearly between 1 (one thread) and the measured ``thread_speedup`` (all ``cores``); times
    ``corun_slowdown`` when other workers compute beside it in lock-step (collectives or receives inside the work:
    the figure holds the partner's lag), ``corun_free`` when they compute side by side without waiting for each
    other (``independent``: model-averaging's workers, each training its own partition for a whole epoch), and
    ``load_factor`` (a typical step against the quiet one the rates are)."""
    t, cores = worker_threads(machine, workers), max(machine.cores, 1)
    speed = 1.0 if cores == 1 else 1.0 + (machine.thread_speedup - 1.0) * (t - 1) / (cores - 1)
    corun = 1.0 if workers < 2 else machine.corun_free if independent else machine.corun_slowdown
    return machine.threads / speed * corun * machine.load_factor


def transfer_seconds(machine, nbytes: float, messages: int) -> float:
    """Time of moving ``nbytes`` between workers in ``messages`` synchronising collectives / messages: each costs
    the profile's ``sync_s`` (latency, the partner's lag, the wake-up; ``collective_latency_s`` on a profile
    without it), the bytes the collective bandwidth."""
    return messages * (machine.sync_s or machine.collective_latency_s) + nbytes / machine.collective_bandwidth


def activation_bytes(rows: float, widths: list[int], outs: list[int], elem: int) -> int:
    """Autograd-saved and live activation bytes of a full forward over ``rows`` rows: each layer keeps its input
    and output (and the dropout mask's bits)."""
    return int(sum(rows * (d + o) * elem + rows * d / 8 for d, o in zip(widths, outs)))


def state_bytes(params: int, elem: int, moments: int = 2) -> int:
    """Parameters, their gradients and the optimiser's ``moments`` tensors per parameter (Adam's two, SGD's momentum
    buffer: :func:`graphscale.strategies.optimizers.moment_count`)."""
    return (2 + moments) * params * elem


def node_data_bytes(rows: float, features: int, elem: int) -> int:
    """Feature rows plus labels (int64) and three split masks."""
    return int(rows * (features * elem + 8 + 3))

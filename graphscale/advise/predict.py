"""The prediction interface every strategy implements next to its code, and the pieces they share.

``predict(data, model, config, machine) -> Prediction`` (one function per strategy, listed in :data:`PREDICTORS`):

* ``data`` is the :class:`~graphscale.data.handle.DataHandle` the run's workers would get
  (:func:`graphscale.prepare.prepare_data`): the graph's counts, a store's per-part halo counts, a host-shared graph
  directory's memory-mapped structure and the strategy's shared plan (offload's chunk sets, pipeline's and
  task-parallel's chunks). The features are never read.
* ``model`` is the run's model (built as :func:`graphscale.run.train_worker` builds it: widths, parameter counts).
* ``bytes`` per epoch by Ledger category, summed over workers, come from the closed forms the strategies' tests
  hold the Ledger to (``halo_bytes_per_epoch``, offload's ``epoch_bytes``, ``pipeline_bytes_per_epoch``,
  task-parallel's ``epoch_bytes``, ...); nothing here restates them.
* ``seconds`` per epoch and ``memory`` (the largest worker's tracked peak) are models over the
  :class:`~graphscale.advise.profile.Machine` profile: :func:`layer_seconds` prices one worker's rows, edges and
  widths; :func:`activation_bytes` / :func:`state_bytes` its memory.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field

#: strategy name -> "module:function" of its predictor (next to the strategy's code)
PREDICTORS = {
    "single": "graphscale.strategies.single:predict",
    "graph-parallel": "graphscale.strategies.graph_parallel:predict",
    "data-parallel": "graphscale.strategies.data_parallel:predict",
    "split-parallel": "graphscale.strategies.split_parallel.predict:predict",
    "offload": "graphscale.strategies.offload.predict:predict",
    "pipeline": "graphscale.strategies.pipeline.predict:predict",
    "task-parallel": "graphscale.strategies.task_parallel.predict:predict",
    "model-averaging": "graphscale.strategies.model_averaging.predict:predict",
}

@dataclass
class Prediction:
    """What one configuration is predicted to cost.

    Attributes:
        strategy: the strategy's name.
        workers: workers it runs on.
        options: the key options of the configuration (``--chunks``, ``--t-workers``, ...), as ``train`` flags.
        memory: the largest worker's peak memory in bytes (tracked figure: resident data, parameters, optimiser
            state, autograd's saved tensors).
        os_memory: ``memory`` (on CPU; on CUDA the GPU holds it) plus ``host_memory`` plus the profile's
            per-worker process baseline (``process_rss``): the predicted peak resident set the OS measures (set by
            :func:`graphscale.advise.configs.predict_config`; plus the calibration's figure of what the model
            leaves out, for a multi-worker strategy where the profile has one: :attr:`modelled_os_memory` keeps the
            model's).
        host_memory: bytes besides ``memory`` that the largest worker holds resident in host memory and the OS
            counts in its resident set (offload: the host arrays, shared-memory files every worker maps and touches
            whole: ``RssShmem``); one copy per host: a CUDA budget does not hold it, a CPU budget holds each
            worker's share (:meth:`need`).
        bytes_epoch: the epoch whose bytes ``bytes`` are, where they vary with the epoch (the sampled
            strategies); ``None``: every epoch after the first.
        memory_per_worker: every worker's peak.
        bytes: bytes moved per training epoch by Ledger category, summed over workers (closed forms).
        seconds: predicted epoch time: :attr:`modelled_seconds` on the profile's calibration line of the strategy
            (:mod:`graphscale.advise.calibrate`) where it has one.
        modelled_seconds: the strategy's model's epoch time (set by
            :func:`graphscale.advise.configs.predict_config`).
        modelled_os_memory: the model's ``os_memory``, to which the profile's calibration of a multi-worker
            strategy adds what it measured the model to leave out at :attr:`graph_bytes`.
        graph_bytes: the graph's feature rows and CSR structure in bytes
            (:func:`graphscale.advise.configs.graph_bytes`).
        exact: whether it reproduces ``single`` (full-graph) training.
        semantics: one sentence: exact, or the approximation.
        fits: whether :meth:`need` fits the device-memory budget (set by :func:`check_fit`).
        reason: why it does not fit (empty when it does).
        notes: how the figures were obtained (which closed forms, which model).
        collectives: synchronising collectives (``Comm`` collectives and barriers) one worker issues in a training
            epoch, counted from the strategy's plan.
        waits: blocking point-to-point receives (``Comm.recv``, counted in ``DistEnv.receives``) of each worker in
            a training epoch, by rank, counted from the strategy's plan (empty: none).
        events: host-side work ``seconds`` prices per event, counted from the strategy's plan for the busiest
            worker of a training epoch (task-parallel: ``blocks`` built and their ``block_edges``; split-parallel:
            ``samples`` and ``sampled_edges``); the tests hold them to a run's.

    ``seconds`` prices :attr:`messages` (``collectives`` plus the most ``waits`` of a worker), each at the
    profile's ``sync_s``; the tests hold both counts to a real run's.
    """

    strategy: str
    workers: int
    options: dict = field(default_factory=dict)
    memory: int = 0
    memory_per_worker: list[int] = field(default_factory=list)
    bytes: dict = field(default_factory=dict)
    seconds: float = 0.0
    exact: bool = True
    semantics: str = "exact (reproduces single-process full-graph training)"
    fits: bool = True
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    os_memory: int = 0
    bytes_epoch: int | None = None
    collectives: int = 0
    waits: list[int] = field(default_factory=list)
    events: dict = field(default_factory=dict)
    host_memory: int = 0
    modelled_seconds: float = 0.0
    modelled_os_memory: int = 0
    graph_bytes: int = 0

    @property
    def messages(self) -> int:
        """The synchronising waits :attr:`seconds` prices: :func:`synchronising_waits` of the two counts."""
        return synchronising_waits(self.collectives, self.waits)

    @property
    def moved(self) -> int:
        """Bytes per epoch that cross a link (the Ledger's ``moved_bytes``: ``reuse`` left out)."""
        from graphscale.metrics.ledger import moved_bytes

        return moved_bytes(self.bytes)

    def need(self, device: str = "cpu") -> int:
        """Bytes per worker the budget must hold: :attr:`memory`, and on CPU, where the budget is host memory, each
        worker's share of :attr:`host_memory` (one copy per host, which its workers map) and what the profile's
        calibration measured the resident-set model to leave out (``os_memory - modelled_os_memory``, where
        positive)."""
        if device == "cuda":
            return self.memory
        left_out = max(self.os_memory - self.modelled_os_memory, 0) if self.modelled_os_memory else 0
        return self.memory + -(-self.host_memory // max(self.workers, 1)) + left_out

    def check_fit(self, budget: int | None, device: str = "cpu") -> Prediction:
        """Set :attr:`fits` / :attr:`reason` against a per-worker budget in bytes (``None``: no budget) of
        ``device``'s memory (:meth:`need`)."""
        need = self.need(device)
        if budget is not None and need > budget:
            from graphscale.metrics.units import format_bytes

            self.fits = False
            self.reason = f"needs {format_bytes(need)} per worker, more than the {format_bytes(budget)} budget"
        return self

    def to_dict(self) -> dict:
        out = asdict(self)
        out["moved_bytes"] = self.moved
        return out


def synchronising_waits(collectives: int, waits: list[int]) -> int:
    """The waits one epoch's time prices: every worker's ``collectives`` plus the receives of the worker with the
    most (``waits`` by rank)."""
    return collectives + max(waits, default=0)


def predictor(name: str):
    """The ``predict`` function of strategy ``name``."""
    if name not in PREDICTORS:
        raise ValueError(f"no prediction for strategy {name!r}; strategies with one: {', '.join(PREDICTORS)}")
    module, func = PREDICTORS[name].split(":")
    return getattr(importlib.import_module(module), func)


def element_size(model) -> int:
    return next(model.parameters()).element_size()


def num_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def dims(model, config, data):
    """The model's per-layer widths (offload's shape probe :func:`~graphscale.strategies.offload.cost.probe_dims`):
    ``widths`` ``d_l`` entering each step, ``out`` ``o_l`` leaving it."""
    from graphscale.data.features import input_width
    from graphscale.strategies.offload.cost import probe_dims

    return probe_dims(model, input_width(config.data.features, data.num_features), next(model.parameters()).dtype)


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
    cost per call ``call_s`` and per edge ``edge_s`` (:mod:`graphscale.advise.host_costs`: a task-parallel P block,
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


def state_bytes(params: int, elem: int) -> int:
    """Parameters, their gradients and Adam's two moments."""
    return 4 * params * elem


def node_data_bytes(rows: float, features: int, elem: int) -> int:
    """Feature rows plus labels (int64) and three split masks."""
    return int(rows * (features * elem + 8 + 3))

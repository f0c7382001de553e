r"""Modelled peak device memory of the offload strategy, and the choice of ``K`` from a memory budget.

The spec's rule (§3.1): pick the smallest ``K`` whose per-worker peak fits the
budget, with peak ≈ buffers + the current chunk's vertex data, topology and
intermediates + parameters and optimiser state. This module evaluates that
rule with the strategy's own accounting (:class:`~graphscale.metrics.memory.MemoryTracker`:
tracked device tensors plus autograd's saved tensors), per worker ``i``,
layer ``l`` and batch ``j`` (``b`` bytes per element, ``B_i`` merged-buffer
rows, ``D, N, E`` the chunk's destinations, sources and edges)::

    resident   = 4 P b                                  (parameters, Adam's two moments, the gradient buffer)
    chunk      = 8 (D + 1 + E + 2N) + 8 (N + R + S + F)  (topology and plan indices)
    forward    = resident + B_i d_l b + chunk + (N d_l + D a_l + D o_l [+ D d_0]) b
    recompute  = resident + 2 B_i d_l b + chunk + (N d_l + D o_l + D a_l + D o_l [+ D d_0] + N d_l) b + W_l(N, D, E)
    hybrid     = resident + B_i d_l b + chunk + (D o_l + D a_l + D d_l + D o_l [+ D d_0] + 2 N d_l) b
                 + U_l(N, D, E)
    none       = resident + B_i d_l b + Σ_{layers, chunks kept} (N d + D o + topology) + W_l per kept chunk

``W_l`` (saved tensors of ``aggregate`` + ``update`` with autograd) and
``U_l`` (of ``update`` and the aggregate's vector-Jacobian product) are linear
in ``(1, N, D, E)`` for every built-in layer (dropout keeps ids, the sparse
products keep scales, GAT keeps per-edge scores); their coefficients are
fitted by least squares on probe blocks of a few shapes, measured with the
same tracker. Terms are counted separately even where one storage serves two
of them, so the model errs high (a budget it accepts is met).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig
from graphscale.cost.dims import ModelDims
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.metrics.memory import MemoryTracker
from graphscale.strategies.offload.cost import Bandwidths, layer_modes, layer_pass_rows
from graphscale.strategies.offload.layout import write_layout
from graphscale.strategies.offload.plan import ChunkSets, WorkerPlan, build_worker_plan, plan_folder
from graphscale.strategies.optimizers import moment_count

#: Probe block shapes (destinations, sources, edges) for the working-set fits.
PROBES = ((6, 10, 20), (12, 14, 24), (6, 24, 30), (6, 10, 60), (16, 40, 90), (30, 60, 200))
#: Phases whose working set is fitted (see :func:`probe_phase`).
PHASES = ("forward", "kept", "recompute", "hybrid", "none", "input")


@dataclass(frozen=True)
class Linear:
    """``const + per_src N + per_dst D + per_edge E`` bytes (least-squares fit, shifted to bound the probes)."""

    const: float
    per_src: float
    per_dst: float
    per_edge: float

    def __call__(self, n: int, d: int, e: int) -> float:
        return max(0.0, self.const + self.per_src * n + self.per_dst * d + self.per_edge * e)


def _probe_block(num_dst: int, num_src: int, num_edges: int, seed: int) -> Block:
    gen = torch.Generator().manual_seed(seed)
    dst = torch.sort(torch.randint(0, num_dst, (num_edges,), generator=gen)).values
    indices = torch.randint(0, num_src, (num_edges,), generator=gen)
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=indptr[1:])
    ids = torch.arange(num_src) * 7 + 3
    return Block(indptr, indices, ids, torch.randint(1, 5, (num_src,), generator=gen))


def probe_phase(model: torch.nn.Module, dims: ModelDims, layer: int, phase: str, block: Block,
                seed: int) -> int:
    """Peak bytes of one chunk's working set in ``phase``, replaying the strategy's own sequence.

    The tensors the strategy tracks per chunk (its sources, aggregate, output,
    loaded gradient and cache rows, source gradients) plus autograd's saved
    tensors, measured with a :class:`MemoryTracker` over the parameters as base.
    Phases: ``forward`` (no autograd; the last layer adds the fused loss),
    ``kept`` (``--recompute none``: what one chunk keeps until its backward),
    ``recompute`` / ``hybrid`` / ``none`` (backward), ``input`` (learned input map, backward).
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    gen = torch.Generator().manual_seed(seed)
    n, d = block.num_src, block.num_dst
    width, agg_w, out_w = dims.widths[layer], dims.agg[layer], dims.out[layer]
    need = dims.needs_src_grad(layer)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device)

    block = block.to(device)
    ids = block.src_ids[:d]
    tracker = MemoryTracker(device)
    tracker.track_module("model", model)
    base = tracker.current
    tracker.reset_peak()
    h0 = rand(d, dims.widths[0]) if dims.needs_h0 else None
    with tracker.saved_tensors():
        if phase == "input":
            x, grad = rand(d, dims.in_dim), rand(d, dims.widths[0])
            with torch.enable_grad():
                h = model.input_map(x, ids)
            tracker.track("chunk", x, grad, h)
            torch.autograd.backward(h, grad)
        elif phase in ("forward", "kept", "none"):
            xn = rand(n, width).requires_grad_(phase != "forward" and need)
            if h0 is not None:
                h0.requires_grad_(phase != "forward" and dims.learned_input)
            with torch.set_grad_enabled(phase != "forward"):
                agg = model.aggregate(layer, block, xn)
                out = model.update(layer, agg, xn[:d], ids, h0)
            tracker.track("chunk", xn, h0, agg, out)
            if phase == "forward" and layer == dims.num_layers - 1:
                leaf = out.detach().requires_grad_(True)
                with torch.enable_grad():
                    logits = model.output_map(leaf, ids)
                    loss = torch.nn.functional.cross_entropy(logits, torch.zeros(d, dtype=torch.int64,
                                                                                  device=device), reduction="sum")
                loss.backward()
            if phase == "none":
                gout = rand(d, out_w)
                tracker.track("chunk", gout)
                torch.autograd.backward(out, gout)
                if need:
                    tracker.track("chunk_grad", xn.grad)
            elif phase == "kept":
                tracker.untrack("chunk")
                tracker.track("kept", out, xn, h0)
                return tracker.current - base
        elif phase == "recompute":
            gout = rand(d, out_w)
            xn = rand(n, width).requires_grad_(need)
            if h0 is not None:
                h0.requires_grad_(dims.learned_input)
            with torch.enable_grad():
                agg = model.aggregate(layer, block, xn)
                out = model.update(layer, agg, xn[:d], ids, h0)
            tracker.track("chunk", gout, xn, h0, agg, out)
            torch.autograd.backward(out, gout)
            if need:
                tracker.track("chunk_grad", xn.grad)
        elif phase == "hybrid":
            gout = rand(d, out_w)
            agg = rand(d, agg_w).requires_grad_(True)
            h_dst = rand(d, width).requires_grad_(need) if dims.uses_dst[layer] else torch.zeros(d, width, dtype=dtype,
                                                                                               device=device)
            if h0 is not None:
                h0.requires_grad_(dims.learned_input)
            with torch.enable_grad():
                out = model.update(layer, agg, h_dst, ids, h0)
            tracker.track("chunk", gout, agg, h_dst, h0, out)
            torch.autograd.backward(out, gout)
            if need:
                zero = torch.zeros(n, width, dtype=dtype, device=device, requires_grad=True)
                with torch.enable_grad():
                    (g_src,) = torch.autograd.grad(model.aggregate(layer, block, zero), zero, agg.grad)
                tracker.track("chunk_grad", g_src)
        else:
            raise ValueError(f"probe_phase: unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    return tracker.modelled_peak - base


def fit_phase(model: torch.nn.Module, dims: ModelDims, layer: int, phase: str) -> Linear:
    """Fit :func:`probe_phase` over :data:`PROBES` with ``const + a N + b D + c E``."""
    rows, sizes = [], []
    training = model.training
    model.train()
    try:
        for k, (d, n, e) in enumerate(PROBES):
            rows.append([1.0, n, d, e])
            sizes.append(float(probe_phase(model, dims, layer, phase, _probe_block(d, n, e, seed=k), seed=k)))
    finally:
        model.train(training)
    a, y = np.asarray(rows), np.asarray(sizes)
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    slack = max(float(np.max(y - a @ coef)), 0.0)  # an upper bound on every probe
    return Linear(float(coef[0]) + slack, *(float(c) for c in coef[1:]))


def fit_phases(model: torch.nn.Module, dims: ModelDims, modes: list[str]) -> dict[tuple[int, str], Linear]:
    """The fits :func:`modelled_peaks` needs for these layer modes."""
    fits = {}
    for layer, mode in enumerate(modes):
        fits[layer, "forward"] = fit_phase(model, dims, layer, "forward")
        fits[layer, mode] = fit_phase(model, dims, layer, mode)
        if mode == "none":
            fits[layer, "kept"] = fit_phase(model, dims, layer, "kept")
    if dims.learned_input:
        fits[0, "input"] = fit_phase(model, dims, 0, "input")
    return fits


def modelled_peaks(plans: list, dims: ModelDims, modes: list[str], element_size: int, num_params: int,
                   fits: dict[tuple[int, str], Linear], moments: int = 2) -> list[float]:
    """Modelled steady-state peak bytes of every worker (module docstring); ``moments``: the optimiser's tensors per
    parameter (:func:`~graphscale.strategies.optimizers.moment_count`: Adam's two)."""
    b = element_size
    # parameters and the optimiser's state; the gradient buffer lives after the chunks
    resident = (1 + moments) * num_params * b
    peaks = []
    for plan in plans:
        peak = (2 + moments) * num_params * b
        kept = 0.0
        for bp in plan.batches if dims.learned_input else ():
            peak = max(peak, resident + 8 * bp.num_dst + fits[0, "input"](0, bp.num_dst, 0))
        for layer, mode in enumerate(modes):
            buffer = plan.buffer_rows * dims.widths[layer] * b
            need = dims.needs_src_grad(layer)
            for bp in plan.batches:
                n, nd, e = bp.block.num_src, bp.num_dst, bp.block.num_edges
                topo = 8 * (nd + 1 + e + 2 * n)
                chunk = topo + 8 * (n + bp.load_ids.numel() + bp.send_slots.numel() + bp.flush_ids.numel())
                if mode == "none":
                    kept += fits[layer, "kept"](n, nd, e) + topo
                    peak = max(peak, resident + buffer + chunk + kept)
                    continue
                peak = max(peak, resident + buffer + chunk + fits[layer, "forward"](n, nd, e))
                backward_buffers = (buffer if mode == "recompute" else 0) + (buffer if need else 0)
                peak = max(peak, resident + backward_buffers + chunk + fits[layer, mode](n, nd, e))
        for layer, mode in enumerate(modes):  # the kept graphs shrink from here on
            if mode == "none":
                buffer = plan.buffer_rows * dims.widths[layer] * b if dims.needs_src_grad(layer) else 0
                worst = max(fits[layer, "none"](bp.block.num_src, bp.num_dst, bp.block.num_edges)
                            for bp in plan.batches)
                peak = max(peak, resident + buffer + kept + worst)
        peaks.append(peak)
    return peaks


def plans_peak(graph: Graph, sets: ChunkSets, plans: Iterable[WorkerPlan], model: torch.nn.Module, dims: ModelDims,
               config: RunConfig, bw: Bandwidths, fits: dict | None = None) -> float:
    """Modelled peak bytes over the workers' ``plans`` (an iterable, taken one plan at a time) of the chunk sets
    ``sets``; ``fits``: filled in place with the phases' fits, so that callers can reuse them across ``K``."""
    dtype = next(model.parameters()).dtype
    elem = torch.empty(0, dtype=dtype).element_size()
    modes = layer_modes(config.strategy.recompute, dims, layer_pass_rows(sets, config.strategy.dedup),
                        graph.num_nodes, elem, bw)
    fits = {} if fits is None else fits
    if any((layer, mode) not in fits for layer, mode in enumerate(modes)):
        fits.update(fit_phases(model, dims, modes))
    num_params = sum(p.numel() for p in model.parameters())
    return max(modelled_peaks([plan], dims, modes, elem, num_params, fits, moment_count(config.optim))[0]
               for plan in plans)


def estimate_peak(graph: Graph, owner: torch.Tensor, batch: torch.Tensor, num_parts: int, num_chunks: int,
                  model: torch.nn.Module, dims: ModelDims, config: RunConfig, bw: Bandwidths,
                  fits: dict | None = None) -> float:
    """Modelled peak bytes over workers for a scheduled two-level partition, its sets and plans built in memory."""
    sets = ChunkSets.build(graph, owner, batch, num_parts, num_chunks)
    plans = (build_worker_plan(graph, sets, i, config.strategy.dedup) for i in range(num_parts))
    return plans_peak(graph, sets, plans, model, dims, config, bw, fits)


def layout_peak(graph: Graph, folder: Path, model: torch.nn.Module, dims: ModelDims, config: RunConfig,
                bw: Bandwidths, fits: dict | None = None) -> float:
    """:func:`estimate_peak` of the layout :func:`~graphscale.strategies.offload.layout.write_layout` wrote into
    ``folder``: its sets and plans memory-mapped, one worker's plan at a time."""
    sets = ChunkSets.load(folder)
    plans = (WorkerPlan.load(plan_folder(folder, rank)) for rank in range(sets.num_parts))
    return plans_peak(graph, sets, plans, model, dims, config, bw, fits)


def choose_chunks(graph: Graph, model: torch.nn.Module, owner: torch.Tensor, num_parts: int, budget: int,
                  config: RunConfig, dims: ModelDims, bw: Bandwidths | None = None,
                  scratch: Path | None = None) -> int:
    """The smallest ``K`` whose modelled per-worker peak fits ``budget`` bytes.

    ``K`` runs through 1, 2, 4, ... until a power of two fits, then bisects
    between the last two powers (the modelled peak falls with ``K``; the
    bisection relies on that). Every candidate's layout is planned in bounded
    memory (:func:`~graphscale.strategies.offload.layout.write_layout`, as the
    run's) into a folder under ``scratch`` (default: the system's temporary
    directory), its peak read from the mapped plans (:func:`layout_peak`), and
    the folder removed: the same peaks as :func:`estimate_peak` of the
    in-memory planner's schedule.

    Raises:
        ValueError: not even one vertex per chunk fits (the message names ``--memory-budget``).
    """
    bw = bw or Bandwidths()
    sc = config.strategy
    elem = next(model.parameters()).element_size()
    sizes = torch.bincount(owner, minlength=num_parts)
    k_max = int(sizes.min())
    cache: dict[int, float] = {}
    fits: dict = {}

    def peak(k: int) -> float:
        if k not in cache:
            with tempfile.TemporaryDirectory(prefix=".budget-", dir=scratch) as tmp:
                write_layout(graph, owner, num_parts, k, sc.partitioner, config.seed, sc.dedup, dims.widths[0], elem,
                             Path(tmp), bw, host_memory=config.host_memory)
                cache[k] = layout_peak(graph, Path(tmp), model, dims, config, bw, fits)
        return cache[k]

    lo, hi = 0, 1  # peak(lo) > budget (lo = 0: unknown), peak(hi) <= budget once found
    while peak(hi) > budget:
        if hi >= k_max:
            raise ValueError(f"--memory-budget {budget} bytes is too small: even {hi} chunks per partition need "
                             f"{int(peak(hi))} bytes per worker (modelled)")
        lo, hi = hi, min(2 * hi, k_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if peak(mid) <= budget:
            hi = mid
        else:
            lo = mid
    return hi

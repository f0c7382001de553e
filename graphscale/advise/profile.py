"""The machine profile the predictions price work with: measured once per host and cached.

Figures (:class:`~graphscale.cost.machine.Machine`; each recorded with how it was measured, :attr:`Machine.how`). The rates are measured with one thread
(``threads``: a worker of a W-worker run on ``cores`` cores gets ``cores // W`` threads, priced with
``thread_speedup``):

* ``gemm_flops``: a float32 square GEMM (:func:`graphscale.strategies.task_parallel.plan.measure_flops`);
* ``spmm_edge_s`` / ``spmm_edge_col_s``: seconds per edge and per edge-column of :func:`graphscale.nn.ops.spmm`
  on a random graph at two widths (a line through the two timings);
* ``memory_bandwidth``: a float32 copy (:func:`~graphscale.strategies.task_parallel.plan.measure_bandwidth`);
* ``collective_latency_s`` / ``collective_bandwidth``: an all-reduce between 2 workers (gloo on CPU, NCCL on
  CUDA) of a small and a large buffer, through :func:`graphscale.distributed.launch.launch`;
* ``layer_call_s`` / ``step_s``: the fixed cost of one layer's forward and backward (Python, dispatch, autograd
  bookkeeping: what does not scale with rows or edges) and of one optimiser step with its loss, timed on a
  2-layer GCN over a 16-vertex graph (where the work itself is negligible) and a line through 2 and 4 layers;
* ``elementwise_s``: seconds per element of a layer's elementwise passes (keyed dropout, activation, gradients,
  allocations): a 2-layer GCN training step on a 5000-vertex random graph, less the products and fixed costs;
* ``thread_speedup``: how much faster one training step runs with all ``cores`` threads than with one (the median of
  interleaved repetitions: on a shared machine another process on a core stalls every parallel region, and the
  figure says so; it can be below 1);
* ``sync_s`` / ``corun_slowdown``: what one synchronising collective costs inside training and how much slower a
  worker computes while the others run: 2 workers alternate a fixed computation (two sizes, on the device) with a
  1-element all-reduce, the median step against the same computation alone in the parent (:func:`sync_line`: a
  line through the two sizes, slope ``corun_slowdown``, intercept ``sync_s``: the latency, the partner's lag, the
  wake-up; on CUDA every step synchronises the device before reading the clock);
* ``corun_free``: the same two workers running the same steps without the all-reduce (one barrier before them),
  the slower worker's median step against the computation alone, a line through the two sizes (slope, clamped like
  ``corun_slowdown``): the slowdown of workers that compute side by side but wait for each other only at the end
  of a long stretch (model-averaging's workers, each training its own partition for a whole epoch). In lock-step
  every step costs the slower of the two workers' steps, so ``corun_slowdown`` also holds the partner's lag,
  which grows with the step; ``corun_free`` does not;
* ``load_factor`` (:func:`load_factor_of`): the median over the best of repetitions of the elementwise calibration's training step (one
  thread): how much longer a typical step takes than a quiet one while the machine's other load runs (the rates
  above are best of repetitions; measured epochs are medians);
* ``process_rss``: the peak resident set of a spawned worker after its process group, the training modules and
  a few tiny training steps (interpreter, torch runtime, graphscale: what every worker holds besides its data);
* ``block_call_s`` / ``block_edge_s`` and ``sample_call_s`` / ``sample_edge_s``: the host-side work repeated per
  task-parallel P block (built for every subgraph in every epoch) and per sampled mini-batch, per call and per
  edge (:mod:`graphscale.advise.host_costs`);
* ``host_transfer_bandwidth``: on CPU, bytes per second of offload's host-array traffic (row gathers and scatters
  through its staged transfer pipeline, :func:`graphscale.advise.host_costs.transfer_costs`; 0 on CUDA, where
  ``h2d_bandwidth`` prices the link);
* ``h2d_bandwidth``: a pinned host-to-device copy (CUDA only; ``0`` on CPU, where host and device are one);
* ``free_memory``: ``MemAvailable`` (CPU) or ``cudaMemGetInfo`` (CUDA) when measured.

``calibration``: per model and worker count, every strategy's line through its modelled and measured epoch time
(and resident set) on two probe graphs (:mod:`graphscale.advise.calibrate`; ``None`` for a synthetic profile,
which is never calibrated).

The profile lives in ``CACHE/advise/profile-<device>.json`` (``--cache-dir``). A profile recorded on another host
is stale: :func:`load_profile` says so in one line and ``graphscale advise`` measures again (``--profile`` always
does). ``tiny=True`` measures with small sizes and short repetitions (tests).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from graphscale.advise.timing import best_of as _best
from graphscale.cost.machine import PROFILE_VERSION, Machine


def profile_path(cache: Path, device: str) -> Path:
    return Path(cache) / "advise" / f"profile-{device}.json"


def load_profile(path: Path) -> tuple[Machine | None, str]:
    """``(machine, "")``, or ``(None, why)`` for a missing, unreadable, old or other host's profile."""
    path = Path(path)
    if not path.is_file():
        return None, f"no machine profile at {path}"
    try:
        machine = Machine.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        return None, f"machine profile {path} is unreadable ({err})"
    if machine.version != PROFILE_VERSION:
        return None, f"machine profile {path} has version {machine.version}, not {PROFILE_VERSION}"
    if machine.host != platform.node():
        return None, (f"machine profile {path} was measured on host {machine.host!r}, not this host "
                      f"{platform.node()!r} (stale)")
    return machine, ""


def save_profile(machine: Machine, path: Path) -> None:
    from graphscale.data.formats import write_json_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, machine.to_dict())


def cached_profile(cache: Path, device: str, refresh: bool = False, tiny: bool = False,
                   warn=None) -> Machine:
    """The host's profile for ``device``: the cached one, else (or with ``refresh``) measured and cached; ``warn``
    gets the one-line reason a cached profile was measured again."""
    path = profile_path(cache, device)
    if not refresh:
        machine, why = load_profile(path)
        if machine is not None:
            return machine
        if warn is not None and path.is_file():
            warn(f"{why}; measuring this host again")
    machine = measure(device, tiny=tiny)
    save_profile(machine, path)
    return machine


# ------------------------------------------------------------------------------------------------ measuring
def measure(device: str = "cpu", tiny: bool = False) -> Machine:
    """Measure this host (module docstring); ``tiny``: small sizes, short repetitions."""
    from graphscale.advise.host_costs import block_costs, sample_costs, transfer_costs
    from graphscale.distributed.launch import cpu_count
    from graphscale.strategies.task_parallel.plan import measure_bandwidth, measure_flops

    seconds = 0.05 if tiny else 1.0  # best of 1 s of repetitions: a shared machine has quiet moments
    how = {"threads": "rates measured with 1 torch thread"}
    with _threads(1):
        if device == "cuda":
            flops, bandwidth, h2d, free = _cuda_rates(tiny)
            how["gemm_flops"] = "float32 4096^2 torch.mm on the GPU, best of repetitions"
            how["memory_bandwidth"] = "device-to-device float32 copy of 256 MiB"
            how["h2d_bandwidth"] = "pinned host-to-device copy of 256 MiB"
            how["free_memory"] = "torch.cuda.mem_get_info"
        else:
            n = 128 if tiny else 384
            flops = measure_flops(n, seconds)
            bandwidth = measure_bandwidth(1 << (20 if tiny else 23), seconds)
            h2d, free = 0.0, _mem_available()
            how["gemm_flops"] = f"float32 {n}x{n} torch.mm, best of repetitions over {seconds:g} s"
            how["memory_bandwidth"] = "float32 copy (read + write bytes), best of repetitions"
            how["h2d_bandwidth"] = "none: host and device memory are one on CPU"
            how["free_memory"] = "MemAvailable of /proc/meminfo"
        edge_s, edge_col_s, spmm_how = _spmm_costs(device, tiny, seconds)
        how["spmm"] = spmm_how
        layer_call, step, how["fixed_costs"] = _fixed_costs(device, seconds)
        alone = _sync_work_alone(tiny, device)
        block_call, block_edge, how["blocks"] = block_costs(tiny, seconds)
        sample_call, sample_edge, how["sampling"] = sample_costs(tiny, seconds)
        if device == "cuda":
            host_transfer, how["host_transfer"] = 0.0, "none: h2d_bandwidth prices the link on CUDA"
        else:
            host_transfer, how["host_transfer"] = transfer_costs(tiny, seconds)
    latency, coll_bw, process_rss, coll_how = _collective(device, tiny)
    how["collective"] = coll_how
    how["process_rss"] = ("peak resident set (VmHWM) of a spawned worker after its all-reduces, importing "
                          "graphscale.run and a few tiny training steps (the larger of the 2)")
    machine = Machine(platform.node(), device, flops, edge_s, edge_col_s, bandwidth, latency, coll_bw, h2d, free,
                      1, time.time(), how, layer_call_s=layer_call, step_s=step, process_rss=process_rss,
                      cores=cpu_count(), block_call_s=block_call, block_edge_s=block_edge, sample_call_s=sample_call,
                      sample_edge_s=sample_edge, host_transfer_bandwidth=host_transfer)
    with _threads(1):
        machine.elementwise_s, how["elementwise"] = _elementwise_cost(machine, tiny, seconds)
        machine.load_factor, how["load_factor"] = _load_factor(machine.device, tiny, seconds)
    machine.thread_speedup, how["thread_speedup"] = _thread_speedup(device, tiny, machine.cores)
    machine.sync_s, machine.corun_slowdown, machine.corun_free, how["sync"] = _sync_costs(device, tiny, alone, latency)
    return machine


@contextmanager
def _threads(n: int):
    """torch's intra-op threads set to ``n`` inside the block."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _median_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _thread_speedup(device: str, tiny: bool, cores: int) -> tuple[float, str]:
    """Median over interleaved repetitions of (one calibration step with 1 thread) / (with ``cores`` threads)."""
    if device == "cuda" or cores < 2:
        return 1.0, "1: " + ("the GPU computes" if device == "cuda" else "one core")
    step = _calibration_step(device, tiny)[0]
    ratios = []
    for _ in range(5 if tiny else 30):
        with _threads(1):
            one = _median_of(step, 1)
        with _threads(cores):
            many = _median_of(step, 1)
        ratios.append(one / many)
    return statistics.median(ratios), (f"a 2-layer GCN training step (the elementwise calibration's) with 1 and "
                                       f"{cores} threads, interleaved, median of the ratios")


#: ``torch.mm`` calls of the two sizes of the synchronisation probe's computation (:func:`_sync_costs`)
SYNC_WORK = (2, 12)


def _sync_work(k: int, device: str = "cpu"):
    """``k`` products of a 256x256 float32 matrix on ``device`` (waited for on CUDA, whose kernels are queued)."""
    import torch

    a = torch.ones(256, 256, device=device)
    sync = (lambda: torch.cuda.synchronize(a.device)) if a.is_cuda else (lambda: None)
    return lambda: ([torch.mm(a, a) for _ in range(k)], sync())


def _sync_work_alone(tiny: bool, device: str = "cpu") -> dict[int, float]:
    """The probe's computations alone on ``device``, one thread, median of repetitions (the 2 sizes
    interleaved)."""
    work = {k: _sync_work(k, device) for k in SYNC_WORK}
    times: dict[int, list] = {k: [] for k in SYNC_WORK}
    for _ in range(5 if tiny else 40):
        for k, fn in work.items():
            times[k].append(_median_of(fn, 1))
    return {k: statistics.median(v) for k, v in times.items()}


#: the range :func:`sync_line` clamps ``corun_slowdown`` to
SLOWDOWN_RANGE = (1.0, 2.0)


def sync_line(alone: dict[int, float], co: dict[int, float], latency: float) -> tuple[float, float]:
    """``(sync_s, corun_slowdown)`` from the probe's timings: ``alone[k]`` / ``co[k]`` the step of ``k`` products
    alone and beside the other worker with its all-reduce (the 2 sizes of :data:`SYNC_WORK`). The line through the
    two co-run steps against the alone ones: slope = ``corun_slowdown``, clamped to :data:`SLOWDOWN_RANGE`;
    intercept at the small size = ``sync_s``, at least ``latency`` (the bare collective)."""
    small, large = SYNC_WORK
    slope = (co[large] - co[small]) / max(alone[large] - alone[small], 1e-9)
    slowdown = min(max(slope, SLOWDOWN_RANGE[0]), SLOWDOWN_RANGE[1])
    return max(co[small] - slowdown * alone[small], latency), slowdown


def free_slowdown(alone: dict[int, float], free: dict[int, float]) -> float:
    """``corun_free`` from the probe's timings without the all-reduce: ``free[k]`` the slower worker's median step of
    ``k`` products beside the other worker; the slope of the line through the two sizes against the alone steps,
    clamped to :data:`SLOWDOWN_RANGE` (as :func:`sync_line`'s)."""
    small, large = SYNC_WORK
    slope = (free[large] - free[small]) / max(alone[large] - alone[small], 1e-9)
    return min(max(slope, SLOWDOWN_RANGE[0]), SLOWDOWN_RANGE[1])


def load_factor_of(times: list[float]) -> float:
    """Median over best of a step's repetition times, at least 1 (module docstring)."""
    return max(statistics.median(times) / min(times), 1.0)


def _sync_costs(device: str, tiny: bool, alone: dict[int, float], latency: float) -> tuple[float, float, float, str]:
    """``sync_s`` and ``corun_slowdown`` (module docstring) from 2 workers' computation + all-reduce steps
    (:func:`sync_line`), and ``corun_free`` from the same steps without the all-reduce (:func:`free_slowdown`); on CUDA the products run on each worker's GPU and every step synchronises the device
    before it reads the clock, so it times the kernels and the (asynchronous) NCCL all-reduce."""
    from graphscale.distributed.launch import launch

    results = launch(_sync_worker, 2, 5 if tiny else 40, device=device, timeout_s=120)
    co = {k: max(r["sync"][k] for r in results) for k in SYNC_WORK}
    sync, slowdown = sync_line(alone, co, latency)
    free = free_slowdown(alone, {k: max(r["free"][k] for r in results) for k in SYNC_WORK})
    small, large = SYNC_WORK
    where = "on the GPU, the device synchronised before every clock read" if device == "cuda" else "1 thread"
    return sync, slowdown, free, (f"2 workers alternate {small} or {large} float32 256x256 torch.mm ({where}) with "
                                  "a 1-element all-reduce, median step of the slower worker, against the same "
                                  "computation alone: slope = corun_slowdown (clamped to [1, 2]), intercept = sync_s "
                                  "(at least the collective latency); the same without the all-reduce: slope = "
                                  "corun_free")


def _sync_worker(env, repeats: int) -> dict:  # pragma: no cover - spawned
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    work = {k: _sync_work(k, str(env.device)) for k in SYNC_WORK}
    flag = torch.ones(1, device=env.device)
    sync = (lambda: torch.cuda.synchronize(env.device)) if flag.is_cuda else (lambda: None)
    times: dict[int, list] = {k: [] for k in SYNC_WORK}
    dist.barrier()
    for _ in range(repeats):
        for k, fn in work.items():
            start = time.perf_counter()
            fn()
            dist.all_reduce(flag)
            sync()  # NCCL's all-reduce is queued: wait for it before reading the clock
            times[k].append(time.perf_counter() - start)
    free: dict[int, list] = {k: [] for k in SYNC_WORK}
    dist.barrier()
    for _ in range(repeats):  # side by side, no collective until the end: corun_free
        for k, fn in work.items():
            start = time.perf_counter()
            fn()
            free[k].append(time.perf_counter() - start)
    dist.barrier()
    return {"sync": {k: statistics.median(v) for k, v in times.items()},
            "free": {k: statistics.median(v) for k, v in free.items()}}


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _spmm_costs(device: str, tiny: bool, seconds: float) -> tuple[float, float, str]:
    """Seconds per edge and per edge-column of a forward ``spmm`` (GCN normalisation) at widths 16 and 128."""
    import torch

    from graphscale.data.block import Block
    from graphscale.nn.ops import spmm
    from graphscale.testing import random_graph

    n, deg = (4000, 8) if tiny else (50000, 16)
    graph = random_graph(n, float(deg), num_features=1, seed=0)
    block = Block.full(graph).to(torch.device(device))
    e = block.num_edges if hasattr(block, "num_edges") else int(block.indices.numel())
    times = {}
    for width in (16, 128):
        x = torch.randn(block.num_src, width, device=device)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        times[width] = _best(lambda x=x, sync=sync: (spmm(block, x), sync()), seconds)
    per_col = max((times[128] - times[16]) / (112 * e), 0.0)
    per_edge = max(times[16] / e - 16 * per_col, 1e-12)
    return per_edge, per_col, (f"spmm over a random graph of {n} vertices and {e} edges at widths 16 and 128, "
                               "best of repetitions, a line through the two")


def _tiny_steps(device: str) -> dict:
    """Training steps (forward, loss, backward, Adam) of a GCN of 2 and of 4 layers on a 16-vertex graph, warm."""
    import torch

    from graphscale.config import build_config
    from graphscale.data.block import Block
    from graphscale.nn.models import build_model
    from graphscale.strategies.base import masked_loss_sum
    from graphscale.strategies.optimizers import make_optimizer
    from graphscale.testing import random_graph

    graph = random_graph(16, 3.0, num_features=8, seed=0)
    block = Block.full(graph).to(torch.device(device))
    x, y = graph.x.to(device), graph.y.to(device)
    mask = torch.ones(graph.num_nodes, dtype=torch.bool, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    steps = {}
    for layers in (2, 4):
        config = build_config({"model": {"name": "gcn", "hidden": 8, "layers": layers}})
        model = build_model(config.model, 8, int(graph.y.max()) + 1, seed=0).to(device)
        opt = make_optimizer(model, config.optim)

        def step(model=model, opt=opt):
            opt.zero_grad(set_to_none=True)
            masked_loss_sum(model(block, x), y, mask).backward()
            opt.step()
            sync()
        steps[layers] = step
        for _ in range(3):  # warm up
            step()
    return steps


def _fixed_costs(device: str, seconds: float) -> tuple[float, float, str]:
    """Seconds of one layer's forward + backward and of one optimiser step (with its loss), on a graph so small
    that only the fixed costs remain: training steps of a GCN of 2 and of 4 layers, a line through the two."""
    steps = _tiny_steps(device)
    times = {2: float("inf"), 4: float("inf")}
    deadline, count = time.perf_counter() + seconds, 0
    while count < 200 or time.perf_counter() < deadline:  # interleaved: both see the same background load
        for layers, step in steps.items():
            start = time.perf_counter()
            step()
            times[layers] = min(times[layers], time.perf_counter() - start)
        count += 1
    layer = max((times[4] - times[2]) / 2, 0.0)
    return layer, max(times[2] - 2 * layer, 0.0), ("training steps (forward, loss, backward, Adam) of a GCN of 2 "
                                                   "and 4 layers on a 16-vertex graph, best of repetitions; per "
                                                   "layer = half the difference, per step = the rest")


def _calibration_step(device: str, tiny: bool):
    """A 2-layer GCN training step on a random graph (``step``), and its sizes ``(n, features, edges, classes)``."""
    import torch

    from graphscale.config import build_config
    from graphscale.data.block import Block
    from graphscale.nn.models import build_model
    from graphscale.strategies.base import masked_loss_sum
    from graphscale.strategies.optimizers import make_optimizer
    from graphscale.testing import random_graph

    n, features = (1000, 64) if tiny else (5000, 256)
    graph = random_graph(n, 8.0, num_features=features, seed=0)
    block = Block.full(graph).to(torch.device(device))
    x, y = graph.x.to(device), graph.y.to(device)
    mask = torch.ones(n, dtype=torch.bool, device=device)
    config = build_config({"model": {"name": "gcn", "hidden": 16, "layers": 2}})
    model = build_model(config.model, features, int(graph.y.max()) + 1, seed=0).to(device)
    opt = make_optimizer(model, config.optim)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        masked_loss_sum(model(block, x), y, mask).backward()
        opt.step()
        sync()
    edges = block.num_edges if hasattr(block, "num_edges") else int(block.indices.numel())
    return step, (n, features, edges, int(graph.y.max()) + 1)


def _load_factor(device: str, tiny: bool, seconds: float) -> tuple[float, str]:
    """The median over the best of repetitions of the calibration step (module docstring)."""
    step = _calibration_step(device, tiny)[0]
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 20 or time.perf_counter() < deadline:
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return load_factor_of(times), (f"a 2-layer GCN training step (the elementwise calibration's), 1 thread, "
                                   f"{len(times)} repetitions over {seconds:g} s: median / best")


def _elementwise_cost(machine: Machine, tiny: bool, seconds: float) -> tuple[float, str]:
    """Seconds per element of a layer's elementwise passes (keyed dropout, activation, their gradients, the
    allocations): a GCN training step on a random graph, less what :func:`~graphscale.cost.pricing.layer_seconds`
    prices without them (products and fixed costs), over the elements it counts."""
    from graphscale.cost.pricing import layer_seconds

    step, (n, features, edges, classes) = _calibration_step(machine.device, tiny)
    taken = _best(step, seconds, at_least=20)
    widths, outs = [features, 16], [16, classes]
    priced = layer_seconds(machine, n, edges + n, widths, outs) + machine.step_s
    per = taken - priced  # layer_seconds so far priced the elementwise passes at elementwise_s = 0
    elements = n * (widths[0] + 3 * outs[0] + 3 * widths[1] + 3 * outs[1])
    return max(per / elements, 1e-12), (f"a 2-layer GCN training step on a random graph of {n} vertices and "
                                        f"{features} features, best of repetitions, less the products and fixed "
                                        "costs layer_seconds prices, per element it counts")


def _collective(device: str, tiny: bool) -> tuple[float, float, int, str]:
    """Latency and bandwidth of a 2-worker all-reduce (the backend of ``device``), and a worker's resident set."""
    from graphscale.distributed.launch import launch

    small, large = 1, (1 << 16 if tiny else 1 << 22)
    results = launch(_allreduce_worker, 2, small, large, 3 if tiny else 10, device=device, timeout_s=60)
    t_small, t_large = max(r[0] for r in results), max(r[1] for r in results)
    bandwidth = 4 * (large - small) / max(t_large - t_small, 1e-9)
    backend = "nccl" if device == "cuda" else "gloo"
    return t_small, bandwidth, max(r[2] for r in results), (f"{backend} all_reduce between 2 workers of 1 and {large} float32 elements, best "
                                "of repetitions; latency = the small one, bandwidth = the difference's bytes over "
                                "the difference's time")


def _allreduce_worker(env, small: int, large: int, repeats: int) -> tuple:  # pragma: no cover - spawned
    import torch
    import torch.distributed as dist

    from graphscale.metrics.memory import os_memory

    out = []
    for n in (small, large):
        t = torch.ones(n, device=env.device)
        dist.all_reduce(t)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            if t.is_cuda:
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        out.append(best)
    import graphscale.run  # noqa: F401 - what a training worker imports

    for step in _tiny_steps(env.device.type).values():  # the runtime's first-use allocations (threads, autograd)
        step()
    return out[0], out[1], os_memory().peak_rss or 0


def _cuda_rates(tiny: bool) -> tuple[float, float, float, int]:  # pragma: no cover - needs a GPU
    import torch

    n = 1024 if tiny else 4096
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    sync = torch.cuda.synchronize
    flops = 2.0 * n ** 3 / _best(lambda: (torch.mm(a, b), sync()), 0.2)
    elements = (1 << 22) if tiny else (1 << 26)
    src, dst = torch.ones(elements, device="cuda"), torch.empty(elements, device="cuda")
    bandwidth = 8.0 * elements / _best(lambda: (dst.copy_(src), sync()), 0.2)
    host = torch.ones(elements).pin_memory()
    h2d = 4.0 * elements / _best(lambda: (dst.copy_(host, non_blocking=True), sync()), 0.2)
    free = int(torch.cuda.mem_get_info()[0])
    return flops, bandwidth, h2d, free

"""``graphscale bench device``: a 2-layer GCN training epoch on one device, graphscale's device path against PyG.

The model and systems are :mod:`graphscale.bench.peers.peers`' (dropout -> GCN(in, hidden) -> ReLU -> dropout ->
GCN(hidden, classes), cross-entropy on the training vertices, backward, Adam step): ``graphscale`` (its device kernel
backend: on CUDA always, on CPU by ``GRAPHSCALE_KERNELS=torch``, which this command sets in its processes),
``pyg-csr`` (``GCNConv(cached=True)`` on a torch sparse CSR ``adj_t``) and ``pyg-edge_index``. Adam runs with
``foreach=True`` everywhere (torch's default on CUDA), so the op counts of a CPU run are those of a CUDA run.

Each system runs in a fresh process (``spawn``) that loads the graph, moves it to the device, runs ``--warmup``
epochs (PyG's cached normalisation, graphscale's cached operator and compiled dropout kernel are built there), then:

* ``s/epoch``: the median of ``--repeats`` epochs, synchronised (``torch.cuda.synchronize`` on CUDA);
* ``peak MiB above data``: on CUDA ``torch.cuda.max_memory_allocated`` over the timed epochs minus what was allocated
  before them (the graph, features, parameters, caches); on CPU the traced peak of live tensor bytes over one epoch
  (:class:`graphscale.metrics.trace.OpTrace`: the same figure less the allocator's rounding);
* ``ops/epoch``: operator calls of one epoch as the dispatcher sees them (a fused custom op counts once);
* ``kernels/epoch`` (CUDA only): kernel launches of one epoch (``torch.profiler``);
* ``final loss``, and the ratios of graphscale to each system in the same run.

Example::

    graphscale bench device --device cuda --dataset sbm:nodes=2000000,degree=10,features=128
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from graphscale.bench.peers.peers import SYSTEMS, check_model_options, make_epoch, toy_data

#: Goals of graphscale against PyG-CSR on the device (docs/gpu.md): time ratio, memory ratio, at most.
TARGETS = {"pyg-csr": (0.5, 0.6)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register this benchmark's options on ``parser``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default="sbm:nodes=200000,degree=10,features=128",
                 why="a CPU-sized graph; docs/gpu.md's GPU figures use sbm:nodes=2000000,...")
    add_own(parser, "--device", default="cpu", help="cpu or cuda[:i] (default cpu: the device path on CPU tensors)",
            differs="one torch device, cuda:i included, not a run's auto/cpu/cuda")
    add_declared(parser, "hidden", default=128, note="here: of the 2-layer GCN", why="bench peers' width")
    add_declared(parser, "dropout")
    parser.add_argument("--repeats", type=int, default=10, help="timed epochs per system; the median is reported")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warm-up epochs per system (default 3)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {', '.join(SYSTEMS)} (default all)")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _kernel_launches(epoch, i: int, device: torch.device) -> int | None:
    """CUDA kernels launched by one epoch (``torch.profiler``), ``None`` off CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        epoch(i)
        _sync(device)
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def run_system(system: str, data: dict, device: str, hidden: int, dropout: float, warmup: int, repeats: int) -> dict:
    """Measure one system on ``data`` in this process (what each fresh process of :func:`measure` runs; the tests
    call it directly at small sizes). The device backend is used on every device."""
    saved = os.environ.get("GRAPHSCALE_KERNELS")
    os.environ["GRAPHSCALE_KERNELS"] = "torch"
    try:
        return _measure_here(system, data, torch.device(device), hidden, dropout, warmup, repeats)
    finally:
        if saved is None:
            del os.environ["GRAPHSCALE_KERNELS"]
        else:
            os.environ["GRAPHSCALE_KERNELS"] = saved


def _measure_here(system: str, data: dict, dev: torch.device, hidden: int, dropout: float, warmup: int,
                  repeats: int) -> dict:
    from graphscale.metrics.trace import OpTrace

    device = str(dev)
    toy = make_epoch(system, toy_data(), 4, dropout, device, foreach=True)
    toy(0)  # libraries imported, kernels compiled, before the baseline
    del toy
    epoch = make_epoch(system, data, hidden, dropout, device, foreach=True)
    for i in range(warmup):
        epoch(i)
    _sync(dev)
    with OpTrace() as trace:
        epoch(warmup)
    _sync(dev)
    launches = _kernel_launches(epoch, warmup + 1, dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    times, loss = [], float("nan")
    for i in range(warmup + 2, warmup + 2 + repeats):
        _sync(dev)
        start = time.perf_counter()
        loss = epoch(i)
        _sync(dev)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(dev) - base if dev.type == "cuda" else trace.peak
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return {"times": times, "peak": peak, "traced peak": trace.peak, "ops": trace.total, "launches": launches,
            "loss": loss, "device": name}


def _child(system: str, path: str, device: str, hidden: int, dropout: float, warmup: int, repeats: int) -> dict:
    import warnings

    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    return run_system(system, torch.load(path), device, hidden, dropout, warmup, repeats)


def bench_data(graph) -> dict:
    """The dict every system trains on (CPU tensors; each system moves them to its device)."""
    if graph.x is None or graph.y is None:
        raise ValueError(f"dataset {graph.name!r} needs features and labels for the GCN benchmark")
    train = graph.train_mask if graph.train_mask is not None else torch.ones(graph.num_nodes, dtype=torch.bool)
    return {"indptr": graph.indptr, "indices": graph.indices, "x": graph.x.float().contiguous(),
            "y": graph.y.clamp_min(0), "train": train, "classes": max(graph.num_classes, 2)}


def check_device(device: str) -> torch.device:
    """``device`` as a torch device, or a ValueError naming the fix (no CUDA device, an unknown name)."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"--device {device!r}: only cpu and cuda are supported (cpu, cuda, cuda:1)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: torch sees no CUDA device here (a CPU build, or no GPU); use "
                         "--device cpu to run the device path on CPU tensors")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {device}: only cpu and cuda are supported")
    return dev


def measure(graph, device: str = "cpu", hidden: int = 128, dropout: float = 0.5, repeats: int = 10,
            warmup: int = 3, systems: tuple[str, ...] = SYSTEMS) -> list[dict]:
    """One row per system: ``s/epoch``, ``peak MiB above data``, ``ops/epoch``, ``kernels/epoch``, ``final loss``,
    and graphscale's ratios to it (``time gs/system``, ``memory gs/system``). Each system in a fresh process."""
    if repeats < 1 or warmup < 1:
        raise ValueError(f"--repeats and --warmup must be >= 1, got {repeats} and {warmup}")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise ValueError(f"--systems: unknown {unknown or 'empty list'}; choose from {', '.join(SYSTEMS)}")
    check_device(device)
    data = bench_data(graph)
    results = {}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="graphscale-device-", dir=shm) as tmp:
        path = str(Path(tmp) / "graph.pt")
        torch.save(data, path)
        del data
        ctx = mp.get_context("spawn")
        for system in systems:
            with ctx.Pool(1) as pool:
                results[system] = pool.apply(_child, (system, path, device, hidden, dropout, warmup, repeats))
    return rows_of(results)


def rows_of(results: dict[str, dict]) -> list[dict]:
    """Table rows from :func:`run_system`'s results, with graphscale's ratios where it ran."""
    ref = results.get("graphscale")
    rows = []
    for system, res in results.items():
        sec = statistics.median(res["times"])
        row = {"system": system, "s/epoch": sec, "peak MiB above data": res["peak"] / 2**20,
               "ops/epoch": res["ops"], "kernels/epoch": res["launches"], "final loss": res["loss"]}
        if ref is not None:
            row["time gs/system"] = statistics.median(ref["times"]) / sec
            row["memory gs/system"] = ref["peak"] / max(res["peak"], 1)
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> list[dict]:
    """Load ``args.dataset``, measure every system, print the table and the goals."""
    from graphscale.data.datasets import load_dataset
    from graphscale.metrics.table import format_table

    systems = check_model_options(args)
    dev = check_device(args.device)
    graph = load_dataset(args.dataset)
    rows = measure(graph, args.device, args.hidden, args.dropout, args.repeats, args.warmup, systems)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (device kernel backend on CPU tensors)"
    memory = "max_memory_allocated" if dev.type == "cuda" else "traced live tensor bytes"
    title = (f"2-layer GCN epoch on {name}, hidden {args.hidden}, dropout {args.dropout}, {graph.name} "
             f"({graph.num_nodes:,} nodes, {graph.num_edges:,} edges); median of {args.repeats} after "
             f"{args.warmup} warm-up; peak: {memory}")
    columns = ["system", "s/epoch", "peak MiB above data", "ops/epoch", "kernels/epoch", "final loss",
               "time gs/system", "memory gs/system"]
    present = [c for c in columns if c in rows[0] and (c != "kernels/epoch" or dev.type == "cuda")]
    print(format_table(rows, present, title=title))
    by_name = {r["system"]: r for r in rows}
    for peer, (time_goal, memory_goal) in TARGETS.items():
        if "graphscale" in by_name and peer in by_name:
            r = by_name[peer]
            print(f"graphscale / {peer}: time {r['time gs/system']:.2f}x (goal <= {time_goal}x on a GPU), "
                  f"memory {r['memory gs/system']:.2f}x (goal <= {memory_goal}x)")
    return rows

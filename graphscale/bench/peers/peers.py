"""``graphscale bench peers``: a 2-layer GCN training epoch, graphscale against PyG.

Three systems train the same model (dropout -> GCN(in, hidden) -> ReLU ->
dropout -> GCN(hidden, classes), cross-entropy on the training vertices,
backward, Adam step) on the same graph, side by side in one run:

* ``graphscale`` - :func:`graphscale.nn.models.build_model` (``gcn``) on the
  full graph as one block (numba CSR kernels, transpose cached on the block,
  keyed dropout);
* ``pyg-edge_index`` - ``torch_geometric.nn.GCNConv(cached=True)`` on ``edge_index``
  (gather / scatter message passing);
* ``pyg-csr`` - the same ``GCNConv(cached=True)`` on the adjacency as a
  ``torch.sparse_csr_tensor`` ``adj_t`` (PyG normalises it with ``gcn_norm`` once
  and multiplies with ``torch.sparse.mm``; no torch-sparse needed).

Both PyG variants use ``cached=True`` (PyG's setting for transductive
full-graph training), so their normalisation runs once, in the warm-up epoch.

Time: seconds per epoch, the median of ``--repeats`` epochs after
``--warmup`` warm-up epochs (which absorb numba compilation or cache loading,
PyG's normalisation and allocator warm-up); next to it the process's CPU time
per epoch split into user and system time (``getrusage``: all threads) and its
minor page faults per epoch, so the cost of the kernel handing out fresh pages
(system time) is visible.

Allocator (``--allocator``, :mod:`graphscale.allocator`): every process of a run
gets the same malloc, so the ratios compare the systems and not their
allocators: ``default`` (malloc as installed, nothing applied: what a PyG user,
or graphscale's model used directly, gets), ``retain`` (glibc's retaining
configuration, which ``graphscale train --allocator retain`` applies to its workers),
``tcmalloc`` / ``jemalloc`` (preloaded into each process; a library that is not
installed is an error naming its Debian package). Each process reports the malloc
it really ran (the library mapped into it, read from ``/proc/self/maps``, and
whether it retained freed memory): the ``malloc`` column.

Peak memory: every system runs in a fresh process (``multiprocessing`` spawn)
that imports its libraries and runs one epoch on a toy graph (so code, numba's
compiled kernels and lazily imported modules are in the baseline), loads the
graph from a shared-memory file, reads its resident set size
(``VmRSS``), resets the kernel's peak-RSS counter (``/proc/self/clear_refs``
``5``; where that is not allowed the process-lifetime peak is used) and then
builds the system and trains; peak memory is ``ru_maxrss`` at the end minus
that baseline. It therefore covers everything the system adds beyond the raw
graph and features: format conversions, normalisation, caches, activations,
autograd's saved tensors and temporaries.

Example::

    graphscale bench peers --dataset sbm:nodes=1000000,degree=10,features=128 --hidden 128 --repeats 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

from graphscale import allocator
from graphscale.metrics.memory import reset_peak_rss

SYSTEMS = ("graphscale", "pyg-edge_index", "pyg-csr")
TARGETS = {"pyg-edge_index": (3.5, 0.3), "pyg-csr": (1.5, None)}
"""Targets of graphscale against each peer: (minimum speed-up, maximum memory ratio)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register this benchmark's options on ``parser``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default="sbm:nodes=1000000,degree=10,features=128",
                 why="the comparison graph of docs/benchmarks.md")
    add_declared(parser, "hidden", default=128, note="here: of the 2-layer GCN",
                 why="the comparison width of docs/benchmarks.md")
    add_declared(parser, "dropout")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per system; the median is reported")
    parser.add_argument("--warmup", type=int, default=1, help="untimed warm-up epochs per system (default 1)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch (and kernel) threads in each system's process; 0 = torch's default")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {', '.join(SYSTEMS)} (default all)")
    add_own(parser, "--allocator", choices=allocator.BENCH_MODES, default="default",
            help="malloc of every measured process (default: as installed); retain = graphscale train's worker "
                 "configuration; tcmalloc / jemalloc are preloaded",
            differs="also tcmalloc / jemalloc (preloaded into each measured process), not only train's modes")
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help="also write a bar plot (PNG/PDF) of time and peak memory relative to graphscale")


# ----------------------------------------------------------------------------- memory probes
def rss_bytes() -> int:
    """Current resident set size of this process (``VmRSS``; falls back to ``ru_maxrss``)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _peak_bytes()


def _peak_bytes() -> int:
    """Peak resident set size since start or the last reset (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ----------------------------------------------------------------------------- systems
def _graphscale_epoch(data: dict, hidden: int, dropout: float, device: str = "cpu", foreach: bool | None = None):
    from graphscale.config import ModelConfig
    from graphscale.data.block import Block
    from graphscale.data.graph import Graph
    from graphscale.nn.models import build_model

    graph = Graph(data["indptr"], data["indices"])
    block = Block.full(graph).to(device)
    x, y, train = (data[k].to(device) for k in ("x", "y", "train"))
    model = build_model(ModelConfig(name="gcn", hidden=hidden, layers=2, dropout=dropout), x.shape[1],
                        data["classes"], seed=0).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=foreach)

    def epoch(i: int) -> float:
        model.train()
        model.set_epoch(i)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(block, x)[train], y[train])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return epoch


def _pyg_epoch(data: dict, hidden: int, dropout: float, layout: str, device: str = "cpu", foreach: bool | None = None):
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    x, y, train, indptr, indices = (data[k].to(device) for k in ("x", "y", "train", "indptr", "indices"))
    n = indptr.numel() - 1
    if layout == "edge_index":
        dst = torch.repeat_interleave(torch.arange(n, device=device), indptr[1:] - indptr[:-1])
        adj = torch.stack([indices, dst])
        del dst
    else:  # adj_t: rows = destinations, columns = sources; exactly the graph's CSR
        adj = torch.sparse_csr_tensor(indptr, indices, torch.ones(indices.numel(), device=device), (n, n))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], hidden, cached=True)
            self.conv2 = GCNConv(hidden, data["classes"], cached=True)

        def forward(self, h):
            h = F.dropout(h, dropout, self.training)
            h = F.relu(self.conv1(h, adj))
            h = F.dropout(h, dropout, self.training)
            return self.conv2(h, adj)

    torch.manual_seed(0)
    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=foreach)

    def epoch(i: int) -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x)[train], y[train])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return epoch


def toy_data(num_classes: int = 3) -> dict:
    """A tiny graph in the layout :func:`_child` loads, to warm the libraries up before the baseline."""
    from graphscale.testing.graphs import random_graph

    g = random_graph(50, 4.0, num_features=8, num_classes=num_classes, seed=0)
    return {"indptr": g.indptr, "indices": g.indices, "x": g.x, "y": g.y, "train": g.train_mask,
            "classes": num_classes}


def make_epoch(system: str, data: dict, hidden: int, dropout: float, device: str = "cpu",
               foreach: bool | None = None):
    """One training epoch of ``system`` (:data:`SYSTEMS`) on ``data`` (the dict :func:`measure` saves), on
    ``device``: a function of the epoch number returning the loss. ``foreach``: Adam's (``None``: torch's default
    for the device)."""
    if system == "graphscale":
        return _graphscale_epoch(data, hidden, dropout, device, foreach)
    return _pyg_epoch(data, hidden, dropout, system.split("-", 1)[1], device, foreach)


def _child(system: str, path: str, hidden: int, dropout: float, warmup: int, repeats: int, threads: int,
           mode: str = "default") -> dict:
    """Body of one measurement process (module level so that spawn can import it)."""
    import warnings

    malloc = allocator.configure(mode)  # first: the system's allocations all see it (preloads are checked)
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    if threads > 0:
        torch.set_num_threads(threads)
    # import the system's libraries and load its compiled kernels on a toy graph, so that the
    # baseline below holds code and the peak measures data-dependent memory only
    toy = make_epoch(system, toy_data(), 4, dropout)
    toy(0)
    del toy
    data = torch.load(path)
    baseline = rss_bytes()
    exact_reset = reset_peak_rss()
    epoch = make_epoch(system, data, hidden, dropout)
    times, user, system_s, faults, loss = [], [], [], [], float("nan")
    for i in range(warmup + repeats):
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        loss = epoch(i)
        if i >= warmup:
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_SELF)
            user.append(after.ru_utime - before.ru_utime)
            system_s.append(after.ru_stime - before.ru_stime)
            faults.append(after.ru_minflt - before.ru_minflt)
    return {"times": times, "user": user, "system": system_s, "faults": faults,
            "peak": max(0, _peak_bytes() - baseline), "loss": loss, "exact_reset": exact_reset,
            "threads": torch.get_num_threads(), "malloc": {**malloc, **allocator.state()}}


def malloc_label(info: dict) -> str:
    """``glibc``, ``glibc retaining``, ``tcmalloc``: the malloc a process reported it ran."""
    if info["library"] != "glibc":
        return info["library"]
    return "glibc retaining" if info["retaining"] else "glibc"


def measure(graph, hidden: int = 128, dropout: float = 0.5, repeats: int = 3, warmup: int = 1,
            systems: tuple[str, ...] = SYSTEMS, threads: int = 0, mode: str = "default") -> list[dict]:
    """Time one GCN training epoch and its peak memory for each system, each in a fresh process.

    Args:
        graph: a :class:`graphscale.data.graph.Graph` with features, labels (and optionally a training mask).
        hidden: hidden width.
        dropout: dropout probability.
        repeats: timed epochs (median reported).
        warmup: untimed epochs first.
        systems: which of :data:`SYSTEMS` to run; ``graphscale`` is the reference of the ratios.
        threads: threads per process (0 = torch's default).
        mode: the allocator of every process (:data:`graphscale.allocator.BENCH_MODES`).

    Returns:
        One row per system: ``system``, ``malloc`` (what the process ran), ``s/epoch``, ``min s/epoch``,
        ``user s/epoch``, ``sys s/epoch``, ``faults/epoch``, ``speedup of graphscale``, ``peak MiB``,
        ``memory graphscale/system``, ``final loss``.

    Raises:
        graphscale.allocator.AllocatorUnavailable: ``mode`` needs a library that is not installed.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"--repeats must be >= 1 and --warmup >= 0, got {repeats} and {warmup}")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise ValueError(f"--systems: unknown {unknown or 'empty list'}; choose from {', '.join(SYSTEMS)}")
    if graph.x is None or graph.y is None:
        raise ValueError(f"dataset {graph.name!r} needs features and labels for the GCN benchmark")
    child_env = allocator.child_environment(mode)  # before any work: a missing library is the first error
    train = graph.train_mask if graph.train_mask is not None else torch.ones(graph.num_nodes, dtype=torch.bool)
    data = {"indptr": graph.indptr, "indices": graph.indices, "x": graph.x.float().contiguous(),
            "y": graph.y.clamp_min(0), "train": train, "classes": max(graph.num_classes, 2)}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    results = {}
    with tempfile.TemporaryDirectory(prefix="graphscale-peers-", dir=shm) as tmp:
        path = str(Path(tmp) / "graph.pt")
        torch.save(data, path)
        del data
        ctx = mp.get_context("spawn")
        for system in systems:
            with allocator.environment(child_env), ctx.Pool(1) as pool:
                results[system] = pool.apply(_child, (system, path, hidden, dropout, warmup, repeats, threads,
                                                      mode))
    ref = results.get("graphscale")
    rows = []
    for system, res in results.items():
        sec = statistics.median(res["times"])
        row = {"system": system, "malloc": malloc_label(res["malloc"]), "s/epoch": sec,
               "min s/epoch": min(res["times"]), "user s/epoch": statistics.median(res["user"]),
               "sys s/epoch": statistics.median(res["system"]), "faults/epoch": int(statistics.median(res["faults"])),
               "peak MiB": res["peak"] / 2**20, "final loss": res["loss"]}
        if ref is not None:
            row["speedup of graphscale"] = sec / statistics.median(ref["times"])
            row["memory graphscale/system"] = ref["peak"] / max(res["peak"], 1)
        row["threads"] = res["threads"]
        row["exact peak reset"] = "yes" if res["exact_reset"] else "no (lifetime peak)"
        rows.append(row)
    return rows


def check_model_options(args: argparse.Namespace) -> tuple[str, ...]:
    """``--hidden`` and ``--dropout`` checked (one-line errors naming them); the ``--systems`` list."""
    if args.hidden < 1:
        raise ValueError(f"--hidden must be >= 1, got {args.hidden}")
    if not 0.0 <= args.dropout < 1.0:
        raise ValueError(f"--dropout must lie in [0, 1), got {args.dropout}")
    return tuple(s.strip() for s in args.systems.split(",") if s.strip())


def run(args: argparse.Namespace) -> list[dict]:
    """Load ``args.dataset``, measure every system, print the table and the targets (and write the plot)."""
    from graphscale.bench.table import save_bar_plot
    from graphscale.data.datasets import load_dataset
    from graphscale.metrics.table import format_table

    systems = check_model_options(args)
    graph = load_dataset(args.dataset)
    rows = measure(graph, args.hidden, args.dropout, args.repeats, args.warmup, systems, args.threads,
                   args.allocator)
    title = (f"2-layer GCN epoch (forward + backward + Adam), allocator {args.allocator}, hidden {args.hidden}, "
             f"dropout {args.dropout}, on "
             f"{graph.name} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {graph.num_features} features); "
             f"median of {args.repeats} after {args.warmup} warm-up")
    columns = ["system", "malloc", "s/epoch", "min s/epoch", "user s/epoch", "sys s/epoch", "faults/epoch",
               "speedup of graphscale", "peak MiB", "memory graphscale/system", "final loss", "threads",
               "exact peak reset"]
    print(format_table(rows, [c for c in columns if c in rows[0]], title=title))
    by_name = {r["system"]: r for r in rows}
    if "graphscale" in by_name:
        for peer, (speed, memory) in TARGETS.items():
            if peer not in by_name:
                continue
            r = by_name[peer]
            line = (f"graphscale vs {peer}: {r['speedup of graphscale']:.2f}x faster (target >= {speed}x, "
                    f"{'met' if r['speedup of graphscale'] >= speed else 'NOT met'}); "
                    f"peak memory {r['memory graphscale/system']:.3f}x")
            if memory is not None:
                line += (f" (target <= {memory}x, "
                         f"{'met' if r['memory graphscale/system'] <= memory else 'NOT met'})")
            print(line)
    if args.plot and "graphscale" in by_name:
        labels = [r["system"] for r in rows]
        path = save_bar_plot(args.plot, labels, {
            "time per epoch (x graphscale)": [r["speedup of graphscale"] for r in rows],
            "peak memory (x graphscale)": [1.0 / max(r["memory graphscale/system"], 1e-12) for r in rows],
        }, "relative to graphscale", f"2-layer GCN epoch, hidden {args.hidden}: PyG / graphscale")
        print(f"plot written to {path}")
    return rows

"""``graphscale bench sampler``: neighbour-sampler throughput.

Samples mini-batches of the training vertices (all vertices when the graph has
no training mask) with :class:`graphscale.data.sampler.NeighborSampler` and
reports sampled edges per second and targets per second. The first batch, which
pays numba's compilation (or its on-disk cache load), is reported on its own
row; the steady-state row covers every later batch.

Example::

    graphscale bench sampler --dataset cora --fanouts 15,10,5 --batch-size 1024 --epochs 2
"""

from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register this benchmark's options on ``parser``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default="cora", why="a graph that is always at hand")
    add_declared(parser, "fanouts")
    add_declared(parser, "batch_size", default=1024, why="batches large enough for a steady rate")
    add_own(parser, "--epochs", type=int, default=1, help="epochs over the training vertices (default 1)",
            differs="passes of the sampler only: nothing is trained or evaluated")
    parser.add_argument("--batches", type=int, default=0,
                        help="stop each epoch after this many batches; 0 = the whole epoch (default)")
    add_declared(parser, "seed", note="here: of the sampler and the shuffling")
    parser.add_argument("--plot", default=None, metavar="PATH", help="also write a bar plot (PNG/PDF) of edges/s")


def measure(graph, fanouts: list[int], batch_size: int, epochs: int = 1, batches: int = 0,
            seed: int = 0) -> list[dict]:
    """Time the sampler on ``graph``; one row for the first batch, one for the steady state.

    Args:
        graph: a :class:`graphscale.data.graph.Graph`.
        fanouts: per-layer fanouts, input layer first.
        batch_size: targets per mini-batch.
        epochs: epochs over the training vertices.
        batches: batches per epoch to time; ``0`` = all.
        seed: seed of the sampler and of the shuffling.

    Returns:
        Rows with ``phase``, ``batches``, ``targets``, ``sampled_edges``, ``input_nodes``
        (mean ``blocks[0].num_src``), ``seconds``, ``edges_per_s``, ``targets_per_s``.

    Raises:
        ValueError: on a bad epoch / batch count (fanouts and batch size are checked by the sampler).
    """
    import torch

    from graphscale.data.sampler import MiniBatchLoader, NeighborSampler

    if epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {epochs}")
    if batches < 0:
        raise ValueError(f"--batches must be >= 0 (0 = whole epoch), got {batches}")
    train = graph.train_mask if graph.train_mask is not None and bool(graph.train_mask.any()) \
        else torch.arange(graph.num_nodes)
    sampler = NeighborSampler(graph, fanouts, seed=seed)
    loader = MiniBatchLoader(train, batch_size, seed=seed)
    stats = {phase: {"batches": 0, "targets": 0, "edges": 0, "inputs": 0, "seconds": 0.0}
             for phase in ("first call (JIT)", "steady state")}
    for epoch in range(epochs):
        todo = loader.batches(epoch)
        if batches:
            todo = todo[:batches]
        for i, targets in enumerate(todo):
            phase = "first call (JIT)" if epoch == 0 and i == 0 else "steady state"
            start = time.perf_counter()
            blocks = sampler.sample(targets, loader.batch_key(epoch, i))
            elapsed = time.perf_counter() - start
            s = stats[phase]
            s["batches"] += 1
            s["targets"] += targets.numel()
            s["edges"] += sum(b.num_edges for b in blocks)
            s["inputs"] += blocks[0].num_src
            s["seconds"] += elapsed
    rows = []
    for phase, s in stats.items():
        if s["batches"] == 0:
            continue
        secs = s["seconds"]
        rows.append({"phase": phase, "batches": s["batches"], "targets": s["targets"],
                     "sampled_edges": s["edges"], "input_nodes": s["inputs"] / s["batches"], "seconds": secs,
                     "edges_per_s": s["edges"] / secs if secs > 0 else float("nan"),
                     "targets_per_s": s["targets"] / secs if secs > 0 else float("nan")})
    return rows


def run(args: argparse.Namespace) -> list[dict]:
    """Load ``args.dataset``, time the sampler, print the table (and write the plot)."""
    from graphscale.bench.table import save_bar_plot
    from graphscale.data.datasets import load_dataset
    from graphscale.metrics.table import format_table

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    graph = load_dataset(args.dataset)
    rows = measure(graph, args.fanouts, args.batch_size, args.epochs, args.batches, args.seed)
    fanouts = ",".join(str(f) for f in args.fanouts)
    title = (f"neighbour sampler on {graph.name} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges), "
             f"fanouts {fanouts}, batch {args.batch_size}")
    print(format_table(rows, title=title))
    if args.plot:
        path = save_bar_plot(args.plot, [r["phase"] for r in rows],
                             {"sampled edges/s": [r["edges_per_s"] for r in rows]}, "sampled edges / s", title)
        print(f"plot written to {path}")
    return rows

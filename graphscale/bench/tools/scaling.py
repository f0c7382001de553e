"""``graphscale bench scaling``: single against each distributed strategy on the same graph and total cores.

For every ``W`` in ``--workers`` it times ``single`` on one process with ``W`` threads and every distributed
strategy on ``W`` workers with one thread each (the same cores), after one warm-up epoch, and prints per run:

* ``s/epoch``: the median over the timed epochs of the slowest worker's training epoch;
* ``cpu s/epoch``: the median of the CPU time all workers (all their threads, the backend's included) spent in an
  epoch: the work done, which a busy machine inflates far less than wall time; ``sys s/epoch`` is its system part
  (page faults of fresh memory show here);
* ``malloc``: the malloc every worker really ran (read back from each: :func:`graphscale.allocator.state`), set by
  ``--allocator`` as ``graphscale train`` sets it (default: ``$GRAPHSCALE_ALLOCATOR``, else ``default``);
* ``vs single``: that time over ``single``'s with ``W`` threads (the target for ``graph-parallel`` at
  ``W = 2``: at most 1.25);
* ``efficiency``: parallel efficiency ``T_single(1 thread) / (W * T)`` (1.0 = perfect scaling);
* per worker, the shares of its epoch spent in communication, waiting and computing (``comm/wait/compute``).
  Every collective a worker blocks in is timed (:attr:`DistEnv.comm_log`; for an overlapped exchange, its
  wait); since all workers run the same collectives in the same order, the ``k``-th one's *communication* is the
  shortest time any worker spent in it (the last to arrive waits for nobody) and a worker's *waiting* is what it
  spent beyond that (load imbalance: it arrived early). Compute is the rest of the epoch.

``graph-parallel`` runs in two variants by default (``--overlap both``): with its halo exchange overlapped with
the interior rows' computation and without (exchange first, then the whole block), set up side by side in the
same workers and taking turns epoch by epoch, so the table shows before and after measured under the same load. Mini-batch strategies (``data-parallel``, ``split-parallel``) are
compared with ``single --minibatch`` at the same batch size and fanouts.

Example (the graph of docs/benchmarks.md; the default is smaller)::

    graphscale bench scaling --dataset sbm:nodes=1000000,degree=10,features=128 --workers 1,2
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from graphscale.metrics.table import format_table

STRATEGIES = ("graph-parallel", "data-parallel", "split-parallel")
MINIBATCH = {"data-parallel", "split-parallel"}
DEFAULT_DATASET = "sbm:nodes=300000,degree=10,features=128"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench scaling``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default=DEFAULT_DATASET, why="an epoch long enough to time on 2 cores")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated distributed strategies (default {','.join(STRATEGIES)})")
    add_declared(parser, "workers", grid=True, default=[1, 2], note="single runs with as many threads",
                 why="one thread per worker on a 2-core machine")
    add_own(parser, "--epochs", type=int, default=3, help="timed epochs after one warm-up epoch (default 3)",
            differs="timed training epochs of the strategies alone: no evaluation, no accuracy")
    add_declared(parser, "model")
    add_declared(parser, "hidden", default=None, why="the model's preset, as train")
    add_declared(parser, "batch_size", default=1024, note="here: of the mini-batch strategies",
                 why="batches large enough to time")
    add_declared(parser, "fanouts", note="here: of the mini-batch strategies")
    parser.add_argument("--overlap", choices=["both", "on", "off"], default="both",
                        help="graph-parallel with its halo exchange overlapped, without, or both (default both)")
    add_declared(parser, "allocator")
    add_declared(parser, "json", note="here: the rows and timings")


def bench_worker(env, config, data, threads: int, variants: list[bool], epochs: int) -> dict:
    """One worker: set up one strategy per variant (``graph-parallel``: overlap on / off; otherwise one), one
    warm-up epoch each, then ``epochs`` timed ones, the variants taking turns epoch by epoch (so that a change of
    the machine's load hits them alike), every collective timed."""
    from graphscale.nn.models import build_model
    from graphscale.registry import STRATEGIES as REGISTRY
    from graphscale.strategies.graph_parallel import GraphParallel

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    strategies = []
    try:
        for overlap in variants:
            torch.manual_seed(config.seed)
            model = build_model(config.model, data.num_features, data.num_classes, seed=config.seed,
                                dtype=getattr(torch, config.dtype)).to(env.device)
            name = config.strategy.name
            strategy = GraphParallel(overlap=overlap) if name == "graph-parallel" else REGISTRY.get(name)()
            strategy.setup(data, model, env, config)
            strategies.append(strategy)
        env.comm_log = []
        out = [{"seconds": [], "cpu_seconds": [], "sys_seconds": [], "comm": []} for _ in strategies]
        for epoch in range(epochs + 1):
            for strategy, record in zip(strategies, out):
                env.comm_log.clear()
                cpu = time.process_time()
                sys_time = resource.getrusage(resource.RUSAGE_SELF).ru_stime
                stats = strategy.train_epoch(epoch)
                if epoch > 0:
                    record["seconds"].append(stats.seconds)
                    record["cpu_seconds"].append(time.process_time() - cpu)
                    record["sys_seconds"].append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys_time)
                    record["comm"].append([d for _, _, d in env.comm_log])
        from graphscale import allocator

        return {"rank": env.rank, "variants": out, "allocator": allocator.state()}
    finally:
        env.comm_log = None
        for strategy in strategies:
            strategy.teardown()
        torch.set_num_threads(before)


def shares(results: list[dict]) -> list[dict] | None:
    """Per worker: seconds of communication, waiting and compute summed over the timed epochs (module docstring);
    ``None`` when the workers' collectives do not line up."""
    out = [{"comm": 0.0, "wait": 0.0, "total": sum(r["seconds"])} for r in results]
    for epoch in range(len(results[0]["seconds"])):
        logs = [r["comm"][epoch] for r in results]
        if len({len(log) for log in logs}) != 1:
            return None
        for k in range(len(logs[0])):
            transfer = min(log[k] for log in logs)
            for w, log in enumerate(logs):
                out[w]["comm"] += transfer
                out[w]["wait"] += log[k] - transfer
    for w in out:
        w["compute"] = max(0.0, w["total"] - w["comm"] - w["wait"])
    return out


def cpu_seconds(results: list[dict]) -> float:
    """Median over the timed epochs of the workers' summed CPU time (all their threads): the work done, which
    other processes on the machine do not inflate as they do wall time."""
    epochs = len(results[0]["cpu_seconds"])
    return statistics.median(sum(r["cpu_seconds"][e] for r in results) for e in range(epochs))


def sys_seconds(results: list[dict]) -> float:
    """Median over the timed epochs of the workers' summed system time (page faults, syscalls)."""
    epochs = len(results[0]["sys_seconds"])
    return statistics.median(sum(r["sys_seconds"][e] for r in results) for e in range(epochs))


def malloc_of(results: list[dict]) -> str:
    """The malloc the workers ran (``glibc retaining``...), one label when they all agree."""
    from graphscale.bench.peers.peers import malloc_label

    labels = sorted({malloc_label(r["allocator"]) for r in results})
    return " | ".join(labels)


def epoch_seconds(results: list[dict]) -> float:
    """Median over the timed epochs of the slowest worker's epoch."""
    return statistics.median(max(r["seconds"][e] for r in results) for e in range(len(results[0]["seconds"])))


def _config(args: argparse.Namespace, strategy: str, workers: int, minibatch: bool):
    from graphscale.config import build_config

    sc: dict = {"name": strategy, "workers": workers}
    if strategy == "single" and minibatch:
        sc["minibatch"] = True
    if minibatch:
        sc.update(batch_size=args.batch_size, fanouts=list(args.fanouts))
    model: dict = {"name": args.model}
    if args.hidden is not None:
        model["hidden"] = args.hidden
    return build_config({"data": {"dataset": args.dataset}, "model": model, "strategy": sc, "progress": False,
                         "oversubscribe": True})


def measure(args: argparse.Namespace, strategy: str, workers: int, threads: int, variants: list[bool],
            minibatch: bool) -> list[list[dict]]:
    """Per variant, every worker's timings of one run (data prepared here, as a training run does)."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = _config(args, strategy, workers, minibatch)
    data = prepare_data(config)
    results = launch(bench_worker, workers, config, data, threads, variants, args.epochs, device="cpu",
                     timeout_s=config.strategy.timeout, allocator_mode=args.allocator)
    results = sorted(results, key=lambda r: r["rank"])
    return [[{**r["variants"][v], "allocator": r["allocator"]} for r in results] for v in range(len(variants))]


def run(args: argparse.Namespace) -> int:
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    overlaps = {"both": [True, False], "on": [True], "off": [False]}[args.overlap]
    single: dict[tuple[bool, int], float] = {}
    rows, raw = [], []
    for minibatch in sorted({s in MINIBATCH for s in strategies}):
        for threads in sorted(set(args.workers) | {1}):
            results = measure(args, "single", 1, threads, [True], minibatch)[0]
            t = epoch_seconds(results)
            single[(minibatch, threads)] = t
            label = "single --minibatch" if minibatch else "single"
            if threads in args.workers:
                rows.append({"strategy": label, "W": 1, "threads": threads, "malloc": malloc_of(results),
                             "s/epoch": t, "cpu s/epoch": cpu_seconds(results), "sys s/epoch": sys_seconds(results),
                             "vs single": 1.0, "efficiency": single[(minibatch, 1)] / (threads * t),
                             "comm/wait/compute per worker": "-"})
            raw.append({"strategy": label, "workers": 1, "threads": threads, "results": results})
    for strategy in strategies:
        minibatch = strategy in MINIBATCH
        variants = overlaps if strategy == "graph-parallel" else [True]
        for w in args.workers:
            for overlap, results in zip(variants, measure(args, strategy, w, 1, variants, minibatch)):
                label = strategy + ("" if strategy != "graph-parallel" else
                                    (" overlap" if overlap else " no-overlap"))
                t = epoch_seconds(results)
                split = shares(results)
                text = "-" if split is None else " | ".join(
                    f"{100 * s['comm'] / s['total']:.0f}/{100 * s['wait'] / s['total']:.0f}/"
                    f"{100 * s['compute'] / s['total']:.0f}%" for s in split)
                rows.append({"strategy": label, "W": w, "threads": 1, "malloc": malloc_of(results), "s/epoch": t,
                             "cpu s/epoch": cpu_seconds(results), "sys s/epoch": sys_seconds(results),
                             "vs single": t / single[(minibatch, w)],
                             "efficiency": single[(minibatch, 1)] / (w * t),
                             "comm/wait/compute per worker": text})
                raw.append({"strategy": label, "workers": w, "threads": 1, "results": results, "shares": split})
    print(format_table(rows, title=f"bench scaling: {args.model} on {args.dataset}, {args.epochs} timed epochs "
                                   "(single: W threads; distributed: W workers x 1 thread)"))
    if args.json:
        from graphscale.data.formats import write_json_atomic

        write_json_atomic(args.json, {"rows": rows, "runs": raw}, option="--json")
    return 0

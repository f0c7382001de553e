"""``graphscale bench task``'s accuracy sections: test accuracy of the variants over seeds (``accuracy``) and
against the subgraph count with the measured keep rate (``subgraphs``); see :mod:`graphscale.bench.papers.neutrontask.task`."""

from __future__ import annotations

import statistics

from graphscale.bench.papers.neutrontask.runs import TP, TP_TD, Section, graph_spec, load, tp_flags, tp_plan, train_run
from graphscale.bench.table import split_specs


def _accuracy(report: dict) -> list[float]:
    """Test accuracy (at the best validation epoch) of every seed of a ``--repeat`` report."""
    return [r["final"]["test_acc"] for r in report["runs"]] if "runs" in report else [report["final"]["test_acc"]]


def accuracy(args) -> Section:
    """Decoupled against coupled against ``single`` GCN over seeds (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    out = Section("accuracy")
    rows = []
    for name in split_specs(args.accuracy_graphs):
        graph = load(name, args, args.accuracy_nodes)
        variants = [("single GCN", ["--strategy", "single"], 1),
                    ("single decoupled", ["--strategy", "single", "--decoupled", "on"], 1),
                    ("task-parallel decoupled", tp_flags(TP_TD, tp_plan(graph, 2, args, True)), args.workers),
                    ("task-parallel coupled", tp_flags(TP, tp_plan(graph, 2, args, False)), args.workers)]
        base = None
        for label, flags, workers in variants:
            report = train_run(args, out, label, graph_spec(name, args, args.accuracy_nodes), flags, workers,
                            args.epochs, extra=["--repeat", str(args.seeds)])
            if report is None:
                continue
            accs = _accuracy(report)
            mean = statistics.mean(accs)
            base = mean if base is None else base
            rows.append({"graph": name, "model / strategy": label, "workers": workers, "seeds": len(accs),
                         "test acc": 100 * mean, "std": 100 * (statistics.stdev(accs) if len(accs) > 1 else 0.0),
                         "gap to single GCN (points)": 100 * (mean - base)})
    out.tables.append(((f"Test accuracy at the best validation epoch, {args.epochs} epochs, 2-layer GCN H={args.hidden}, "
                       f"{args.seeds} seeds, task-parallel causal with 4 METIS chunks in 4 subgraphs (Fig. 13 "
                       "analogue)"), rows))
    return out


def subgraphs(args) -> Section:
    """Accuracy against the subgraph count in ``causal`` mode, and the keep rate (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    from graphscale.strategies.task_parallel.chunks import assign_chunks, expected_keep_rate, keep_rate, layout

    out = Section("subgraphs")
    bad = [s for s in args.subgraph_counts if s < 1 or args.chunks % s]
    if bad:
        raise ValueError(f"--subgraph-counts {','.join(map(str, bad))} do not divide --chunks {args.chunks}")
    rows = []
    for name in split_specs(args.subgraph_graphs):
        graph = load(name, args, args.accuracy_nodes)
        plan = tp_plan(graph, 2, args, True)
        chunk_of = assign_chunks(graph, args.chunks, "partitioner", args.partitioner, "", 0)  # the runs' chunks
        base = None
        for count in args.subgraph_counts:
            flags = ["--subgraphs", str(count), "--chunks", str(args.chunks), "--dependency", "causal"]
            report = train_run(args, out, f"S={count}", graph_spec(name, args, args.accuracy_nodes),
                            tp_flags(TP_TD, plan), args.workers, args.epochs, extra=flags)
            if report is None:
                continue
            acc = report["final"]["test_acc"]
            base = acc if base is None else base
            # the fraction of cross-chunk edges the run's masks kept, epoch by epoch (the same shuffles: seed 0)
            kept = [keep_rate(graph, chunk_of, layout(args.chunks, count, 0, e).sub) for e in range(args.epochs)]
            rows.append({"graph": name, "S": count, "M": args.chunks, "test acc": 100 * acc,
                         "change vs first S (points)": 100 * (acc - base),
                         "keep rate measured": statistics.mean(kept),
                         "keep rate (M+k-2)/(2(M-1))": expected_keep_rate(args.chunks, args.chunks // count)})
    out.tables.append(((f"Task-parallel decoupled, causal mode, {args.chunks} METIS chunks, {args.epochs} epochs, seed 0 "
                       "(Fig. 14b analogue: paper < 1 point lost from 1 to 6 subgraphs); keep rate: cross-chunk edges "
                       "kept per epoch, mean over the run's epochs"), rows))
    return out

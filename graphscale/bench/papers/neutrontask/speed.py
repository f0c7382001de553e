"""``graphscale bench task``'s speed sections: serial against pipelined makespan, modelled and measured
(``pipeline``), and the TP+DM / +TD / +TS ablation (``ablation``); see :mod:`graphscale.bench.papers.neutrontask.task`."""

from __future__ import annotations

import itertools

from graphscale.bench.papers.neutrontask.runs import (
    TP,
    TP_TD,
    Section,
    graph_spec,
    load,
    td_widths,
    total_bytes,
    tp_flags,
    tp_plan,
    train_run,
)
from graphscale.bench.table import format_bytes, split_specs


def subgraph_sizes(graph, count: int) -> tuple[list[int], list[int]]:
    """Rows and in-edges of ``count`` contiguous, equal vertex ranges (the modelled subgraphs: METIS chunks are
    balanced, so equal sizes; the in-edges of a range stand for a subgraph's)."""
    import numpy as np

    bounds = np.linspace(0, graph.num_nodes, count + 1).round().astype(np.int64)
    indptr = graph.indptr.numpy() if hasattr(graph.indptr, "numpy") else np.asarray(graph.indptr)
    return (np.diff(bounds).tolist(), [int(indptr[b] - indptr[a]) for a, b in itertools.pairwise(bounds)])


def pipeline(args) -> Section:
    """Serial against pipelined makespan, modelled at GPU speeds (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    from graphscale.strategies.task_parallel.plan import make_plan, task_costs
    from graphscale.strategies.task_parallel.simulate import ALL_KINDS, analyse, modelled_costs, simulate

    out = Section("pipeline")
    rows = []
    speeds = {"flops": args.gpu_flops, "bandwidth": args.gpu_bandwidth}
    for name in split_specs(args.graphs):
        graph = load(name, args)
        vertices, edges = subgraph_sizes(graph, args.pipeline_subgraphs)
        for layers in args.depths:
            widths = td_widths(graph, layers, args.hidden)
            t_t, t_p = task_costs(graph.num_nodes, graph.num_edges, widths, gamma=args.gamma, **speeds)
            plan = make_plan(args.workers, layers, costs=(t_t, t_p))
            costs = modelled_costs(plan, vertices, edges, widths, link_bandwidth=args.link_bandwidth,
                                   gamma=args.gamma, **speeds)
            serial = simulate(plan, costs, serial=True)
            piped = simulate(plan, costs)
            rows.append({"graph": name, "L": layers, "plan": plan.describe(), "T_t ms": 1e3 * t_t,
                         "T_p ms": 1e3 * t_p, "serial ms": 1e3 * serial.makespan,
                         "pipelined ms": 1e3 * piped.makespan, "serial / pipelined": serial.makespan / piped.makespan,
                         "overlap": round(analyse(piped.records(ALL_KINDS))["overlap"], 3)})
            out.data.setdefault("pipeline", []).append((f"{name} L={layers}", serial.makespan, piped.makespan))
    _measured_pipeline(args, out)
    out.tables.insert(0, ((f"Modelled epoch (not measured): {args.pipeline_subgraphs} subgraphs, causal, recompute, on "
                       f"{args.workers} devices of {args.gpu_flops:g} FLOP/s and {args.gpu_bandwidth:g} B/s, links "
                       f"{args.link_bandwidth:g} B/s, gamma {args.gamma} (Fig. 14a analogue: paper 1.2-1.5x)"), rows))
    return out


def timeline_records(epoch: dict) -> list[tuple]:
    """An epoch's per-task timestamps of every worker (``extra["timeline"]``: ``(segment, kind, phase, subgraph,
    layer, start, end)``) as :func:`~graphscale.strategies.task_parallel.simulate.analyse` reads them: ``(rank,
    subgraph, kind_phase, start, end)``."""
    return [(rank, sub, f"{kind}_{phase}", start, end)
            for rank, extra in enumerate(epoch["extra_per_worker"])
            for _, kind, phase, sub, _, start, end in extra.get("timeline", [])]


def _measured_pipeline(args, out: Section) -> None:
    """Serial against pipelined makespan from the strategy's per-task timestamps (the last of
    ``--pipeline-epochs`` epochs), next to the modelled ratio of the same graph and plan."""
    from graphscale.strategies.task_parallel.simulate import analyse, modelled_costs, simulate

    rows = []
    for name in split_specs(args.pipeline_graphs):
        graph = load(name, args)
        plan = tp_plan(graph, 2, args, True)
        vertices, edges = subgraph_sizes(graph, args.pipeline_subgraphs)
        costs = modelled_costs(plan, vertices, edges, td_widths(graph, 2, args.hidden), flops=args.gpu_flops,
                               bandwidth=args.gpu_bandwidth, link_bandwidth=args.link_bandwidth, gamma=args.gamma)
        modelled = simulate(plan, costs, serial=True).makespan / simulate(plan, costs).makespan
        measured = {}
        for schedule in ("pipelined", "no-pipelined"):
            report = train_run(args, out, f"pipeline {schedule}", graph_spec(name, args), tp_flags(TP_TD, plan),
                            args.workers, args.pipeline_epochs,
                            extra=[f"--{schedule}", "--subgraphs", str(args.pipeline_subgraphs)])
            if report is not None:
                measured[schedule] = analyse(timeline_records(report["epochs"][-1]))
        if len(measured) < 2:
            continue
        piped, serial = measured["pipelined"], measured["no-pipelined"]
        rows.append({"graph": name, "plan": plan.describe(), "S": args.pipeline_subgraphs,
                     "serial makespan ms": 1e3 * serial["makespan"], "pipelined makespan ms": 1e3 * piped["makespan"],
                     "serial / pipelined": serial["makespan"] / piped["makespan"],
                     "overlap serial": round(serial["overlap"], 3), "overlap pipelined": round(piped["overlap"], 3),
                     "pipelined: subgraph spans summed ms": 1e3 * piped["serial_estimate"],
                     "modelled serial / pipelined (GPU speeds)": modelled})
    out.tables.append(((f"Measured epoch (task timestamps of the last of {args.pipeline_epochs} epochs, {args.workers} "
                       "CPU workers on shared cores: wall-clock ratios here say little about GPUs) against the "
                       "modelled ratio; overlap: fraction of the makespan with two or more subgraphs in flight"), rows))


def ablation(args) -> Section:
    """TP+DM, +TD, +TS: epoch seconds here (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    out = Section("ablation")
    rows = []
    # --p-split subgraphs (the artifact's): any T worker count fits, so the scheduling model has a choice
    fixed = ["--dependency", "causal", "--p-split", "subgraphs"]
    steps = [("TP+DM", TP + fixed + ["--t-workers", "1"]),
             ("+TD", TP_TD + fixed + ["--t-workers", "1"]),
             ("+TS", TP_TD + fixed)]
    for name in split_specs(args.ablation_graphs):
        base = None
        for label, flags in steps:
            report = train_run(args, out, label, graph_spec(name, args, args.accuracy_nodes), flags, args.workers,
                            args.ablation_epochs)
            if report is None:
                continue
            secs = report["final"]["mean_epoch_seconds"]
            base = secs if base is None else base
            roles = [e["role"][0] for e in report["epochs"][-1]["extra_per_worker"]]
            rows.append({"graph": name, "variant": label, "T / P workers": f"{roles.count('T')} / {roles.count('P')}",
                         "s/epoch": secs, "speed-up vs TP+DM": base / secs,
                         "bytes/epoch": format_bytes(total_bytes(report))})
    out.tables.append(((f"Ablation on {args.workers} CPU workers, 2-layer GCN H={args.hidden}, {args.ablation_epochs} "
                       "epochs, --p-split subgraphs (Fig. 12 analogue: paper +TD 1.8-2.9x, +TS 1.35-1.39x on GPUs; "
                       "+TS: the scheduling model at this machine's measured speeds; CPU times on shared cores are "
                       "indicative only)"), rows))
    return out

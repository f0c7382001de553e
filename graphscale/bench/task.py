"""``graphscale bench task``: NeutronTask's hardware-independent results (issue 12's "Measurements"), on this machine.

Each section is a function of the parsed arguments returning a :class:`Section` (tables, failed runs, notes);
``--sections`` picks them. Every ratio is against a baseline computed in the same run. Train runs are
``graphscale train ... --json`` subprocesses (:func:`graphscale.bench.memory.train_once`: a fresh interpreter, so
the OS-measured peaks are the run's own); a run that fails is listed under its section's table with its
configuration.

* ``comm`` (Fig. 15 analogue): bytes per epoch on ``--workers`` workers for every graph and depth. Graph
  parallelism's are its exact closed form (:func:`~graphscale.strategies.graph_parallel.halo_bytes_per_epoch` over
  a ``--partitioner`` partition into ``--workers`` parts, plus the gradient all-reduce), which the tests hold its
  Ledger to; graphs of at most ``--measure-nodes`` vertices are also trained for one epoch with graph-parallel,
  task-parallel coupled (TP) and decoupled (TP+TD), whose Ledger totals are printed next to it.
* ``memory`` (Fig. 10 / Table 1 analogue): per worker, the design's parts (node data, replicas
  ``MR = (|B_i| + |V_i|) sum_l d_l b``, intermediates ``ID = 2 |V_i| sum_l d_{l+1} b``, parameters with their
  gradients and Adam state) from the formulas of spec §3.2 / §3.4 for this worker's rows, what the tracked peak
  holds beyond them, against the strategy's tracked peak (resident + autograd-saved) and the OS-measured peak
  (``VmHWM``) and anonymous growth of a 2-epoch run.
* ``replication`` (Table 2 analogue): ``alpha`` of a ``--partitioner`` partition into 1..64 parts
  (:func:`~graphscale.strategies.task_parallel.plan.replication_alpha`) and, for ``--hybrid-workers``, the
  ``alpha`` of graph parallelism on all of them against that of the P groups of a hybrid plan.
* ``accuracy`` (Fig. 13 analogue): test accuracy at the best validation epoch over ``--seeds`` seeds: ``single``
  standard GCN (the baseline), ``single`` decoupled, task-parallel decoupled and coupled.
* ``subgraphs`` (Fig. 14b analogue): task-parallel decoupled in ``causal`` mode with ``S`` in ``--subgraph-counts``
  (``--chunks`` chunks), accuracy against the first ``S``, and the expected keep rate of a cross-chunk edge
  ``(M + k - 2) / (2 (M - 1))``.
* ``pipeline`` (Fig. 14a analogue, *modelled*): the discrete-event model
  (:mod:`graphscale.strategies.task_parallel.simulate`) fed the Eq. 5-6 costs at the speeds of the spec's GPU
  server (``--gpu-flops``, ``--gpu-bandwidth``, ``--link-bandwidth``): serial against pipelined makespan of
  ``--pipeline-subgraphs`` subgraphs, per graph and depth, with the plan the scheduling model picks.
* ``ablation`` (Fig. 12 analogue): task-parallel with dependency management only (coupled, ``causal``, one T
  worker), + task decoupling, + task scheduling (the model's T worker count), epoch seconds here against TP+DM's.

Example (the defaults run in a few minutes on 2 cores)::

    graphscale bench task --sections comm,replication,pipeline --plot task.png
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from graphscale.bench.memory import node_data_bytes, train_once
from graphscale.bench.table import format_bytes, format_table, int_list, save_figure, split_specs

SECTIONS = ("comm", "memory", "replication", "accuracy", "subgraphs", "pipeline", "ablation")
#: the synthetic power-law graphs: degree-corrected SBM (power-law degrees, exponent 2.5) at these average degrees
DEGREES = (4, 10, 25, 50)
#: average degree from which a graph counts as dense in the comm summary (the paper's reddit: 492; products: 51)
DENSE_DEGREE = 20
#: the spec's GPU server (§5): A5000 FP32 rate and memory bandwidth, PCIe 4.0 x16 effective bandwidth
GPU_FLOPS, GPU_BANDWIDTH, LINK_BANDWIDTH = 27.8e12, 768e9, 25e9
#: command-line options of the task-parallel variants (strategy `task-parallel`, model option --decoupled)
TP = ["--strategy", "task-parallel", "--decoupled", "off"]
TP_TD = ["--strategy", "task-parallel", "--decoupled", "on"]
GP = ["--strategy", "graph-parallel"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench task``."""
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated sections among {', '.join(SECTIONS)} (default all)")
    parser.add_argument("--graphs", default="cora," + ",".join(f"sbm-{d}" for d in DEGREES),
                        help="comma-separated graphs: cora, sbm-D (power-law SBM of --nodes vertices, average degree "
                             "D), or dataset specs")
    parser.add_argument("--nodes", type=int, default=20_000, help="vertices of the sbm-D graphs (default 20000)")
    parser.add_argument("--features", type=int, default=128, help="feature width of the sbm-D graphs (default 128)")
    parser.add_argument("--workers", type=int, default=4, help="workers (default 4)")
    parser.add_argument("--depths", type=int_list, default=[2, 4, 8], help="layer counts (default 2,4,8)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden width (default 128, the paper's for cora)")
    parser.add_argument("--partitioner", default="metis", help="graph parallelism's partitioner (default metis)")
    parser.add_argument("--measure-nodes", type=int, default=5_000,
                        help="comm: also train graphs of at most this many vertices and print the Ledger's bytes "
                             "(default 5000: cora)")
    parser.add_argument("--memory-graphs", default="cora",
                        help="memory: comma-separated graphs trained for the memory table (default cora)")
    parser.add_argument("--parts", type=int_list, default=[1, 2, 4, 8, 16, 32, 64],
                        help="replication: partition counts (default 1,2,4,8,16,32,64)")
    parser.add_argument("--hybrid-workers", type=int_list, default=[8],
                        help="replication: worker counts of the hybrid comparison, 2-layer TD model, half T, half P "
                             "(default 8, the paper's)")
    parser.add_argument("--accuracy-graphs", default="cora,sbm-10",
                        help="accuracy / subgraphs: comma-separated graphs (default cora,sbm-10)")
    parser.add_argument("--epochs", type=int, default=100, help="accuracy / subgraphs: epochs per run (default 100)")
    parser.add_argument("--seeds", type=int, default=3, help="accuracy: seeds (default 3)")
    parser.add_argument("--subgraph-counts", type=int_list, default=[1, 2, 3, 4, 5, 6],
                        help="subgraphs: S values (default 1..6); each must divide --chunks")
    parser.add_argument("--chunks", type=int, default=60, help="subgraphs: chunks M (default 60 = lcm of 1..6)")
    parser.add_argument("--pipeline-subgraphs", type=int, default=4,
                        help="pipeline: subgraphs of the modelled epoch (default 4, the paper's)")
    parser.add_argument("--gpu-flops", type=float, default=GPU_FLOPS,
                        help=f"pipeline: FLOP/s of a modelled device (default {GPU_FLOPS:g}, an A5000)")
    parser.add_argument("--gpu-bandwidth", type=float, default=GPU_BANDWIDTH,
                        help=f"pipeline: memory bytes/s of a modelled device (default {GPU_BANDWIDTH:g})")
    parser.add_argument("--link-bandwidth", type=float, default=LINK_BANDWIDTH,
                        help=f"pipeline: bytes/s between modelled devices and from the host (default "
                             f"{LINK_BANDWIDTH:g}, PCIe 4.0 x16)")
    parser.add_argument("--gamma", type=float, default=0.5, help="pipeline: Eq. 6's gamma (default 0.5)")
    parser.add_argument("--ablation-epochs", type=int, default=3, help="ablation: epochs per run (default 3)")
    parser.add_argument("--train-args", default="", help="extra arguments for every train run (quoted)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per train run (default 900)")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="write the comm bytes and the modelled pipeline makespans here")


@dataclass
class Section:
    """What a section prints: tables (title, rows), runs that failed (configuration, message), notes."""

    name: str
    tables: list[tuple[str, list[dict]]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # what --plot draws


# --------------------------------------------------------------------------------------- shared helpers


def graph_spec(name: str, args) -> str:
    """The dataset spec of a ``--graphs`` entry (``sbm-D`` expanded)."""
    if name.startswith("sbm-") and name[4:].replace(".", "", 1).isdigit():
        return f"sbm:nodes={args.nodes},degree={name[4:]},features={args.features},seed=0"
    return name


def load(name: str, args):
    """The training graph of a ``--graphs`` entry, named after it."""
    from graphscale.prepare import training_graph

    graph = training_graph(graph_spec(name, args))
    graph.name = name
    return graph


def model_of(graph, layers: int, hidden: int):
    """A GCN of ``layers`` layers for ``graph`` (the standard, coupled model)."""
    from graphscale.config import ModelConfig
    from graphscale.nn.models import build_model

    return build_model(ModelConfig(name="gcn", hidden=hidden, layers=layers, dropout=0.0),
                       max(graph.num_features, 1), graph.num_classes)


def td_widths(graph, layers: int, hidden: int) -> list[int]:
    """``(d^1, ..., d^{L+1})`` of the decoupled model's MLP: features, hidden..., classes."""
    return [max(graph.num_features, 1)] + [hidden] * (layers - 1) + [graph.num_classes]


def total_bytes(report: dict) -> int:
    """Bytes per epoch of a report, summed over the Ledger's categories."""
    b = report["final"]["bytes_per_epoch"]
    return int(sum(b.values())) if isinstance(b, dict) else int(b or 0)


def _train(args, section: Section, label: str, dataset: str, flags: Sequence[str], workers: int, epochs: int,
           layers: int = 2, seed: int = 0, extra: Sequence[str] = ()) -> dict | None:
    """One train run (``flags`` = ``["--strategy", NAME, *options]``); ``None``, and a line under the section,
    when it failed."""
    report = train_once(dataset, flags[1], workers, epochs, "gcn", args.hidden,
                        extra=["--layers", str(layers), "--seed", str(seed), *flags[2:], *extra,
                               *args.train_args.split()], timeout=args.timeout)
    if "error" in report:
        section.failed.append(f"{label} on {dataset} ({' '.join([*flags, *extra])}, {workers} workers, {layers} "
                              f"layers, seed {seed}): {report['error']}")
        return None
    return report


# --------------------------------------------------------------------------------------- sections


def comm(args) -> Section:
    """Bytes per epoch, graph parallelism against TP and TP+TD (module docstring)."""
    from graphscale.partition.base import halo_sizes
    from graphscale.prepare import build_vertex_partitioner
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch, halo_bytes_per_epoch
    from graphscale.strategies.pipeline.reference import learned_input

    out = Section("comm")
    rows, ratios = [], {"dense": [], "sparse": []}
    for name in split_specs(args.graphs):
        graph = load(name, args)
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo = halo_sizes(graph, owner, args.workers).tolist()
        alpha = 1 + sum(halo) / graph.num_nodes
        degree = graph.num_edges / graph.num_nodes
        measure = graph.num_nodes <= args.measure_nodes
        for layers in args.depths:
            model = model_of(graph, layers, args.hidden)
            params = sum(p.numel() for p in model.parameters())
            gp = (halo_bytes_per_epoch(halo, model.layer_widths(), 4, learned_input(model))
                  + allreduce_bytes_per_epoch(params, args.workers, 4) + 2 * (args.workers - 1) * 8)  # + loss sum
            row = {"graph": name, "|V|": graph.num_nodes, "avg deg": round(degree, 1), "alpha": round(alpha, 2),
                   "L": layers, "graph-parallel (closed form)": format_bytes(gp)}
            if measure:
                runs = {label: _train(args, out, label, graph_spec(name, args), flags, args.workers, 1, layers)
                        for label, flags in (("graph-parallel", GP), ("TP", TP),
                                             ("TP+TD", TP_TD))}
                measured = {k: total_bytes(r) for k, r in runs.items() if r is not None}
                for label in ("graph-parallel", "TP", "TP+TD"):
                    row[f"{label} (Ledger)"] = format_bytes(measured[label]) if label in measured else ""
                base = measured.get("graph-parallel")
                if base is not None:
                    row["closed form = Ledger"] = "yes" if base == gp else f"no ({base - gp:+,} B)"
                for label in ("TP", "TP+TD"):
                    value = measured.get(label)
                    if value is not None and base:
                        row[f"{label} / GP"] = value / base
                        ratios["dense" if degree >= DENSE_DEGREE else "sparse"].append((label, value / base))
            rows.append(row)
            out.data.setdefault("comm", []).append((f"{name} L={layers}", gp))
    columns = ["graph", "|V|", "avg deg", "alpha", "L", "graph-parallel (closed form)", "graph-parallel (Ledger)",
               "closed form = Ledger", "TP (Ledger)", "TP+TD (Ledger)", "TP / GP", "TP+TD / GP"]
    rows = [{c: r.get(c, "") for c in columns} for r in rows]
    out.tables.append(((f"Bytes per epoch on {args.workers} workers, GCN H={args.hidden}, fp32 (Fig. 15 analogue); "
                       f"graph-parallel: {args.partitioner} partition, halo + gradient all-reduce + loss sum"), rows))
    for kind, pairs in ratios.items():
        for label in ("TP", "TP+TD"):
            values = [v for lab, v in pairs if lab == label]
            if values:
                out.notes.append(f"{label} against graph-parallel on the {kind} graphs (avg deg "
                                 f"{'>=' if kind == 'dense' else '<'} {DENSE_DEGREE}): {100 * (statistics.mean(values) - 1):+.1f}% "
                                 "on average (paper: TP+TD -54.2%, TP above graph-parallel on sparse graphs)")
    return out


def memory(args) -> Section:
    """Per-worker memory: the formulas' parts against the tracked and OS-measured peaks (module docstring)."""
    from graphscale.partition.base import halo_sizes, partition_sizes
    from graphscale.prepare import build_vertex_partitioner

    out = Section("memory")
    rows = []
    layers = 2
    for name in split_specs(args.memory_graphs):
        graph = load(name, args)
        model = model_of(graph, layers, args.hidden)
        widths = model.layer_widths() + [graph.num_classes]
        params = sum(p.numel() for p in model.parameters())
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo, inner = halo_sizes(graph, owner, args.workers).tolist(), partition_sizes(owner, args.workers).tolist()
        runs = {label: _train(args, out, label, graph_spec(name, args), flags, args.workers, 2, layers)
                for label, flags in (("graph-parallel", GP), ("TP", TP),
                                     ("TP+TD", TP_TD))}
        gp = runs["graph-parallel"]
        for label, report in runs.items():
            if report is None:
                continue
            final = report["final"]
            osm = final.get("os_memory_per_worker") or [None] * args.workers
            for rank, tracked in enumerate(final.get("peak_memory_per_worker") or []):
                m = osm[rank] or {}
                row = {"graph": name, "strategy": label, "worker": rank}
                if label == "graph-parallel":
                    # spec §3.2 / §3.4 for this worker: MR = (|B_i| + |V_i|) sum_l d_l, ID = 2 |V_i| sum_l d_{l+1}
                    mr = (halo[rank] + inner[rank]) * sum(widths[:layers]) * 4
                    ids = 2 * inner[rank] * sum(widths[1:layers + 1]) * 4
                    parts = {"node data": node_data_bytes({"nodes": inner[rank], "features": graph.num_features}),
                             "replicas (MR)": mr, "intermediates (ID)": ids, "parameters (+grad, Adam)": 4 * params * 4}
                    row.update({k: format_bytes(v) for k, v in parts.items()})
                    row["formulas / tracked"] = sum(parts.values()) / tracked if tracked else None
                    row["rest (topology, plans)"] = format_bytes(tracked - sum(parts.values()))
                row.update({"tracked": format_bytes(tracked),
                            "OS peak RSS": format_bytes(m["peak_rss"]) if m.get("peak_rss") else "",
                            "anon above start": (format_bytes(m["peak_anon"] - m["baseline_anon"])
                                                 if m.get("peak_anon") is not None and m.get("baseline_anon") is not None
                                                 else "")})
                if gp is not None and label != "graph-parallel":
                    base = max(gp["final"]["peak_memory_per_worker"])
                    row["tracked / GP max"] = tracked / base if base else None
                rows.append(row)
    columns = ["graph", "strategy", "worker", "node data", "replicas (MR)", "intermediates (ID)",
               "parameters (+grad, Adam)", "rest (topology, plans)", "formulas / tracked", "tracked",
               "tracked / GP max", "OS peak RSS", "anon above start"]
    out.tables.append(((f"Peak memory per worker, {args.workers} workers, GCN {layers} layers H={args.hidden}, fp32, "
                       "2 epochs (Fig. 10 analogue): formulas for the worker's rows against the tracked peak "
                       "(resident + autograd-saved) and the OS"), [{c: r.get(c, "") for c in columns} for r in rows]))
    return out


def _alpha_cache(graph, partitioner: str):
    """``p -> alpha`` of ``graph``'s ``p``-way partition, each computed once."""
    from graphscale.strategies.task_parallel.plan import replication_alpha

    alphas: dict[int, float] = {}

    def alpha(p: int) -> float:
        if p not in alphas:
            alphas[p] = replication_alpha(graph, p, partitioner=partitioner)
        return alphas[p]
    return alpha


def replication(args) -> Section:
    """``alpha`` against the partition count, and what hybrid P groups save (module docstring)."""
    from graphscale.strategies.task_parallel.plan import make_plan

    out = Section("replication")
    rows, hybrid = [], []
    for name in split_specs(args.graphs):
        graph = load(name, args)
        alpha = _alpha_cache(graph, args.partitioner)
        row = {"graph": name, "avg deg": round(graph.num_edges / graph.num_nodes, 1)}
        for p in args.parts:
            row[f"p={p}"] = round(alpha(p), 2) if p <= graph.num_nodes else None
        fitted = [p for p in args.parts if p <= graph.num_nodes]
        if len(fitted) > 1:
            row[f"p={fitted[-1]} / p={fitted[0]}"] = alpha(fitted[-1]) / alpha(fitted[0])
        rows.append(row)
        for workers in args.hybrid_workers:
            plan = make_plan(workers, 2, t_workers=workers // 2)
            group = len(plan.p_groups[0])
            hybrid.append({"graph": name, "workers": workers, "plan": plan.describe(),
                           f"alpha graph-parallel ({workers} parts)": round(alpha(workers), 2),
                           "alpha P group": round(alpha(group), 2),
                           "reduction": alpha(workers) / alpha(group)})
    out.tables.append(((f"Replication factor alpha = 1 + sum |B_i| / |V| against the partition count, {args.partitioner} "
                       "(Table 2 analogue; papers100M: 1, 1.25, 1.52, 2.13, 3.02, 4.46, 6.34)"), rows))
    out.tables.append((("Hybrid parallelism (2-layer decoupled model, half the workers T, half P): the P groups' "
                       "alpha against graph parallelism's on all workers (paper: 1.25 vs 2.13, 1.7x)"), hybrid))
    return out


def accuracy(args) -> Section:
    """Decoupled against coupled against ``single`` GCN over seeds (module docstring)."""
    out = Section("accuracy")
    rows = []
    variants = [("single GCN", ["--strategy", "single"], 1),
                ("single decoupled", ["--strategy", "single", "--decoupled", "on"], 1),
                ("task-parallel decoupled", TP_TD, args.workers),
                ("task-parallel coupled", TP, args.workers)]
    for name in split_specs(args.accuracy_graphs):
        base = None
        for label, flags, workers in variants:
            reports = [_train(args, out, label, graph_spec(name, args), flags, workers, args.epochs, seed=s)
                       for s in range(args.seeds)]
            accs = [r["final"]["test_acc"] for r in reports if r is not None]
            if len(accs) < args.seeds:
                continue
            mean = statistics.mean(accs)
            base = mean if base is None else base
            rows.append({"graph": name, "model / strategy": label, "workers": workers, "seeds": len(accs),
                         "test acc": 100 * mean, "std": 100 * statistics.pstdev(accs),
                         "gap to single GCN (points)": 100 * (mean - base)})
    out.tables.append(((f"Test accuracy at the best validation epoch, {args.epochs} epochs, 2-layer GCN H={args.hidden} "
                       "(Fig. 13 analogue)"), rows))
    return out


def keep_rate(chunks: int, subgraphs: int) -> float:
    """Expected per-epoch keep rate of a cross-chunk edge in ``causal`` mode: ``(M + k - 2) / (2 (M - 1))``,
    ``k = M / S`` chunks per subgraph (spec §3.2)."""
    k = chunks // subgraphs
    return (chunks + k - 2) / (2 * (chunks - 1))


def subgraphs(args) -> Section:
    """Accuracy against the subgraph count in ``causal`` mode, and the keep rate (module docstring)."""
    out = Section("subgraphs")
    bad = [s for s in args.subgraph_counts if s < 1 or args.chunks % s]
    if bad:
        raise ValueError(f"--subgraph-counts {','.join(map(str, bad))} do not divide --chunks {args.chunks}")
    rows = []
    for name in split_specs(args.accuracy_graphs):
        base = None
        for count in args.subgraph_counts:
            flags = ["--subgraphs", str(count), "--chunks", str(args.chunks), "--dependency", "causal"]
            report = _train(args, out, f"S={count}", graph_spec(name, args), TP_TD, args.workers, args.epochs,
                            extra=flags)
            if report is None:
                continue
            acc = report["final"]["test_acc"]
            base = acc if base is None else base
            rows.append({"graph": name, "S": count, "M": args.chunks, "test acc": 100 * acc,
                         "change vs first S (points)": 100 * (acc - base),
                         "keep rate (M+k-2)/(2(M-1))": keep_rate(args.chunks, count)})
    out.tables.append(((f"Task-parallel decoupled, causal mode, {args.chunks} chunks, {args.epochs} epochs "
                       "(Fig. 14b analogue: paper < 1 point lost from 1 to 6 subgraphs)"), rows))
    return out


def subgraph_sizes(graph, count: int) -> tuple[list[int], list[int]]:
    """Rows and in-edges of ``count`` contiguous, equal vertex ranges (the model's subgraphs)."""
    import numpy as np

    bounds = np.linspace(0, graph.num_nodes, count + 1).round().astype(np.int64)
    indptr = graph.indptr.numpy() if hasattr(graph.indptr, "numpy") else np.asarray(graph.indptr)
    return (np.diff(bounds).tolist(), [int(indptr[b] - indptr[a]) for a, b in itertools.pairwise(bounds)])


def pipeline(args) -> Section:
    """Serial against pipelined makespan, modelled at GPU speeds (module docstring)."""
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
    out.tables.append(((f"Modelled epoch (not measured): {args.pipeline_subgraphs} subgraphs, causal, recompute, on "
                       f"{args.workers} devices of {args.gpu_flops:g} FLOP/s and {args.gpu_bandwidth:g} B/s, links "
                       f"{args.link_bandwidth:g} B/s, gamma {args.gamma} (Fig. 14a analogue: paper 1.2-1.5x)"), rows))
    return out


def ablation(args) -> Section:
    """TP+DM, +TD, +TS: epoch seconds here (module docstring)."""
    out = Section("ablation")
    rows = []
    steps = [("TP+DM", TP + ["--dependency", "causal", "--t-workers", "1"]),
             ("+TD", TP_TD + ["--dependency", "causal", "--t-workers", "1"]),
             ("+TS", TP_TD + ["--dependency", "causal"])]
    for name in split_specs(args.accuracy_graphs):
        base = None
        for label, flags in steps:
            report = _train(args, out, label, graph_spec(name, args), flags, args.workers, args.ablation_epochs)
            if report is None:
                continue
            secs = report["final"]["mean_epoch_seconds"]
            base = secs if base is None else base
            rows.append({"graph": name, "variant": label, "s/epoch": secs, "speed-up vs TP+DM": base / secs,
                         "bytes/epoch": format_bytes(total_bytes(report))})
    out.tables.append(((f"Ablation on {args.workers} CPU workers, 2-layer GCN H={args.hidden}, {args.ablation_epochs} "
                       "epochs (Fig. 12 analogue: paper +TD 1.8-2.9x, +TS 1.35-1.39x on GPUs; CPU times on shared "
                       "cores are indicative only)"), rows))
    return out


RUNNERS = {"comm": comm, "memory": memory, "replication": replication, "accuracy": accuracy,
           "subgraphs": subgraphs, "pipeline": pipeline, "ablation": ablation}


def plot(sections: list[Section], path: str) -> Path:
    """Graph parallelism's bytes per epoch and the modelled serial / pipelined makespans (written atomically)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {k: v for s in sections for k, v in s.data.items()}
    panels = [k for k in ("comm", "pipeline") if data.get(k)]
    if not panels:
        raise ValueError("--plot: the sections run have nothing to draw (comm or pipeline)")
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        labels = [d[0] for d in data[panel]]
        xs = range(len(labels))
        if panel == "comm":
            ax.bar(xs, [d[1] / 2 ** 20 for d in data[panel]])
            ax.set_ylabel("graph-parallel MiB / epoch")
            ax.set_title("communication per epoch (closed form)")
        else:
            ax.bar([x - 0.2 for x in xs], [1e3 * d[1] for d in data[panel]], 0.4, label="serial")
            ax.bar([x + 0.2 for x in xs], [1e3 * d[2] for d in data[panel]], 0.4, label="pipelined")
            ax.set_ylabel("ms / epoch (modelled)")
            ax.set_title("modelled pipeline makespan")
            ax.legend()
        ax.set_xticks(list(xs), labels, rotation=30, ha="right", fontsize=7)
    return save_figure(fig, path)


def check_args(args) -> list[str]:
    """The sections asked for, after checking the options they read.

    Raises:
        ValueError: an unknown section, or an option out of range (named).
    """
    names = [s for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in RUNNERS]
    if unknown or not names:
        raise ValueError(f"--sections: unknown {', '.join(unknown) or '(none given)'}; choose among "
                         f"{', '.join(SECTIONS)}")
    for option, value, low in (("--workers", args.workers, 2), ("--nodes", args.nodes, 2), ("--hidden", args.hidden, 1),
                               ("--epochs", args.epochs, 1), ("--seeds", args.seeds, 1), ("--chunks", args.chunks, 1),
                               ("--pipeline-subgraphs", args.pipeline_subgraphs, 1),
                               ("--ablation-epochs", args.ablation_epochs, 1), ("--features", args.features, 1)):
        if value < low:
            raise ValueError(f"{option} must be >= {low}, got {value}")
    for option, values in (("--depths", args.depths), ("--parts", args.parts), ("--hybrid-workers", args.hybrid_workers),
                           ("--subgraph-counts", args.subgraph_counts)):
        if not values or min(values) < 1:
            raise ValueError(f"{option} needs integers >= 1, got {values}")
    for option, value in (("--gpu-flops", args.gpu_flops), ("--gpu-bandwidth", args.gpu_bandwidth),
                          ("--link-bandwidth", args.link_bandwidth)):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{option} must be a positive rate, got {value}")
    if not 0 <= args.gamma <= 1:
        raise ValueError(f"--gamma must lie in [0, 1], got {args.gamma}")
    if "replication" in names and any(w < 2 or w % 2 for w in args.hybrid_workers):
        raise ValueError(f"--hybrid-workers must be even counts >= 2 (half T, half P), got {args.hybrid_workers}")
    return names


def run(args: argparse.Namespace) -> list[Section]:
    """Run the sections asked for and print their tables (and write ``--plot``)."""
    names = check_args(args)
    sections = []
    for name in names:
        section = RUNNERS[name](args)
        sections.append(section)
        for title, rows in section.tables:
            print(format_table(rows, title=title))
            print()
        for note in section.notes:
            print(note)
        for line in section.failed:
            print(f"failed: {line}")
        if section.notes or section.failed:
            print()
    if args.plot:
        print(f"wrote {plot(sections, args.plot)}")
    return sections

"""``graphscale bench task``: NeutronTask's hardware-independent results (issue 12's "Measurements"), on this machine.

Each section is a function of the parsed arguments returning a :class:`Section` (tables, failed runs, notes);
``--sections`` picks them. Every ratio is against a baseline computed in the same run. Train runs are
``graphscale train ... --json`` subprocesses (:func:`graphscale.bench.memory.train_once`: a fresh interpreter, so
the OS-measured peaks are the run's own); a run that fails is listed under its section's table with its
configuration.

* ``comm`` (Fig. 15 analogue): bytes per epoch on ``--workers`` workers for every graph and depth, all in closed
  form: graph parallelism's (:func:`~graphscale.strategies.graph_parallel.halo_bytes_per_epoch` over a
  ``--partitioner`` partition into ``--workers`` parts, plus the gradient all-reduce and the loss), task-parallel
  coupled (TP) and decoupled (TP+TD) by :func:`~graphscale.strategies.task_parallel.strategy.epoch_bytes` (the
  stage chain, the ``h2d`` feature rows, the loss) for the plan the scheduling model picks at the modelled GPU's
  speeds (:func:`tp_plan`; the train runs get it as ``--t-workers``). Graphs of at most ``--measure-nodes``
  vertices are also trained for one epoch with each, and their Ledger is checked against the closed forms
  category by category. The notes average the ratios over the dense and the sparse graphs, with and without
  the ``h2d`` stream.
* ``memory`` (Fig. 10 / Table 1 analogue): per worker, graph-parallel's formula parts (node data, replicas
  ``MR = (|B_i| + |V_i|) sum_l d_l b``, intermediates ``ID = 2 |V_i| sum_l d_{l+1} b``, parameters) next to its
  tracked peak; task-parallel's tracked peak in parts (``extra["memory"]``: parameters, caches, intermediates)
  against ``MR_tp`` (P workers) and ``ID_tp`` (T workers) of spec §3.2 / §3.4; the OS-measured peak (``VmHWM``) and
  anonymous growth above each worker's start of a 2-epoch run; totals over the workers (and the largest worker),
  tracked and OS-measured, against graph-parallel's. ``--memory-graphs`` takes dataset specs: on small graphs
  (Cora) each worker's fixed runtime (about 110 MB of anonymous memory) dominates the OS figures.
* ``replication`` (Table 2 analogue): ``alpha`` of a ``--partitioner`` partition into 1..64 parts
  (:func:`~graphscale.strategies.task_parallel.plan.replication_alpha`) and, for ``--hybrid-workers``, the
  ``alpha`` of graph parallelism on all of them against that of the P groups of a hybrid plan.
* ``accuracy`` (Fig. 13 analogue): test accuracy at the best validation epoch over ``--seeds`` seeds (one
  ``--repeat`` run per variant): ``single`` standard GCN (the baseline), ``single`` decoupled, task-parallel
  decoupled and coupled.
* ``subgraphs`` (Fig. 14b analogue): task-parallel decoupled in ``causal`` mode with ``S`` in ``--subgraph-counts``
  (``--chunks`` METIS chunks) on ``--subgraph-graphs``, accuracy against the first ``S``, the measured keep rate
  (the fraction of cross-chunk edges the run's masks kept, :func:`~graphscale.strategies.task_parallel.chunks.
  keep_rate` over its epochs' shuffles) against ``(M + k - 2) / (2 (M - 1))``.
* ``pipeline`` (Fig. 14a analogue): the discrete-event model
  (:mod:`graphscale.strategies.task_parallel.simulate`) fed the Eq. 5-6 costs at the speeds of the spec's GPU
  server (``--gpu-flops``, ``--gpu-bandwidth``, ``--link-bandwidth``), *modelled*: serial against pipelined
  makespan of ``--pipeline-subgraphs`` subgraphs, per graph and depth, with the plan the scheduling model picks;
  and *measured* on ``--pipeline-graphs``: the strategy's per-task timestamps (``extra["timeline"]``) of a
  pipelined and a serial run, analysed by :func:`~graphscale.strategies.task_parallel.simulate.analyse`.
* ``ablation`` (Fig. 12 analogue): task-parallel with dependency management only (coupled, ``causal``, one T
  worker, ``--p-split subgraphs``), + task decoupling, + task scheduling (the model's T worker count), epoch
  seconds here against TP+DM's.

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

from graphscale.bench.memory import node_data_bytes, train_once, worker_rows
from graphscale.bench.table import int_list, save_figure, split_specs
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes

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
                        help="comm: also train graphs of at most this many vertices and check the Ledger's bytes "
                             "against the closed forms (default 5000: cora)")
    parser.add_argument("--measure-depths", type=int_list, default=[2],
                        help="comm: the layer counts of those trained runs (default 2)")
    parser.add_argument("--memory-graphs", default="cora",
                        help="memory: comma-separated graphs trained for the memory table, as --graphs (sbm-D of "
                             "--nodes vertices and --features features, or dataset specs such as "
                             "sbm:nodes=200000,degree=20,features=256,seed=0, where the data dominate each worker's "
                             "fixed runtime in the OS-measured figures; default cora)")
    parser.add_argument("--parts", type=int_list, default=[1, 2, 4, 8, 16, 32, 64],
                        help="replication: partition counts (default 1,2,4,8,16,32,64)")
    parser.add_argument("--hybrid-workers", type=int_list, default=[8],
                        help="replication: worker counts of the hybrid comparison, 2-layer TD model, half T, half P "
                             "(default 8, the paper's)")
    parser.add_argument("--accuracy-graphs", default="cora,sbm-10",
                        help="accuracy: comma-separated graphs (default cora,sbm-10)")
    parser.add_argument("--accuracy-nodes", type=int, default=2_000,
                        help="accuracy / subgraphs / ablation: vertices of their sbm-D graphs (default 2000)")
    parser.add_argument("--ablation-graphs", default="cora", help="ablation: comma-separated graphs (default cora)")
    parser.add_argument("--subgraph-graphs", default="cora",
                        help="subgraphs: comma-separated graphs (default cora)")
    parser.add_argument("--pipeline-graphs", default="cora",
                        help="pipeline: graphs trained for the measured timestamps (default cora)")
    parser.add_argument("--pipeline-epochs", type=int, default=3,
                        help="pipeline: epochs of each measured run; the last one's timestamps are used (default 3)")
    parser.add_argument("--epochs", type=int, default=50, help="accuracy / subgraphs: epochs per run (default 50)")
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


def graph_spec(name: str, args, nodes: int | None = None) -> str:
    """The dataset spec of a ``--graphs`` entry (``sbm-D`` expanded with ``nodes``, default ``--nodes``)."""
    if name.startswith("sbm-") and name[4:].replace(".", "", 1).isdigit():
        return f"sbm:nodes={nodes or args.nodes},degree={name[4:]},features={args.features},seed=0"
    return name


def load(name: str, args, nodes: int | None = None):
    """The training graph of a ``--graphs`` entry, named after it."""
    from graphscale.prepare import training_graph

    graph = training_graph(graph_spec(name, args, nodes))
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
    when it failed. Runs are memoised in ``args.run_cache`` (when :func:`run` set one): comm and memory train the
    same configurations."""
    argv = ["--layers", str(layers), "--seed", str(seed), *flags[2:], *extra, *args.train_args.split()]
    cache = getattr(args, "run_cache", None)
    key = (dataset, flags[1], workers, epochs, *argv)
    if cache is not None and key in cache:
        report = cache[key]
    else:
        report = train_once(dataset, flags[1], workers, epochs, "gcn", args.hidden, extra=argv, timeout=args.timeout)
        if cache is not None:
            cache[key] = report
    if "error" in report:
        section.failed.append(f"{label} on {dataset} ({' '.join([*flags, *extra])}, {workers} workers, {layers} "
                              f"layers, seed {seed}): {report['error']}")
        return None
    return report


# --------------------------------------------------------------------------------------- sections


def tp_model(graph, layers: int, hidden: int, decoupled: bool):
    """The GCN the task-parallel variants train: decoupled (TP+TD) or standard, coupled order (TP)."""
    from graphscale.config import ModelConfig
    from graphscale.nn.models import build_model

    return build_model(ModelConfig(name="gcn", hidden=hidden, layers=layers, dropout=0.0),
                       max(graph.num_features, 1), graph.num_classes, decoupled=decoupled)


def tp_plan(graph, layers: int, args, decoupled: bool):
    """The plan of the task-parallel runs: the scheduling model at the modelled GPU's speeds (``--gpu-flops``,
    ``--gpu-bandwidth``, ``--gamma``: deterministic, unlike this machine's measured ones); the train runs get its
    T worker count as ``--t-workers``."""
    from graphscale.strategies.task_parallel.plan import make_plan, task_costs

    widths = td_widths(graph, layers, args.hidden) if decoupled else [max(graph.num_features, 1)] + \
        [args.hidden] * (layers - 1) + [graph.num_classes]
    costs = task_costs(graph.num_nodes, graph.num_edges, widths, decoupled=decoupled, gamma=args.gamma,
                       flops=args.gpu_flops, bandwidth=args.gpu_bandwidth)
    return make_plan(args.workers, layers, costs=costs)


def tp_flags(flags: Sequence[str], plan) -> list[str]:
    """``flags`` with the plan's ``--t-workers``."""
    return [*flags, "--t-workers", str(len(plan.t_ranks))]


def comm(args) -> Section:
    """Bytes per epoch, graph parallelism against TP and TP+TD (module docstring)."""
    from graphscale.partition.base import halo_sizes
    from graphscale.partition.build import build_vertex_partitioner
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch, halo_bytes_per_epoch
    from graphscale.strategies.pipeline.reference import learned_input
    from graphscale.strategies.task_parallel.strategy import H2D, epoch_bytes

    out = Section("comm")
    rows, ratios = [], {"dense": [], "sparse": []}
    h2d_share = []
    for name in split_specs(args.graphs):
        graph = load(name, args)
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo = halo_sizes(graph, owner, args.workers).tolist()
        alpha = 1 + sum(halo) / graph.num_nodes
        degree = graph.num_edges / graph.num_nodes
        for layers in args.depths:
            measure = graph.num_nodes <= args.measure_nodes and layers in args.measure_depths
            model = model_of(graph, layers, args.hidden)
            params = sum(p.numel() for p in model.parameters())
            gp = (halo_bytes_per_epoch(halo, model.layer_widths(), 4, learned_input(model))
                  + allreduce_bytes_per_epoch(params, args.workers, 4) + allreduce_bytes_per_epoch(1, args.workers, 8))
            closed = {"graph-parallel": {"total": gp}}
            plans = {}
            for label, decoupled in (("TP", False), ("TP+TD", True)):
                plans[label] = tp_plan(graph, layers, args, decoupled)
                closed[label] = epoch_bytes(tp_model(graph, layers, args.hidden, decoupled), plans[label],
                                            graph.num_nodes, max(graph.num_features, 1), 4)
                closed[label]["total"] = sum(closed[label].values())
            row = {"graph": name, "|V|": graph.num_nodes, "avg deg": round(degree, 1), "alpha": round(alpha, 2),
                   "L": layers, "TP+TD plan": plans["TP+TD"].describe()}
            for label in ("graph-parallel", "TP", "TP+TD"):
                row[label] = format_bytes(closed[label]["total"])
            if measure:
                flags = {"graph-parallel": GP, "TP": tp_flags(TP, plans["TP"]), "TP+TD": tp_flags(TP_TD, plans["TP+TD"])}
                checks = []
                for label in ("graph-parallel", "TP", "TP+TD"):
                    report = _train(args, out, label, graph_spec(name, args), flags[label], args.workers, 2, layers)
                    if report is None:
                        checks.append(f"{label} failed")
                        continue
                    ledger = report["final"]["bytes_per_epoch"]
                    if label == "graph-parallel":
                        same = total_bytes(report) == gp
                    else:
                        same = {k: v for k, v in ledger.items() if v} == {k: v for k, v in closed[label].items()
                                                                          if k != "total" and v}
                    checks.append(f"{label} {'yes' if same else 'NO: ' + str(ledger)}")
                row["closed form = Ledger (trained)"] = "; ".join(checks)
            for label in ("TP", "TP+TD"):
                row[f"{label} / GP"] = closed[label]["total"] / gp
                ratios["dense" if degree >= DENSE_DEGREE else "sparse"].append(
                    (label, closed[label]["total"] / gp, (closed[label]["total"] - closed[label][H2D]) / gp))
            row[f"TP+TD {H2D} share"] = closed["TP+TD"][H2D] / closed["TP+TD"]["total"]
            h2d_share.append(row[f"TP+TD {H2D} share"])
            rows.append(row)
            out.data.setdefault("comm", []).append((f"{name} L={layers}", gp, closed["TP"]["total"],
                                                    closed["TP+TD"]["total"]))
    columns = ["graph", "|V|", "avg deg", "alpha", "L", "TP+TD plan", "graph-parallel", "TP", "TP+TD", "TP / GP",
               "TP+TD / GP", f"TP+TD {H2D} share", "closed form = Ledger (trained)"]
    rows = [{c: r.get(c, "") for c in columns} for r in rows]
    out.tables.append(((f"Bytes per epoch on {args.workers} workers, GCN H={args.hidden}, fp32, closed forms (Fig. 15 "
                       f"analogue); graph-parallel: {args.partitioner} partition, halo + gradient all-reduce + loss; "
                       f"TP (coupled) / TP+TD (decoupled): stage chain + {H2D} feature rows (read twice: T "
                       f"recomputation) + loss; graphs of <= {args.measure_nodes} vertices also trained (2 epochs, "
                       f"L in {args.measure_depths}), "
                       "their Ledger checked against the closed forms category by category"), rows))
    for kind, triples in ratios.items():
        for label in ("TP", "TP+TD"):
            values = [(v, w) for lab, v, w in triples if lab == label]
            if values:
                mean = statistics.mean(v for v, _ in values)
                without = statistics.mean(w for _, w in values)
                out.notes.append(f"{label} against graph-parallel on the {kind} graphs (avg deg "
                                 f"{'>=' if kind == 'dense' else '<'} {DENSE_DEGREE}): {100 * (mean - 1):+.1f}% on "
                                 f"average ({100 * (without - 1):+.1f}% without the {H2D} feature stream); paper: "
                                 "TP+TD -54.2%, TP above graph-parallel on sparse graphs")
    if h2d_share:
        out.notes.append(f"the {H2D} feature stream (N F b, twice with T recomputation) is {100 * min(h2d_share):.0f}-"
                         f"{100 * max(h2d_share):.0f}% of TP+TD's bytes")
    return out


def boundary_rows(graph, chunk_of, lay, mode: str = "causal") -> list[int]:
    """``|B_i|`` of every subgraph ``i`` of an epoch's layout: the vertices of other subgraphs whose rows the kept
    edges into subgraph ``i`` read (what a P worker caches for it)."""
    import torch

    from graphscale.data.block import Block
    from graphscale.strategies.task_parallel.chunks import block_keep

    full = Block.full(graph)
    keep = block_keep(full, chunk_of, lay.sub, mode)
    dst_sub = lay.sub[chunk_of[full.dst_of_edges()[keep]]]
    src = full.indices[keep]
    outside = lay.sub[chunk_of[src]] != dst_sub
    pairs = torch.unique(dst_sub[outside] * graph.num_nodes + src[outside])
    return torch.bincount(pairs // graph.num_nodes, minlength=lay.num_subgraphs).tolist()


def _tp_memory_rows(args, name: str, graph, label: str, report: dict, plan, decoupled: bool, layers: int) -> list:
    """Per worker of a task-parallel run: the tracked peak's parts (``extra["memory"]``) against MR_tp (P workers)
    and ID_tp (T workers) of spec §3.2 / §3.4."""
    from graphscale.metrics.memory import SAVED
    from graphscale.strategies.task_parallel.chunks import assign_chunks, chunk_members, layout
    from graphscale.strategies.task_parallel.strategy import (
        BLOCKS,
        CACHES,
        KEPT_INPUTS,
        PARAMETERS,
        SENDS,
        T_ROWS,
        group_sizes,
    )

    model = tp_model(graph, layers, args.hidden, decoupled)
    m = 4 * math.lcm(*group_sizes(plan))  # the runs' --subgraphs 4 x the largest group (num_chunks)
    chunk_of = assign_chunks(graph, m, "partitioner", args.partitioner, "", 0)
    lay = layout(m, 4, 0, 0)
    sizes = [sum(chunk_members(chunk_of, m)[c].numel() for c in lay.chunks(s)) for s in range(4)]
    boundary = boundary_rows(graph, chunk_of, lay)
    if decoupled:
        t_dims, p_width = model.t_dims, [graph.num_classes] * layers
    else:
        t_dims = [model.layers[0].in_dim] + [layer.out_dim for layer in model.layers]
        p_width = t_dims[1:]
    epoch = max(report["epochs"], key=lambda e: sum(e["peak_memory_per_worker"]))
    rows = []
    for rank, (extra, tracked) in enumerate(zip(epoch["extra_per_worker"], epoch["peak_memory_per_worker"])):
        kind, stage, _ = extra["role"]
        parts = extra.get("memory", {})
        row = {"graph": name, "strategy": label, "worker": f"{rank} ({kind}{stage})",
               "parameters": format_bytes(parts.get(PARAMETERS, 0)), "caches": format_bytes(parts.get(CACHES, 0)),
               "intermediates": format_bytes(parts.get(SAVED, 0)), "kept T inputs": format_bytes(parts.get(KEPT_INPUTS, 0)),
               "blocks": format_bytes(parts.get(BLOCKS, 0)), "T rows in flight": format_bytes(parts.get(T_ROWS, 0)),
               "sends in flight": format_bytes(parts.get(SENDS, 0)),
               "tracked": format_bytes(tracked)}
        if kind == "P":
            a, b = plan.p_layers[stage]
            mr = (sum(sizes) + sum(boundary)) * sum(p_width[a:b]) * 4
            row["MR formula"] = format_bytes(mr)
            row["measured / formula"] = parts.get(CACHES, 0) / mr
        else:
            a, b = plan.t_layers[stage]
            ident = max(sizes) * sum(t_dims[l] + t_dims[l + 1] for l in range(a, b)) * 4
            row["ID formula"] = format_bytes(ident)
            row["measured / formula"] = parts.get(SAVED, 0) / ident
        rows.append(row)
    return rows


def _memory_totals(report: dict) -> tuple[int, int, int | None, int | None]:
    """Tracked peaks summed over the workers and the largest worker's; the OS-measured anonymous growth above each
    worker's start (:func:`~graphscale.bench.memory.worker_rows`), summed and the largest (``None`` where the OS
    did not say for every worker)."""
    rows = worker_rows("", "", report)
    tracked = [r["tracked"] or 0 for r in rows] or [0]
    grown = [r["anon_above_baseline"] for r in rows]
    known = bool(grown) and None not in grown
    return sum(tracked), max(tracked), sum(grown) if known else None, max(grown) if known else None


def memory(args) -> Section:
    """Per-worker memory: the formulas' parts against the tracked and OS-measured peaks (module docstring)."""
    from graphscale.partition.base import halo_sizes, partition_sizes
    from graphscale.partition.build import build_vertex_partitioner

    out = Section("memory")
    rows, totals = [], []
    layers = 2
    for name in split_specs(args.memory_graphs):
        graph = load(name, args)
        model = model_of(graph, layers, args.hidden)
        widths = model.layer_widths() + [graph.num_classes]
        params = sum(p.numel() for p in model.parameters())
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo, inner = halo_sizes(graph, owner, args.workers).tolist(), partition_sizes(owner, args.workers).tolist()
        plans = {"TP": tp_plan(graph, layers, args, False), "TP+TD": tp_plan(graph, layers, args, True)}
        runs = {label: _train(args, out, label, graph_spec(name, args), flags, args.workers, 2, layers)
                for label, flags in (("graph-parallel", GP), ("TP", tp_flags(TP, plans["TP"])),
                                     ("TP+TD", tp_flags(TP_TD, plans["TP+TD"])))}
        gp = runs["graph-parallel"]
        for label, report in runs.items():
            if report is None:
                continue
            final = report["final"]
            if label == "graph-parallel":
                for rank, tracked in enumerate(final.get("peak_memory_per_worker") or []):
                    # spec §3.2 / §3.4 for this worker: MR = (|B_i| + |V_i|) sum_l d_l, ID = 2 |V_i| sum_l d_{l+1}
                    mr = (halo[rank] + inner[rank]) * sum(widths[:layers]) * 4
                    ids = 2 * inner[rank] * sum(widths[1:layers + 1]) * 4
                    rows.append({"graph": name, "strategy": label, "worker": str(rank),
                                 "node data": format_bytes(node_data_bytes({"nodes": inner[rank],
                                                                             "features": graph.num_features})),
                                 "MR formula": format_bytes(mr), "ID formula": format_bytes(ids),
                                 "parameters": format_bytes(4 * params * 4), "tracked": format_bytes(tracked)})
            else:
                rows += _tp_memory_rows(args, name, graph, label, report, plans[label], label == "TP+TD", layers)
            measured = worker_rows(name, label, report)
            for rank, m in enumerate(measured):
                rows[-len(measured) + rank].update({
                    "OS peak RSS": format_bytes(m["rss_peak"]) if m["rss_peak"] else "",
                    "anon above start": (format_bytes(m["anon_above_baseline"])
                                         if m["anon_above_baseline"] is not None else "")})
            if gp is not None:
                (tot, top, grown, top_grown), (g_tot, g_top, g_grown, g_top_grown) = (_memory_totals(report),
                                                                                      _memory_totals(gp))
                totals.append({"graph": name, "strategy": label, "tracked, all workers": format_bytes(tot),
                               "vs graph-parallel": tot / g_tot - 1, "largest worker": format_bytes(top),
                               "largest vs graph-parallel": top / g_top - 1,
                               "OS anon above start, all workers": format_bytes(grown) if grown is not None else "",
                               "OS vs graph-parallel": (grown / g_grown - 1) if grown and g_grown else None,
                               "OS largest worker": format_bytes(top_grown) if top_grown is not None else "",
                               "OS largest vs graph-parallel": ((top_grown / g_top_grown - 1)
                                                                if top_grown and g_top_grown else None)})
    columns = ["graph", "strategy", "worker", "node data", "parameters", "caches", "intermediates", "kept T inputs",
               "blocks", "T rows in flight", "sends in flight",
               "MR formula", "ID formula", "measured / formula", "tracked", "anon above start", "OS peak RSS"]
    out.tables.append(((f"Peak memory per worker, {args.workers} workers, GCN {layers} layers H={args.hidden}, fp32, "
                       "2 epochs (Fig. 10 analogue). graph-parallel: the formulas for its rows (replicas MR = (|B_i| "
                       "+ |V_i|) sum_l d_l, intermediates ID = 2 |V_i| sum_l d_l+1) next to its tracked peak; "
                       "task-parallel: the tracked peak's parts (parameters + gradients + Adam; caches = P views and "
                       "P-backward gradient rows; intermediates = autograd-saved; the T inputs a non-first T stage "
                       "keeps for its recomputation; blocks = P blocks with their cached transposes; T rows in "
                       "flight = the rows read or received and the gradient received for one subgraph; sends in "
                       "flight = rows sent, not yet taken) against MR_tp = sum_i (|B_i| + |V_i|) L_w d (P workers, causal, "
                       "epoch 0: caches / MR) and ID_tp = max_i |V_i| sum_l (d_l + d_l+1) (T workers, one subgraph "
                       "in flight, a layer's input and output: intermediates / ID)"),
                      [{c: r.get(c, "") for c in columns} for r in rows]))
    out.tables.append((("Total memory against graph-parallel (paper: 49-67% less): tracked peaks, and the "
                        "OS-measured anonymous memory above each worker's start (peak anon - anon at worker start, "
                        "before it touched any data; it includes each worker's fixed runtime, about 110 MB here: "
                        "give graphs whose data dominate it, e.g. --memory-graphs "
                        "sbm:nodes=200000,degree=20,features=256,seed=0)"), totals))
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


def _accuracy(report: dict) -> list[float]:
    """Test accuracy (at the best validation epoch) of every seed of a ``--repeat`` report."""
    return [r["final"]["test_acc"] for r in report["runs"]] if "runs" in report else [report["final"]["test_acc"]]


def accuracy(args) -> Section:
    """Decoupled against coupled against ``single`` GCN over seeds (module docstring)."""
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
            report = _train(args, out, label, graph_spec(name, args, args.accuracy_nodes), flags, workers,
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
    """Accuracy against the subgraph count in ``causal`` mode, and the keep rate (module docstring)."""
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
            report = _train(args, out, f"S={count}", graph_spec(name, args, args.accuracy_nodes),
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


def subgraph_sizes(graph, count: int) -> tuple[list[int], list[int]]:
    """Rows and in-edges of ``count`` contiguous, equal vertex ranges (the modelled subgraphs: METIS chunks are
    balanced, so equal sizes; the in-edges of a range stand for a subgraph's)."""
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
            report = _train(args, out, f"pipeline {schedule}", graph_spec(name, args), tp_flags(TP_TD, plan),
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
    """TP+DM, +TD, +TS: epoch seconds here (module docstring)."""
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
            report = _train(args, out, label, graph_spec(name, args, args.accuracy_nodes), flags, args.workers,
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
            for i, label in enumerate(("graph-parallel", "TP", "TP+TD")):
                ax.bar([x + 0.27 * (i - 1) for x in xs], [d[1 + i] / 2 ** 20 for d in data[panel]], 0.27, label=label)
            ax.set_ylabel("MiB / epoch")
            ax.set_title("communication per epoch (closed forms)")
            ax.legend()
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
                               ("--ablation-epochs", args.ablation_epochs, 1), ("--features", args.features, 1),
                               ("--pipeline-epochs", args.pipeline_epochs, 1),
                               ("--accuracy-nodes", args.accuracy_nodes, 2)):
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
    args.run_cache = {}
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

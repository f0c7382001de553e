"""``graphscale bench task``: NeutronTask's hardware-independent results (the NeutronTask paper's measurements, docs/strategies/task-parallel.md), on this machine.

Each section is a function of the parsed arguments returning a :class:`Section` (tables, failed runs, notes);
``--sections`` picks them. Every ratio is against a baseline computed in the same run. Train runs are
``graphscale train ... --json`` subprocesses (:func:`graphscale.bench.tools.memory.train_once`: a fresh interpreter, so
the OS-measured peaks are the run's own); a run that fails is listed under its section's table with its
configuration.

* ``comm`` (Fig. 15 analogue): bytes per epoch on ``--workers`` workers for every graph and depth, all in closed
  form: graph parallelism's (:func:`~graphscale.strategies.graph_parallel.halo_bytes_per_epoch` over a
  ``--partitioner`` partition into ``--workers`` parts, plus the gradient all-reduce and the loss), task-parallel
  coupled (TP) and decoupled (TP+TD) by :func:`~graphscale.strategies.task_parallel.chain.epoch_bytes` (the
  stage chain, the ``h2d`` feature rows, the loss) for the plan the scheduling model picks at the modelled GPU's
  speeds (:func:`~graphscale.bench.papers.neutrontask.runs.tp_plan`; the train runs get it as ``--t-workers``). Graphs of at
  most ``--measure-nodes`` vertices are also trained for one epoch with each, and their Ledger is checked against
  the closed forms category by category. The notes average the ratios over the dense and the sparse graphs, with
  and without the ``h2d`` stream.
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
import math
from pathlib import Path

from graphscale.bench.papers.neutrontask.accuracy import accuracy, subgraphs
from graphscale.bench.papers.neutrontask.cost import comm, memory, replication
from graphscale.bench.papers.neutrontask.runs import Section
from graphscale.bench.papers.neutrontask.speed import ablation, pipeline
from graphscale.bench.table import format_table, save_figure
from graphscale.options import int_list

SECTIONS = ("comm", "memory", "replication", "accuracy", "subgraphs", "pipeline", "ablation")
#: the synthetic power-law graphs: degree-corrected SBM (power-law degrees, exponent 2.5) at these average degrees
DEGREES = (4, 10, 25, 50)

#: the spec's GPU server (§5): A5000 FP32 rate and memory bandwidth, PCIe 4.0 x16 effective bandwidth
GPU_FLOPS, GPU_BANDWIDTH, LINK_BANDWIDTH = 27.8e12, 768e9, 25e9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench task``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated sections among {', '.join(SECTIONS)} (default all)")
    parser.add_argument("--graphs", default="cora," + ",".join(f"sbm-{d}" for d in DEGREES),
                        help="comma-separated graphs: cora, sbm-D (power-law SBM of --nodes vertices, average degree "
                             "D), or dataset specs")
    parser.add_argument("--nodes", type=int, default=20_000, help="vertices of the sbm-D graphs (default 20000)")
    add_own(parser, "--features", type=int, default=128, help="feature width of the sbm-D graphs (default 128)",
            differs="the width of generated graphs' features, not train's feature mode (degree, random:D, ...)")
    add_declared(parser, "workers", default=4, why="NeutronTask's 4-GPU machine")
    parser.add_argument("--depths", type=int_list, default=[2, 4, 8], help="layer counts (default 2,4,8)")
    add_declared(parser, "hidden", default=128, why="NeutronTask's for cora")
    add_declared(parser, "partitioner", note="here: of graph parallelism")
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
    add_own(parser, "--parts", type=int_list, default=[1, 2, 4, 8, 16, 32, 64],
            help="replication: partition counts (default 1,2,4,8,16,32,64)",
            differs="partition counts a replication factor is computed at (no store is written), not a store's")
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
    add_declared(parser, "epochs", default=50, note="here: per accuracy / subgraphs run",
                 why="a sweep of many runs on 2 cores")
    parser.add_argument("--seeds", type=int, default=3, help="accuracy: seeds (default 3)")
    parser.add_argument("--subgraph-counts", type=int_list, default=[1, 2, 3, 4, 5, 6],
                        help="subgraphs: S values (default 1..6); each must divide --chunks")
    add_declared(parser, "chunks", default=60, note="here: M of the subgraphs section", why="lcm of 1..6")
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
    add_own(parser, "--timeout", type=float, default=900, help="seconds per train run (default 900)",
            differs="a whole run's time limit, not the collective timeout")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="write the comm bytes and the modelled pipeline makespans here")


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

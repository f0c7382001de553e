"""What the sections of ``graphscale bench task`` share: the :class:`Section` they return, the graphs they load,
the models and task-parallel plans they price, and the memoised train runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from graphscale.bench.tools.memory import train_once

#: command-line options of the task-parallel variants (strategy `task-parallel`, model option --decoupled)
TP = ["--strategy", "task-parallel", "--decoupled", "off"]
TP_TD = ["--strategy", "task-parallel", "--decoupled", "on"]
GP = ["--strategy", "graph-parallel"]


@dataclass
class Section:
    """What a section prints: tables (title, rows), runs that failed (configuration, message), notes."""

    name: str
    tables: list[tuple[str, list[dict]]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # what --plot draws


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


def train_run(args, section: Section, label: str, dataset: str, flags: Sequence[str], workers: int, epochs: int,
           layers: int = 2, seed: int = 0, extra: Sequence[str] = ()) -> dict | None:
    """One train run (``flags`` = ``["--strategy", NAME, *options]``); ``None``, and a line under the section,
    when it failed. Runs are memoised in ``args.run_cache`` (when :func:`graphscale.bench.papers.neutrontask.task.run` set one): comm and memory train the
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

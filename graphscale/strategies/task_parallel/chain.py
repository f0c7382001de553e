"""The chain of a task-parallel run (:mod:`.strategy`): its plan (resolved from ``--t-workers`` or the scheduling
model), the option checks that need it, its segments (consecutive tasks of one plan stage), the message tags, the
Ledger and memory categories, and an epoch's bytes in closed form (:func:`epoch_bytes`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import lcm

import torch

from graphscale.config import RunConfig
from graphscale.distributed.comm import CONTROL
from graphscale.strategies.task_parallel.chunks import check_subgraphs
from graphscale.strategies.task_parallel.plan import TaskPlan, feasible_t_workers, make_plan, task_costs
from graphscale.strategies.task_parallel.tasks import Op, T, TaskSplit, task_split

#: Ledger categories: segment-boundary rows (forward), their gradients (backward), P groups' mirror rows and their
#: gradients, the evaluation forward's boundary rows and mirrors, the feature rows read by the first T segment.
TASK_FWD, TASK_BWD, HALO, EVAL_STAGE, EVAL_HALO, H2D = "task_fwd", "task_bwd", "halo", "eval_stage", "eval_halo", "h2d"
CHUNK_FILE, PLAN_FILE = "chunk_of.npy", "plan.json"
#: memory categories of ``extra["memory"]`` (the tracked peak's parts): parameters with their gradients and Adam
#: state; the P views (the rows of a P layer the member holds: Algorithm 1's cache of earlier subgraphs' rows, the
#: current subgraph's and, in a hybrid group, the mirrors) and the P-backward gradient rows; the T inputs a non-first T
#: segment keeps for its recomputation; autograd's saved tensors (:data:`~graphscale.metrics.memory.SAVED`)
PARAMETERS, CACHES, KEPT_INPUTS = "parameters", "caches", "kept T inputs"
#: memory categories too: a P segment's blocks (the graph structure of its rows, with the transposes its backward
#: builds); the rows a T segment works on for the current subgraph (the features it read or the rows it received,
#: the gradient it received); the rows of the sends not yet completed
BLOCKS, T_ROWS, SENDS = "blocks", "T rows in flight", "sends in flight"
#: where the routing tables (chunk owners and members, global ids) live: beside the host-shared graph they index
HOST_DEVICE = torch.device("cpu")
#: message phases (part of every tag; every tag stays below :data:`~graphscale.strategies.stage_state.STAGE_STATE_TAG`,
#: where the checkpoint gather's begin)
_FWD, _BWD, _EVAL = 0, 1, 2


def _tag(phase: int, boundary: int, subgraph: int) -> int:
    return (phase * 1024 + boundary) * 65536 + subgraph


def resolve_plan(config: RunConfig, t_workers: int = 0) -> TaskPlan:
    """The run's :class:`TaskPlan` for ``t_workers`` T ranks (0: ``--t-workers``, which must then be given)."""
    sc = config.strategy
    q = t_workers or sc.t_workers
    if not q:
        raise ValueError("the task plan needs the T worker count: --t-workers, or the scheduling model's "
                         "(scheduled_t_workers)")
    return make_plan(sc.workers, config.model.layers, t_workers=q, p_split=sc.p_split)


def scheduled_t_workers(config: RunConfig, num_nodes: int, num_edges: int, num_features: int,
                        num_classes: int) -> int:
    """``q`` from the scheduling model (Eqs. 5-8 with ``--task-gamma``, ``--device-flops`` and
    ``--device-bandwidth``, the rates measured on this machine where they are 0; :func:`.plan.make_plan` takes the
    feasible count nearest to it)."""
    return len(scheduled_plan(config, num_nodes, num_edges, num_features, num_classes)[0].t_ranks)


def scheduled_plan(config: RunConfig, num_nodes: int, num_edges: int, num_features: int,
                   num_classes: int) -> tuple[TaskPlan, tuple[float, float]]:
    """The scheduling model's plan and the costs ``(T_t, T_p)`` it was chosen from (:func:`scheduled_t_workers`)."""
    from graphscale.nn.models import is_decoupled

    model, sc = config.model, config.strategy
    heads = model.heads if model.name == "gat" else 1  # the decoupled GAT's T output: heads x classes
    widths = [num_features] + [model.hidden] * (model.layers - 1) + [heads * num_classes]
    costs = task_costs(num_nodes, num_edges, widths, attention=model.name == "gat", decoupled=is_decoupled(config),
                       gamma=sc.task_gamma, flops=sc.device_flops or None, bandwidth=sc.device_bandwidth or None,
                       dtype_bytes=getattr(torch, config.dtype).itemsize)
    return make_plan(sc.workers, model.layers, p_split=sc.p_split, costs=costs), costs


def group_sizes(plan: TaskPlan) -> list[int]:
    """Sizes of the groups that split every subgraph's chunks (T groups, and P groups with ``p_split=layers``)."""
    sizes = [len(g) for g in plan.t_groups]
    return sizes + ([len(g) for g in plan.p_groups] if plan.p_split == "layers" else [])


def num_chunks(config: RunConfig, plan: TaskPlan | None = None) -> int:
    """``M``: ``--chunks``, else ``--subgraphs`` times the largest chunk-splitting group (one chunk per member)."""
    if config.strategy.chunks is not None:
        return config.strategy.chunks
    plan = resolve_plan(config) if plan is None else plan
    return config.strategy.subgraphs * lcm(*group_sizes(plan))


def run_chunk_of(graph, config: RunConfig, plan: TaskPlan, shared) -> torch.Tensor:
    """The chunk of every vertex, as a run has it: the parent's (``--chunking partitioner``: written to the
    strategy's shared folder ``shared`` before the workers start), else contiguous ranges, computed here."""
    import numpy as np

    from graphscale.strategies.task_parallel.chunks import assign_chunks

    sc = config.strategy
    if sc.chunking == "partitioner":
        return torch.from_numpy(np.load(shared / CHUNK_FILE).astype(np.int64))
    return assign_chunks(graph, num_chunks(config, plan), sc.chunking, sc.partitioner, sc.balance, config.seed)


def check_task_config(config: RunConfig) -> None:
    """Everything the parent can check before it loads the data (with ``--t-workers``: the plan too).

    Raises:
        ValueError: naming the option (see :func:`check_plan`; a model without a task split; fewer than 2 workers;
            a worker count no T/P split fits).
    """
    from graphscale.nn.models import is_decoupled

    sc, model = config.strategy, config.model
    if is_decoupled(config):
        if model.name not in ("gcn", "gat"):
            raise ValueError(f"model {model.name!r} has no decoupled form (strategy 'task-parallel' trains gcn and "
                             "gat decoupled, or gcn in the coupled order with --decoupled off)")
    elif model.name != "gcn":
        raise ValueError(f"strategy 'task-parallel' trains the coupled order (--decoupled off) for model gcn only, "
                         f"not {model.name!r}")
    if sc.workers < 2:
        raise ValueError(f"strategy 'task-parallel' needs --workers >= 2 (T and P ranks), got {sc.workers}")

    if sc.t_workers < 0:
        raise ValueError(f"--t-workers must be >= 0 (0: the scheduling model decides), got {sc.t_workers}")
    if sc.chunks is not None:
        check_subgraphs(sc.chunks, sc.subgraphs)
    if sc.t_workers:
        check_plan(config, resolve_plan(config))
    elif not feasible_t_workers(sc.workers, model.layers, sc.p_split):
        raise ValueError(f"no split of --workers {sc.workers} into T and P ranks fits --layers {model.layers} "
                         f"(--p-split {sc.p_split})")


def check_plan(config: RunConfig, plan: TaskPlan) -> None:
    """The checks that need the plan (in the parent: from ``check_config`` with ``--t-workers``, else from
    ``prepare_shared`` once the scheduling model chose).

    Raises:
        ValueError: subgraphs not dividing the chunks, chunks not dividing among a group, idle P ranks.
    """
    sc = config.strategy
    chunks = num_chunks(config, plan)
    check_subgraphs(chunks, sc.subgraphs)
    k = chunks // sc.subgraphs
    for size in group_sizes(plan):
        if size > 1 and k % size:
            raise ValueError(f"--chunks {chunks} / --subgraphs {sc.subgraphs} = {k} chunk(s) per subgraph do not "
                             f"divide among a group of {size} ranks (each member takes an equal share)")
    if plan.p_split == "subgraphs" and sc.subgraphs < len(plan.p_groups[0]):
        raise ValueError(f"--subgraphs {sc.subgraphs} leaves P ranks idle: --p-split subgraphs gives each of the "
                         f"{len(plan.p_groups[0])} P ranks whole subgraphs")


@dataclass
class Segment:
    """Consecutive tasks of one plan stage: ``kind`` T or P, the stage's ``group`` of ranks, its ``ops``."""

    index: int
    kind: str
    stage: int
    group: tuple[int, ...]
    ops: list[Op] = field(default_factory=list)


def build_segments(split: TaskSplit, plan: TaskPlan) -> list[Segment]:
    """The chain of segments: every op on the stage holding its layer, consecutive ops of a stage merged."""
    segments: list[Segment] = []
    for op in split.chain:
        layer = split.layer_of(op)
        stages = plan.t_layers if op.kind == T else plan.p_layers
        stage = next(i for i, (a, b) in enumerate(stages) if a <= layer < b)
        if segments and segments[-1].kind == op.kind and segments[-1].stage == stage:
            segments[-1].ops.append(op)
        else:
            group = (plan.t_groups if op.kind == T else plan.p_groups)[stage]
            segments.append(Segment(len(segments), op.kind, stage, tuple(group), [op]))
    return segments


def epoch_bytes(model: torch.nn.Module, plan: TaskPlan, num_nodes: int, num_features: int, element_size: int,
                t_recompute: bool = True) -> dict[str, int]:
    """The Ledger's bytes of one training epoch summed over workers, by category, in closed form (the tests hold
    the strategy to it): ``task_fwd = task_bwd`` the chain's boundaries (:func:`.tasks.chain_bytes_per_epoch` over
    the widths leaving every segment but the last), ``h2d = N F b`` (twice with ``t_recompute``: the first T
    segment re-reads its rows), ``allreduce`` the ring all-reduce of every T group of several ranks, ``control``
    the loss (one float64 all-reduced over the workers).

    Raises:
        ValueError: a P group of several ranks (its mirror rows, category ``halo``, depend on the epoch's shuffle).
    """
    from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch
    from graphscale.strategies.task_parallel.tasks import chain_bytes_per_epoch

    if any(len(g) > 1 for g in plan.p_groups):
        raise ValueError(f"the plan ({plan.describe()}) has a P group of several ranks: its mirror bytes depend on "
                         "the epoch's shuffle and have no closed form here")
    split = task_split(model)
    segments = build_segments(split, plan)
    chain = chain_bytes_per_epoch(num_nodes, [split.out_width(seg.ops[-1]) for seg in segments[:-1]], element_size)
    out = {TASK_FWD: chain // 2, TASK_BWD: chain // 2, H2D: num_nodes * num_features * element_size
           * (2 if t_recompute else 1), CONTROL: allreduce_bytes_per_epoch(1, plan.workers, 8)}
    stage_params = [sum(p.numel() for seg in segments if seg.kind == T and seg.stage == stage for op in seg.ops
                        for p in split.t_params(op.index)) for stage in range(len(plan.t_groups))]
    reduce = sum(allreduce_bytes_per_epoch(n, len(g), element_size) for n, g in zip(stage_params, plan.t_groups)
                 if len(g) > 1)
    if reduce:
        out["allreduce"] = reduce
    return out


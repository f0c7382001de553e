r"""NeutronTask: task-parallel full-graph training (``--strategy task-parallel``).

Spec: ``shared/specs/neutrontask.md`` (§3 components, §4 properties). Workers split the *tasks* of the model, not
the graph: ranks ``0..q-1`` run T tasks (dense, row-wise; they hold every parameter), ranks ``q..N-1`` P tasks
(sparse propagations, no parameters), as the :class:`TaskPlan` says (``--t-workers``, else the scheduling model;
``--p-split layers``: P stages of contiguous layers, the paper's chain; ``subgraphs``: one P group taking whole
subgraphs round-robin, the artifact's). The model's tasks (:mod:`.tasks`: the decoupled ``T_0..T_{L-1},
P_0..P_{L-1}``, or the coupled GCN ``T_0 P_0 .. T_L``) are mapped onto those stages; consecutive tasks on one stage
form a *segment*, and the chain of segments is the pipeline.

**Data.** The graph is host-shared (one memory-mapped copy per host). The first T segment reads its rows of the
input features (a modelled host-to-device copy, ``h2d``); P ranks build their blocks from the graph; the loss
segment reads labels and masks.

**An epoch** (Algorithm 2). The chunks are shuffled into ``S`` subgraphs (:mod:`.chunks`, the same on every rank);
subgraphs stream through the chain: a segment's rows of subgraph ``s`` go to the next segment with point-to-point
sends tagged by (subgraph, boundary, phase), so T of ``s + 1`` runs while P of ``s`` runs (``--pipelined``, the
default; ``--no-pipelined`` holds a segment's sends until it finished every subgraph: the serial schedule, same
numbers). Inside a segment:

* T: the ops on the subgraph's rows. With ``--t-recompute`` (default) nothing is kept but the segment's input rows
  (the first segment re-reads the features); the backward re-runs the forward (posted before the gradient
  arrives, so it overlaps the P-backward) and back-propagates. Dropout masks are keyed by (seed, epoch, site, global
  id, column), so the recomputation is exact.
* P (dependency modes of :mod:`.chunks`): ``causal`` and ``block_diag`` run subgraph by subgraph, layer by layer;
  the rows of earlier subgraphs stay in the per-layer views (the cache of Algorithm 1). ``full`` runs layer by
  layer over every subgraph (a layer needs every row). The backward runs the subgraphs in *reverse* order and
  accumulates every layer's source gradients, so the gradient of subgraph ``s``'s rows is complete when ``s`` is
  reached (``causal``'s boundary gradients of later subgraphs are cached). Linear P ops (GCN) back-propagate with
  the transposed operator (:func:`~graphscale.nn.ops.spmm_transpose`) and keep no P intermediates; the GAT variant
  keeps its vertex-sized views and re-runs each step under autograd (exact attention gradients).
* The loss of every subgraph is computed where the chain ends (the last P segment; coupled: the T rank of the last
  layer), normalised by the global training count (``--loss-norm global``) or as the sum of per-subgraph means
  (``subgraph-mean``, the artifact's). One Adam step per epoch after every subgraph's backward.

**Hybrid groups** (§3.3). A stage with several ranks splits each subgraph's chunks among its members (position in
the subgraph mod the group size; ``--p-split subgraphs``: whole subgraphs, ``s mod size``). A chunk's rows travel
from its owner in one segment to its owner in the next. P members exchange mirrors: after rows of subgraph ``s``
at a layer exist, each member sends the rows other members' kept edges read (one ``all_to_all_v`` in the group,
category ``halo``), and the backward returns the mirrors' gradients to their owners. T members all-reduce their
stage's gradients (``allreduce_gradients``).

**Bytes** per training epoch, summed over workers: ``task_fwd = task_bwd = N b sum_i d_i`` over the chain's
boundaries (:func:`.tasks.chain_bytes_per_epoch`), ``h2d = N F b`` (twice with ``--t-recompute``), ``halo = 2 b
sum_l d_l x`` the mirror rows, ``allreduce`` the ring all-reduce of each T group; ``control``: the loss. Evaluation
runs the chain in ``full`` mode without gradients (categories ``eval_stage``, ``eval_halo``) and all-reduces the
per-split counts.

**Checkpoints.** With ``--checkpoint`` and several T stages, the first member of every other T stage sends its
parameters and Adam state to rank 0 after every epoch (category ``checkpoint``), so rank 0's checkpoint holds the
whole model; on ``--resume`` every rank loads the model and keeps its own stage's Adam state, and training continues
exactly as without the interruption.

**Timestamps.** Every epoch's ``extra["timeline"]`` lists ``(segment, kind, phase, subgraph, layer, start, end)``
(``time.time()``; phases ``fwd``, ``recompute``, ``bwd``, ``eval``) of every task this rank ran, for ``graphscale
bench task``; a stamp starts once the task's input rows (or gradient) arrived, so it spans the task's own work and
its sends, not the wait.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from math import lcm
from pathlib import Path

import numpy as np
import torch

from graphscale import allocator
from graphscale.config import RunConfig
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.ledger import HOST
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.nn.ops import topology
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    COUNTS_PER_SPLIT,
    SPLITS,
    Strategy,
    allreduce_gradients,
    counts_to_metrics,
    optimizer_tensors,
    split_counts,
)
from graphscale.strategies.task_parallel.chunks import (
    FULL,
    Layout,
    assign_chunks,
    block_keep,
    check_subgraphs,
    chunk_members,
    layout,
    masked_block,
)
from graphscale.strategies.task_parallel.plan import TaskPlan, feasible_t_workers, make_plan, task_costs
from graphscale.strategies.task_parallel.reference import loss_weights, weighted_loss
from graphscale.strategies.task_parallel.tasks import Op, P, T, TaskSplit, task_split

#: Ledger categories: segment-boundary rows (forward), their gradients (backward), P groups' mirror rows and their
#: gradients, the evaluation forward's boundary rows and mirrors, the feature rows read by the first T segment.
TASK_FWD, TASK_BWD, HALO, EVAL_STAGE, EVAL_HALO, H2D = "task_fwd", "task_bwd", "halo", "eval_stage", "eval_halo", "h2d"
#: Ledger category of the parameters and Adam state the other T stages send to rank 0 for a checkpoint
CHECKPOINT = "checkpoint"
CHUNK_FILE, PLAN_FILE = "chunk_of.npy", "plan.json"
#: memory categories of ``extra["memory"]`` (the tracked peak's parts): parameters with their gradients and Adam
#: state; the P views (every row of a P layer: Algorithm 1's cache of earlier subgraphs' rows, the current
#: subgraph's and, in a hybrid group, the mirrors) and the P-backward gradient rows; the T inputs a non-first T
#: segment keeps for its recomputation; autograd's saved tensors (:data:`~graphscale.metrics.memory.SAVED`)
PARAMETERS, CACHES, KEPT_INPUTS = "parameters", "caches", "kept T inputs"
#: memory categories too: a P segment's blocks (the graph structure of its rows, with the transposes its backward
#: builds); the rows a T segment works on for the current subgraph (the features it read or the rows it received,
#: the gradient it received); the rows of the sends not yet completed
BLOCKS, T_ROWS, SENDS = "blocks", "T rows in flight", "sends in flight"
#: message phases (part of every tag)
_FWD, _BWD, _EVAL, _CKPT = 0, 1, 2, 3


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
                       dtype_bytes=torch.empty(0, dtype=getattr(torch, config.dtype)).element_size())
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


@STRATEGIES.register("task-parallel")
class TaskParallelStrategy(Strategy):
    """NeutronTask task parallelism (see the module docstring)."""

    exact = False  # exact with --dependency full (placement invariance); causal / block_diag drop edges
    data_view = HOST_SHARED
    decoupled_models = True
    decoupled_default = True
    options = frozenset({"t_workers", "p_split", "subgraphs", "chunks", "chunking", "partitioner", "balance",
                         "shuffle", "dependency", "t_recompute", "pipelined", "loss_norm", "task_gamma",
                         "device_flops", "device_bandwidth"})

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        sc = config.strategy
        unused = {}
        if sc.chunking != "partitioner":
            unused.update({"partitioner": "without --chunking partitioner", "balance": "without --chunking "
                                                                                        "partitioner"})
        if sc.t_workers:
            unused.update({name: "with --t-workers (the scheduling model does not run)"
                           for name in ("task_gamma", "device_flops", "device_bandwidth")})
        if sc.dependency == FULL and sc.loss_norm == "global":
            unused["shuffle"] = "with --dependency full and --loss-norm global (the order changes no number)"
        elif sc.subgraphs == 1:
            unused["shuffle"] = "with --subgraphs 1 (one subgraph: the order changes no number)"
        return unused

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        from graphscale.distributed.launch import resolve_device

        check_task_config(config)
        if resolve_device(config.device, config.strategy.workers) != "cpu":
            raise ValueError(f"strategy 'task-parallel' runs on CPU only (its buffers are not placed on a GPU yet): "
                             f"--device {config.device} resolves to cuda here; give --device cpu")

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        """The parent prepares the METIS chunks (``--chunking partitioner``) and, without ``--t-workers``, the plan
        the scheduling model chooses (so every worker gets the same one)."""
        from graphscale.nn.models import is_decoupled

        sc, model = config.strategy, config.model
        if sc.chunking != "partitioner" and sc.t_workers:
            return None
        key = {"task_chunks": sc.chunks, "subgraphs": sc.subgraphs, "chunking": sc.chunking, "workers": sc.workers,
               "seed": config.seed, "t_workers": sc.t_workers, "p_split": sc.p_split, "model": model.name, "hidden": model.hidden,
               "layers": model.layers, "decoupled": is_decoupled(config), "dtype": config.dtype}
        if model.name == "gat":  # the scheduling model's P width: heads x classes
            key["heads"] = model.heads
        if sc.chunking == "partitioner":
            key.update({"chunk_partitioner": sc.partitioner, "chunk_balance": sc.balance})
        if not sc.t_workers:
            key.update({"task_gamma": sc.task_gamma, "device_flops": sc.device_flops,
                        "device_bandwidth": sc.device_bandwidth})
        return key

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        sc = config.strategy
        record: dict = {}
        if sc.t_workers:
            plan = resolve_plan(config)
        else:
            plan, (t_t, t_p) = scheduled_plan(config, graph.num_nodes, graph.num_edges, graph.num_features,
                                              graph.num_classes)
            record = {"T_t": t_t, "T_p": t_p}
        check_plan(config, plan)
        (folder / PLAN_FILE).write_text(json.dumps({"t_workers": len(plan.t_ranks), "plan": plan.describe(),
                                                    **record}))
        if sc.chunking == "partitioner":
            chunk_of = assign_chunks(graph, num_chunks(config, plan), sc.chunking, sc.partitioner, sc.balance,
                                     config.seed)
            np.save(folder / CHUNK_FILE, chunk_of.numpy())

    # ------------------------------------------------------------ setup
    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        sc = config.strategy
        check_task_config(config)
        if sc.workers != env.world_size:
            raise ValueError(f"--workers {sc.workers} but the group has {env.world_size} workers")
        self.comm = Comm(env)
        graph = self.data.open_graph()
        shared = self.data.extras.get("shared")
        self.plan = resolve_plan(config, self._t_workers(graph, Path(shared) if shared else None))
        check_plan(config, self.plan)
        self.split = task_split(model)
        self.segments = build_segments(self.split, self.plan)
        self.mine = [seg for seg in self.segments if env.rank in seg.group]
        self.kind, self.stage, self.member = self.plan.role(env.rank)
        self.groups = self._group_comms(env)
        self.group = self.groups.get((self.kind, self.stage))
        self.graph = graph
        self.num_nodes = graph.num_nodes
        self.num_chunks = num_chunks(config, self.plan)
        if shared and (Path(shared) / CHUNK_FILE).is_file():
            self.chunk_of = torch.from_numpy(np.load(Path(shared) / CHUNK_FILE).astype(np.int64))
        else:
            self.chunk_of = assign_chunks(graph, self.num_chunks, sc.chunking, sc.partitioner, sc.balance,
                                          config.seed)
        self.members = chunk_members(self.chunk_of, self.num_chunks)
        self.dtype = next(model.parameters()).dtype
        self.first = self.segments[0] in self.mine
        self.last = self.segments[-1] in self.mine
        self.x = graph.x if self.first else None  # memory-mapped; rows are read per subgraph
        self.y = graph.y if self.last else None
        self.masks = {s: getattr(graph, f"{s}_mask") for s in SPLITS} if self.last else None
        self.num_train = int(graph.train_mask.sum())
        if self.num_train == 0:
            raise ValueError("strategy 'task-parallel': the graph has no training vertices")
        self.stage_params = [p for seg in self.mine if seg.kind == T for op in seg.ops
                             for p in self.split.t_params(op.index)]
        self.tracker = MemoryTracker(env)
        self.trim = not allocator.state()["retaining"]
        self.tracker.track_module("model", model, category=PARAMETERS)
        self.timeline: list[tuple] = []

    def _t_workers(self, graph: Graph, shared: Path | None) -> int:
        """``q``: the parent's choice (written with the shared data), ``--t-workers``, or the scheduling model's
        on rank 0, broadcast (a handle without the parent's preparation)."""
        if shared is not None and (shared / PLAN_FILE).is_file():
            return int(json.loads((shared / PLAN_FILE).read_text())["t_workers"])
        if self.config.strategy.t_workers:
            return self.config.strategy.t_workers
        q = torch.zeros(1, dtype=torch.int64)
        if self.env.rank == 0:
            q[0] = scheduled_t_workers(self.config, graph.num_nodes, graph.num_edges, graph.num_features,
                                       graph.num_classes)
        return int(self.comm.broadcast(q, 0, CONTROL)[0])

    def _group_comms(self, env: DistEnv) -> dict[tuple[str, int], Comm]:
        """A Comm per group of more than one rank (every rank creates every group, in the same order)."""
        comms = {}
        for kind, groups in ((T, self.plan.t_groups), (P, self.plan.p_groups)):
            for stage, group in enumerate(groups):
                if len(group) == 1:
                    continue
                import torch.distributed as dist

                handle = dist.new_group(list(group))
                if env.rank in group:
                    comms[(kind, stage)] = Comm(DistEnv(rank=group.index(env.rank), world_size=len(group),
                                                        device=env.device, backend=env.backend, group=handle,
                                                        timeout=env.timeout, ledger=env.ledger))
        return comms

    # ------------------------------------------------------------ per-epoch routing
    def _owner(self, seg: Segment, lay: Layout) -> torch.Tensor:
        """The member of ``seg``'s group that owns every chunk this epoch."""
        size = len(seg.group)
        if size == 1:
            return torch.zeros(self.num_chunks, dtype=torch.int64)
        if seg.kind == P and self.plan.p_split == "subgraphs":
            return lay.sub % size
        return (lay.pos % lay.k) % size

    def _ids(self, chunks: list[int]) -> torch.Tensor:
        return torch.cat([self.members[c] for c in chunks]) if chunks else torch.zeros(0, dtype=torch.int64)

    def _route(self, src: Segment, dst: Segment, owners: dict, lay: Layout, s: int, me_in_src: bool):
        """Per peer rank, the chunks of subgraph ``s`` moving between ``src`` and ``dst`` that involve me
        (``me_in_src``: I send them; else I receive them)."""
        mine = self.env.rank
        out: dict[int, list[int]] = {}
        for c in lay.chunks(s):
            a, b = src.group[int(owners[src.index][c])], dst.group[int(owners[dst.index][c])]
            if (a if me_in_src else b) == mine:
                out.setdefault(b if me_in_src else a, []).append(c)
        return out

    # ------------------------------------------------------------ messages
    def _send(self, rows: torch.Tensor, dst: int, category: str, tag: int) -> None:
        message = (rows.detach().contiguous(), dst, category, tag)
        if self.pipelined:
            self.pending.append((self.comm.send(*message[:3], tag=tag), message[0]))
        else:
            self.deferred.append(message)
        self._track_sends()

    def _track_sends(self) -> None:
        """Count the rows of the sends not yet completed (gloo holds them until the receiver took them)."""
        self.tracker.track("sends", *[rows for _, rows in self.pending], *[m[0] for m in self.deferred],
                           category=SENDS)

    def _end_segment(self) -> None:
        """A segment finished every subgraph: issue the sends it held back (serial schedule), then wait for all of
        its sends, so their rows are freed before the rank's next segment (or its backward) allocates its own.

        This cannot deadlock: a segment's messages go to the next segment in the phase's direction only, and the
        receivers post their receives in subgraph order without waiting for anything of this rank's later work."""
        for rows, dst, category, tag in self.deferred:
            self.pending.append((self.comm.send(rows, dst, category, tag=tag), rows))
        self.deferred = []
        for work, _ in self.pending:
            work.wait()
        self.pending = []
        self._track_sends()

    def _recv(self, peers: dict[int, list[int]], width: int, tag: int) -> list[tuple[list[int], torch.Tensor]]:
        """Receive the rows of the given chunks from every peer (posted together, then waited)."""
        works, out = [], []
        for peer, chunks in sorted(peers.items()):
            buf = torch.empty(int(sum(self.members[c].numel() for c in chunks)), width, dtype=self.dtype)
            works.append(self.comm.recv(buf, peer, tag=tag))
            out.append((chunks, buf))
        for work in works:
            work.wait()
        return out

    def _stamp(self, seg: Segment, phase: str, s: int, layer: int, start: float) -> None:
        self.timeline.append((seg.index, seg.kind, phase, s, layer, start, time.time()))

    # ------------------------------------------------------------ T segments
    def _t_input(self, seg: Segment, ids: torch.Tensor, s: int, ctx: dict) -> torch.Tensor:
        """The segment's input rows of ``ids`` (subgraph ``s``): the features (first segment) or received."""
        if seg.index == 0:
            rows = self.x[ids].to(self.dtype)
            self.comm.record(H2D, rows.numel() * rows.element_size(), HOST)
            return rows
        prev = self.segments[seg.index - 1]
        return self._recv_aligned(prev, seg, s, ctx, self.split.out_width(prev.ops[-1]),
                                  _tag(ctx["phase"], seg.index, s))

    def _recv_aligned(self, src: Segment, seg: Segment, s: int, ctx: dict, width: int, tag: int) -> torch.Tensor:
        """My rows of subgraph ``s`` in segment ``seg`` (my chunks' order), received from their owners in ``src``
        (straight into place where a peer's chunks lie back to back in my order)."""
        offsets = ctx["offsets_of"][seg.index][s]
        buf = torch.empty(ctx["ids"][seg.index][s].numel(), width, dtype=self.dtype)
        works, staged = [], []
        for peer, chunks in sorted(self._route(src, seg, ctx["owners"], ctx["lay"], s, False).items()):
            span = self._span(offsets, chunks)
            if span is not None:
                works.append(self.comm.recv(buf[span[0]: span[1]], peer, tag=tag))
            else:
                staged.append((chunks, torch.empty(int(sum(self.members[c].numel() for c in chunks)), width,
                                                   dtype=self.dtype)))
                works.append(self.comm.recv(staged[-1][1], peer, tag=tag))
        for work in works:
            work.wait()
        for chunks, rows in staged:
            start = 0
            for c in chunks:
                n = self.members[c].numel()
                buf[offsets[c]: offsets[c] + n] = rows[start: start + n]
                start += n
        return buf

    def _t_run(self, seg: Segment, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        for op in seg.ops:
            h = self.split.t_op(op.index, h, ids)
        return h

    def _send_on(self, seg: Segment, out: torch.Tensor, offsets: dict, s: int, ctx: dict, category: str) -> None:
        """Send my rows of subgraph ``s`` (``out``, aligned with ``offsets``) to their owners in the next segment."""
        nxt = self.segments[seg.index + 1]
        for peer, chunks in sorted(self._route(seg, nxt, ctx["owners"], ctx["lay"], s, True).items()):
            self._send(self._rows_of(out, offsets, chunks), peer, category, _tag(ctx["phase"], nxt.index, s))

    def _send_back(self, seg: Segment, grad: torch.Tensor, offsets: dict, s: int, ctx: dict) -> None:
        """Send the gradient of my input rows of subgraph ``s`` to their owners in the previous segment."""
        prev = self.segments[seg.index - 1]
        for peer, chunks in sorted(self._route(seg, prev, ctx["owners"], ctx["lay"], s, True).items()):
            self._send(self._rows_of(grad, offsets, chunks), peer, TASK_BWD, _tag(_BWD, seg.index, s))

    def _span(self, offsets: dict, chunks: list[int]) -> tuple[int, int] | None:
        """``(start, end)`` of ``chunks``' rows when they lie back to back in that order (``offsets``), else None."""
        start = end = offsets[chunks[0]]
        for c in chunks:
            if offsets[c] != end:
                return None
            end += self.members[c].numel()
        return start, end

    def _rows_of(self, rows: torch.Tensor, offsets: dict, chunks: list[int]) -> torch.Tensor:
        """The rows of ``chunks`` (in that order) of ``rows`` (aligned with ``offsets``): a view where they lie back
        to back (one owner in the next segment: every row), else a copy."""
        span = self._span(offsets, chunks)
        if span is not None:
            return rows[span[0]: span[1]]
        return torch.cat([rows[offsets[c]: offsets[c] + self.members[c].numel()] for c in chunks])

    def _recv_grad(self, seg: Segment, s: int, ctx: dict) -> torch.Tensor:
        """The gradient of my output rows of subgraph ``s`` from the next segment."""
        nxt = self.segments[seg.index + 1]
        return self._recv_aligned(nxt, seg, s, ctx, self.split.out_width(seg.ops[-1]), _tag(_BWD, nxt.index, s))

    def _t_forward(self, seg: Segment, ctx: dict) -> None:
        state = ctx["state"].setdefault(seg.index, {})
        for s in range(ctx["lay"].num_subgraphs):
            if ctx["ids"][seg.index][s].numel():
                self._t_forward_subgraph(seg, s, ctx, state)
        self._end_segment()

    def _t_forward_subgraph(self, seg: Segment, s: int, ctx: dict, state: dict) -> None:
        """The segment's forward of my rows of subgraph ``s`` (its rows are freed on return, before the next
        subgraph's are read)."""
        ids, train = ctx["ids"][seg.index][s], ctx["phase"] == _FWD
        start = time.time()
        h_in = self._t_input(seg, ids, s, ctx)
        self.tracker.track(f"t_rows_{seg.index}", h_in, category=T_ROWS)
        if seg.index > 0:  # the stamp leaves out the wait for the rows (the first segment's is the h2d read)
            start = time.time()
        keep_graph = train and not self.config.strategy.t_recompute
        with torch.set_grad_enabled(keep_graph):
            if keep_graph and seg.index > 0:
                h_in.requires_grad_(True)
            out = self._t_run(seg, h_in, ids)
        if train:
            state[s] = {"in": h_in, "out": out} if keep_graph else {"in": None if seg.index == 0 else h_in}
            self._track_kept(seg, state)
        if seg is self.segments[-1]:
            self._finish(out, ids, s, ctx, state.get(s))
        else:
            self._send_on(seg, out, ctx["offsets_of"][seg.index][s], s, ctx, TASK_FWD if train else EVAL_STAGE)
        self.tracker.untrack(f"t_rows_{seg.index}")
        self._stamp(seg, "fwd" if train else "eval", s, seg.ops[0].index, start)
        del h_in, out
        self._give_back()

    def _t_backward(self, seg: Segment, ctx: dict) -> None:
        state = ctx["state"][seg.index]
        for s in reversed(range(ctx["lay"].num_subgraphs)):
            if ctx["ids"][seg.index][s].numel():
                self._t_backward_subgraph(seg, s, ctx, state)
        self._end_segment()

    def _t_backward_subgraph(self, seg: Segment, s: int, ctx: dict, state: dict) -> None:
        """The segment's backward of my rows of subgraph ``s`` (recomputing its forward first with
        ``--t-recompute``); what it allocated is freed on return."""
        ids, offsets = ctx["ids"][seg.index][s], ctx["offsets_of"][seg.index][s]
        rows = f"t_rows_{seg.index}"
        saved = state.pop(s)
        self._track_kept(seg, state)
        if self.config.strategy.t_recompute:  # Re_forward: before the gradient arrives (overlaps P-backward)
            start = time.time()
            h_in = self._t_input(seg, ids, s, ctx) if seg.index == 0 else saved["in"]
            self.tracker.track(rows, h_in, category=T_ROWS)
            if seg.index > 0:
                h_in.requires_grad_(True)
            with torch.enable_grad():
                out = self._t_run(seg, h_in, ids)
                loss = self._loss(out, ids, s, ctx) if seg is self.segments[-1] else None
            self._stamp(seg, "recompute", s, seg.ops[0].index, start)
        else:
            h_in, out, loss = saved["in"], saved["out"], saved.get("loss")
            self.tracker.track(rows, h_in, out, category=T_ROWS)
        if seg is self.segments[-1]:
            start = time.time()
            loss.backward()
        else:
            grad = self._recv_grad(seg, s, ctx)
            self.tracker.track(rows, h_in, grad, *([] if self.config.strategy.t_recompute else [out]),
                               category=T_ROWS)
            start = time.time()  # the stamp leaves out the wait for the gradient
            out.backward(grad)
        if seg.index > 0:
            self._send_back(seg, h_in.grad, offsets, s, ctx)
        self.tracker.untrack(rows)
        self._stamp(seg, "bwd", s, seg.ops[0].index, start)
        del saved, h_in, out, loss
        self._give_back()

    def _track_kept(self, seg: Segment, state: dict) -> None:
        """Count the input rows segment ``seg`` keeps for its backward (every subgraph's not yet back-propagated)."""
        self.tracker.track(f"t_inputs_{seg.index}", *[v["in"] for v in state.values()], category=KEPT_INPUTS)

    # ------------------------------------------------------------ loss
    def _loss(self, out: torch.Tensor, ids: torch.Tensor, s: int, ctx: dict) -> torch.Tensor:
        logits = self.split.logits(out, ids)
        return weighted_loss(logits, self.y[ids], self.masks["train"][ids], ctx["weights"][ids])

    def _finish(self, out: torch.Tensor, ids: torch.Tensor, s: int, ctx: dict, saved: dict | None) -> None:
        """The chain's end for my rows of subgraph ``s``: the loss (training) or the split counts (evaluation)."""
        if ctx["phase"] == _EVAL:
            masks = {k: m[ids] for k, m in self.masks.items()}
            ctx["counts"] += split_counts(self.split.logits(out, ids), self.y[ids], masks)
            return
        if out.requires_grad:  # a T segment keeping its graph: backward from this loss
            loss = self._loss(out, ids, s, ctx)
            saved["loss"] = loss
        else:
            with torch.enable_grad():
                leaf = out.detach().requires_grad_(True)
                loss = self._loss(leaf, ids, s, ctx)
                if self.segments[-1].kind == P:  # the P-backward starts from this gradient
                    ctx["loss_grad"][s] = torch.autograd.grad(loss, leaf)[0]
        ctx["loss"] += float(loss.detach())

    # ------------------------------------------------------------ P segments
    def _p_prepare(self, seg: Segment, ctx: dict) -> dict:
        """The segment's blocks (my rows of every subgraph, the mode's edges) and its mirror lists this epoch."""
        lay, mode = ctx["lay"], ctx["mode"]
        owner = ctx["owners"][seg.index]
        blocks = []
        for ids in ctx["ids"][seg.index]:
            blocks.append(masked_block(Block.from_nodes(self.graph, ids), self.chunk_of, lay.sub, mode)
                          if ids.numel() else None)
            self._give_back()  # a block's construction temporaries, before the next one's
        size = len(seg.group)
        mirrors: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        if size > 1:  # (u, reader) pairs: reader's kept edges read u, owned by another member
            full = Block.full(self.graph)
            keep = block_keep(full, self.chunk_of, lay.sub, mode)
            owner_v = owner[self.chunk_of]
            dst, src = full.dst_of_edges()[keep], full.indices[keep]
            cross = owner_v[dst] != owner_v[src]
            pairs = torch.unique(src[cross] * size + owner_v[dst][cross])
            u, reader = pairs // size, pairs % size
            u_sub, u_owner = lay.sub[self.chunk_of[u]], owner_v[u]
            for s in range(lay.num_subgraphs):
                here = u_sub == s
                if not bool(here.any()):
                    continue
                send = [u[here & (u_owner == self.group_member(seg)) & (reader == m)] for m in range(size)]
                recv = [u[here & (u_owner == m) & (reader == self.group_member(seg))] for m in range(size)]
                mirrors[s] = (send, recv)
        return {"blocks": blocks, "mirrors": mirrors, "group": self.groups.get((P, seg.stage))}

    def group_member(self, seg: Segment) -> int:
        return seg.group.index(self.env.rank)

    def _exchange(self, prep: dict, view: torch.Tensor, s: int, category: str) -> None:
        """Forward mirrors: my rows of subgraph ``s`` that other members read go to them."""
        if s not in prep["mirrors"]:
            return
        send, recv = prep["mirrors"][s]
        got = prep["group"].all_to_all_v(view[torch.cat(send)], [t.numel() for t in send],
                                         [t.numel() for t in recv], category)
        view[torch.cat(recv)] = got

    def _exchange_grad(self, prep: dict, grad: torch.Tensor, s: int) -> None:
        """Backward mirrors: the gradients I hold for other members' rows of subgraph ``s`` go to their owners."""
        if s not in prep["mirrors"]:
            return
        send, recv = prep["mirrors"][s]
        got = prep["group"].all_to_all_v(grad[torch.cat(recv)], [t.numel() for t in recv],
                                         [t.numel() for t in send], HALO)
        grad.index_add_(0, torch.cat(send), got)

    def _p_forward(self, seg: Segment, ctx: dict) -> None:
        lay, train = ctx["lay"], ctx["phase"] == _FWD
        layers = [op.index for op in seg.ops]
        prep = self._p_prepare(seg, ctx)
        ctx["state"][seg.index] = prep
        self._track_blocks(seg, prep)
        self._give_back()
        widths = {l: self.split.out_width(Op(P, l)) for l in layers}  # a P op keeps the width
        view = {l: torch.zeros(self.num_nodes, widths[l], dtype=self.dtype) for l in layers}
        halo = HALO if train else EVAL_HALO
        prev = self.segments[seg.index - 1]
        num = lay.num_subgraphs

        def ready_input(s: int) -> None:
            received = self._recv(self._route(prev, seg, ctx["owners"], lay, s, False), widths[layers[0]],
                                  _tag(ctx["phase"], seg.index, s))
            self.tracker.track("p_received", *[rows for _, rows in received], category=CACHES)
            for chunks, rows in received:
                view[layers[0]][self._ids(chunks)] = rows
            self.tracker.untrack("p_received")
            del received
            self._exchange(prep, view[layers[0]], s, halo)

        def compute(l: int, s: int) -> None:
            ids, block = ctx["ids"][seg.index][s], prep["blocks"][s]
            start = time.time()
            if block is not None:
                with torch.no_grad():
                    out = self.split.p_op(l, block, view[l][block.src_ids])
                if l != layers[-1]:
                    view[l + 1][ids] = out
                elif seg is self.segments[-1]:
                    self._finish(out, ids, s, ctx, None)
                else:
                    offsets = ctx["offsets_of"][seg.index][s]
                    self._send_on(seg, out, offsets, s, ctx, TASK_FWD if train else EVAL_STAGE)
            if l != layers[-1]:
                self._exchange(prep, view[l + 1], s, halo)
            self._stamp(seg, "fwd" if train else "eval", s, l, start)

        if ctx["mode"] == FULL:  # every layer needs every row: layer by layer over the subgraphs
            for s in range(num):
                ready_input(s)
            for l in layers:
                for s in range(num):
                    compute(l, s)
        else:  # causal / block_diag: subgraph by subgraph; earlier subgraphs' rows stay in the views
            for s in range(num):
                ready_input(s)
                for l in layers:
                    compute(l, s)
        self._end_segment()
        if train and not self.split.linear_p:
            prep["views"] = view  # the GAT variant re-runs its steps in backward from the vertex-sized inputs
        self.tracker.track(f"p_views_{seg.index}", *view.values(), category=CACHES)
        if "views" not in prep:  # linear P: nothing of the forward is kept for the backward
            self.tracker.untrack(f"p_views_{seg.index}")
        if not train:  # evaluation keeps nothing for a backward
            self.tracker.untrack(f"p_blocks_{seg.index}")
        else:
            self._track_blocks(seg, prep)  # with the topologies the forward built

    def _p_backward(self, seg: Segment, ctx: dict) -> None:
        lay = ctx["lay"]
        prep = ctx["state"].pop(seg.index)
        layers = [op.index for op in seg.ops]
        widths = {l: self.split.out_width(Op(P, l)) for l in layers}  # a P op keeps the width
        grads = {l: torch.zeros(self.num_nodes, widths[l], dtype=self.dtype) for l in layers}
        self.tracker.track(f"p_grads_{seg.index}", *grads.values(), category=CACHES)
        num = lay.num_subgraphs
        last_segment = seg is self.segments[-1]

        def out_grad(l: int, s: int) -> torch.Tensor:
            ids = ctx["ids"][seg.index][s]
            if l != layers[-1]:
                return grads[l + 1][ids]
            if last_segment:
                return ctx["loss_grad"].pop(s)
            return self._recv_grad(seg, s, ctx)

        def compute(l: int, s: int) -> None:
            block = prep["blocks"][s]
            g_out = out_grad(l, s) if block is not None else None
            self.tracker.track("p_grad_in", g_out, category=CACHES)
            start = time.time()  # after the gradient arrived
            if block is not None:
                if self.split.linear_p:
                    g_src = self.split.p_transpose(l, block, g_out)
                else:
                    h_src = prep["views"][l][block.src_ids].requires_grad_(True)
                    with torch.enable_grad():
                        self.split.p_op(l, block, h_src).backward(g_out)
                    g_src = h_src.grad
                grads[l].index_add_(0, block.src_ids, g_src)
                self._track_blocks(seg, prep)  # with the transpose the backward built
            self.tracker.untrack("p_grad_in")
            self._stamp(seg, "bwd", s, l, start)

        def done(l: int, s: int) -> None:
            """The gradient of every row of subgraph ``s`` at layer ``l`` is complete on the members: collect the
            mirrors' shares at the owners; the segment's input gradient goes back."""
            self._exchange_grad(prep, grads[l], s)
            if l == layers[0]:
                ids = ctx["ids"][seg.index][s]
                if ids.numel():
                    self._send_back(seg, grads[l][ids], ctx["offsets_of"][seg.index][s], s, ctx)

        if ctx["mode"] == FULL:
            for l in reversed(layers):
                for s in reversed(range(num)):
                    compute(l, s)
                for s in reversed(range(num)):
                    done(l, s)
        else:  # reverse subgraph order: later subgraphs' boundary gradients are cached in ``grads``
            for s in reversed(range(num)):
                for l in reversed(layers):
                    compute(l, s)
                    done(l, s)
                prep["blocks"][s] = None  # subgraph s is done: its block (and transpose) go
                self._track_blocks(seg, prep)
                self._give_back()
        self._end_segment()
        self.tracker.untrack(f"p_views_{seg.index}")
        self.tracker.untrack(f"p_grads_{seg.index}")
        self.tracker.untrack(f"p_blocks_{seg.index}")

    def _give_back(self) -> None:
        """Return the memory malloc keeps after a subgraph's buffers were freed (:func:`graphscale.allocator.trim`),
        unless the run asked malloc to retain it (``--allocator retain``, tcmalloc, jemalloc).

        Why: a subgraph's tensors are tens of MiB, below glibc's dynamic mmap threshold once the first of them was
        freed, so they come from the heap, and the heap keeps the holes they leave (measured on a 200k-vertex SBM:
        a T worker held 3-4x its tracked peak). Trimming after every subgraph bounds what the worker holds to what
        it uses, for a few page faults per subgraph."""
        if self.trim:
            allocator.trim()

    def _track_blocks(self, seg: Segment, prep: dict) -> None:
        """Count the blocks a P segment holds (the graph structure of its rows: CSR, global ids and degrees, and
        the transposes and edge lists the kernels cached on them) and its mirror lists."""
        tensors = [t for block in prep["blocks"] if block is not None
                   for t in (block.src_ids, block.src_deg, block.edge_weight, *topology(block).tensors())]
        tensors += [t for send, recv in prep["mirrors"].values() for t in (*send, *recv)]
        self.tracker.track(f"p_blocks_{seg.index}", *tensors, category=BLOCKS)

    # ------------------------------------------------------------ epochs
    def _context(self, lay: Layout, mode: str, phase: int) -> dict:
        ctx = {"lay": lay, "mode": mode, "phase": phase, "state": {}, "loss": 0.0, "loss_grad": {},
               "owners": {seg.index: self._owner(seg, lay) for seg in self.segments}, "ids": {}, "offsets_of": {}}
        for seg in self.mine:
            owner, me = ctx["owners"][seg.index], seg.group.index(self.env.rank)
            per_s, offs = [], []
            for s in range(lay.num_subgraphs):
                chunks = [c for c in lay.chunks(s) if int(owner[c]) == me]
                offsets, start = {}, 0
                for c in chunks:
                    offsets[c] = start
                    start += self.members[c].numel()
                per_s.append(self._ids(chunks))
                offs.append(offsets)
            ctx["ids"][seg.index], ctx["offsets_of"][seg.index] = per_s, offs
        return ctx

    def _forward(self, ctx: dict) -> None:
        for seg in self.mine:
            (self._t_forward if seg.kind == T else self._p_forward)(seg, ctx)

    def train_epoch(self, epoch: int) -> EpochStats:
        sc = self.config.strategy
        model = self.model
        model.train()
        model.set_epoch(epoch)
        self.pipelined = sc.pipelined
        self.pending, self.deferred, self.timeline = [], [], []
        start = time.perf_counter()
        before = self.env.ledger.snapshot()
        with self.tracker.epoch():
            self.optimizer.zero_grad(set_to_none=True)
            lay = layout(self.num_chunks, sc.subgraphs, self.config.seed, epoch, sc.shuffle)
            ctx = self._context(lay, sc.dependency, _FWD)
            if self.last:
                ctx["weights"] = loss_weights(self.graph.train_mask, self.chunk_of, lay, sc.loss_norm)
            self._forward(ctx)
            for seg in reversed(self.mine):
                (self._t_backward if seg.kind == T else self._p_backward)(seg, ctx)
            group = self.groups.get((T, self.stage)) if self.kind == T else None
            if group is not None:  # a T stage's weights are replicated in its group: sum their gradients
                allreduce_gradients(group, self.stage_params, self.tracker)
            self.tracker.track("gradients", *[p.grad for p in self.stage_params], category=PARAMETERS)
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer), category=PARAMETERS)
            self.tracker.untrack("gradients")
        if self.config.checkpoint and len(self.plan.t_groups) > 1:
            self._gather_stages()
        seconds = time.perf_counter() - start
        total = torch.tensor([ctx["loss"]], dtype=torch.float64)
        self.comm.all_reduce(total, CONTROL)
        return EpochStats(loss=float(total), seconds=seconds, bytes=self.env.ledger.since(before),
                          peak_memory=self.tracker.peak,
                          extra={"role": [self.kind, self.stage, self.member], "segments": [s.index for s in self.mine],
                                 "timeline": self.timeline, "model_form": type(model).form,
                                 "memory": self.tracker.peak_breakdown})

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        sc = self.config.strategy
        self.pipelined, self.pending, self.deferred = True, [], []
        timeline, self.timeline = self.timeline, []  # evaluation stamps stay out of the epoch's timeline
        ctx = self._context(layout(self.num_chunks, sc.subgraphs, self.config.seed, 0, shuffle=False), FULL, _EVAL)
        ctx["counts"] = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64)
        self._forward(ctx)
        self.timeline = timeline
        return counts_to_metrics(self.comm.all_reduce(ctx["counts"], CONTROL))

    # ------------------------------------------------------------ checkpoints
    def _stage_state(self, stage: int) -> list[tuple[int, torch.nn.Parameter]]:
        """``(index in model.parameters(), parameter)`` of T stage ``stage``'s parameters."""
        index = {id(p): i for i, p in enumerate(self.model.parameters())}
        params = {id(p): p for seg in self.segments if seg.kind == T and seg.stage == stage for op in seg.ops
                  for p in self.split.t_params(op.index)}
        return sorted((index[k], p) for k, p in params.items())

    def _gather_stages(self) -> None:
        """Every T stage's parameters and Adam state to rank 0 (which writes checkpoints; its model then holds every
        weight, and :meth:`state_dict` every stage's optimiser state). The first member of each other T stage sends
        one flat tensor per parameter: its values, ``exp_avg``, ``exp_avg_sq`` and ``step`` (0: no state yet)."""
        def pack(p: torch.nn.Parameter) -> torch.Tensor:
            st = self.optimizer.state.get(p, {})
            if not st:
                return torch.cat([p.detach().flatten(), torch.zeros(2 * p.numel() + 1, dtype=p.dtype)])
            step = torch.as_tensor(st["step"], dtype=p.dtype).reshape(1)
            return torch.cat([p.detach().flatten(), st["exp_avg"].flatten(), st["exp_avg_sq"].flatten(), step])

        self.gathered_optimizer: dict[int, dict] = {}
        pending = []
        for stage, group in enumerate(self.plan.t_groups[1:], start=1):
            owned = self._stage_state(stage)
            if self.env.rank == group[0]:
                pending += [self.comm.send(pack(p), 0, CHECKPOINT, tag=_tag(_CKPT, 0, i)) for i, p in owned]
            elif self.env.rank == 0:
                for i, p in owned:
                    buf = torch.empty(3 * p.numel() + 1, dtype=p.dtype)
                    self.comm.recv(buf, group[0], tag=_tag(_CKPT, 0, i)).wait()
                    n = p.numel()
                    with torch.no_grad():
                        p.copy_(buf[:n].view_as(p))
                    if float(buf[-1]) > 0:
                        self.gathered_optimizer[i] = {"step": buf[-1].to(torch.float32).reshape(()),
                                                      "exp_avg": buf[n:2 * n].view_as(p).clone(),
                                                      "exp_avg_sq": buf[2 * n:3 * n].view_as(p).clone()}
        for work in pending:
            work.wait()

    def state_dict(self) -> dict:
        """The model and the Adam state of every parameter (rank 0, which writes checkpoints: with several T stages
        the other stages' come from :meth:`_gather_stages` after every epoch)."""
        state = super().state_dict()
        for i, st in getattr(self, "gathered_optimizer", {}).items():
            state["optimizer"]["state"][i] = st
        return state

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the whole model and keeps the Adam state of its own stage's parameters only."""
        self.model.load_state_dict(state["model"])
        mine = {i for seg in self.mine if seg.kind == T for i, _ in self._stage_state(seg.stage)}
        optimizer = {"state": {i: st for i, st in state["optimizer"]["state"].items() if i in mine},
                     "param_groups": state["optimizer"]["param_groups"]}
        self.optimizer.load_state_dict(optimizer)

    def teardown(self) -> None:
        for name in ("model", "optimizer"):
            self.tracker.untrack(name)

r"""NeutronTask: task-parallel full-graph training (``--strategy task-parallel``).

Spec: ``shared/specs/neutrontask.md`` (§3 components, §4 properties). Workers split the *tasks* of the model, not
the graph: ranks ``0..q-1`` run T tasks (dense, row-wise; they hold every parameter), ranks ``q..N-1`` P tasks
(sparse propagations, no parameters), as the :class:`TaskPlan` says (``--t-workers``, else the scheduling model;
``--p-split layers``: P stages of contiguous layers, the paper's chain; ``subgraphs``: one P group taking whole
subgraphs round-robin, the artifact's). The model's tasks (:mod:`.tasks`: the decoupled ``T_0..T_{L-1},
P_0..P_{L-1}``, or the coupled GCN ``T_0 P_0 .. T_L``) are mapped onto those stages; consecutive tasks on one stage
form a *segment*, and the chain of segments is the pipeline.

**Data and devices.** The graph is host-shared (one memory-mapped copy per host). The first T segment reads its
rows of the input features on the host and moves them to the run's device (``env.device``; the ``h2d`` copy); P
ranks build their blocks from the graph on the host and move them to the device; the loss segment reads its rows'
labels, masks and loss weights the same way. Everything computed, sent or received (rows, gradients, receive
buffers, P views, blocks, the reduced loss and counts, the checkpoint gather) lives on the run's device; only the
routing tables (chunk owners and members, global ids) stay on the host, beside the graph they index. The modules:
:mod:`.chain` (plan, option checks, segments, tags, categories, closed-form bytes), :mod:`.exchange` (routing,
messages, a P member's rows and mirror exchange), :mod:`.checkpoint` (the T stages' gather to rank 0),
:mod:`.t_segments` and :mod:`.p_segments` (the T and P segments) and this one (setup, the epochs).

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
stage's gradients (``allreduce_gradients``). **Memory**: a P member's per-layer views and gradients hold only its
own rows (the chunks it owns this epoch) and the rows its blocks read from the other members (``|own ∪ mirrors|``
rows, ``extra["p_rows"]`` per P segment; every index is translated once per epoch, :meth:`.Exchange._p_prepare`),
about ``N / size`` plus the mirrors instead of ``N``; a single-member P stage owns every chunk and holds ``N`` rows.

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
from pathlib import Path

import numpy as np
import torch

from graphscale import allocator
from graphscale.config import RunConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.options import option_names
from graphscale.options.task_parallel import TaskParallelOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    COUNTS_PER_SPLIT,
    SPLITS,
    Strategy,
    allreduce_gradients,
    counts_to_metrics,
    optimizer_tensors,
)
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.groups import subgroup_comms
from graphscale.strategies.task_parallel.chain import (
    _EVAL,
    _FWD,
    CHUNK_FILE,
    PARAMETERS,
    PLAN_FILE,
    Segment,
    build_segments,
    check_plan,
    check_task_config,
    num_chunks,
    resolve_plan,
    run_chunk_of,
    scheduled_plan,
)
from graphscale.strategies.task_parallel.checkpoint import StageCheckpoint
from graphscale.strategies.task_parallel.chunks import FULL, Layout, assign_chunks, chunk_members, layout
from graphscale.strategies.task_parallel.exchange import Exchange
from graphscale.strategies.task_parallel.p_segments import PSegments
from graphscale.strategies.task_parallel.reference import loss_weights
from graphscale.strategies.task_parallel.t_segments import TSegments
from graphscale.strategies.task_parallel.tasks import P, T, task_split


@STRATEGIES.register("task-parallel")
class TaskParallelStrategy(TSegments, PSegments, Exchange, StageCheckpoint, Strategy):
    """NeutronTask task parallelism (see the module docstring)."""

    exact = False  # exact with --dependency full (placement invariance); causal / block_diag drop edges
    data_view = HOST_SHARED
    decoupled_models = True
    decoupled_default = True
    options = option_names(TaskParallelOptions)
    pyg_refusal = ("it trains decoupled models (Y = A_hat^L MLP(X): graphscale's gcn or gat with --decoupled), and "
                   "a PyG model is not decoupled")

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
    def link_refusal(cls, config: RunConfig) -> str:
        return ("streams subgraphs through its T and P stages and takes the loss per subgraph on the last T stage, "
                "while a link pair's loss needs both endpoints' embeddings, which other subgraphs hold")

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        check_task_config(config)

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

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        sc = config.strategy
        check_task_config(config)
        if sc.workers != env.world_size:
            raise ValueError(f"--workers {sc.workers} but the group has {env.world_size} workers")
        self.comm = Comm(env)
        graph = self.data.open_graph()
        # the parent's plan and chunks; nothing is prepared for --t-workers with --chunking contiguous
        shared = None if self.shared_data_key(config) is None else self.data.require_shared(config.strategy.name)
        q = sc.t_workers if shared is None else int(json.loads((shared / PLAN_FILE).read_text())["t_workers"])
        self.plan = resolve_plan(config, q)
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
        self.chunk_of = run_chunk_of(graph, config, self.plan, shared)
        self.members = chunk_members(self.chunk_of, self.num_chunks)
        self.dtype = next(model.parameters()).dtype
        self.device = env.device  # every buffer, message and block; the routing tables stay on the host
        self.first = self.segments[0] in self.mine
        self.last = self.segments[-1] in self.mine
        # host-shared (memory-mapped); the rows of a subgraph are read on the host and moved to the device
        self.x = graph.x if self.first else None
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

    def _group_comms(self, env: DistEnv) -> dict[tuple[str, int], Comm]:
        """A Comm per group of more than one rank (every rank creates every group, in the same order)."""
        return {(kind, stage): comm for kind, groups in ((T, self.plan.t_groups), (P, self.plan.p_groups))
                for stage, comm in subgroup_comms(env, groups).items()}

    def _stamp(self, seg: Segment, phase: str, s: int, layer: int, start: float) -> None:
        self.timeline.append((seg.index, seg.kind, phase, s, layer, start, time.time()))

    def _context(self, lay: Layout, mode: str, phase: int) -> dict:
        ctx = {"lay": lay, "mode": mode, "phase": phase, "state": {}, "loss": 0.0, "loss_grad": {},
               "owners": {seg.index: self._owner(seg, lay) for seg in self.segments}, "ids": {}, "dev_ids": {},
               "offsets_of": {}}
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
            ctx["dev_ids"][seg.index] = [ids.to(self.device) for ids in per_s]
        return ctx

    def _forward(self, ctx: dict) -> None:
        for seg in self.mine:
            (self._t_forward if seg.kind == T else self._p_forward)(seg, ctx)

    def train_epoch(self, epoch: int) -> EpochStats:
        sc = self.config.strategy
        model = self.model
        self.pipelined = sc.pipelined
        self.pending, self.deferred, self.timeline, self.p_rows = [], [], [], {}
        run = Epoch(model, epoch, self.env, self.tracker)
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
        seconds = run.seconds()
        total = torch.tensor([ctx["loss"]], dtype=torch.float64, device=self.device)
        self.comm.all_reduce(total, CONTROL)
        return run.stats(float(total), {"role": [self.kind, self.stage, self.member],
                                        "segments": [s.index for s in self.mine], "timeline": self.timeline,
                                        "model_form": type(model).form, "p_rows": self.p_rows,
                                        "memory": self.tracker.peak_breakdown}, seconds=seconds)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        sc = self.config.strategy
        self.pipelined, self.pending, self.deferred = True, [], []
        timeline, self.timeline = self.timeline, []  # evaluation stamps stay out of the epoch's timeline
        ctx = self._context(layout(self.num_chunks, sc.subgraphs, self.config.seed, 0, shuffle=False), FULL, _EVAL)
        ctx["counts"] = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64, device=self.device)
        self._forward(ctx)
        self.timeline = timeline
        return counts_to_metrics(self.comm.all_reduce(ctx["counts"], CONTROL))

    def teardown(self) -> None:
        for name in ("model", "optimizer"):
            self.tracker.untrack(name)

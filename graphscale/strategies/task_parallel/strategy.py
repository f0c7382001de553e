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
messages, a P member's rows and mirror exchange), :mod:`.checkpoint` (the T stages' gather to rank 0) and this one
(setup, the T and P segments, the epochs).

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
from graphscale.strategies.task_parallel.chain import (  # noqa: F401 - some re-exported (tests, bench)
    _EVAL,
    _FWD,
    BLOCKS,
    CACHES,
    CHECKPOINT,
    CHUNK_FILE,
    EVAL_HALO,
    EVAL_STAGE,
    H2D,
    HALO,
    KEPT_INPUTS,
    PARAMETERS,
    PLAN_FILE,
    SENDS,
    T_ROWS,
    TASK_BWD,
    TASK_FWD,
    Segment,
    _tag,
    build_segments,
    check_plan,
    check_task_config,
    epoch_bytes,
    group_sizes,
    num_chunks,
    resolve_plan,
    scheduled_plan,
    scheduled_t_workers,
)
from graphscale.strategies.task_parallel.checkpoint import StageCheckpoint
from graphscale.strategies.task_parallel.chunks import FULL, Layout, assign_chunks, chunk_members, layout
from graphscale.strategies.task_parallel.exchange import Exchange
from graphscale.strategies.task_parallel.reference import loss_weights, weighted_loss
from graphscale.strategies.task_parallel.tasks import Op, P, T, task_split


@STRATEGIES.register("task-parallel")
class TaskParallelStrategy(Exchange, StageCheckpoint, Strategy):
    """NeutronTask task parallelism (see the module docstring)."""

    exact = False  # exact with --dependency full (placement invariance); causal / block_diag drop edges
    data_view = HOST_SHARED
    decoupled_models = True
    decoupled_default = True
    pyg_refusal = ("it trains decoupled models (Y = A_hat^L MLP(X): graphscale's gcn or gat with --decoupled), and "
                   "a PyG model is not decoupled")
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

    def _t_workers(self, graph: Graph, shared: Path | None) -> int:
        """``q``: the parent's choice (written with the shared data), ``--t-workers``, or the scheduling model's
        on rank 0, broadcast (a handle without the parent's preparation)."""
        if shared is not None and (shared / PLAN_FILE).is_file():
            return int(json.loads((shared / PLAN_FILE).read_text())["t_workers"])
        if self.config.strategy.t_workers:
            return self.config.strategy.t_workers
        q = torch.zeros(1, dtype=torch.int64, device=self.device)
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

    def _stamp(self, seg: Segment, phase: str, s: int, layer: int, start: float) -> None:
        self.timeline.append((seg.index, seg.kind, phase, s, layer, start, time.time()))

    # ------------------------------------------------------------ T segments
    def _t_input(self, seg: Segment, ids: torch.Tensor, s: int, ctx: dict) -> torch.Tensor:
        """The segment's input rows of ``ids`` (subgraph ``s``): the features (first segment) or received."""
        if seg.index == 0:
            rows = self.x[ids].to(device=self.device, dtype=self.dtype)
            self.comm.record(H2D, rows.numel() * rows.element_size(), HOST)
            return rows
        prev = self.segments[seg.index - 1]
        return self._recv_aligned(prev, seg, s, ctx, self.split.out_width(prev.ops[-1]),
                                  _tag(ctx["phase"], seg.index, s))

    def _t_run(self, seg: Segment, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        for op in seg.ops:
            h = self.split.t_op(op.index, h, ids)
        return h

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
        on_device = ctx["dev_ids"][seg.index][s]  # the model's dropout keys
        start = time.time()
        h_in = self._t_input(seg, ids, s, ctx)
        self.tracker.track(f"t_rows_{seg.index}", h_in, category=T_ROWS)
        if seg.index > 0:  # the stamp leaves out the wait for the rows (the first segment's is the h2d read)
            start = time.time()
        keep_graph = train and not self.config.strategy.t_recompute
        with torch.set_grad_enabled(keep_graph):
            if keep_graph and seg.index > 0:
                h_in.requires_grad_(True)
            out = self._t_run(seg, h_in, on_device)
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
        on_device = ctx["dev_ids"][seg.index][s]
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
                out = self._t_run(seg, h_in, on_device)
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
    def _on_device(self, host: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of a host array (labels, masks, loss weights) on the run's device."""
        return host[ids].to(self.device)

    def _loss(self, out: torch.Tensor, ids: torch.Tensor, s: int, ctx: dict) -> torch.Tensor:
        logits = self.split.logits(out, ctx["dev_ids"][self.segments[-1].index][s])
        return weighted_loss(logits, self._on_device(self.y, ids), self._on_device(self.masks["train"], ids),
                             self._on_device(ctx["weights"], ids))

    def _finish(self, out: torch.Tensor, ids: torch.Tensor, s: int, ctx: dict, saved: dict | None) -> None:
        """The chain's end for my rows of subgraph ``s``: the loss (training) or the split counts (evaluation)."""
        if ctx["phase"] == _EVAL:
            masks = {k: self._on_device(m, ids) for k, m in self.masks.items()}
            logits = self.split.logits(out, ctx["dev_ids"][self.segments[-1].index][s])
            ctx["counts"] += split_counts(logits, self._on_device(self.y, ids), masks).to(self.device)
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

    def _p_forward(self, seg: Segment, ctx: dict) -> None:
        lay, train = ctx["lay"], ctx["phase"] == _FWD
        layers = [op.index for op in seg.ops]
        prep = self._p_prepare(seg, ctx)
        ctx["state"][seg.index] = prep
        self._track_blocks(seg, prep)
        self._give_back()
        widths = {l: self.split.out_width(Op(P, l)) for l in layers}  # a P op keeps the width
        rows = prep["rows"].numel()  # my own rows and my blocks' mirrors (every row in a single-member group)
        if train:
            self.p_rows[seg.index] = rows
        view = {l: torch.zeros(rows, widths[l], dtype=self.dtype, device=self.device) for l in layers}
        halo = HALO if train else EVAL_HALO
        prev = self.segments[seg.index - 1]
        num = lay.num_subgraphs

        def ready_input(s: int) -> None:
            received = self._recv(self._route(prev, seg, ctx["owners"], lay, s, False), widths[layers[0]],
                                  _tag(ctx["phase"], seg.index, s))
            self.tracker.track("p_received", *[rows for _, rows in received], category=CACHES)
            for chunks, rows in received:
                view[layers[0]][self._local(prep, self._ids(chunks))] = rows
            self.tracker.untrack("p_received")
            del received
            self._exchange(prep, view[layers[0]], s, halo)

        def compute(l: int, s: int) -> None:
            ids, block = ctx["ids"][seg.index][s], prep["blocks"][s]
            start = time.time()
            if block is not None:
                with torch.no_grad():
                    out = self.split.p_op(l, block, view[l][prep["src"][s]])
                if l != layers[-1]:
                    view[l + 1][prep["ids"][s]] = out
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
        rows = prep["rows"].numel()
        grads = {l: torch.zeros(rows, widths[l], dtype=self.dtype, device=self.device) for l in layers}
        self.tracker.track(f"p_grads_{seg.index}", *grads.values(), category=CACHES)
        num = lay.num_subgraphs
        last_segment = seg is self.segments[-1]

        def out_grad(l: int, s: int) -> torch.Tensor:
            if l != layers[-1]:
                return grads[l + 1][prep["ids"][s]]
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
                    h_src = prep["views"][l][prep["src"][s]].requires_grad_(True)
                    with torch.enable_grad():
                        self.split.p_op(l, block, h_src).backward(g_out)
                    g_src = h_src.grad
                grads[l].index_add_(0, prep["src"][s], g_src)
                self._track_blocks(seg, prep)  # with the transpose the backward built
            self.tracker.untrack("p_grad_in")
            self._stamp(seg, "bwd", s, l, start)

        def done(l: int, s: int) -> None:
            """The gradient of every row of subgraph ``s`` at layer ``l`` is complete on the members: collect the
            mirrors' shares at the owners; the segment's input gradient goes back."""
            self._exchange_grad(prep, grads[l], s)
            if l == layers[0] and ctx["ids"][seg.index][s].numel():
                self._send_back(seg, grads[l][prep["ids"][s]], ctx["offsets_of"][seg.index][s], s, ctx)

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
                prep["blocks"][s] = prep["src"][s] = None  # subgraph s is done: its block (and transpose) go
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
        tensors += [prep["rows"], *prep["ids"], *[t for t in prep["src"] if t is not None]]  # my rows' positions
        self.tracker.track(f"p_blocks_{seg.index}", *tensors, category=BLOCKS)

    # ------------------------------------------------------------ epochs
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
        model.train()
        model.set_epoch(epoch)
        self.pipelined = sc.pipelined
        self.pending, self.deferred, self.timeline, self.p_rows = [], [], [], {}
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
        total = torch.tensor([ctx["loss"]], dtype=torch.float64, device=self.device)
        self.comm.all_reduce(total, CONTROL)
        return EpochStats(loss=float(total), seconds=seconds, bytes=self.env.ledger.since(before),
                          peak_memory=self.tracker.peak,
                          extra={"role": [self.kind, self.stage, self.member], "segments": [s.index for s in self.mine],
                                 "timeline": self.timeline, "model_form": type(model).form, "p_rows": self.p_rows,
                                 "memory": self.tracker.peak_breakdown})

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

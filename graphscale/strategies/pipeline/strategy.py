r"""GNNPipe: pipelined layer-level model parallelism over graph chunks (``--strategy pipeline``).

Spec: ``shared/specs/gnnpipe.md``. Worker ``i`` is stage ``i`` of ``S = --workers`` (the hybrid below: ``S =
--workers / W``): it holds the whole graph (host-shared, memory-mapped once per host), its contiguous layers
(:func:`~.plan.stage_layers`; stage 0 also runs the input map, stage ``S-1`` the output map and the loss) and, for
each of its layers ``l``, the rows ``view[l]`` (``N x d_l``) that layer reads. The graph is cut once into ``K``
locality-aware chunks (``--chunks``, default four per worker; the run's vertex partitioner, METIS by default, into
``K`` parts, computed by the parent before the workers start; :func:`~.plan.assign_chunks`), each with its block
(the chunk, then its in-neighbours elsewhere).

**An epoch** (Algorithm 1). The chunk order is a permutation drawn from ``(seed, epoch)`` (``--shuffle``, the
default; identical on every rank without communication) or the identity (``--no-shuffle``). The stage runs the
``(phase, chunk)`` steps of :func:`~.plan.pipeline_schedule`: ``--schedule gpipe`` (default) every forward in
that order, then every backward in reverse; ``1f1b`` (below) interleaves them.

* Forward, chunk by chunk: stage 0 maps the chunk's features, other stages receive the chunk's rows (and, for
  GCNII, its initial-residual rows ``H^0``) from stage ``i-1`` (category ``pipe_fwd``); every own layer gathers
  the chunk's neighbour rows from ``view[l]`` and runs ``model.step`` on the chunk's block, and the chunk's new
  rows are written into ``view[l+1]``. Rows of chunks processed earlier this epoch are therefore fresh and the
  others are history. The last stage computes the chunk's loss (cross-entropy of its training rows divided by the
  *whole graph's* training count); the others send the chunk's output rows on (non-blocking).
* Backward, layers from the last: each (chunk, layer) forward is one autograd island whose leaves are the
  chunk's input rows and the neighbour rows it gathered. The last island starts from the gradient of stage
  ``i+1`` (category ``pipe_bwd``) or the loss; each island's output gradient is the next island's input-row
  gradient plus the accumulator ``G[l]`` of what chunks processed *later* in the forward sent those rows. With
  ``--cross-chunk-grad fresh`` (default, GNNPipe) the gathered neighbour rows' gradients go into ``G[l]`` for rows
  that were fresh (their chunk came no later); gradients along stale edges are dropped (GNNPipe's technique 3), so
  the result is the exact gradient of the stale forward. The input rows' gradient (and GCNII's ``H^0`` gradient,
  summed over the stages) goes to stage ``i-1``.
* One Adam step per epoch on every stage's own parameters (weights are never stale).

**History** (§3.4-3.5). Before the first epoch one exact forward through the stages (training mode, the first
epoch's dropout masks; category ``pipe_init``, :meth:`PipelineStrategy._exact_forward`) fills every ``view``.
With ``--history-period P`` the rows are copied to ``hist`` at the start of every epoch ``e`` with ``e % P == 0``
and ``view`` is reset to ``hist`` at the start of the others, so epochs ``P m .. P m + P - 1`` read the rows of the
end of epoch ``P m - 1`` (``P = 1``: the previous epoch's, and no copy). ``--history-grad historical`` (the
ablation) keeps the gradients along stale edges of one epoch and adds them, one epoch later, to the gradient of
the source rows.

The semantics depend on the chunks, the orders and the options, never on ``S``, the schedule or timing:
:class:`~.reference.ChunkedReference` runs them on one process and the tests hold this strategy to it; with one
chunk (or chunks without cross edges) it is exact full-graph training.

**1F1B** (``--schedule 1f1b``, the paper's named future work) needs ``--cross-chunk-grad none``. 1F1B runs chunk
``k``'s backward before the forward of chunks ``k + S ..``; with fresh cross-chunk gradients those later chunks,
which read ``k``'s rows fresh, send their contributions to ``k`` (the accumulators ``G[l]``) after ``k``'s
backward. Keeping GPipe's numbers would need a second backward through ``k``'s saved graph once they arrive, so
every chunk's activations would stay alive as under GPipe: no memory saved. So the combination is refused before
any worker starts, and the honest variant is a semantics: with ``none`` a chunk reads the other chunks' rows
(fresh or history) as constants and gradients flow only inside chunks (in a hybrid, still to the ghosts of the
same chunk), so no chunk's backward needs another's and the two schedules compute the same numbers (tested against
each other and the reference; GPipe accepts ``none`` too, for the comparison under identical semantics). 1F1B
starts ``min(S - 1 - i, K)`` forwards on stage ``i``, then alternates one forward and one backward (chunks'
backwards in forward order): stage ``i`` holds at most ``S - i`` chunks' saved activations instead of ``K``
(``activation_peak`` in the epoch's ``extra``; the bubble is GPipe's). What dropping the cross-chunk gradients
costs in accuracy is measured by ``graphscale bench pipeline`` (docs/strategies/pipeline.md).

**Timings** (:mod:`.timeline`): every stage records the start and end of every ``(phase, chunk)`` step and of
the receive wait inside it, and when it sent each chunk; after the epoch the neighbours trade their send times
(``control``) and every wait is split at the peer's send: before it, **bubble** (the schedule had no chunk for the
stage: the peer was still computing), after it **transfer**. The epoch's ``extra`` has ``bubble_frac``,
``transfer_frac`` and the seconds (``schedule_s``, ``compute_s``, ``bubble_s``, ``transfer_s``, a hybrid's
``halo_s`` inside compute), next to ``stale_frac`` (edges read from history), ``cut_frac``, ``activation_peak``
and ``buffer_rows``.

**Hybrid** (§3.6, ``--hybrid-width W``): ``M = S W`` workers, rank ``j W + r`` is member ``r`` of stage ``j``'s
group. Each chunk is split once more into ``W`` sub-chunks (``--hybrid-split chunks-first``, the paper's: the
partitioner on the chunk's induced subgraph), or the graph is split into ``W`` parts first and each part into
``K`` pieces, chunk ``k`` being every part's ``k``-th piece (``parts-first``: the ghosts of ``W`` parts only;
:func:`~.plan.assign_hybrid`); member ``r`` of every stage runs sub-chunk ``(k, r)``, so the members ``r`` form
a pure pipeline over their sub-chunks. Inside a group every member keeps ghost rows of its boundary set ``B_r``:
after each layer's input rows of a chunk are known, the rows that are ghosts elsewhere go to their readers (one
``all_to_all_v`` in the group, category ``halo``; :class:`~.plan.GroupExchange`), and in the backward the ghosts'
accumulated fresh-edge gradients go back to their owners the same way. Freshness is still by chunk, so the numbers
are those of the pure pipeline with the same chunks (the tests hold both to the same reference). A stage's weights
are replicated in its group: one all-reduce of their gradients per epoch (``allreduce``). **Memory**: a member's
``view``, ``hist`` and accumulators hold only its own rows and its ghosts (``|V_r| + |B_r|`` rows per layer,
``local_ids``; every index of the schedule is translated once at setup), about ``N / W`` plus the ghosts instead of
``N``. Historical gradients are refused in a hybrid.

**Evaluation** flows chunk by chunk through the stages like training, and is exact
(:meth:`PipelineStrategy._exact_forward`, the same routine as the initial history): each stage takes every
chunk's rows (received chunk by chunk), runs each of its layers on every chunk's block (a hybrid's members their
sub-chunks, exchanging ghosts between layers: ``eval_halo``, ``init_halo`` for the history forward), and sends each
chunk's output rows on as soon as its last layer made them, so the next stage receives while this one computes.
A layer needs every row of the previous one, so the stages overlap only on the boundary layers; the numbers are
the exact forward's (tested against the full-graph forward of the reference model). Every member takes part; the
last group's counts are summed and broadcast.

**Bytes** per training epoch, summed over workers: ``pipe_fwd + pipe_bwd = 2 N sum_i d_i c b``
(:func:`~.plan.pipeline_bytes_per_epoch`; ``2 (S-1) N H c b`` with ``c = 2`` for GCNII), independent of ``L``,
``K`` and the schedule; ``control``: the loss (8 bytes to each other rank) and the send times (``8 K`` per
boundary and direction). The pure pipeline has no weight all-reduce (every parameter lives on one stage); a hybrid
adds ``halo = 2 sum_r |B_r| sum_l d_l b`` per group over its exchanged layers
(:func:`~.plan.group_halo_bytes_per_epoch`) and ``allreduce = 2 (W-1) P b``. The exact forwards move ``N d_i c b``
per boundary (``pipe_init`` once, ``eval_stage`` per evaluation).

**Checkpoints** (``--checkpoint`` / ``--resume``): :meth:`PipelineStrategy.state_dict` is collective; the
members 0 of the groups send worker 0 their stage's parameters (:func:`stage_parameters`) and Adam state, every
member its own rows of the historical embeddings (``view``), of the fixed history (``hist``) and of the kept
stale-edge gradients (``late``), all through :meth:`Comm.gather_object` (category ``checkpoint``). The file holds
the whole model and ``N`` rows per layer, so a resumed run continues exactly as the uninterrupted one (tested);
without the rows it would start from a new exact history and diverge. The best-validation model is gathered the
same way (:meth:`PipelineStrategy.full_model_state`).

**Why not ``torch.distributed.pipelining``.** Its ``PipelineStage`` and schedules (GPipe, 1F1B, interleaved)
split one batch into microbatches of equal shape, infer or fix the stage's input and output shapes once, and run
each microbatch's backward from its output gradient alone. GNNPipe's chunks have unequal row counts (padding them
would move bytes the closed form does not count and need masks in every layer); a stage's forward reads
per-stage state (``view``) that earlier chunks wrote, so a stage is not a function of its microbatch input; and a
chunk's backward needs extra gradients injected at every intermediate layer (the accumulators ``G[l]``) and
scatters gradients of gathered neighbour rows, neither of which its ``backward_one_chunk`` allows. Its
point-to-point traffic would also bypass the Ledger. So the schedules are written here on :class:`Comm`.

**Not implemented**: 1F1B with fresh cross-chunk gradients (refused, above); the timings' bubble / transfer split
assumes the stages share one host's clock. The §3.7 cost model is :mod:`.costmodel`; ``graphscale bench
pipeline`` prints the volume, timing, memory and accuracy tables.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.options import option_names
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    COUNTS_PER_SPLIT,
    SPLITS,
    Strategy,
    allreduce_gradients,
    counts_to_metrics,
    masked_loss_sum,
    optimizer_tensors,
    split_counts,
)
from graphscale.strategies.options.pipeline import PipelineOptions
from graphscale.strategies.pipeline.plan import (
    BACKWARD,
    FORWARD,
    ChunkPlan,
    GroupExchange,
    assign_hybrid,
    check_plan,
    chunk_order,
    default_chunks,
    pipeline_schedule,
    positions,
    refreshes_history,
    stage_layers,
)
from graphscale.strategies.pipeline.reference import learned_input
from graphscale.strategies.pipeline.timeline import StageTimeline, clock

#: Ledger categories: stage-boundary rows (forward), their gradients (backward), the initial history forward,
#: the evaluation forward, a hybrid group's ghost rows and their gradients.
PIPE_FWD, PIPE_BWD, PIPE_INIT, EVAL_STAGE, HALO = "pipe_fwd", "pipe_bwd", "pipe_init", "eval_stage", "halo"
#: a hybrid group's ghost rows in the initial history forward and in the evaluation forward
INIT_HALO, EVAL_HALO = "init_halo", "eval_halo"
#: Ledger category of the stages' states gathered to worker 0 for a checkpoint.
CHECKPOINT = "checkpoint"
CHUNK_FILE, SUBCHUNK_FILE = "chunk_of.npy", "sub_of.npy"


def num_chunks(config: RunConfig) -> int:
    """``K``: ``--chunks``, else four per worker."""
    chunks = config.strategy.chunks
    return default_chunks(config.strategy.workers) if chunks is None else chunks


def num_stages(config: RunConfig) -> int:
    """``S = --workers / --hybrid-width``."""
    return config.strategy.workers // max(config.strategy.hybrid_width, 1)


def stage_parameters(model: torch.nn.Module, layers: range, first: bool, last: bool, in_dim: int) -> set[str]:
    """Names of the parameters a stage trains: those of its layers (``layers.<l>.``), and of the others those the
    input map uses on stage 0 (found by differentiating it on one zero row) and the rest (the output map's) on the
    last stage."""
    own = {n for n, _ in model.named_parameters() if n.split(".")[:1] == ["layers"] and int(n.split(".")[1]) in layers}
    others = [(n, p) for n, p in model.named_parameters() if n.split(".")[:1] != ["layers"]]
    used = set()
    if others:
        p = next(model.parameters())
        with torch.enable_grad():
            out = model.input_map(torch.zeros(1, in_dim, dtype=p.dtype, device=p.device),
                                  torch.zeros(1, dtype=torch.int64, device=p.device))
            if out.requires_grad:
                grads = torch.autograd.grad(out.sum(), [q for _, q in others], allow_unused=True)
                used = {n for (n, _), g in zip(others, grads) if g is not None}
    return own | {n for n, _ in others if (n in used and first) or (n not in used and last)}


def check_width(workers: int, width: int) -> None:
    """Raises ``ValueError`` unless ``--hybrid-width`` divides ``--workers``."""
    if width < 1 or workers % width:
        raise ValueError(f"--hybrid-width {width} must be >= 1 and divide --workers {workers}")


@STRATEGIES.register("pipeline")
class PipelineStrategy(Strategy):
    """GNNPipe pipelined model parallelism (see the module docstring)."""

    exact = False
    data_view = HOST_SHARED
    options = option_names(PipelineOptions)

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        unused = {} if config.strategy.hybrid_width > 1 else {"hybrid_split": "without --hybrid-width"}
        if num_chunks(config) == 1 and config.strategy.hybrid_width == 1:
            unused.update({"partitioner": "with --chunks 1", "balance": "with --chunks 1"})
        return unused

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        sc = config.strategy
        check_width(sc.workers, sc.hybrid_width)
        check_plan(config.model.layers, num_stages(config), num_chunks(config), sc.history_period, sc.history_grad,
                   sc.hybrid_width, sc.schedule, sc.cross_chunk_grad)

    @classmethod
    def resume_identity(cls, config: RunConfig) -> dict:
        """What decides the chunks and the training semantics (the schedule does not: 1F1B computes GPipe's
        numbers); ``chunks`` is the resolved ``K``."""
        sc = config.strategy
        return {"chunks": num_chunks(config), "partitioner": sc.partitioner, "balance": sc.balance,
                "hybrid_width": sc.hybrid_width, "hybrid_split": sc.hybrid_split, "shuffle": sc.shuffle,
                "history_period": sc.history_period, "history_grad": sc.history_grad,
                "cross_chunk_grad": sc.cross_chunk_grad}

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        sc = config.strategy
        return {"chunks": num_chunks(config), "chunk_partitioner": sc.partitioner, "chunk_balance": sc.balance,
                "hybrid_width": sc.hybrid_width, "hybrid_split": sc.hybrid_split}

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        sc = config.strategy
        chunk_of, sub_of = assign_hybrid(graph, num_chunks(config), sc.hybrid_width, sc.hybrid_split, sc.partitioner,
                                         sc.balance, config.seed)
        np.save(folder / CHUNK_FILE, chunk_of.numpy())
        np.save(folder / SUBCHUNK_FILE, sub_of.numpy())

    # ------------------------------------------------------------ setup
    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        sc = config.strategy
        self.width = sc.hybrid_width
        check_width(env.world_size, self.width)
        self.comm = Comm(env)
        self.stages = env.world_size // self.width
        self.stage, self.member = divmod(env.rank, self.width)
        check_plan(model.num_layers, self.stages, num_chunks(config), sc.history_period, sc.history_grad,
                   self.width, sc.schedule, sc.cross_chunk_grad)
        self.schedule, self.fresh_cross = sc.schedule, sc.cross_chunk_grad == "fresh"
        self.group = self._group_comm(env)
        graph = self.data.open_graph()
        shared = self.data.extras.get("shared")
        if shared:
            chunk_of = torch.from_numpy(np.load(Path(shared) / CHUNK_FILE).astype(np.int64))
            sub_of = torch.from_numpy(np.load(Path(shared) / SUBCHUNK_FILE).astype(np.int64))
        else:
            chunk_of, sub_of = assign_hybrid(graph, num_chunks(config), self.width, sc.hybrid_split, sc.partitioner,
                                             sc.balance, config.seed)
        self.plan = ChunkPlan.build(graph, chunk_of, sub_of, self.member)
        self.layers = stage_layers(model.num_layers, self.stages)[self.stage]
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        self.learned = learned_input(model)
        self.owned = stage_parameters(model, self.layers, self.first, self.last, graph.num_features)
        device, dtype = env.device, next(model.parameters()).dtype
        self.num_nodes = graph.num_nodes
        self.num_train = int(graph.train_mask.sum())
        if self.num_train == 0:
            raise ValueError("strategy 'pipeline': the graph has no training vertices")
        self._local_rows(graph, chunk_of, sub_of, device)
        self.blocks = [b.to(device) for b in self.plan.blocks]
        self.halo_member = [sub_of[b.halo_ids].to(device) for b in self.plan.blocks]
        self.nodes = [n.to(device) for n in self.plan.nodes]
        self.x = graph.x.to(device=device, dtype=dtype) if self.first else None
        self.y = graph.y.to(device) if self.last else None
        self.masks = {s: getattr(graph, f"{s}_mask").to(device) for s in SPLITS} if self.last else None
        widths = model.layer_widths()
        self.widths = widths
        self.in_width = widths[self.layers.start]
        self.out_width = widths[self.layers.stop] if not self.last else None
        self.h0_width = widths[0] if model.needs_h0 else 0
        # the rows every own layer reads, own and ghost rows only (layer 0 of an identity input map reads x)
        rows = self.local_ids.numel()
        self.view = {l: torch.zeros(rows, widths[l], dtype=dtype, device=device) for l in self.layers
                     if l > 0 or self.learned}
        self.grad_acc = {l: torch.zeros_like(v) for l, v in self.view.items()}
        self.ghost_acc = {l: torch.zeros_like(v) for l, v in self.view.items()} if self.width > 1 else {}
        self.historical = sc.history_grad == "historical"
        self.late = {l: torch.zeros_like(v) for l, v in self.view.items()} if self.historical else {}
        self.hist: dict[int, torch.Tensor] | None = None
        self.initialised = False
        self.timeline = StageTimeline(self.plan.num_chunks)
        self.tracker = MemoryTracker(env)
        self.tracker.track("graph", *[t for b in self.blocks for t in (b.indptr, b.indices, b.src_ids, b.src_deg)],
                           self.x, self.y, *([] if self.masks is None else self.masks.values()))
        self.tracker.track("buffers", *self.view.values(), *self.grad_acc.values(), *self.ghost_acc.values(),
                           *self.late.values())
        self.tracker.track_module("model", model)

    def _local_rows(self, graph: Graph, chunk_of: torch.Tensor, sub_of: torch.Tensor, device) -> None:
        """The rows this member keeps (``local_ids``: its own vertices and, in a hybrid, its ghosts ``B_r``,
        ascending; every vertex in the pure pipeline) and every index of the schedule as a row of them."""
        own = torch.nonzero(sub_of == self.member).flatten()
        exchange = GroupExchange.build(graph, chunk_of, sub_of, self.width, self.member) if self.width > 1 else None
        ghosts = torch.cat([t for row in exchange.recv for t in row]) if exchange is not None else own[:0]
        self.local_ids = torch.unique(torch.cat([own, ghosts]))
        index = torch.full((graph.num_nodes,), -1, dtype=torch.int64)
        index[self.local_ids] = torch.arange(self.local_ids.numel())
        self.own_local = index[own].to(device)
        self.nodes_local = [index[n].to(device) for n in self.plan.nodes]
        self.halo_local = [index[b.halo_ids].to(device) for b in self.plan.blocks]
        if any(bool((h < 0).any()) for h in self.halo_local):  # pragma: no cover - B_r holds every foreign source
            raise RuntimeError("pipeline hybrid: a block reads a row that is neither the member's nor a ghost")
        self.src_local = [torch.cat([n, h]) for n, h in zip(self.nodes_local, self.halo_local)]
        self.exchange = None
        if exchange is not None:
            local = GroupExchange([[index[t].to(device) for t in row] for row in exchange.send],
                                  [[index[t].to(device) for t in row] for row in exchange.recv])
            self.exchange = local
            # backward: where the gradients the others return land among my rows of chunk k
            self.returned_at = [torch.searchsorted(n, torch.cat(local.send[k])) for k, n in enumerate(self.nodes_local)]
            # the exact forwards exchange every chunk's ghosts of a layer at once
            self.send_all = [torch.cat([row[p] for row in local.send]) for p in range(self.width)]
            self.recv_all = [torch.cat([row[p] for row in local.recv]) for p in range(self.width)]
        self.local_ids = self.local_ids.to(device)

    def _group_comm(self, env: DistEnv) -> Comm:
        """The collectives of this worker's stage group (its ``W`` ranks; the ledger is the worker's)."""
        if self.width == 1:
            return Comm(DistEnv(rank=0, world_size=1, device=env.device, timeout=env.timeout, ledger=env.ledger))
        import torch.distributed as dist

        groups = [dist.new_group(list(range(s * self.width, (s + 1) * self.width))) for s in range(self.stages)]
        return Comm(DistEnv(rank=self.member, world_size=self.width, device=env.device, backend=env.backend,
                            group=groups[self.stage], timeout=env.timeout, ledger=env.ledger))

    # ------------------------------------------------------------ helpers
    def _recv_from(self, stage: int, rows: int, width: int, phase: str | None = None,
                   chunk: int = -1) -> torch.Tensor:
        """Receive ``[rows, width]`` from the same member of stage ``stage`` (the wait is timed in a schedule
        step, ``phase``)."""
        buf = torch.empty(rows, width, dtype=next(self.model.parameters()).dtype, device=self.env.device)
        start = clock()
        self.comm.recv(buf, stage * self.width + self.member).wait()
        if phase is not None:
            self.timeline.waits.append((phase, chunk, start, clock()))
        return buf

    def _send_to(self, stage: int, t: torch.Tensor, category: str, phase: str | None = None, chunk: int = -1):
        if phase is not None:
            self.timeline.sent[phase][chunk] = clock()
        return self.comm.send(t.detach(), stage * self.width + self.member, category)

    def _stage_input(self, k: int, phase: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Chunk ``k``'s input rows of the stage and GCNII's ``H^0`` rows: mapped here (stage 0) or received."""
        ids = self.nodes[k]
        if self.first:
            h = self.model.input_map(self.x[ids], ids)
            return h, (h if self.model.needs_h0 else None)
        buf = self._recv_from(self.stage - 1, ids.numel(), self.in_width + self.h0_width, phase, k)
        h, h0 = buf[:, : self.in_width].detach(), buf[:, self.in_width:].detach()
        return h, (h0 if self.model.needs_h0 else None)

    def _forward_message(self, h: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
        return h if h0 is None else torch.cat([h, h0], dim=1)

    def _exchange(self, send_rows: torch.Tensor, send: list[torch.Tensor], recv: list[torch.Tensor],
                  category: str) -> torch.Tensor:
        """One ``all_to_all_v`` of the group: ``send_rows`` (grouped as ``send``) out, the rows of ``recv`` in."""
        start = clock()
        out = self.group.all_to_all_v(send_rows, [t.numel() for t in send], [t.numel() for t in recv], category)
        self.timeline.halo += clock() - start
        return out

    def _push_ghosts(self, k: int, layer: int) -> None:
        """Hybrid forward: send my chunk-``k`` rows of ``view[layer]`` to the ranks that hold them as ghosts and
        write theirs into mine."""
        send, recv = self.exchange.send[k], self.exchange.recv[k]
        view = self.view[layer]
        view[torch.cat(recv)] = self._exchange(view[torch.cat(send)], send, recv, HALO)

    def _pull_ghost_grads(self, k: int, layer: int) -> torch.Tensor:
        """Hybrid backward: return my ghosts' accumulated gradients of chunk ``k`` to their owners; the gradients
        the others hold for my rows of chunk ``k``, as ``[rows of chunk k, d]``."""
        send, recv = self.exchange.send[k], self.exchange.recv[k]
        acc = self.ghost_acc[layer]
        ghosts = torch.cat(recv)
        received = self._exchange(acc[ghosts], recv, send, HALO)
        acc[ghosts] = 0
        out = torch.zeros(self.nodes_local[k].numel(), acc.shape[1], dtype=acc.dtype, device=acc.device)
        return out.index_add_(0, self.returned_at[k], received)

    # ------------------------------------------------------------ exact forward
    def _exact_forward(self, category: str, halo_category: str, fill: bool) -> list | None:
        """The exact forward of the whole graph, chunk by chunk through the stages (no autograd): every member of
        every group runs its sub-chunks. A stage takes every chunk's input rows (mapped, or received chunk by
        chunk), then runs each of its layers on every chunk's block (a hybrid exchanging its ghost rows between
        layers, ``halo_category``), and sends each chunk's output rows on as soon as its last layer produced
        them (``category``), so the next stage receives while this one computes. The last stage returns
        ``[(ids, logits)]`` per chunk; ``fill``: write every layer's input rows into ``view`` (the initial
        history)."""
        model, rows = self.model, self.local_ids.numel()
        dtype = next(model.parameters()).dtype
        with torch.no_grad():
            if self.first:  # row-wise: every kept row, ghosts included
                cur = model.input_map(self.x[self.local_ids], self.local_ids)
                h0 = cur if model.needs_h0 else None
            else:
                cur = torch.zeros(rows, self.in_width, dtype=dtype, device=self.env.device)
                h0 = torch.zeros(rows, self.h0_width, dtype=dtype, device=self.env.device) if model.needs_h0 \
                    else None
                for k in range(self.plan.num_chunks):
                    h, h0k = self._stage_input(k, None)
                    cur[self.nodes_local[k]] = h
                    if h0 is not None:
                        h0[self.nodes_local[k]] = h0k
            out, pending = [], []
            for layer in self.layers:
                if self.exchange is not None and not (self.first and layer == self.layers.start):
                    cur[torch.cat(self.recv_all)] = self._exchange(cur[torch.cat(self.send_all)], self.send_all,
                                                                   self.recv_all, halo_category)
                if fill and layer in self.view:
                    self.view[layer].copy_(cur)
                final = layer == self.layers.stop - 1
                nxt = None if final else torch.zeros(rows, self.widths[layer + 1], dtype=dtype,
                                                     device=self.env.device)
                for k in range(self.plan.num_chunks):
                    lids = self.nodes_local[k]
                    o = model.step(layer, self.blocks[k], cur[self.src_local[k]], None if h0 is None else h0[lids])
                    if not final:
                        nxt[lids] = o
                    elif self.last:
                        out.append((self.nodes[k], model.output_map(o, self.nodes[k])))
                    else:
                        pending.append(self._send_to(self.stage + 1, self._forward_message(
                            o, None if h0 is None else h0[lids]), category))
                cur = nxt
            for work in pending:
                work.wait()
        return out if self.last else None

    # ------------------------------------------------------------ training
    def _start_epoch(self, epoch: int) -> None:
        if not self.initialised:
            self._exact_forward(PIPE_INIT, INIT_HALO, fill=True)
            self.initialised = True
        period = self.config.strategy.history_period
        if period > 1:
            if self.hist is None or refreshes_history(epoch, period):
                self.hist = {l: v.clone() for l, v in self.view.items()}
                self.tracker.track("history", *self.hist.values())
            else:
                for l, v in self.view.items():
                    v.copy_(self.hist[l])
        if self.historical:  # last epoch's stale-edge gradients seed this epoch's accumulators
            self.grad_acc, self.late = self.late, self.grad_acc
            for t in self.late.values():
                t.zero_()
        else:
            for t in self.grad_acc.values():
                t.zero_()

    def _forward_chunk(self, k: int) -> dict:
        """The stage's forward of chunk ``k``: one autograd island per layer; what the backward needs."""
        model, ids, block = self.model, self.nodes[k], self.blocks[k]
        lids, halo = self.nodes_local[k], self.halo_local[k]
        h, h0 = self._stage_input(k, FORWARD)
        saved = {"map": None, "h0": h0, "islands": []}
        if self.first and self.learned:  # the input map is its own island; the layers start from a leaf
            saved["map"] = h
            h = h.detach()
            h0 = None if h0 is None else h0.detach().requires_grad_(True)
            saved["h0"] = h0
        elif h0 is not None:
            h0.requires_grad_(True)
        for layer in self.layers:
            if layer in self.view:
                h.requires_grad_(True)
                self.view[layer][lids] = h.detach()
                if self.exchange is not None:
                    self._push_ghosts(k, layer)
                nbr = self.view[layer][halo].requires_grad_(True)
            else:  # layer 0 of an identity input map: the features
                nbr = self.x[block.halo_ids]
            out = model.step(layer, block, torch.cat([h, nbr]), h0)
            saved["islands"].append((layer, h, nbr, out))
            h = out.detach()
        if self.last:
            _, _, _, out = saved["islands"][-1]
            logits = model.output_map(out, ids)
            saved["loss"] = masked_loss_sum(logits, self.y[ids], self.masks["train"][ids]) / self.num_train
        else:
            saved["send"] = self._send_to(self.stage + 1, self._forward_message(h, h0), PIPE_FWD, FORWARD, k)
        return saved

    def _scatter_neighbour_grads(self, k: int, layer: int, nbr: torch.Tensor, pos: torch.Tensor) -> None:
        """Gathered rows' gradients: those to propagate into the accumulators (mine, or the ghosts' to return to
        their owners): rows read fresh (their chunk came no later than ``k``), or with ``--cross-chunk-grad
        none`` only rows of chunk ``k`` itself (a hybrid's ghosts of the same chunk); the others dropped or,
        historical, kept for the next epoch."""
        halo, chunk = self.halo_local[k], self.plan.halo_chunk[k]
        fresh = ((pos[chunk] <= pos[k]) if self.fresh_cross else (chunk == k)).to(nbr.device)
        if self.exchange is None:
            self.grad_acc[layer].index_add_(0, halo[fresh], nbr.grad[fresh])
        else:
            mine = self.halo_member[k] == self.member
            self.grad_acc[layer].index_add_(0, halo[fresh & mine], nbr.grad[fresh & mine])
            self.ghost_acc[layer].index_add_(0, halo[fresh & ~mine], nbr.grad[fresh & ~mine])
        if self.historical:
            self.late[layer].index_add_(0, halo[~fresh], nbr.grad[~fresh])

    def _backward_chunk(self, k: int, saved: dict, pos: torch.Tensor):
        """The stage's backward of chunk ``k``, layer by layer; returns the pending send of its input gradient."""
        lids = self.nodes_local[k]
        g_h0 = None
        if self.last:
            grad = None
        else:
            g = self._recv_from(self.stage + 1, lids.numel(), self.out_width + self.h0_width, BACKWARD, k)
            grad = g[:, : self.out_width]
            g_h0 = g[:, self.out_width:] if self.model.needs_h0 else None
        for layer, h, nbr, out in reversed(saved["islands"]):
            if grad is None:
                saved["loss"].backward()
            else:
                out.backward(grad)
            if nbr.grad is not None:
                self._scatter_neighbour_grads(k, layer, nbr, pos)
            if layer not in self.view:  # layer 0 of an identity input map: nothing below it
                grad = None
                break
            grad = h.grad + self.grad_acc[layer][lids]
            if self.exchange is not None:
                grad = grad + self._pull_ghost_grads(k, layer)
        h0 = saved["h0"]
        if h0 is not None:  # H^0's gradient: this stage's uses plus the later stages'
            g_h0 = h0.grad if g_h0 is None else h0.grad + g_h0
        if self.first:
            if saved["map"] is not None:
                root = grad if g_h0 is None else grad + g_h0
                saved["map"].backward(root)
            return None
        return self._send_to(self.stage - 1, grad if g_h0 is None else torch.cat([grad, g_h0], dim=1), PIPE_BWD,
                             BACKWARD, k)

    def _run_schedule(self, order: torch.Tensor) -> tuple[float, int]:
        """Every ``(phase, chunk)`` step of the epoch (:func:`~.plan.pipeline_schedule`), timed; returns the
        training loss (last stage, else 0) and the peak bytes of the saved activations (tensors autograd keeps
        for the backward, tracked), sampled after every forward."""
        pos = positions(order)
        saved: dict[int, dict] = {}
        sends, pending = {}, []
        loss, base, peak = 0.0, self.tracker.current, 0
        self.timeline.start()
        for phase, k in pipeline_schedule(order, self.stage, self.stages, self.schedule):
            start = clock()
            if phase == FORWARD:
                saved[k] = self._forward_chunk(k)
                if "send" in saved[k]:
                    sends[k] = saved[k].pop("send")
                if self.last:
                    loss += float(saved[k]["loss"].detach())
                peak = max(peak, self.tracker.current - base)
            else:
                if k in sends:  # the next stage took chunk k's rows before it sent their gradient
                    sends.pop(k).wait()
                work = self._backward_chunk(k, saved.pop(k), pos)
                if work is not None:
                    pending.append(work)
            self.timeline.steps.append((phase, k, start, clock()))
        for work in [*sends.values(), *pending]:
            work.wait()
        self.timeline.stop()
        return loss, peak

    def _timeline_split(self) -> dict[str, float]:
        """Trade send times with the neighbour stages (``control``) and split this stage's waits."""
        t = self.timeline
        dtype, device = torch.float64, self.env.device
        mine_f = torch.tensor(t.sent[FORWARD], dtype=dtype, device=device)
        mine_b = torch.tensor(t.sent[BACKWARD], dtype=dtype, device=device)
        up = torch.full_like(mine_f, float("nan"))
        down = torch.full_like(mine_b, float("nan"))
        works, before, after = [], self.env.rank - self.width, self.env.rank + self.width
        if not self.first:
            works += [self.comm.recv(up, before), self.comm.send(mine_b, before, CONTROL)]
        if not self.last:
            works += [self.comm.recv(down, after), self.comm.send(mine_f, after, CONTROL)]
        for work in works:
            work.wait()
        return t.split(up.tolist(), down.tolist())

    def train_epoch(self, epoch: int) -> EpochStats:
        model = self.model
        model.train()
        model.set_epoch(epoch)
        start = time.perf_counter()
        before = self.env.ledger.snapshot()
        with self.tracker.epoch():
            self._start_epoch(epoch)
            self.optimizer.zero_grad(set_to_none=True)
            order = chunk_order(self.plan.num_chunks, epoch, self.config.seed, self.config.strategy.shuffle)
            loss, activations = self._run_schedule(order)
            if self.width > 1:  # a stage's weights are replicated in its group: sum their gradients
                allreduce_gradients(self.group, [p for p in model.parameters() if p.grad is not None], self.tracker)
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
            self.tracker.untrack("gradients")
        seconds = time.perf_counter() - start
        timing = self._timeline_split()
        total = torch.tensor([loss], dtype=torch.float64, device=self.env.device)
        if self.width > 1 and self.last:  # the last stage's members each hold their sub-chunks' share
            self.group.all_reduce(total, CONTROL)
        self.comm.broadcast(total, self.env.world_size - 1, CONTROL)
        return EpochStats(loss=float(total), seconds=seconds,
                          bytes=self.env.ledger.since(before), peak_memory=self.tracker.peak,
                          extra={"stage_layers": [self.layers.start, self.layers.stop],
                                 "chunks": self.plan.num_chunks, "cut_frac": self.plan.cut_fraction(),
                                 "stale_frac": self.plan.stale_fraction(order), "schedule": self.schedule,
                                 "activation_peak": activations, "buffer_rows": self.local_ids.numel(), **timing})

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The exact forward, chunk by chunk through the stages (:meth:`_exact_forward`), in eval mode; the last
        stage's members add their chunks' counts."""
        self.model.eval()
        counts = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64, device=self.env.device)
        outputs = self._exact_forward(EVAL_STAGE, EVAL_HALO, fill=False)
        if self.last:
            for ids, logits in outputs:
                counts += split_counts(logits, self.y[ids], {s: m[ids] for s, m in self.masks.items()}).to(counts)
            self.group.all_reduce(counts, CONTROL)
        return counts_to_metrics(self.comm.broadcast(counts, self.env.world_size - 1, CONTROL).cpu())

    # ------------------------------------------------------------ checkpoints
    def _gather_owned(self, model_state: dict) -> dict | None:
        """``model_state`` (a ``model.state_dict()`` of this worker) with every parameter taken from the stage that
        trains it (the members 0 of the groups send theirs), on worker 0; ``None`` on the others."""
        mine = {n: t for n, t in model_state.items() if n in self.owned} if self.member == 0 else {}
        parts = self.comm.gather_object(mine, 0, CHECKPOINT)
        if parts is None:
            return None
        merged = dict(model_state)
        for part in parts:
            merged.update(part)
        return merged

    def full_model_state(self, state: dict | None) -> dict | None:
        """Collective: the whole model (each stage's parameters from that stage) on worker 0."""
        return None if state is None else self._gather_owned(state)

    def state_dict(self) -> dict:
        """Collective (every worker calls it): on worker 0 the whole run's state, ``{}`` on the others.

        ``model``: every parameter from the stage that trains it; ``optimizer``: Adam's state of every parameter
        (the same indices on every stage: every worker builds the whole model); ``rows``, ``hist``, ``late``: per
        layer, the ``N`` rows of ``view`` (the historical embeddings, from the stage holding the layer, each
        member's own rows in a hybrid), of the fixed history and of the stale-edge gradients kept for the next
        epoch, so that a resumed run continues exactly as an uninterrupted one; ``initialised``: the initial
        history forward ran.
        """
        names = [n for n, _ in self.model.named_parameters()]
        opt = self.optimizer.state_dict()
        own, ids = self.own_local, self.local_ids[self.own_local]
        mine = {"optimizer": {i: st for i, st in opt["state"].items() if names[i] in self.owned}
                if self.member == 0 else {},
                "rows": {l: (ids, v[own]) for l, v in self.view.items()},
                "hist": None if self.hist is None else {l: (ids, v[own]) for l, v in self.hist.items()},
                "late": {l: (ids, v[own]) for l, v in self.late.items()}}
        model = self._gather_owned(self.model.state_dict())
        parts = self.comm.gather_object(mine, 0, CHECKPOINT)
        if parts is None:
            return {}

        def rows(key: str) -> dict | None:
            if any(p[key] is None for p in parts):
                return None
            out: dict[int, torch.Tensor] = {}
            for part in parts:
                for layer, (ids, values) in part[key].items():
                    if layer not in out:
                        out[layer] = torch.zeros(self.num_nodes, values.shape[1], dtype=values.dtype)
                    out[layer][ids.cpu()] = values.cpu()
            return out

        return {"model": model, "optimizer": {"state": {i: st for p in parts for i, st in p["optimizer"].items()},
                                              "param_groups": opt["param_groups"]},
                "rows": rows("rows"), "hist": rows("hist"), "late": rows("late"), "initialised": self.initialised}

    def load_state_dict(self, state: dict) -> None:
        """Every worker takes its stage's part of :meth:`state_dict`'s whole-run state."""
        names = [n for n, _ in self.model.named_parameters()]
        self.model.load_state_dict(state["model"])
        opt = state["optimizer"]
        self.optimizer.load_state_dict({"state": {i: st for i, st in opt["state"].items() if names[i] in self.owned},
                                        "param_groups": opt["param_groups"]})
        device, ids = self.env.device, self.local_ids.cpu()
        for layer, v in self.view.items():
            v.copy_(state["rows"][layer][ids].to(device))
        if state["hist"] is not None:
            self.hist = {l: state["hist"][l][ids].to(device) for l in self.view}
            self.tracker.track("history", *self.hist.values())
        for layer, v in self.late.items():
            v.copy_(state["late"][layer][ids].to(device))
        self.initialised = bool(state["initialised"])

    def teardown(self) -> None:
        for name in ("graph", "buffers", "history", "model", "optimizer"):
            self.tracker.untrack(name)

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
epoch's dropout masks; category ``pipe_init``, :meth:`~.passes.ChunkPasses._exact_forward`) fills every ``view``.
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
(:meth:`~.passes.ChunkPasses._exact_forward`, the same routine as the initial history): each stage takes every
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

**Checkpoints** (``--checkpoint`` / ``--resume``): :meth:`~.checkpoint.StageCheckpoint.state_dict` is collective; the
members 0 of the groups send worker 0 their stage's parameters (:func:`stage_parameters`) and Adam state through the
shared stage-state gathering (:mod:`graphscale.strategies.stage_state`: ``b sum(3 n + 1)`` bytes over stages
1..S-1's parameters), every member its own rows of the historical embeddings (``view``), of the fixed history
(``hist``) and of the kept stale-edge gradients (``late``) through :meth:`Comm.gather_object`, all in category
``checkpoint``. The file holds
the whole model and ``N`` rows per layer, so a resumed run continues exactly as the uninterrupted one (tested);
without the rows it would start from a new exact history and diverge. The best-validation model is gathered the
same way, values only (``b sum(n)`` bytes; :meth:`~.checkpoint.StageCheckpoint.full_model_state`).

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
from graphscale.options.pipeline import PipelineOptions
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
from graphscale.strategies.chunking import chunk_order
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.exchange import RowExchange
from graphscale.strategies.groups import subgroup_comms
from graphscale.strategies.pipeline.checkpoint import StageCheckpoint
from graphscale.strategies.pipeline.passes import EVAL_HALO, EVAL_STAGE, ChunkPasses
from graphscale.strategies.pipeline.plan import (
    ChunkPlan,
    GroupExchange,
    assign_hybrid,
    check_plan,
    default_chunks,
    stage_layers,
)
from graphscale.strategies.pipeline.reference import learned_input
from graphscale.strategies.pipeline.timeline import StageTimeline

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


def read_chunks(shared: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk and sub-chunk of every vertex, as :meth:`PipelineStrategy.prepare_shared` wrote them to the
    strategy's shared folder."""
    return tuple(torch.from_numpy(np.load(shared / name).astype(np.int64)) for name in (CHUNK_FILE, SUBCHUNK_FILE))


def check_width(workers: int, width: int) -> None:
    """Raises ``ValueError`` unless ``--hybrid-width`` divides ``--workers``."""
    if width < 1 or workers % width:
        raise ValueError(f"--hybrid-width {width} must be >= 1 and divide --workers {workers}")


@STRATEGIES.register("pipeline")
class PipelineStrategy(ChunkPasses, StageCheckpoint, Strategy):
    """GNNPipe pipelined model parallelism (see the module docstring)."""

    exact = False
    data_view = HOST_SHARED
    edge_weights = True  # chunk blocks are Block.from_nodes: they carry a weighted graph's edge weights
    options = option_names(PipelineOptions)
    pyg_forward_refusal = "splits the model into stages of consecutive layers"
    predict_refusal = ""  # its evaluation is the exact forward, whatever the history options

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        unused = {} if config.strategy.hybrid_width > 1 else {"hybrid_split": "without --hybrid-width"}
        if num_chunks(config) == 1 and config.strategy.hybrid_width == 1:
            unused.update({"partitioner": "with --chunks 1", "balance": "with --chunks 1"})
        return unused

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        return ("computes its last stage's rows chunk by chunk and takes the loss of each chunk's own rows as they "
                "come, while a link pair's loss needs both endpoints' embeddings, which other chunks (computed "
                "later, or history) hold")

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
        shared = self.data.require_shared(config.strategy.name)
        chunk_of, sub_of = read_chunks(shared)
        self.plan = ChunkPlan.build(graph, chunk_of, sub_of, self.member)
        self.layers = stage_layers(model.num_layers, self.stages)[self.stage]
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        self.learned = learned_input(model)
        names = [n for n, _ in model.named_parameters()]
        every = [stage_parameters(model, layers, s == 0, s == self.stages - 1, graph.num_features)
                 for s, layers in enumerate(stage_layers(model.num_layers, self.stages))]
        self.owned = every[self.stage]
        #: member 0 of every stage (the stage's leader, rank ``s W``) -> indices of the parameters the stage trains
        self.stage_owners = {s * self.width: [i for i, n in enumerate(names) if n in own] for s, own in enumerate(every)}
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
        self.chunk_exchange = None
        if exchange is not None:
            local = GroupExchange([[index[t].to(device) for t in row] for row in exchange.send],
                                  [[index[t].to(device) for t in row] for row in exchange.recv])
            self.chunk_exchange = [RowExchange.from_lists(send, recv) for send, recv in zip(local.send, local.recv)]
            # backward: where the gradients the others return land among my rows of chunk k
            self.returned_at = [torch.searchsorted(n, self.chunk_exchange[k].send_index)
                                for k, n in enumerate(self.nodes_local)]
            # the exact forwards exchange every chunk's ghosts of a layer at once
            self.layer_exchange = RowExchange.from_lists(
                [torch.cat([row[p] for row in local.send]) for p in range(self.width)],
                [torch.cat([row[p] for row in local.recv]) for p in range(self.width)])
        self.local_ids = self.local_ids.to(device)

    def _group_comm(self, env: DistEnv) -> Comm:
        """The collectives of this worker's stage group (its ``W`` ranks; the ledger is the worker's)."""
        if self.width == 1:
            return Comm(DistEnv(rank=0, world_size=1, device=env.device, timeout=env.timeout, ledger=env.ledger))
        groups = [list(range(s * self.width, (s + 1) * self.width)) for s in range(self.stages)]
        return subgroup_comms(env, groups)[self.stage]

    def train_epoch(self, epoch: int) -> EpochStats:
        model = self.model
        run = Epoch(model, epoch, self.env, self.tracker)
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
        seconds = run.seconds()
        timing = self._timeline_split()
        total = torch.tensor([loss], dtype=torch.float64, device=self.env.device)
        if self.width > 1 and self.last:  # the last stage's members each hold their sub-chunks' share
            self.group.all_reduce(total, CONTROL)
        self.comm.broadcast(total, self.env.world_size - 1, CONTROL)
        return run.stats(float(total), {"stage_layers": [self.layers.start, self.layers.stop],
                                        "chunks": self.plan.num_chunks, "cut_frac": self.plan.cut_fraction(),
                                        "stale_frac": self.plan.stale_fraction(order), "schedule": self.schedule,
                                        "activation_peak": activations, "buffer_rows": self.local_ids.numel(),
                                        **timing}, seconds=seconds)

    @torch.no_grad()
    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact forward's logits (:meth:`_exact_forward`): the last stage's members return their chunks', every
        other worker none."""
        self.model.eval()
        outputs = self._exact_forward(EVAL_STAGE, EVAL_HALO, fill=False)
        if not outputs:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, 0)
        return torch.cat([ids for ids, _ in outputs]).cpu(), torch.cat([logits for _, logits in outputs])

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

    def teardown(self) -> None:
        for name in ("graph", "buffers", "history", "model", "optimizer"):
            self.tracker.untrack(name)

r"""GNNPipe: pipelined layer-level model parallelism over graph chunks (``--strategy pipeline``).

Spec: ``shared/specs/gnnpipe.md``. Worker ``i`` is stage ``i`` of ``S = --workers`` (the hybrid below: ``S =
--workers / W``): it holds the whole graph (host-shared, memory-mapped once per host), its contiguous layers
(:func:`~.plan.stage_layers`; stage 0 also runs the input map, stage ``S-1`` the output map and the loss) and, for
each of its layers ``l``, the rows ``view[l]`` (``N x d_l``) that layer reads. The graph is cut once into ``K``
locality-aware chunks (``--chunks``, default four per worker; the run's vertex partitioner, METIS by default, into
``K`` parts, computed by the parent before the workers start; :func:`~.plan.assign_chunks`), each with its block
(the chunk, then its in-neighbours elsewhere).

**An epoch** (Algorithm 1, GPipe schedule). The chunk order is a permutation drawn from ``(seed, epoch)``
(``--shuffle``, the default; identical on every rank without communication) or the identity (``--no-shuffle``).

* Forward, chunk by chunk: stage 0 maps the chunk's features, other stages receive the chunk's rows (and, for
  GCNII, its initial-residual rows ``H^0``) from stage ``i-1`` (category ``pipe_fwd``); every own layer gathers
  the chunk's neighbour rows from ``view[l]`` and runs ``model.step`` on the chunk's block, and the chunk's new
  rows are written into ``view[l+1]``. Rows of chunks processed earlier this epoch are therefore fresh and the
  others are history. The last stage computes the chunk's loss (cross-entropy of its training rows divided by the
  *whole graph's* training count); the others send the chunk's output rows on (non-blocking).
* Backward, chunks in reverse order, layers from the last: each (chunk, layer) forward is one autograd island
  whose leaves are the chunk's input rows and the neighbour rows it gathered. The last island starts from the
  gradient of stage ``i+1`` (category ``pipe_bwd``) or the loss; each island's output gradient is the next
  island's input-row gradient plus the accumulator ``G[l]`` of what chunks processed *later* in the forward sent
  those rows. The gathered neighbour rows' gradients go into ``G[l]`` only for rows that were fresh (their chunk
  came no later); gradients along stale edges are dropped (GNNPipe's technique 3), so the result is the exact
  gradient of the stale forward. The input rows' gradient (and GCNII's ``H^0`` gradient, summed over the stages)
  goes to stage ``i-1``.
* One Adam step per epoch on every stage's own parameters (weights are never stale).

**History** (§3.4-3.5). Before the first epoch one exact forward through the stages (training mode, the first
epoch's dropout masks; category ``pipe_init``) fills every ``view``. With ``--history-period P`` the rows are
copied to ``hist`` at the start of every epoch ``e`` with ``e % P == 0`` and ``view`` is reset to ``hist`` at the
start of the others, so epochs ``P m .. P m + P - 1`` read the rows of the end of epoch ``P m - 1`` (``P = 1``:
the previous epoch's, and no copy). ``--history-grad historical`` (the ablation) keeps the gradients along stale
edges of one epoch and adds them, one epoch later, to the gradient of the source rows.

The semantics depend on the chunks, the orders and the options, never on ``S`` or timing:
:class:`~.reference.ChunkedReference` runs them on one process and the tests hold this strategy to it; with one
chunk (or chunks without cross edges) it is exact full-graph training.

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
are replicated in its group: one all-reduce of their gradients per epoch (``allreduce``). ``view`` stays ``N x d``
per layer (only own and ghost rows are used; dividing memory by ``W`` is not done). Historical gradients are
refused in a hybrid.

**Bytes** per training epoch, summed over workers: ``pipe_fwd + pipe_bwd = 2 N sum_i d_i c b``
(:func:`~.plan.pipeline_bytes_per_epoch`; ``2 (S-1) N H c b`` with ``c = 2`` for GCNII), independent of ``L``
and ``K``; ``control``: the loss (8 bytes to each other rank). The pure pipeline has no weight all-reduce (every
parameter lives on one stage); a hybrid adds ``halo = 2 sum_r |B_r| sum_l d_l b`` per group over its exchanged
layers (:func:`~.plan.group_halo_bytes_per_epoch`) and ``allreduce = 2 (W-1) P b``. Evaluation runs an exact full
forward through the stages on the members 0 (``eval_stage``: ``N d_i c b`` per boundary) and broadcasts the
per-split counts; the initial history forward runs on every member's pipeline.

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
point-to-point traffic would also bypass the Ledger. So the schedule is written here on :class:`Comm`.

**Why no 1F1B schedule.** 1F1B runs chunk ``k``'s backward before the forward of chunks ``k + S ..``; but
those later chunks read ``k``'s rows fresh, so their gradient contributions to ``k`` (the accumulators ``G[l]``)
would arrive after ``k``'s backward. Keeping the numbers identical to GPipe would mean a second backward through
``k``'s saved graph once they arrive, which keeps every chunk's activations alive as GPipe does: no memory is
saved. 1F1B is only equivalent without cross-chunk edges, where pipelining needs no history at all.

**Not implemented** (issue 13): the 1F1B schedule (above), the hybrid's memory split (buffers are ``N`` rows),
and bubble timings separate from transfer time (an epoch's ``extra`` has ``idle_frac``: the share of the epoch the
stage waited for a neighbour stage's rows or gradients, bubbles and transfers together). The
§3.7 cost model is :mod:`.costmodel`; ``graphscale bench pipeline`` prints the volume and accuracy tables.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
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
from graphscale.strategies.pipeline.plan import (
    ChunkPlan,
    GroupExchange,
    assign_hybrid,
    check_plan,
    chunk_order,
    default_chunks,
    positions,
    refreshes_history,
    stage_layers,
)
from graphscale.strategies.pipeline.reference import learned_input

#: Ledger categories: stage-boundary rows (forward), their gradients (backward), the initial history forward,
#: the evaluation forward, a hybrid group's ghost rows and their gradients.
PIPE_FWD, PIPE_BWD, PIPE_INIT, EVAL_STAGE, HALO = "pipe_fwd", "pipe_bwd", "pipe_init", "eval_stage", "halo"
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
    options = frozenset({"chunks", "partitioner", "balance", "history_period", "shuffle", "history_grad",
                         "hybrid_width", "hybrid_split"})

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
                   sc.hybrid_width)

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
                   self.width)
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
        self.exchange = GroupExchange.build(graph, chunk_of, sub_of, self.width, self.member) if self.width > 1 \
            else None
        self.layers = stage_layers(model.num_layers, self.stages)[self.stage]
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        self.learned = learned_input(model)
        self.owned = stage_parameters(model, self.layers, self.first, self.last, graph.num_features)
        self.own_ids = torch.nonzero(sub_of == self.member).flatten()  # the vertices this member computes
        device, dtype = env.device, next(model.parameters()).dtype
        self.num_nodes = graph.num_nodes
        self.num_train = int(graph.train_mask.sum())
        if self.num_train == 0:
            raise ValueError("strategy 'pipeline': the graph has no training vertices")
        self.full = Block.full(graph).to(device)
        self.blocks = [b.to(device) for b in self.plan.blocks]
        self.halo_member = [sub_of[b.halo_ids].to(device) for b in self.plan.blocks]
        if self.exchange is not None:
            self.exchange = GroupExchange([[t.to(device) for t in row] for row in self.exchange.send],
                                          [[t.to(device) for t in row] for row in self.exchange.recv])
        self.nodes = [n.to(device) for n in self.plan.nodes]
        self.x = graph.x.to(device=device, dtype=dtype) if self.first else None
        self.y = graph.y.to(device) if self.last else None
        self.masks = {s: getattr(graph, f"{s}_mask").to(device) for s in SPLITS} if self.last else None
        widths = model.layer_widths()
        self.in_width = widths[self.layers.start]
        self.out_width = widths[self.layers.stop] if not self.last else None
        self.h0_width = widths[0] if model.needs_h0 else 0
        # rows every own layer reads (layer 0 of an identity input map reads the features themselves)
        self.view = {l: torch.zeros(self.num_nodes, widths[l], dtype=dtype, device=device) for l in self.layers
                     if l > 0 or self.learned}
        self.grad_acc = {l: torch.zeros_like(v) for l, v in self.view.items()}
        self.ghost_acc = {l: torch.zeros_like(v) for l, v in self.view.items()} if self.width > 1 else {}
        self.historical = sc.history_grad == "historical"
        self.late = {l: torch.zeros_like(v) for l, v in self.view.items()} if self.historical else {}
        self.hist: dict[int, torch.Tensor] | None = None
        self.initialised = False
        self.waited = 0.0  # seconds this epoch spent waiting for a neighbour stage's rows or gradients
        self.tracker = MemoryTracker(env)
        self.tracker.track("graph", self.full.indptr, self.full.indices, self.x, self.y,
                           *([] if self.masks is None else self.masks.values()))
        self.tracker.track("buffers", *self.view.values(), *self.grad_acc.values(), *self.ghost_acc.values(),
                           *self.late.values())
        self.tracker.track_module("model", model)

    def _group_comm(self, env: DistEnv) -> Comm:
        """The collectives of this worker's stage group (its ``W`` ranks; the ledger is the worker's)."""
        if self.width == 1:
            return Comm(DistEnv(rank=0, world_size=1, device=env.device, timeout=env.timeout, ledger=env.ledger))
        import torch.distributed as dist

        groups = [dist.new_group(list(range(s * self.width, (s + 1) * self.width))) for s in range(self.stages)]
        return Comm(DistEnv(rank=self.member, world_size=self.width, device=env.device, backend=env.backend,
                            group=groups[self.stage], timeout=env.timeout, ledger=env.ledger))

    # ------------------------------------------------------------ helpers
    def _rows(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        return self.view[layer][ids] if layer in self.view else self.x[ids]

    def _recv_from(self, stage: int, rows: int, width: int) -> torch.Tensor:
        """Receive ``[rows, width]`` from the same member of stage ``stage``."""
        buf = torch.empty(rows, width, dtype=next(self.model.parameters()).dtype, device=self.env.device)
        start = time.perf_counter()
        self.comm.recv(buf, stage * self.width + self.member).wait()
        self.waited += time.perf_counter() - start
        return buf

    def _send_to(self, stage: int, t: torch.Tensor, category: str):
        return self.comm.send(t.detach(), stage * self.width + self.member, category)

    def _stage_input(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The stage's input rows for ``ids`` and GCNII's ``H^0`` rows: mapped here (stage 0) or received."""
        if self.first:
            h = self.model.input_map(self.x[ids], ids)
            return h, (h if self.model.needs_h0 else None)
        buf = self._recv_from(self.stage - 1, ids.numel(), self.in_width + self.h0_width)
        h, h0 = buf[:, : self.in_width].detach(), buf[:, self.in_width:].detach()
        return h, (h0 if self.model.needs_h0 else None)

    def _forward_message(self, h: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
        return h if h0 is None else torch.cat([h, h0], dim=1)

    def _push_ghosts(self, k: int, layer: int) -> None:
        """Hybrid forward: send my chunk-``k`` rows of ``view[layer]`` to the ranks that hold them as ghosts and
        write theirs into mine."""
        send, recv = self.exchange.send[k], self.exchange.recv[k]
        view = self.view[layer]
        rows = view[torch.cat(send)]
        received = self.group.all_to_all_v(rows, [t.numel() for t in send], [t.numel() for t in recv], HALO)
        view[torch.cat(recv)] = received

    def _pull_ghost_grads(self, k: int, layer: int, ids: torch.Tensor) -> torch.Tensor:
        """Hybrid backward: return my ghosts' accumulated gradients of chunk ``k`` to their owners; the gradients
        the others hold for my rows of chunk ``k``, as ``[len(ids), d]``."""
        send, recv = self.exchange.send[k], self.exchange.recv[k]
        acc = self.ghost_acc[layer]
        ghosts = torch.cat(recv)
        received = self.group.all_to_all_v(acc[ghosts], [t.numel() for t in recv], [t.numel() for t in send], HALO)
        acc[ghosts] = 0
        out = torch.zeros(ids.numel(), acc.shape[1], dtype=acc.dtype, device=acc.device)
        return out.index_add_(0, torch.searchsorted(ids, torch.cat(send)), received)

    # ------------------------------------------------------------ full forward
    def _full_forward(self, category: str, fill: bool) -> torch.Tensor | None:
        """An exact forward of the whole graph through the stages (no autograd), run by every member of every
        group (each member's pipeline fills its own ``view``); the last stage returns logits.

        ``fill``: write every layer's input rows into ``view`` (the initial history)."""
        ids = self.full.dst_ids
        with torch.no_grad():
            h, h0 = self._stage_input(ids)
            for layer in self.layers:
                if fill and layer in self.view:
                    self.view[layer].copy_(h)
                h = self.model.step(layer, self.full, h, h0)
            if not self.last:
                self._send_to(self.stage + 1, self._forward_message(h, h0), category).wait()
                return None
            return self.model.output_map(h, ids)

    # ------------------------------------------------------------ training
    def _start_epoch(self, epoch: int) -> None:
        if not self.initialised:
            self._full_forward(PIPE_INIT, fill=True)
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
        h, h0 = self._stage_input(ids)
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
                self.view[layer][ids] = h.detach()
                if self.exchange is not None:
                    self._push_ghosts(k, layer)
            nbr = self._rows(layer, block.halo_ids)
            if layer in self.view:
                nbr.requires_grad_(True)
            out = model.step(layer, block, torch.cat([h, nbr]), h0)
            saved["islands"].append((layer, h, nbr, out))
            h = out.detach()
        if self.last:
            _, _, _, out = saved["islands"][-1]
            logits = model.output_map(out, ids)
            saved["loss"] = masked_loss_sum(logits, self.y[ids], self.masks["train"][ids]) / self.num_train
        else:
            saved["send"] = self._send_to(self.stage + 1, self._forward_message(h, h0), PIPE_FWD)
        return saved

    def _scatter_neighbour_grads(self, k: int, layer: int, nbr: torch.Tensor, pos: torch.Tensor) -> None:
        """Gathered rows' gradients: fresh ones (their chunk came no later than ``k``) into the accumulators
        (mine, or the ghosts' to return to their owners); stale ones dropped or, historical, kept for next epoch."""
        halo = self.blocks[k].halo_ids
        fresh = (pos[self.plan.halo_chunk[k]] <= pos[k]).to(nbr.device)
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
        ids = self.nodes[k]
        g_h0 = None
        if self.last:
            grad = None
        else:
            g = self._recv_from(self.stage + 1, ids.numel(), self.out_width + self.h0_width)
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
            grad = h.grad + self.grad_acc[layer][ids]
            if self.exchange is not None:
                grad = grad + self._pull_ghost_grads(k, layer, ids)
        h0 = saved["h0"]
        if h0 is not None:  # H^0's gradient: this stage's uses plus the later stages'
            g_h0 = h0.grad if g_h0 is None else h0.grad + g_h0
        if self.first:
            if saved["map"] is not None:
                root = grad if g_h0 is None else grad + g_h0
                saved["map"].backward(root)
            return None
        return self._send_to(self.stage - 1, grad if g_h0 is None else torch.cat([grad, g_h0], dim=1), PIPE_BWD)

    def train_epoch(self, epoch: int) -> EpochStats:
        model = self.model
        model.train()
        model.set_epoch(epoch)
        start = time.perf_counter()
        before = self.env.ledger.snapshot()
        with self.tracker.epoch():
            self._start_epoch(epoch)
            self.waited = 0.0
            self.optimizer.zero_grad(set_to_none=True)
            order = chunk_order(self.plan.num_chunks, epoch, self.config.seed, self.config.strategy.shuffle)
            pos = positions(order)
            saved = {k: self._forward_chunk(k) for k in order.tolist()}
            pending = [s.pop("send") for s in saved.values() if "send" in s]
            loss = sum(float(s["loss"].detach()) for s in saved.values()) if self.last else 0.0
            for k in reversed(order.tolist()):
                work = self._backward_chunk(k, saved.pop(k), pos)
                if work is not None:
                    pending.append(work)
            for work in pending:
                work.wait()
            if self.width > 1:  # a stage's weights are replicated in its group: sum their gradients
                allreduce_gradients(self.group, [p for p in model.parameters() if p.grad is not None], self.tracker)
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
            self.tracker.untrack("gradients")
        seconds = time.perf_counter() - start
        total = torch.tensor([loss], dtype=torch.float64, device=self.env.device)
        if self.width > 1 and self.last:  # the last stage's members each hold their sub-chunks' share
            self.group.all_reduce(total, CONTROL)
        self.comm.broadcast(total, self.env.world_size - 1, CONTROL)
        return EpochStats(loss=float(total), seconds=seconds,
                          bytes=self.env.ledger.since(before), peak_memory=self.tracker.peak,
                          extra={"stage_layers": [self.layers.start, self.layers.stop],
                                 "chunks": self.plan.num_chunks, "cut_frac": self.plan.cut_fraction(),
                                 "stale_frac": self.plan.stale_fraction(order), "recv_wait_s": self.waited,
                                 "idle_frac": self.waited / seconds if seconds > 0 else 0.0})

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        counts = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64, device=self.env.device)
        if self.member == 0:  # one exact forward through the stages, on the group members 0
            logits = self._full_forward(EVAL_STAGE, fill=False)
            if self.last:
                counts.copy_(split_counts(logits, self.y, self.masks))
        return counts_to_metrics(self.comm.broadcast(counts, (self.stages - 1) * self.width, CONTROL).cpu())

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
        own = self.own_ids
        mine = {"model": None,
                "optimizer": {i: st for i, st in opt["state"].items() if names[i] in self.owned} if self.member == 0
                else {},
                "rows": {l: (own, v[own]) for l, v in self.view.items()},
                "hist": None if self.hist is None else {l: (own, v[own]) for l, v in self.hist.items()},
                "late": {l: (own, v[own]) for l, v in self.late.items()}}
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
        device = self.env.device
        for layer, v in self.view.items():
            v.copy_(state["rows"][layer].to(device))
        if state["hist"] is not None:
            self.hist = {l: state["hist"][l].to(device) for l in self.view}
            self.tracker.track("history", *self.hist.values())
        for layer, v in self.late.items():
            v.copy_(state["late"][layer].to(device))
        self.initialised = bool(state["initialised"])

    def teardown(self) -> None:
        for name in ("graph", "buffers", "history", "model", "optimizer"):
            self.tracker.untrack(name)

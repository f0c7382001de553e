r"""GNNPipe: pipelined layer-level model parallelism over graph chunks (``--strategy pipeline``).

Spec: ``shared/specs/gnnpipe.md``. Worker ``i`` is stage ``i`` of ``S = --workers``: it holds the whole graph
(host-shared, memory-mapped once per host), its contiguous layers (:func:`~.plan.stage_layers`; stage 0 also runs
the input map, stage ``S-1`` the output map and the loss) and, for each of its layers ``l``, the rows ``view[l]``
(``N x d_l``) that layer reads. The graph is cut once into ``K`` locality-aware chunks (``--chunks``, default
``4 S``; the run's vertex partitioner, METIS by default, into ``K`` parts, computed by the parent before the workers
start; :func:`~.plan.assign_chunks`), each with its block (the chunk, then its in-neighbours elsewhere).

**An epoch** (Algorithm 1, GPipe schedule). The chunk order is a permutation drawn from ``(seed, epoch)``
(``--shuffle``, the default; identical on every rank without communication) or the identity (``--no-shuffle``).

* Forward, chunk by chunk: stage 0 maps the chunk's features, other stages receive the chunk's rows (and, for
  GCNII, its initial-residual rows ``H^0``) from stage ``i-1`` (category ``pipe_fwd``); every own layer gathers
  the chunk's neighbour rows from ``view[l]`` and runs ``model.step`` on the chunk's block, and the chunk's new
  rows are written into ``view[l+1]``. Rows of chunks processed earlier this epoch are therefore fresh and the
  others are history. The last stage computes the chunk's loss (cross-entropy of its training rows divided by the
  *whole graph's* training count); the others send the chunk's output rows on (non-blocking).
* Backward, chunks in reverse order: each (chunk, stage) forward is one autograd graph whose leaves are the rows
  it received and the neighbour rows it gathered. Its roots get the gradient from stage ``i+1`` (category
  ``pipe_bwd``) or the loss, plus, at every own layer's input rows of the chunk, the accumulator ``G[l]`` of what
  chunks processed *later* in the forward sent them. The gathered neighbour rows' gradients go into ``G[l]`` only
  for rows that were fresh (their chunk came no later); gradients along stale edges are dropped (GNNPipe's
  technique 3), so the result is the exact gradient of the stale forward. The input rows' gradient goes to stage
  ``i-1``.
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

**Bytes** per training epoch, summed over workers: ``pipe_fwd + pipe_bwd = 2 N sum_i d_i c b``
(:func:`~.plan.pipeline_bytes_per_epoch`; ``2 (S-1) N H c b`` with ``c = 2`` for GCNII), independent of ``L``
and ``K``; ``control``: the loss (8 bytes to each other rank). There is no weight all-reduce (every parameter
lives on one stage). Evaluation runs an exact full forward through the stages (``eval_stage``: ``N d_i c b`` per
boundary) and broadcasts the per-split counts.

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

**Not implemented** (issue 13): the hybrid ``S x W`` mode (``S = --workers`` always), the 1F1B schedule (above),
bubble timings separate from transfer time (an epoch's ``extra`` has ``idle_frac``: the share of the epoch the
stage waited for a neighbour stage's rows or gradients, bubbles and transfers together), and checkpoints
(``--checkpoint`` is refused before the workers start: worker 0 would save only its own stage's weights). The
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
    SPLITS,
    Strategy,
    counts_to_metrics,
    masked_loss_sum,
    optimizer_tensors,
    split_counts,
)
from graphscale.strategies.pipeline.plan import (
    ChunkPlan,
    assign_chunks,
    check_plan,
    chunk_order,
    default_chunks,
    positions,
    refreshes_history,
    stage_layers,
)
from graphscale.strategies.pipeline.reference import learned_input

#: Ledger categories: stage-boundary rows (forward), their gradients (backward), the initial history forward,
#: the evaluation forward.
PIPE_FWD, PIPE_BWD, PIPE_INIT, EVAL_STAGE = "pipe_fwd", "pipe_bwd", "pipe_init", "eval_stage"
CHUNK_FILE = "chunk_of.npy"


def num_chunks(config: RunConfig) -> int:
    """``K``: ``--chunks``, else four per stage."""
    chunks = config.strategy.chunks
    return default_chunks(config.strategy.workers) if chunks is None else chunks


@STRATEGIES.register("pipeline")
class PipelineStrategy(Strategy):
    """GNNPipe pipelined model parallelism (see the module docstring)."""

    exact = False
    data_view = HOST_SHARED
    options = frozenset({"chunks", "partitioner", "balance", "history_period", "shuffle", "history_grad"})

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        return {"partitioner": "with --chunks 1", "balance": "with --chunks 1"} if num_chunks(config) == 1 else {}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        sc = config.strategy
        check_plan(config.model.layers, sc.workers, num_chunks(config), sc.history_period, sc.history_grad)
        if config.checkpoint or config.resume:
            raise ValueError("--checkpoint / --resume are not supported by strategy 'pipeline' (each worker holds "
                             "only its stage's weights)")

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        sc = config.strategy
        return {"chunks": num_chunks(config), "chunk_partitioner": sc.partitioner, "chunk_balance": sc.balance}

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        sc = config.strategy
        chunk_of = assign_chunks(graph, num_chunks(config), sc.partitioner, sc.balance, config.seed)
        np.save(folder / CHUNK_FILE, chunk_of.numpy())

    # ------------------------------------------------------------ setup
    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        sc = config.strategy
        self.comm = Comm(env)
        self.stages, self.stage = env.world_size, env.rank
        check_plan(model.num_layers, self.stages, num_chunks(config), sc.history_period, sc.history_grad)
        graph = self.data.open_graph()
        shared = self.data.extras.get("shared")
        if shared:
            chunk_of = torch.from_numpy(np.load(Path(shared) / CHUNK_FILE).astype(np.int64))
        else:
            chunk_of = assign_chunks(graph, num_chunks(config), sc.partitioner, sc.balance, config.seed)
        self.plan = ChunkPlan.build(graph, chunk_of)
        self.layers = stage_layers(model.num_layers, self.stages)[self.stage]
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        self.learned = learned_input(model)
        device, dtype = env.device, next(model.parameters()).dtype
        self.num_nodes = graph.num_nodes
        self.num_train = int(graph.train_mask.sum())
        if self.num_train == 0:
            raise ValueError("strategy 'pipeline': the graph has no training vertices")
        self.full = Block.full(graph).to(device)
        self.blocks = [b.to(device) for b in self.plan.blocks]
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
        self.historical = sc.history_grad == "historical"
        self.late = {l: torch.zeros_like(v) for l, v in self.view.items()} if self.historical else {}
        self.hist: dict[int, torch.Tensor] | None = None
        self.initialised = False
        self.waited = 0.0  # seconds this epoch spent waiting for a neighbour stage's rows or gradients
        self.tracker = MemoryTracker(env)
        self.tracker.track("graph", self.full.indptr, self.full.indices, self.x, self.y,
                           *([] if self.masks is None else self.masks.values()))
        self.tracker.track("buffers", *self.view.values(), *self.grad_acc.values(), *self.late.values())
        self.tracker.track_module("model", model)

    # ------------------------------------------------------------ helpers
    def _rows(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        return self.view[layer][ids] if layer in self.view else self.x[ids]

    def _recv_from(self, peer: int, rows: int, width: int) -> torch.Tensor:
        buf = torch.empty(rows, width, dtype=next(self.model.parameters()).dtype, device=self.env.device)
        start = time.perf_counter()
        self.comm.recv(buf, peer).wait()
        self.waited += time.perf_counter() - start
        return buf

    def _stage_input(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The stage's input rows for ``ids`` and GCNII's ``H^0`` rows: mapped here (stage 0) or received."""
        if self.first:
            h = self.model.input_map(self.x[ids], ids)
            return h, (h if self.model.needs_h0 else None)
        buf = self._recv_from(self.stage - 1, ids.numel(), self.in_width + self.h0_width)
        h, h0 = buf[:, : self.in_width].detach(), buf[:, self.in_width:].detach()  # leaves of the chunk's graph
        return h, (h0 if self.model.needs_h0 else None)

    def _send_forward(self, h: torch.Tensor, h0: torch.Tensor | None, category: str):
        out = h if h0 is None else torch.cat([h, h0], dim=1)
        return self.comm.send(out.detach(), self.stage + 1, category)

    # ------------------------------------------------------------ full forward
    def _full_forward(self, category: str, fill: bool) -> torch.Tensor | None:
        """An exact forward of the whole graph through the stages (no autograd); the last stage returns logits.

        ``fill``: write every layer's input rows into ``view`` (the initial history)."""
        ids = self.full.dst_ids
        with torch.no_grad():
            h, h0 = self._stage_input(ids)
            for layer in self.layers:
                if fill and layer in self.view:
                    self.view[layer].copy_(h)
                h = self.model.step(layer, self.full, h, h0)
            if not self.last:
                self._send_forward(h, h0, category).wait()
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
        """The stage's forward of chunk ``k`` (one autograd graph); what its backward needs."""
        model, ids, block = self.model, self.nodes[k], self.blocks[k]
        h, h0 = self._stage_input(ids)
        if not self.first:
            h.requires_grad_(True)
            if h0 is not None:
                h0.requires_grad_(True)
        saved = {"input": h, "h0": h0, "inner": [], "nbr": []}
        for layer in self.layers:
            if layer in self.view:
                self.view[layer][ids] = h.detach()
            if layer != self.layers.start:
                saved["inner"].append((layer, h))
            nbr = self._rows(layer, block.halo_ids)
            if layer in self.view:
                nbr.requires_grad_(True)
            saved["nbr"].append((layer, nbr))
            h = model.step(layer, block, torch.cat([h, nbr]), h0)
        if self.last:
            logits = model.output_map(h, ids)
            saved["out"] = masked_loss_sum(logits, self.y[ids], self.masks["train"][ids]) / self.num_train
        else:
            saved["out"] = h
            saved["send"] = self._send_forward(h, h0, PIPE_FWD)
        return saved

    def _backward_chunk(self, k: int, saved: dict, pos: torch.Tensor) -> torch.distributed.Work | None:
        """The stage's backward of chunk ``k``; returns the pending send of its input gradient."""
        ids = self.nodes[k]
        roots, grads = [saved["out"]], [torch.ones_like(saved["out"])]
        g_h0 = None
        if not self.last:
            g = self._recv_from(self.stage + 1, ids.numel(), self.out_width + self.h0_width)
            grads = [g[:, : self.out_width]]
            g_h0 = g[:, self.out_width:] if self.model.needs_h0 else None
        for layer, h in saved["inner"]:
            roots.append(h)
            grads.append(self.grad_acc[layer][ids])
        start = self.layers.start
        if self.first and start in self.view:  # stage 0 with a learned input map: the map's output is a root
            extra = self.grad_acc[start][ids]
            roots.append(saved["input"])
            grads.append(extra if g_h0 is None else extra + g_h0)
        elif self.first and g_h0 is not None:
            roots.append(saved["h0"])
            grads.append(g_h0)
        torch.autograd.backward(roots, grads)
        halo_chunk = self.plan.halo_chunk[k]
        for (layer, nbr), block in ((ln, self.blocks[k]) for ln in saved["nbr"]):
            if nbr.grad is None:
                continue
            fresh = (pos[halo_chunk] <= pos[k]).to(nbr.device)
            halo = block.halo_ids
            self.grad_acc[layer].index_add_(0, halo[fresh], nbr.grad[fresh])
            if self.historical:
                self.late[layer].index_add_(0, halo[~fresh], nbr.grad[~fresh])
        if self.first:
            return None
        g_in = saved["input"].grad + self.grad_acc[start][ids]
        if self.model.needs_h0:  # H^0's gradient: this stage's uses plus the later stages'
            g0 = saved["h0"].grad if g_h0 is None else saved["h0"].grad + g_h0
            g_in = torch.cat([g_in, g0], dim=1)
        return self.comm.send(g_in, self.stage - 1, PIPE_BWD)

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
            loss = sum(float(s["out"].detach()) for s in saved.values()) if self.last else 0.0
            for k in reversed(order.tolist()):
                work = self._backward_chunk(k, saved.pop(k), pos)
                if work is not None:
                    pending.append(work)
            for work in pending:
                work.wait()
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
        seconds = time.perf_counter() - start
        total = torch.tensor([loss], dtype=torch.float64, device=self.env.device)
        self.comm.broadcast(total, self.stages - 1, CONTROL)
        return EpochStats(loss=float(total), seconds=seconds,
                          bytes=self.env.ledger.since(before), peak_memory=self.tracker.peak,
                          extra={"stage_layers": [self.layers.start, self.layers.stop],
                                 "chunks": self.plan.num_chunks, "cut_frac": self.plan.cut_fraction(),
                                 "stale_frac": self.plan.stale_fraction(order), "recv_wait_s": self.waited,
                                 "idle_frac": self.waited / seconds if seconds > 0 else 0.0})

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        logits = self._full_forward(EVAL_STAGE, fill=False)
        counts = torch.zeros(3 * len(SPLITS), dtype=torch.float64, device=self.env.device)
        if self.last:
            counts.copy_(split_counts(logits, self.y, self.masks))
        return counts_to_metrics(self.comm.broadcast(counts, self.stages - 1, CONTROL).cpu())

    def teardown(self) -> None:
        for name in ("graph", "buffers", "history", "model", "optimizer"):
            self.tracker.untrack(name)

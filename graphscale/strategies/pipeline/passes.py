"""GNNPipe's chunk passes on one stage: the stage-boundary sends and receives, a hybrid group's ghost exchange,
the exact forward that fills the history (and evaluates), the forward and backward of one chunk, the epoch's
schedule and the split of its waits into bubble and transfer; see :mod:`graphscale.strategies.pipeline.strategy`."""

from __future__ import annotations

import torch

from graphscale.distributed.comm import CONTROL
from graphscale.strategies.base import masked_loss_sum
from graphscale.strategies.chunking import positions
from graphscale.strategies.pipeline.plan import BACKWARD, FORWARD, pipeline_schedule, refreshes_history
from graphscale.strategies.pipeline.timeline import clock

#: Ledger categories: stage-boundary rows (forward), their gradients (backward), the initial history forward,
#: the evaluation forward, a hybrid group's ghost rows and their gradients.
PIPE_FWD, PIPE_BWD, PIPE_INIT, EVAL_STAGE, HALO = "pipe_fwd", "pipe_bwd", "pipe_init", "eval_stage", "halo"
#: a hybrid group's ghost rows in the initial history forward and in the evaluation forward
INIT_HALO, EVAL_HALO = "init_halo", "eval_halo"


class ChunkPasses:
    """The chunk passes of :class:`~graphscale.strategies.pipeline.strategy.PipelineStrategy` (a mixin: it reads the
    stage state that ``setup`` builds)."""

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

    def _exchange(self, move, rows: torch.Tensor, category: str) -> torch.Tensor:
        """One ``all_to_all_v`` of the group, timed: ``move`` is a
        :class:`~graphscale.strategies.exchange.RowExchange`'s ``rows`` (owned rows out, ghosts in) or ``grads``
        (the ghosts' gradients back to their owners)."""
        start = clock()
        out = move(self.group, rows, category)
        self.timeline.halo += clock() - start
        return out

    def _push_ghosts(self, k: int, layer: int) -> None:
        """Hybrid forward: send my chunk-``k`` rows of ``view[layer]`` to the ranks that hold them as ghosts and
        write theirs into mine."""
        ex, view = self.chunk_exchange[k], self.view[layer]
        view[ex.recv_index] = self._exchange(ex.rows, view[ex.send_index], HALO)

    def _pull_ghost_grads(self, k: int, layer: int) -> torch.Tensor:
        """Hybrid backward: return my ghosts' accumulated gradients of chunk ``k`` to their owners; the gradients
        the others hold for my rows of chunk ``k``, as ``[rows of chunk k, d]``."""
        ex, acc = self.chunk_exchange[k], self.ghost_acc[layer]
        received = self._exchange(ex.grads, acc[ex.recv_index], HALO)
        acc[ex.recv_index] = 0
        out = torch.zeros(self.nodes_local[k].numel(), acc.shape[1], dtype=acc.dtype, device=acc.device)
        return out.index_add_(0, self.returned_at[k], received)

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
                if self.chunk_exchange is not None and not (self.first and layer == self.layers.start):
                    ex = self.layer_exchange
                    cur[ex.recv_index] = self._exchange(ex.rows, cur[ex.send_index], halo_category)
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
                if self.chunk_exchange is not None:
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
        if self.chunk_exchange is None:
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
            if self.chunk_exchange is not None:
                grad = grad + self._pull_ghost_grads(k, layer)
        h0 = saved["h0"]
        if h0 is not None:  # H^0's gradient: this stage's uses plus the later stages'
            g_h0 = h0.grad if g_h0 is None else h0.grad + g_h0
        if self.first:
            if saved["map"] is not None and saved["map"].requires_grad:  # (a map without parameters: nothing to do)
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

"""NeutronTask's T segments (dense, row-wise tasks; they hold the parameters): a segment's input rows (read from
the host features or received), its forward with or without kept activations, its backward (recomputing the
forward under ``--t-recompute``), and the loss where the chain ends; see
:mod:`graphscale.strategies.task_parallel.strategy`."""

from __future__ import annotations

import time

import torch

from graphscale.metrics.ledger import HOST
from graphscale.strategies.base import split_counts
from graphscale.strategies.task_parallel.chain import (
    _EVAL,
    _FWD,
    EVAL_STAGE,
    H2D,
    KEPT_INPUTS,
    T_ROWS,
    TASK_FWD,
    Segment,
    _tag,
)
from graphscale.strategies.task_parallel.reference import weighted_loss
from graphscale.strategies.task_parallel.tasks import P


class TSegments:
    """The T segments of :class:`~graphscale.strategies.task_parallel.strategy.TaskParallelStrategy` (a mixin: it
    reads the state that ``setup`` builds)."""

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

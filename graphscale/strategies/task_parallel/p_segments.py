"""NeutronTask's P segments (sparse propagations, no parameters): the forward subgraph by subgraph (``causal``,
``block_diag``) or layer by layer (``full``) over per-layer views, the backward in reverse subgraph order with
the transposed operator (or autograd for attention), and the memory they hold; see
:mod:`graphscale.strategies.task_parallel.strategy`."""

from __future__ import annotations

import time

import torch

from graphscale import allocator
from graphscale.nn.ops import topology
from graphscale.strategies.task_parallel.chain import (
    _FWD,
    BLOCKS,
    CACHES,
    EVAL_HALO,
    EVAL_STAGE,
    HALO,
    TASK_FWD,
    Segment,
    _tag,
)
from graphscale.strategies.task_parallel.chunks import FULL
from graphscale.strategies.task_parallel.tasks import Op, P


class PSegments:
    """The P segments of :class:`~graphscale.strategies.task_parallel.strategy.TaskParallelStrategy` (a mixin: it
    reads the state that ``setup`` builds and the routing of :class:`~.exchange.Exchange`)."""

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
        tensors += [t for ex in prep["mirrors"].values() for t in (ex.send_index, ex.recv_index)]
        tensors += [prep["rows"], *prep["ids"], *[t for t in prep["src"] if t is not None]]  # my rows' positions
        self.tracker.track(f"p_blocks_{seg.index}", *tensors, category=BLOCKS)

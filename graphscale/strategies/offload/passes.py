"""The chunk passes of an offload epoch: forward, backward and input-map passes over the plan's batches.

:class:`OffloadPasses` is the half of :class:`~graphscale.strategies.offload.strategy.OffloadStrategy` that runs
the schedule (the strategy module's docstring describes it): every pass walks the worker's batches through
:func:`~graphscale.strategies.offload.transfer.pipelined`, so batch ``j+1``'s host reads are in flight while batch
``j`` computes, takes the chunk's topology from the :class:`~graphscale.strategies.offload.resident.DevicePlan`,
and writes its results back through the same :class:`~graphscale.strategies.offload.transfer.Transfers`. Every
byte is recorded in the Ledger under its category when the transfer is submitted (the same counts whichever
mechanism moves it); :meth:`OffloadPasses._barrier` flushes the transfers before every barrier.
"""

from __future__ import annotations

import torch

from graphscale.data.block import Block
from graphscale.strategies.base import masked_loss_sum, split_counts
from graphscale.strategies.exchange import RowExchange
from graphscale.strategies.offload.cost import (
    D2H,
    D2H_CACHE,
    D2H_GRAD,
    D2H_GRAD_REMOTE,
    H2D_CACHE,
    H2D_DST,
    H2D_GRAD,
    H2D_LOCAL,
    H2D_REMOTE,
    H2D_TOPO,
    P2P,
    P2P_GRAD,
    REUSE,
)
from graphscale.strategies.offload.plan import BatchPlan
from graphscale.strategies.offload.resident import block_tensors
from graphscale.strategies.offload.transfer import Request, pipelined


def _nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class OffloadPasses:
    """The passes; mixed into the strategy, whose ``setup`` provides every attribute they read."""

    #: the evaluation keeps each chunk's ``(global ids, logits)`` instead of counting them (:meth:`outputs`)
    keep_outputs: bool = False
    #: ``--task link``: the scorer of the pairs (:mod:`~graphscale.strategies.offload.link`); ``None``: node labels
    link = None

    # ---------------------------------------------------------------- transfers
    def _record(self, category: str, nbytes: int) -> None:
        self.comm.record(category, nbytes)

    def _barrier(self) -> None:
        """Every transfer landed (host rows current), then the workers' barrier."""
        self.transfers.flush()
        self.comm.barrier()

    def _req(self, key: str, name: str, j: int, ids: torch.Tensor, dev: str, category: str) -> Request:
        """A gather of host rows ``ids`` of ``name`` (recorded now, under ``category``)."""
        self._record(category, ids.numel() * self.host[name].shape[1] * self.elem)
        return Request(key, name, ids, self.dplan.ids(j, dev))

    def _put(self, add: bool, name: str, j: int, ids: torch.Tensor, dev_ids: torch.Tensor | None,
             rows: torch.Tensor, category: str) -> None:
        (self.transfers.accumulate if add else self.transfers.write)(name, ids, dev_ids, rows)
        self._record(category, _nbytes(rows))

    def _put_dst(self, add: bool, name: str, j: int, bp: BatchPlan, rows: torch.Tensor, category: str) -> None:
        self._put(add, name, j, bp.block.dst_ids, self.dplan.ids(j, "dst_ids"), rows, category)

    def _package(self, j: int, bp: BatchPlan, block: bool, slots: tuple[str, ...]) -> tuple[Block | None, dict]:
        """The chunk's topology and the named plan indices on the device (``h2d_topo`` when streamed)."""
        dev_block, moved, nbytes = self.dplan.package(j, bp, block, slots)
        if not self.dplan.resident:
            self._record(H2D_TOPO, nbytes)
        return dev_block, moved

    def _topo_tensors(self, block: Block | None, idx: dict) -> tuple:
        """The chunk's topology tensors to track as chunk memory (none when resident: tracked once)."""
        return () if self.dplan.resident else (*block_tensors(block), *idx.values())

    def _neighbour_requests(self, layer: int, j: int, bp: BatchPlan) -> list[Request]:
        """The host reads of the chunk's source rows ``H^l[N_{i,j}]`` (the spec's DedupLoad, Algorithm 2)."""
        name = f"H{layer}"
        if self.dedup == "baseline":
            ids = bp.block.src_ids
            row_bytes = self.host[name].shape[1] * self.elem
            local = int(bp.src_local.sum())
            self._record(H2D_LOCAL, local * row_bytes)
            self._record(H2D_REMOTE, (ids.numel() - local) * row_bytes)
            return [Request("xn", name, ids, self.dplan.ids(j, "src_ids"))]
        if bp.load_ids.numel():
            return [self._req("load", name, j, bp.load_ids, "load_ids", H2D_LOCAL)]
        return []

    def _h0_requests(self, j: int, bp: BatchPlan) -> list[Request]:
        return [self._req("h0", "H0", j, bp.block.dst_ids, "dst_ids", H2D_DST)] if self.dims.needs_h0 else []

    def _load_neighbours(self, bp: BatchPlan, idx: dict, buffer: torch.Tensor | None, rows: dict) -> torch.Tensor:
        """The chunk's source matrix in block order, from the gathered rows, the buffer and the peers."""
        if self.dedup == "baseline":
            return rows["xn"]
        if "load" in rows:
            buffer[idx["load_slots"]] = rows["load"]
        self._record(REUSE, bp.num_reused * buffer.shape[1] * self.elem)
        if self.env.world_size > 1:
            self._peer_exchange(bp, idx).push(self.comm, buffer, P2P)
        return buffer.index_select(0, idx["src_index"])

    def _peer_exchange(self, bp: BatchPlan, idx: dict) -> RowExchange:
        """The batch's rows between the workers' transition buffers: the rows of mine that peers read (their
        slots) out, the rows I read from peers into the slots after the buffer's capacity."""
        cap = self.plan.capacity
        return RowExchange(idx["send_slots"], bp.send_counts, slice(cap, cap + bp.num_recv), bp.recv_counts)

    def _push_gradients(self, layer: int, j: int, bp: BatchPlan, idx: dict, gbuffer: torch.Tensor | None,
                        g_src: torch.Tensor) -> None:
        """Source-row gradients to their owners, accumulated into ``G^l`` (the spec's Algorithm 3)."""
        name = f"G{layer}"
        if self.dedup == "baseline":
            ids, local = bp.block.src_ids, bp.src_local
            dev_ids, dev_local = self.dplan.ids(j, "src_ids"), self.dplan.ids(j, "src_local")
            mask = local.to(g_src.device) if dev_local is None else dev_local
            for rank in range(self.env.world_size):  # host writes of shared rows, serialised rank by rank
                if rank == self.env.rank:
                    self._put(True, name, j, ids[local], None if dev_ids is None else dev_ids[mask], g_src[mask],
                              D2H_GRAD)
                    self._put(True, name, j, ids[~local], None if dev_ids is None else dev_ids[~mask],
                              g_src[~mask], D2H_GRAD_REMOTE)
                self._barrier()
            return
        gbuffer.index_add_(0, idx["src_index"], g_src)
        if self.env.world_size > 1:
            exchange = self._peer_exchange(bp, idx)
            exchange.pull(self.comm, gbuffer, P2P_GRAD)
            gbuffer[exchange.recv_index] = 0
        if bp.flush_ids.numel():
            slots = idx["flush_slots"]
            self._put(True, name, j, bp.flush_ids, self.dplan.ids(j, "flush_ids"), gbuffer.index_select(0, slots),
                      D2H_GRAD)
            gbuffer.index_fill_(0, slots, 0)

    def _buffer(self, layer: int, zero: bool) -> torch.Tensor | None:
        if self.dedup == "baseline":
            return None
        shape = (self.plan.buffer_rows, self.dims.widths[layer])
        make = torch.zeros if zero else torch.empty
        return make(shape, dtype=self.dtype, device=self.device)

    def _batches(self, requests_of) -> object:
        """The plan's batches with batch ``j+1``'s host reads in flight while ``j`` computes: ``(j, bp, rows)``."""
        return pipelined(self.transfers, enumerate(self.plan.batches), lambda item: requests_of(*item))

    # ------------------------------------------------------------------ passes
    def _input_pass(self, backward: bool) -> None:
        """A learned input map: ``H^0 = input_map(X)`` chunk by chunk, or its backward from ``G^0``."""
        def requests(j: int, bp: BatchPlan) -> list[Request]:
            ids = bp.block.dst_ids
            out = [self._req("x", "X", j, ids, "dst_ids", H2D_DST)]
            return out + [self._req("grad", "G0", j, ids, "dst_ids", H2D_GRAD)] if backward else out

        for _, (j, bp), rows in self._batches(requests):
            dev_ids = self.dplan.ids(j, "dst_ids")
            if dev_ids is None:
                ids = bp.block.dst_ids
                dev_ids = ids.to(self.device)
                self._record(H2D_TOPO, _nbytes(ids))
            x = rows["x"]
            if backward:
                with torch.enable_grad():
                    h0 = self.model.input_map(x, dev_ids)
                self.tracker.track("chunk", x, rows["grad"], h0)
                torch.autograd.backward(h0, rows["grad"])
            else:
                with torch.no_grad():
                    h0 = self.model.input_map(x, dev_ids)
                self.tracker.track("chunk", x, h0)
                self._put_dst(False, "H0", j, bp, h0, D2H)
            self.tracker.untrack("chunk")

    def _forward_layer(self, layer: int, train: bool, counts: list) -> None:
        mode = self.modes[layer] if train else "eval"
        need = self.dims.needs_src_grad(layer)
        slots = () if self.dedup == "baseline" else ("src_index", "load_slots", "send_slots")
        buffer = self._buffer(layer, zero=False)
        self.tracker.track("buffers", buffer)
        last = layer == self.num_layers - 1

        def requests(j: int, bp: BatchPlan) -> list[Request]:
            return self._neighbour_requests(layer, j, bp) + self._h0_requests(j, bp)

        for _, (j, bp), rows in self._batches(requests):
            block, idx = self._package(j, bp, True, slots)
            ids = block.dst_ids
            xn = self._load_neighbours(bp, idx, buffer, rows)
            h0 = rows.get("h0")
            if h0 is not None:
                h0.requires_grad_(mode == "none" and self.dims.learned_input)
            d = bp.num_dst
            if mode == "none":
                xn.requires_grad_(need)
                with torch.enable_grad():
                    agg = self.model.aggregate(layer, block, xn)
                    out = self.model.update(layer, agg, xn[:d], ids, h0)
                self.retained[layer].append((out, xn, h0, block))
                self._track_retained()
            else:
                with torch.no_grad():
                    agg = self.model.aggregate(layer, block, xn)
                    out = self.model.update(layer, agg, xn[:d], ids, h0)
            self.tracker.track("chunk", *self._topo_tensors(block, idx), xn, h0, agg, out)
            if mode == "hybrid":
                self._put_dst(False, f"A{layer}", j, bp, agg, D2H_CACHE)
            self._put_dst(False, f"H{layer + 1}", j, bp, out, D2H)
            if last and (self.link is None or self.keep_outputs):  # link: pairs scored after the pass (link.py)
                self._head(j, bp, out, ids, train, counts)
            self.tracker.untrack("chunk")
        self.tracker.untrack("buffers")
        self._barrier()

    def _head(self, j: int, bp: BatchPlan, out: torch.Tensor, ids: torch.Tensor, train: bool, counts: list) -> None:
        """The fused output map and loss of a chunk (training) or its per-split counts (evaluation; its ``(global ids,
        logits)`` with ``keep_outputs``: :meth:`outputs`)."""
        host_ids = bp.block.dst_ids
        if not train:
            with torch.no_grad():
                logits = self.model.output_map(out, ids)
            if self.keep_outputs:
                counts.append((host_ids.cpu(), logits.cpu()))
                return
            masks = {split: mask[host_ids].to(self.device) for split, mask in self.masks.items()}
            counts.append(split_counts(logits, self.y[host_ids].to(self.device), masks))
            return
        y = self.y[host_ids].to(self.device)
        leaf = out.detach().requires_grad_(True)
        with torch.enable_grad():
            logits = self.model.output_map(leaf, ids)
            loss_sum = masked_loss_sum(logits, y, self.masks["train"][host_ids].to(self.device))
        (loss_sum / self.num_train).backward()
        counts.append(float(loss_sum.detach()))
        self._put_dst(False, f"G{self.num_layers}", j, bp, leaf.grad, D2H_GRAD)

    def _backward_requests(self, layer: int, mode: str, j: int, bp: BatchPlan) -> list[Request]:
        ids = bp.block.dst_ids
        out = [self._req("gout", f"G{layer + 1}", j, ids, "dst_ids", H2D_GRAD)]
        if mode == "hybrid":
            out.append(self._req("agg", f"A{layer}", j, ids, "dst_ids", H2D_CACHE))
            if self.dims.uses_dst[layer]:
                out.append(self._req("h_dst", f"H{layer}", j, ids, "dst_ids", H2D_DST))
            out += self._h0_requests(j, bp)
        elif mode == "recompute":
            out += self._neighbour_requests(layer, j, bp) + self._h0_requests(j, bp)
        return out

    def _backward_layer(self, layer: int) -> None:
        mode = self.modes[layer]
        need = self.dims.needs_src_grad(layer)
        dedup = self.dedup != "baseline"
        data = self._buffer(layer, zero=False) if mode == "recompute" else None
        grads = self._buffer(layer, zero=True) if need else None
        self.tracker.track("buffers", data, grads)
        push = ("src_index", "send_slots", "flush_slots") if need and dedup else ()
        for _, (j, bp), rows in self._batches(lambda j, bp: self._backward_requests(layer, mode, j, bp)):
            d = bp.num_dst
            gout = rows["gout"]
            h0 = rows.get("h0")
            if h0 is not None:
                h0.requires_grad_(self.dims.learned_input)
            g_src = None
            if mode == "none":
                out, xn, h0, block = self.retained[layer][j]
                _, idx = self._package(j, bp, False, push)
                self.tracker.track("chunk", *self._topo_tensors(None, idx), gout)
                torch.autograd.backward(out, gout)
                g_src = xn.grad if need else None
                self.retained[layer][j] = None
            elif mode == "hybrid":
                block, idx = self._package(j, bp, True, push)
                ids = block.dst_ids
                agg = rows["agg"].requires_grad_(True)
                if self.dims.uses_dst[layer]:
                    h_dst = rows["h_dst"].requires_grad_(need)
                else:  # the update ignores it; a device-side placeholder of the right shape
                    h_dst = torch.zeros(d, self.dims.widths[layer], dtype=self.dtype, device=self.device)
                with torch.enable_grad():
                    out = self.model.update(layer, agg, h_dst, ids, h0)
                self.tracker.track("chunk", *self._topo_tensors(block, idx), gout, agg, h_dst, h0, out)
                torch.autograd.backward(out, gout)
                if need:
                    zero = torch.zeros(bp.block.num_src, self.dims.widths[layer], dtype=self.dtype,
                                       device=self.device, requires_grad=True)
                    with torch.enable_grad():
                        (g_src,) = torch.autograd.grad(self.model.aggregate(layer, block, zero), zero, agg.grad)
                    if self.dims.uses_dst[layer]:
                        g_src[:d] += h_dst.grad
            else:
                slots = ("src_index", "load_slots", "send_slots") + (("flush_slots",) if need else ()) \
                    if dedup else ()
                block, idx = self._package(j, bp, True, slots)
                ids = block.dst_ids
                xn = self._load_neighbours(bp, idx, data, rows).requires_grad_(need)
                with torch.enable_grad():
                    agg = self.model.aggregate(layer, block, xn)
                    out = self.model.update(layer, agg, xn[:d], ids, h0)
                self.tracker.track("chunk", *self._topo_tensors(block, idx), gout, xn, h0, agg, out)
                torch.autograd.backward(out, gout)
                g_src = xn.grad if need else None
            if self.dims.needs_h0 and self.dims.learned_input:
                self._put_dst(True, "G0", j, bp, h0.grad, D2H_GRAD)
            if need:
                self.tracker.track("chunk_grad", g_src)
                self._push_gradients(layer, j, bp, idx, grads, g_src)
                self.tracker.untrack("chunk_grad")
            self.tracker.untrack("chunk")
        if mode == "none":
            self.retained[layer] = []
            self._track_retained()
        self.tracker.untrack("buffers")
        self._barrier()

    def _track_retained(self) -> None:
        """Count the autograd graphs kept by ``--recompute none`` (outputs, inputs, topology) as resident."""
        tensors = []
        for chunks in self.retained:
            for item in chunks:
                if item is not None:
                    out, xn, h0, block = item
                    tensors += [out, xn, h0, *block_tensors(block)]
        self.tracker.track("retained", *tensors)

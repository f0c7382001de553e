"""Differentiable communication: ``all_to_all_v`` and the halo gather.

Byte categories: the backward of an exchange is recorded under the *same*
category as its forward (``backward_category`` overrides it), because the
specs' closed forms count both directions of a feature exchange together (the
factor 2 of GNNPipe's ``V_g = 2 rho L N H b``). A backward that autograd never
runs (the exchanged tensor does not require grad, e.g. raw input features) is
never recorded, so the closed forms drop that term.

Every rank must take part in every exchange, forward and backward: the
strategies keep ``requires_grad`` the same on all ranks for the tensors they
exchange (layer inputs are computed the same way everywhere), so autograd calls
the backward exchanges on all ranks, in the same (reverse layer) order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from graphscale.distributed.comm import Comm

if TYPE_CHECKING:
    from graphscale.metrics.memory import MemoryTracker


class _AllToAllV(torch.autograd.Function):
    """Forward: rows to peers; backward: the reverse exchange of their gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm, send_counts: list[int], recv_counts: list[int], category: str,
                backward_category: str) -> torch.Tensor:
        ctx.comm, ctx.send_counts, ctx.recv_counts, ctx.category = comm, send_counts, recv_counts, backward_category
        return comm.all_to_all_v(x, send_counts, recv_counts, category)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad_in = ctx.comm.all_to_all_v(grad.contiguous(), ctx.recv_counts, ctx.send_counts, ctx.category)
        return grad_in, None, None, None, None, None


def all_to_all_v(x: torch.Tensor, comm: Comm, send_counts: list[int], recv_counts: list[int], category: str,
                 backward_category: str | None = None) -> torch.Tensor:
    """Differentiable :meth:`Comm.all_to_all_v`; backward sends gradients back along the same routes.

    Args:
        x: ``[sum(send_counts), *rest]`` rows grouped by destination rank.
        comm: the worker's Comm.
        send_counts, recv_counts: rows to / from each rank.
        category: Ledger category of the forward bytes.
        backward_category: Ledger category of the backward bytes (default: ``category``).

    Returns:
        ``[sum(recv_counts), *rest]`` rows grouped by source rank.
    """
    bwd = category if backward_category is None else backward_category
    return _AllToAllV.apply(x, comm, list(send_counts), list(recv_counts), category, bwd)


class _HaloGather(torch.autograd.Function):
    """Forward: ``[x_local; halo rows]`` received straight into one buffer; backward: halo gradients home."""

    @staticmethod
    def forward(ctx, x_local: torch.Tensor, plan: HaloExchange) -> torch.Tensor:
        ctx.plan = plan
        n = plan.num_local
        out = x_local.new_empty((n + plan.num_halo, *x_local.shape[1:]))
        out[:n] = x_local
        send = x_local.index_select(0, plan.send_index)
        if plan.tracker is not None:  # the exchange's buffers, while they coexist
            plan.tracker.track("halo exchange", x_local, send, out)
        if plan.halo_index is None:
            plan.comm.all_to_all_v(send, plan.send_counts, plan.recv_counts, plan.category, out=out[n:])
        else:
            recv = plan.comm.all_to_all_v(send, plan.send_counts, plan.recv_counts, plan.category)
            torch.index_select(recv, 0, plan.halo_index, out=out[n:])
        if plan.tracker is not None:
            plan.tracker.untrack("halo exchange")
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        plan = ctx.plan
        n = plan.num_local
        grad = grad.contiguous()
        halo_grad = grad[n:]
        if plan.halo_index is not None:  # back to received order
            halo_grad = torch.empty_like(halo_grad).index_copy_(0, plan.halo_index, halo_grad)
        back = plan.comm.all_to_all_v(halo_grad, plan.recv_counts, plan.send_counts, plan.category)
        return grad[:n].clone().index_add_(0, plan.send_index, back), None


class _HaloFinish(torch.autograd.Function):
    """Forward: wait for the halo rows :meth:`HaloExchange.start` requested and return its source buffer
    ``[x_local[rows]; halo rows]``; backward: the local part's gradient to its rows, the halo part's to the
    owners, who scatter-add it into theirs (as :class:`_HaloGather`)."""

    @staticmethod
    def forward(ctx, x_local: torch.Tensor, plan: HaloExchange, pending, rows: torch.Tensor | None) -> torch.Tensor:
        ctx.plan, ctx.rows = plan, rows
        out = pending.buffer
        k = out.shape[0] - plan.num_halo
        if rows is None:
            out[:k] = x_local
        else:
            torch.index_select(x_local, 0, rows, out=out[:k])
        recv = pending.wait()
        if plan.halo_index is not None:  # received by owner: into halo order
            torch.index_select(recv, 0, plan.halo_index, out=out[k:])
        if plan.tracker is not None:
            plan.tracker.untrack("halo exchange")
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        plan, rows = ctx.plan, ctx.rows
        grad = grad.contiguous()
        k = grad.shape[0] - plan.num_halo
        halo_grad = grad[k:]
        if plan.halo_index is not None:  # back to received order
            halo_grad = torch.empty_like(halo_grad).index_copy_(0, plan.halo_index, halo_grad)
        back = plan.comm.all_to_all_v(halo_grad, plan.recv_counts, plan.send_counts, plan.category)
        if rows is None:
            local = grad[:k].clone()
        else:
            local = grad.new_zeros((plan.num_local, *grad.shape[1:])).index_add_(0, rows, grad[:k])
        return local.index_add_(0, plan.send_index, back), None, None, None


@dataclass
class HaloExchange:
    """A precomputed halo-exchange plan for one worker's block.

    The block's source layout is ``[local rows (its destinations), halo rows]``.
    :meth:`gather` sends, to each peer, the local rows that peer needs, receives
    this worker's halo rows from their owners, and returns ``cat(x_local, halo)``.
    Its backward returns each halo row's gradient to the owner, which
    scatter-adds (``index_add``) it into its local rows: a row needed by several
    peers accumulates all their contributions.

    Attributes:
        comm: the worker's Comm.
        send_index: int64 ``[sum(send_counts)]`` local rows to send, grouped by peer.
        send_counts: rows sent to each peer.
        recv_counts: rows received from each peer.
        halo_index: int64 ``[num_halo]``: halo row ``j`` is received row ``halo_index[j]``
            (``None`` when received order already is halo order).
        num_local: local rows expected by :meth:`gather`.
        category: Ledger category of both directions.
    """

    comm: Comm
    send_index: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]
    halo_index: torch.Tensor | None
    num_local: int
    category: str = "halo"
    tracker: MemoryTracker | None = None
    """Optional :class:`~graphscale.metrics.memory.MemoryTracker` that counts each gather's buffers (its
    input rows, the send buffer and the ``[local + halo]`` output) while the exchange runs."""

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    @property
    def num_send(self) -> int:
        return sum(self.send_counts)

    @classmethod
    def build(cls, comm: Comm, local_ids: torch.Tensor, halo_ids: torch.Tensor, halo_owner: torch.Tensor,
              category: str = "halo") -> HaloExchange:
        """Agree on the plan with the owners (a collective: every rank calls it).

        Each worker asks every owner for the halo ids it owns (an id exchange
        recorded under ``"control"``); the owner turns them into its local rows.

        Args:
            comm: the worker's Comm.
            local_ids: int64 ``[num_local]`` global ids of this worker's rows, in row order.
            halo_ids: int64 ``[num_halo]`` global ids of the halo rows, in the block's source order.
            halo_owner: int64 ``[num_halo]`` rank owning each halo row (never this rank).
            category: Ledger category of the feature exchange.

        Raises:
            ValueError: an owner is out of range or this rank, or a peer asks for an id it does not own.
        """
        device = comm.env.device
        local_ids = torch.as_tensor(local_ids, dtype=torch.int64).cpu()
        halo_ids = torch.as_tensor(halo_ids, dtype=torch.int64).cpu()
        halo_owner = torch.as_tensor(halo_owner, dtype=torch.int64).cpu()
        if halo_ids.shape != halo_owner.shape:
            raise ValueError(f"HaloExchange.build: halo_ids {tuple(halo_ids.shape)} and halo_owner "
                             f"{tuple(halo_owner.shape)} must have the same shape")
        if halo_owner.numel() and (int(halo_owner.min()) < 0 or int(halo_owner.max()) >= comm.world_size
                                   or bool((halo_owner == comm.rank).any())):
            raise ValueError(f"HaloExchange.build: halo owners must be other ranks in [0, {comm.world_size}), "
                             f"this is rank {comm.rank}")
        order = torch.argsort(halo_owner, stable=True)  # request order: by owner, then halo order
        requested = halo_ids[order]
        req_counts = torch.bincount(halo_owner, minlength=comm.world_size).tolist()
        wanted_counts = comm.exchange_counts(req_counts)
        wanted = comm.all_to_all_v(requested.to(device), req_counts, wanted_counts, "control").cpu()
        # Map the requested global ids to my local rows.
        sorted_ids, perm = torch.sort(local_ids)
        pos = torch.searchsorted(sorted_ids, wanted).clamp_(max=max(sorted_ids.numel() - 1, 0))
        if wanted.numel() and (sorted_ids.numel() == 0 or not torch.equal(sorted_ids[pos], wanted)):
            raise ValueError(f"HaloExchange.build: rank {comm.rank} was asked for vertices it does not own")
        send_index = perm[pos] if wanted.numel() else torch.zeros(0, dtype=torch.int64)
        halo_index = None if torch.equal(order, torch.arange(order.numel())) else torch.argsort(order)
        return cls(comm, send_index.to(device), wanted_counts, req_counts,
                   None if halo_index is None else halo_index.to(device), local_ids.numel(), category)

    def gather(self, x_local: torch.Tensor) -> torch.Tensor:
        """``cat(x_local, halo rows from their owners)``: the block's source rows.

        Args:
            x_local: ``[num_local, d]`` this worker's rows.

        Returns:
            ``[num_local + num_halo, d]``, the halo rows received straight into the output (no separate
            receive buffer or concatenation). Differentiable: the backward exchange runs only when
            ``x_local`` requires grad.
        """
        if x_local.shape[0] != self.num_local:
            raise ValueError(f"HaloExchange.gather: expected {self.num_local} local rows, got {x_local.shape[0]}")
        if self.comm.world_size == 1:  # no peers, no halo: the local rows are the block's sources (no copy)
            return x_local
        return _HaloGather.apply(x_local, self)

    def start(self, x_local: torch.Tensor, rows: torch.Tensor | None = None):
        """The overlapped form of :meth:`gather`: send the rows peers need from ``x_local`` and start receiving
        this worker's halo rows without waiting, so the caller can compute on local rows meanwhile, then
        :meth:`finish`. The result holds ``x_local[rows]`` (all local rows when ``rows`` is ``None``), then the
        halo rows, received straight into it where their order allows.

        Returns:
            the pending exchange, for :meth:`finish` (with the same ``rows``).
        """
        if x_local.shape[0] != self.num_local:
            raise ValueError(f"HaloExchange.start: expected {self.num_local} local rows, got {x_local.shape[0]}")
        x = x_local.detach()
        send = x.index_select(0, self.send_index)
        k = self.num_local if rows is None else rows.numel()
        out = x.new_empty((k + self.num_halo, *x.shape[1:]))
        recv = out[k:] if self.halo_index is None else x.new_empty((self.num_halo, *x.shape[1:]))
        if self.tracker is not None:
            self.tracker.track("halo exchange", send, out, recv)
        pending = self.comm.all_to_all_v_start(send, self.send_counts, self.recv_counts, self.category, recv)
        pending.buffer = out  # its local part is filled by finish: its pages stay untouched while the caller computes
        return pending

    def finish(self, x_local: torch.Tensor, pending, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``[x_local[rows]; halo rows]`` of the exchange :meth:`start` began (waits for the halo rows).
        Differentiable in ``x_local``: the backward returns the halo rows' gradients to their owners (only when
        ``x_local`` requires grad, as :meth:`gather`)."""
        return _HaloFinish.apply(x_local, self, pending, rows)

    def halo_rows(self, x_local: torch.Tensor) -> torch.Tensor:
        """The halo rows alone, in *received* order (grouped by owner): halo row ``j`` is row ``halo_index[j]``
        (row ``j`` when ``halo_index`` is ``None``). No copy of the local rows and no reordering copy, for callers
        that index the halo rows themselves. Forward only (no autograd); the bytes are those of :meth:`gather`."""
        if x_local.shape[0] != self.num_local:
            raise ValueError(f"HaloExchange.halo_rows: expected {self.num_local} local rows, got {x_local.shape[0]}")
        send = x_local.detach().index_select(0, self.send_index)
        return self.comm.all_to_all_v(send, self.send_counts, self.recv_counts, self.category)

    def volume(self, width: int, element_size: int) -> int:
        """Bytes this worker sends in one forward :meth:`gather` of rows ``width`` wide."""
        return sum(c for p, c in enumerate(self.send_counts) if p != self.comm.rank) * width * element_size

"""Row exchange inside a group of workers, for strategies that drive their gradients by hand.

Every member of a group owns some rows of a tensor and keeps copies of rows other members own (halo, ghost or
mirror rows, by paper): in the forward the owners send the rows their peers read and every member writes what it
receives into its copies (:meth:`RowExchange.push`); in the backward the gradients accumulated on the copies travel
back to their owners, which add them to their own rows' gradients (:meth:`RowExchange.pull`). One ``all_to_all_v``
per direction, through :class:`~graphscale.distributed.comm.Comm`, so every byte is counted in the Ledger under the
caller's category (the sender's, as every transfer).

Users: the pipeline's hybrid groups (ghost rows of a chunk), task-parallel's P groups (mirror rows of a subgraph)
and offload's peer reads (rows of the other workers' buffers). Graph-parallel's halo exchange is differentiable
(autograd returns the gradients): :class:`~graphscale.distributed.functional.HaloExchange`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.distributed.comm import Comm


@dataclass
class RowExchange:
    """One member's side of a row exchange.

    Attributes:
        send_index: positions of the owned rows to send, grouped by peer (``send_counts``), in the order the peer
            keeps them.
        send_counts: rows sent to each member (0 for oneself).
        recv_index: where the received rows go, grouped by peer (``recv_counts``): a position per row, or a
            ``slice`` when they fill a contiguous range in the order received.
        recv_counts: rows received from each member (0 from oneself).
    """

    send_index: torch.Tensor
    send_counts: list[int]
    recv_index: torch.Tensor | slice
    recv_counts: list[int]

    @classmethod
    def from_lists(cls, send: list[torch.Tensor], recv: list[torch.Tensor]) -> RowExchange:
        """The exchange whose ``send[m]`` are the positions of the rows member ``m`` reads and ``recv[m]`` where the
        rows member ``m`` sends go."""
        return cls(torch.cat(send), [t.numel() for t in send], torch.cat(recv), [t.numel() for t in recv])

    def rows(self, comm: Comm, owned: torch.Tensor, category: str) -> torch.Tensor:
        """Forward: ``owned`` (the rows of ``send_index``, in its order) out; the rows this member receives, in
        ``recv_index`` order, back."""
        return comm.all_to_all_v(owned, self.send_counts, self.recv_counts, category)

    def grads(self, comm: Comm, copies: torch.Tensor, category: str) -> torch.Tensor:
        """Backward: ``copies`` (the gradients of the received rows, in ``recv_index`` order) to their owners; the
        gradients of this member's sent rows, in ``send_index`` order, back."""
        return comm.all_to_all_v(copies, self.recv_counts, self.send_counts, category)

    def push(self, comm: Comm, rows: torch.Tensor, category: str) -> None:
        """Forward, in place: the owners' rows of ``rows`` into their copies in the other members' ``rows``."""
        rows[self.recv_index] = self.rows(comm, rows[self.send_index], category)

    def pull(self, comm: Comm, grads: torch.Tensor, category: str) -> None:
        """Backward, in place: the gradients of the copies in ``grads`` added to their owners' rows of ``grads``."""
        grads.index_add_(0, self.send_index, self.grads(comm, grads[self.recv_index], category))

"""Comm: every byte a strategy moves goes through here and lands in the Ledger.

Recording follows the Ledger's convention: the *sender* records, ``peer`` is
the receiving rank, sends to oneself are free. Summing a category over workers
gives the bytes that crossed the wire. The byte model of each collective:

* ``all_to_all_v`` / ``send``: the exact rows sent to each other rank.
* ``all_reduce``: the ring algorithm (what NCCL and gloo's ring use for large
  tensors). The tensor is cut into ``W`` chunks (chunk ``c`` holds
  ``numel // W + (c < numel % W)`` elements); in each of the ``W-1``
  reduce-scatter steps rank ``r`` sends chunk ``(r - s) mod W`` to rank
  ``(r + 1) mod W``, and in each of the ``W-1`` all-gather steps chunk
  ``(r + 1 - s) mod W``. Per worker that is about ``2 (W-1)/W * nbytes``;
  summed over workers it is exactly ``2 (W-1) * nbytes``.
* ``broadcast``: the root sends ``nbytes`` to each of the other ``W-1`` ranks
  (flat tree), so the sum over workers is ``(W-1) * nbytes``.
* ``all_gather_v``: every rank sends its rows to each of the other ``W-1`` ranks.
* ``exchange_counts``: one int64 per other rank, under :data:`CONTROL`.
* ``gather_object``: every other rank sends the root its object's serialised bytes (``torch.save``) under the
  given category, after one int64 (its length) under :data:`CONTROL`.

``world_size == 1`` never touches ``torch.distributed`` and records nothing
(there is no other rank to send to).

A collective that fails raises :class:`CollectiveError` naming the collective,
its category and the rank; one that waited ``env.timeout`` for a worker that
never joined it says it timed out.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from graphscale.distributed.env import DistEnv
from graphscale.metrics.ledger import HOST

#: Ledger category of small bookkeeping messages (counts, scalar losses, metric sums).
CONTROL = "control"
#: Ledger category of the gradient all-reduce.
ALLREDUCE = "allreduce"


class CollectiveError(RuntimeError):
    """A collective failed on this rank; the backend's error is the ``__cause__``.

    Attributes:
        timed_out: it waited the whole collective timeout for a worker that did not join it.
    """

    def __init__(self, rank: int, name: str, category: str | None, seconds: float, timeout: timedelta,
                 cause: BaseException) -> None:
        limit = timeout.total_seconds()
        self.timed_out = seconds >= 0.95 * limit
        what = f"rank {rank}: collective {name}" + (f" (category {category!r})" if category else "")
        if self.timed_out:
            detail = (f"{what} timed out after {seconds:.1f} s (timeout {limit:g} s): another worker did not enter "
                      "it, being hung, stuck elsewhere or slower than the timeout (--timeout raises it)")
        else:
            detail = f"{what} failed after {seconds:.1f} s: {cause}"
        super().__init__(detail)


def nbytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s elements (not of its whole storage)."""
    return t.numel() * t.element_size()


def ring_allreduce_bytes(numel: int, element_size: int, rank: int, world_size: int) -> int:
    """Bytes rank ``rank`` sends in a ring all-reduce of ``numel`` elements (see the module docstring)."""
    if world_size <= 1:
        return 0
    base, extra = divmod(numel, world_size)

    def chunk(c: int) -> int:
        return base + (1 if c < extra else 0)

    sent = sum(chunk((rank - s) % world_size) + chunk((rank + 1 - s) % world_size) for s in range(world_size - 1))
    return sent * element_size


class Comm:
    """The collectives a strategy uses, each recorded in ``env.ledger``.

    Args:
        env: this worker's DistEnv (its ``group`` is used; ``None`` = default group).
    """

    def __init__(self, env: DistEnv) -> None:
        self.env = env
        self.rank = env.rank
        self.world_size = env.world_size
        self.group = env.group
        #: gloo moves CUDA tensors for a few collectives only (not all_to_all, send, recv): with gloo on GPUs
        #: every transfer goes through a host copy of its tensors (workers sharing one GPU; not for speed).
        #: The copies are local, not recorded: the Ledger counts bytes between workers.
        self.staged = env.backend == "gloo" and env.device.type == "cuda"

    def _host(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` where the backend can read it: a host copy when :attr:`staged`, else ``t`` itself."""
        return t.cpu() if self.staged else t

    @property
    def ledger(self):
        return self.env.ledger

    # -------------------------------------------------------------- records
    def record(self, category: str, nbytes: int, peer: int = HOST) -> None:
        """Record a modelled transfer (e.g. a host<->device copy on a CPU-only run); self-sends are dropped."""
        if peer == self.rank:
            return
        self.ledger.add(category, nbytes, peer)

    # ---------------------------------------------------------- collectives
    @contextmanager
    def _collective(self, name: str, category: str | None, started: float | None = None) -> Iterator[None]:
        """Turn a backend error inside the block into a :class:`CollectiveError` naming the collective; log the
        seconds blocked in it when ``env.comm_log`` is a list (``started``: when an asynchronous one began)."""
        start = time.monotonic()
        try:
            yield
        except RuntimeError as err:
            since = start if started is None else started
            raise CollectiveError(self.rank, name, category, time.monotonic() - since, self.env.timeout,
                                  err) from err
        if self.env.comm_log is not None:
            self.env.comm_log.append((name, category, time.monotonic() - start))

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.world_size > 1:
            with self._collective("barrier", None):
                dist.barrier(group=self.group)

    def exchange_counts(self, send_counts: list[int]) -> list[int]:
        """Tell every rank how many items I send it; learn how many each rank sends me.

        Args:
            send_counts: ``send_counts[p]`` = items for rank ``p`` (length ``world_size``).

        Returns:
            ``recv_counts[p]`` = items rank ``p`` sends me.
        """
        self._check_counts(send_counts, "send_counts")
        if self.world_size == 1:
            return [int(c) for c in send_counts]
        send = torch.tensor(send_counts, dtype=torch.int64, device="cpu" if self.staged else self.env.device)
        recv = torch.empty_like(send)
        with self._collective("exchange_counts", CONTROL):
            dist.all_to_all_single(recv, send, group=self.group)
        for peer in range(self.world_size):
            self.record(CONTROL, 8, peer)
        return [int(c) for c in recv.tolist()]

    def all_to_all_v(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                     category: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """Personalised exchange of rows: rows ``[sum(send_counts[:p]), +send_counts[p])`` go to rank ``p``.

        Args:
            send: ``[sum(send_counts), *rest]``, grouped by destination rank.
            send_counts: rows for each rank (length ``world_size``).
            recv_counts: rows from each rank (length ``world_size``; see :meth:`exchange_counts`).
            category: Ledger category of the bytes sent to other ranks.
            out: optional contiguous ``[sum(recv_counts), *rest]`` tensor to receive into (saves a copy when
                the caller wants the rows inside a larger buffer).

        Returns:
            ``[sum(recv_counts), *rest]``, grouped by source rank (``out`` when given).
        """
        self._check_counts(send_counts, "send_counts")
        self._check_counts(recv_counts, "recv_counts")
        if send.dim() == 0 or send.shape[0] != sum(send_counts):
            raise ValueError(f"all_to_all_v: send has {send.shape[0] if send.dim() else 0} rows, "
                             f"send_counts sum to {sum(send_counts)}")
        shape = (sum(recv_counts), *send.shape[1:])
        if out is not None and (tuple(out.shape) != shape or not out.is_contiguous()):
            raise ValueError(f"all_to_all_v: out must be a contiguous {shape} tensor, got {tuple(out.shape)}")
        if self.world_size == 1:
            if recv_counts[0] != send_counts[0]:
                raise ValueError(f"all_to_all_v: single worker sends {send_counts[0]} rows but expects {recv_counts[0]}")
            return send.clone() if out is None else out.copy_(send)
        send = send.contiguous()
        out = send.new_empty(shape) if out is None else out
        landing = self._host(out)
        with self._collective("all_to_all_v", category):
            dist.all_to_all_single(landing, self._host(send), output_split_sizes=list(recv_counts),
                                   input_split_sizes=list(send_counts), group=self.group)
        if landing is not out:
            out.copy_(landing)
        row = send.element_size() * send.shape[1:].numel()
        for peer, count in enumerate(send_counts):
            self.record(category, count * row, peer)
        return out

    def all_to_all_v_start(self, send: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                           category: str, out: torch.Tensor) -> PendingExchange:
        """Start :meth:`all_to_all_v` into ``out`` without waiting: the backend moves the rows while the caller
        computes; :meth:`PendingExchange.wait` returns ``out`` once they arrived. Bytes are recorded here.

        ``send`` must stay untouched until the wait returns.
        """
        self._check_counts(send_counts, "send_counts")
        self._check_counts(recv_counts, "recv_counts")
        shape = (sum(recv_counts), *send.shape[1:])
        if send.dim() == 0 or send.shape[0] != sum(send_counts):
            raise ValueError(f"all_to_all_v_start: send has {send.shape[0] if send.dim() else 0} rows, "
                             f"send_counts sum to {sum(send_counts)}")
        if tuple(out.shape) != shape or not out.is_contiguous():
            raise ValueError(f"all_to_all_v_start: out must be a contiguous {shape} tensor, got {tuple(out.shape)}")
        if self.world_size == 1:
            out.copy_(send)
            return PendingExchange(self, None, out, category, time.monotonic(), send)
        send = self._host(send.contiguous())
        landing = self._host(out)
        started = time.monotonic()
        with self._collective("all_to_all_v (start)", category):
            work = dist.all_to_all_single(landing, send, output_split_sizes=list(recv_counts),
                                          input_split_sizes=list(send_counts), group=self.group, async_op=True)
        row = send.element_size() * send.shape[1:].numel()
        for peer, count in enumerate(send_counts):
            self.record(category, count * row, peer)
        pending = PendingExchange(self, work, out, category, started, send)
        pending.landing = landing
        return pending

    def all_gather_v(self, t: torch.Tensor, category: str) -> list[torch.Tensor]:
        """Every rank's ``t`` (row counts may differ; trailing shape and dtype must agree), by rank."""
        if self.world_size == 1:
            return [t.clone()]
        counts = self.exchange_counts([t.shape[0]] * self.world_size)
        send = torch.cat([t] * self.world_size)
        out = self.all_to_all_v(send, [t.shape[0]] * self.world_size, counts, category)
        return list(torch.split(out, counts))

    def gather_object(self, obj, root: int, category: str) -> list | None:
        """Every rank's ``obj`` (tensors, dicts, numbers: anything ``torch.save`` writes) on rank ``root``, by
        rank; ``None`` on the others. Each other rank sends its serialised object point to point (recorded: its
        length under :data:`CONTROL`, the bytes under ``category``)."""
        if not 0 <= root < self.world_size:
            raise ValueError(f"gather_object: root={root} is not a rank of a {self.world_size}-worker group")
        if self.world_size == 1:
            return [obj]
        if self.rank != root:
            buf = io.BytesIO()
            torch.save(obj, buf)
            payload = torch.frombuffer(bytearray(buf.getbuffer()), dtype=torch.uint8).to(self.env.device)
            with self._collective("gather_object", category):
                self.send(torch.tensor([payload.numel()], dtype=torch.int64, device=self.env.device), root,
                          CONTROL).wait()
                self.send(payload, root, category).wait()
            return None
        out = []
        with self._collective("gather_object", category):
            for peer in range(self.world_size):
                if peer == root:
                    out.append(obj)
                    continue
                size = torch.empty(1, dtype=torch.int64, device=self.env.device)
                self.recv(size, peer).wait()
                payload = torch.empty(int(size), dtype=torch.uint8, device=self.env.device)
                self.recv(payload, peer).wait()
                out.append(torch.load(io.BytesIO(payload.cpu().numpy().tobytes()), map_location=self.env.device,
                                      weights_only=False))
        return out

    def all_reduce(self, t: torch.Tensor, category: str, op: dist.ReduceOp = dist.ReduceOp.SUM) -> torch.Tensor:
        """Reduce ``t`` in place across ranks and return it; recorded with the ring model."""
        if self.world_size == 1:
            return t
        moved = self._host(t)
        with self._collective("all_reduce", category):
            dist.all_reduce(moved, op=op, group=self.group)
        if moved is not t:
            t.copy_(moved)
        self.record(category, ring_allreduce_bytes(t.numel(), t.element_size(), self.rank, self.world_size),
                    (self.rank + 1) % self.world_size)
        return t

    def broadcast(self, t: torch.Tensor, src: int, category: str) -> torch.Tensor:
        """Overwrite ``t`` with rank ``src``'s ``t`` in place and return it; the root records ``W-1`` copies."""
        if not 0 <= src < self.world_size:
            raise ValueError(f"broadcast: src={src} is not a rank of a {self.world_size}-worker group")
        if self.world_size == 1:
            return t
        moved = self._host(t)
        with self._collective("broadcast", category):
            dist.broadcast(moved, src=src, group=self.group)
        if moved is not t:
            t.copy_(moved)
        if self.rank == src:
            for peer in range(self.world_size):
                self.record(category, nbytes(t), peer)
        return t

    def send(self, t: torch.Tensor, dst: int, category: str, tag: int = 0) -> dist.Work:
        """Non-blocking send of ``t`` to ``dst`` (recorded here); ``.wait()`` the returned handle. ``tag`` matches
        it to the :meth:`recv` with the same tag (messages between two ranks with one tag arrive in order)."""
        self._check_peer(dst)
        work = dist.isend(self._host(t.contiguous()), dst=dst, group=self.group, tag=tag)
        self.record(category, nbytes(t), dst)
        return work

    def recv(self, t: torch.Tensor, src: int, tag: int = 0) -> dist.Work:
        """Non-blocking receive into ``t`` from ``src`` with ``tag`` (the sender records the bytes; counted in
        ``env.receives``)."""
        self._check_peer(src)
        self.env.receives += 1
        landing = self._host(t)
        work = dist.irecv(landing, src=src, group=self.group, tag=tag)
        return work if landing is t else StagedReceive(work, landing, t)

    # ------------------------------------------------------------- checking
    def _check_counts(self, counts: list[int], name: str) -> None:
        if len(counts) != self.world_size:
            raise ValueError(f"{name} must have one entry per rank ({self.world_size}), got {len(counts)}")
        if any(int(c) < 0 for c in counts):
            raise ValueError(f"{name} must be non-negative, got {list(counts)}")

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"peer {peer} must be another rank of the {self.world_size}-worker group "
                             f"(this is rank {self.rank})")


class PendingExchange:
    """An :meth:`Comm.all_to_all_v_start` in flight; :meth:`wait` blocks until its rows arrived (once)."""

    def __init__(self, comm: Comm, work, out: torch.Tensor, category: str, started: float,
                 send: torch.Tensor) -> None:
        self.comm, self.work, self.out, self.category, self.started = comm, work, out, category, started
        self.send = send  # kept alive until the backend is done with it
        self.landing = out  # where the backend writes (a host copy of ``out`` when the Comm is staged)
        self.buffer: torch.Tensor | None = None  # a caller's buffer that ``out`` lies in (HaloExchange.start)

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            with self.comm._collective("all_to_all_v (wait)", self.category, started=self.started):
                self.work.wait()
            self.work = None
            if self.landing is not self.out:
                self.out.copy_(self.landing)
        self.send = None
        return self.out


class StagedReceive:
    """A receive through a host buffer (a staged :class:`Comm`): :meth:`wait` copies it into the destination."""

    def __init__(self, work: dist.Work, landing: torch.Tensor, out: torch.Tensor) -> None:
        self.work, self.landing, self.out = work, landing, out

    def wait(self) -> bool:
        done = self.work.wait()
        self.out.copy_(self.landing)
        return done

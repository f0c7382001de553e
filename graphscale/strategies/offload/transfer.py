"""The offload strategy's host <-> device transfer pipeline: gathers ahead of compute, writes behind it.

A batch's host reads (``H^l`` neighbour rows, destination rows of ``G^{l+1}``, ``A^l``, ``H^l``, ``H^0``, ``X``)
are all known from the plan before the batch runs, so :func:`pipelined` submits batch ``j+1``'s gathers before
handing batch ``j`` to the caller: the transfer of ``j+1`` runs while ``j`` computes (double buffering). Two
mechanisms, chosen once per run (:attr:`Transfers.mode`):

``staged`` (the default wherever UVA is not available, and on CPU). One worker thread owns two preallocated
  staging buffers (page-locked on an accelerator) used alternately, each of at most :data:`STAGING_BYTES`
  whatever the chunk size. For a batch it waits until its slot's previous host-to-device copy has finished (that
  copy's event), fills the slot with ``index_select(out=...)`` straight from the host arrays, issues the copies to
  the device on a *copy stream* and records an event; a batch whose rows exceed the slot is filled and copied in
  slot-sized pieces, each refill waiting for the copies out of the slot.
  :meth:`Transfers.wait` makes the compute stream wait for that event (device-side; the host does not block on
  the copy) and marks the tensors as used there (``record_stream``). Writes are asynchronous too: the rows are
  copied device-to-host into page-locked memory on a *write stream* (after the compute that produced them), and
  the worker thread, once that copy's event fires, scatters them into the host array (``index_copy_`` /
  ``index_add_``). The one FIFO thread orders every gather and write of a run, so a read of a row submitted after
  its write sees the write. On CPU the same thread, slots and order run; the "device copy" is a copy out of the
  slot into a fresh tensor and the events are no-ops.

``uva`` (CUDA, when the host arrays alias as device tensors and a probe gather is bit-identical). Gathers are
  ``index_select`` kernels on the copy stream reading the page-locked host rows in place (zero-copy: no staging,
  no host thread), after the compute issued so far (an event); writes are ``index_copy_`` kernels on the compute
  stream writing host rows in place; an accumulation is a gather, an add on the device and a scatter (ids are
  distinct), which computes the same sums as the host's ``index_add_``. The kernels index with device ids, so
  this mode needs the device-resident plan (:mod:`~graphscale.strategies.offload.resident`). The mode can also be
  forced on CPU (the alias is then the host array itself), which runs its schedule and arithmetic in the tests.

:meth:`Transfers.flush` waits for every submitted transfer (thread drained, device synchronised); the strategy
calls it before every barrier, so peers and later layers read host rows only after they landed. The byte
accounting stays the caller's (the Ledger), unchanged by the mechanism.

``trace``: when a list is passed, the pipeline appends ``(seq, what, batch, slot)`` tuples with ``seq`` from one
counter under a lock (``submit``, ``fill_start``, ``fill_end``, ``ready``, ``compute_start``, ``compute_end``), so
tests assert the overlap from the order of events, not from clocks.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from graphscale.options.offload import TRANSFER_MODES as MODES
from graphscale.strategies.offload.device import DeviceKit

#: bytes of one staging slot at most: a batch's gathers larger than this are staged in slot-sized pieces, so the
#: two slots take a fixed amount of (page-locked) host memory whatever the chunk size
STAGING_BYTES = 32 << 20


#: threads that gather (and scatter) the rows of one request of an array read at random from disk
#: (:attr:`Transfers.disk`): each missed row is a page fault that waits on the disk, so one thread keeps one read
#: in flight; several keep several (a 20M-vertex worker's chunk reads ~190k rows of a 10 GB feature file)
DISK_THREADS = 16


def rows_in_parallel(pool: ThreadPoolExecutor | None, op: Callable[[slice], object], n: int) -> None:
    """``op(rows)`` over ``n`` rows: in :data:`DISK_THREADS` contiguous pieces on ``pool``, or whole without one.
    The pieces touch disjoint rows of the output, so the result is the whole call's."""
    if pool is None or n < 2 * DISK_THREADS:
        op(slice(0, n))
        return
    step = -(-n // DISK_THREADS)
    for future in [pool.submit(op, slice(start, start + step)) for start in range(0, n, step)]:
        future.result()


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"offload transfer mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class Request:
    """Rows ``ids`` of host array ``array``, returned under ``key``; ``dev_ids``: the same ids on the device."""

    key: str
    array: str
    ids: torch.Tensor
    dev_ids: torch.Tensor | None = None


@dataclass
class Ticket:
    """One batch's gathers in flight."""

    index: int
    keys: tuple[str, ...]
    future: Future | None = None
    rows: dict | None = None
    event: object = None


class Transfers:
    """The transfer pipeline over a set of host arrays (see the module docstring).

    Args:
        arrays: ``name -> [rows, width]`` host tensors (page-locked on an accelerator: registered by the caller).
        device: the compute device.
        mode: ``auto`` (``uva`` where available and ``device_ids`` is true, else ``staged``), ``staged`` or ``uva``.
        device_ids: whether callers pass device ids with every request and write (the resident plan).
        trace: a list to append ordering events to, or ``None``.
        staging_bytes: bytes of one staging slot at most (default :data:`STAGING_BYTES`).
        disk: names of the arrays read at random from disk (mapped files the kernel cannot keep resident): their
            gathers and copies run in :data:`DISK_THREADS` pieces at once (``staged`` mode).

    Raises:
        ValueError: an unknown mode; ``uva`` without device ids, or where the arrays cannot be aliased.
    """

    def __init__(self, arrays: dict[str, torch.Tensor], device: torch.device | str, mode: str = "auto",
                 device_ids: bool = False, trace: list | None = None, staging_bytes: int | None = None,
                 disk: Iterable[str] = ()) -> None:
        check_mode(mode)
        staging_bytes = STAGING_BYTES if staging_bytes is None else staging_bytes
        if staging_bytes < 1:
            raise ValueError(f"Transfers: staging_bytes must be >= 1, got {staging_bytes}")
        self.kit = DeviceKit(device)
        self.arrays = arrays
        self.trace = trace
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self.copy_stream = self.kit.new_stream()  # host-to-device
        self.write_stream = self.kit.new_stream()  # device-to-host (the other direction of the link)
        self.aliases: dict[str, torch.Tensor] = {}
        if mode == "uva" and not device_ids:
            raise ValueError("--offload-transfer uva needs --offload-topology resident (its GPU kernels index with "
                             "ids already on the device)")
        if mode in ("auto", "uva") and device_ids:
            self.aliases = self._aliases(forced=mode == "uva")
        self.mode = "uva" if self.aliases else "staged"
        if mode == "uva" and self.mode != "uva":
            raise ValueError(f"--offload-transfer uva is not available on {self.kit.device}: the host arrays "
                             "cannot be read as device tensors (UVA); use --offload-transfer staged or auto")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offload-staging") \
            if self.mode == "staged" else None
        self.disk = frozenset(disk) if self.mode == "staged" else frozenset()
        self._disk_pool = ThreadPoolExecutor(max_workers=DISK_THREADS, thread_name_prefix="offload-disk") \
            if self.disk else None
        self._slots: list[torch.Tensor | None] = [None, None]
        self.staging_bytes = staging_bytes
        self._slot_events: list[object] = [None, None]
        self._writes: list[Future] = []

    def _aliases(self, forced: bool) -> dict[str, torch.Tensor]:
        """Device views of every array, each probed against a host gather; empty where UVA is unavailable."""
        if not self.kit.accelerated:
            return dict(self.arrays) if forced else {}  # CPU: the "alias" is the array (runs the uva schedule)
        aliases = {}
        for name, host in self.arrays.items():
            if host.numel() == 0:
                aliases[name] = torch.empty(host.shape, dtype=host.dtype, device=self.kit.device)
                continue
            alias = self.kit.uva_alias(host)
            if alias is None:
                return {}
            probe = torch.tensor([0, host.shape[0] - 1, host.shape[0] // 2], dtype=torch.int64)
            got = alias.index_select(0, probe.to(self.kit.device)).cpu()
            if not torch.equal(got, host.index_select(0, probe)):
                return {}
            aliases[name] = alias
        return aliases

    # ---------------------------------------------------------------- trace
    def note(self, what: str, index: int, slot: int | None = None) -> None:
        if self.trace is not None:
            with self._lock:
                self.trace.append((next(self._seq), what, index, slot))

    # ---------------------------------------------------------------- gathers
    def gather(self, requests: list[Request]) -> Ticket:
        """Submit one batch's gathers; :meth:`wait` returns ``key -> device rows``."""
        ticket = Ticket(next(self._counter), tuple(r.key for r in requests))
        self.note("submit", ticket.index, ticket.index % 2)
        if self.mode == "uva":
            compute = self.kit.current_stream()
            after = self.kit.event(compute)  # the compute (and writes) issued so far
            with self.kit.on_stream(self.copy_stream):
                self.kit.wait(self.copy_stream, after)
                ticket.rows = {r.key: self.aliases[r.array].index_select(0, r.dev_ids) for r in requests}
                ticket.event = self.kit.event(self.copy_stream)
        else:
            ticket.future = self._pool.submit(self._fill, ticket.index, list(requests))
        return ticket

    def _fill(self, index: int, requests: list[Request]) -> tuple[dict, object]:
        """Worker thread: fill staging slot ``index % 2`` and copy it to the device on the copy stream.

        The slot holds at most :attr:`slot_numel` elements: a batch whose rows exceed it is filled and copied in
        pieces, each refill of the slot waiting for the copies out of it (one fill when the rows fit)."""
        slot = index % 2
        self.note("fill_start", index, slot)
        if self._slot_events[slot] is not None:
            self._slot_events[slot].synchronize()  # the slot's previous copy to the device has finished
        widths = [self.arrays[r.array].shape[1] for r in requests]
        total = sum(r.ids.numel() * w for r, w in zip(requests, widths))
        buf = self._slot(slot, min(total, self.slot_numel), max(widths, default=1))
        dtype = self._dtype()
        rows, offset = {}, 0
        with self.kit.on_stream(self.copy_stream):
            for r, w in zip(requests, widths):
                n = r.ids.numel()
                out = torch.empty((n, w), dtype=dtype, device=self.kit.device)
                done = 0
                while done < n:
                    if offset + w > buf.numel():  # the slot is full: its copies land before it is refilled
                        self.kit.event(self.copy_stream).synchronize()
                        offset = 0
                    take = min(n - done, (buf.numel() - offset) // w)
                    view = buf[offset: offset + take * w].view(take, w)
                    array, ids = self.arrays[r.array], r.ids[done: done + take]
                    rows_in_parallel(self._disk_pool if r.array in self.disk else None,
                                     lambda part, a=array, i=ids, v=view: torch.index_select(a, 0, i[part],
                                                                                             out=v[part]), take)
                    out[done: done + take].copy_(view, non_blocking=True)
                    offset += take * w
                    done += take
                rows[r.key] = out
            event = self.kit.event(self.copy_stream)
        self._slot_events[slot] = event
        self.note("fill_end", index, slot)
        return rows, event

    def _slot(self, slot: int, numel: int, width: int) -> torch.Tensor:
        """Staging slot ``slot`` with room for ``numel`` elements and at least one row of ``width``."""
        numel = max(numel, width)
        buf = self._slots[slot]
        if buf is None or buf.numel() < numel:
            buf = self._slots[slot] = self.kit.staging(numel, self._dtype())
        return buf

    @property
    def slot_numel(self) -> int:
        """Elements of one staging slot at most (``staging_bytes``): larger batches are staged in pieces."""
        return max(self.staging_bytes // torch.empty(0, dtype=self._dtype()).element_size(), 1)

    def _dtype(self) -> torch.dtype:
        return next(iter(self.arrays.values())).dtype

    def reserve(self, numel: int, width: int = 1) -> None:
        """Preallocate both staging slots for ``numel`` elements (the largest batch), at most :attr:`slot_numel`
        (and at least one row of ``width``), outside the epoch."""
        if self.mode != "staged":
            return
        for slot in range(2):
            self._slot(slot, min(numel, self.slot_numel), width)

    def wait(self, ticket: Ticket) -> dict[str, torch.Tensor]:
        """The batch's rows, usable on the compute stream (which waits for their copy, device-side)."""
        if ticket.future is not None:
            ticket.rows, ticket.event = ticket.future.result()
            ticket.future = None
        compute = self.kit.current_stream()
        self.kit.wait(compute, ticket.event)
        for t in ticket.rows.values():
            self.kit.keep_for(t, compute)
        self.note("ready", ticket.index)
        return ticket.rows

    # ---------------------------------------------------------------- writes
    def write(self, name: str, ids: torch.Tensor, dev_ids: torch.Tensor | None, rows: torch.Tensor) -> None:
        """Overwrite host rows ``ids`` of ``name`` with ``rows`` (asynchronously; :meth:`flush` waits)."""
        self._put(name, ids, dev_ids, rows, add=False)

    def accumulate(self, name: str, ids: torch.Tensor, dev_ids: torch.Tensor | None, rows: torch.Tensor) -> None:
        """Add ``rows`` to host rows ``ids`` of ``name`` (distinct ids; asynchronously)."""
        self._put(name, ids, dev_ids, rows, add=True)

    def _put(self, name: str, ids: torch.Tensor, dev_ids: torch.Tensor | None, rows: torch.Tensor,
             add: bool) -> None:
        host = self.arrays[name]
        rows = rows.detach().to(host.dtype)
        if self.mode == "uva":
            alias = self.aliases[name]
            if add:
                rows = alias.index_select(0, dev_ids) + rows
            alias.index_copy_(0, dev_ids, rows)
            return
        if self.kit.accelerated:  # device -> pinned host, on the write stream after the compute that made rows
            compute = self.kit.current_stream()
            staged = self.kit.staging(rows.numel(), host.dtype)[: rows.numel()].view(rows.shape)
            with self.kit.on_stream(self.write_stream):
                self.kit.wait(self.write_stream, self.kit.event(compute))
                staged.copy_(rows, non_blocking=True)
                self.kit.keep_for(rows, self.write_stream)
                event = self.kit.event(self.write_stream)
        else:  # CPU: the "device-to-host copy" (the caller may reuse rows' memory afterwards)
            staged, event = rows.clone(), None
        pool = self._disk_pool if name in self.disk else None
        self._writes.append(self._pool.submit(self._scatter, host, ids.cpu(), staged, event, add, pool))

    @staticmethod
    def _scatter(host: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor, event, add: bool,
                 pool: ThreadPoolExecutor | None) -> None:
        if event is not None:
            event.synchronize()
        op = host.index_add_ if add else host.index_copy_  # distinct ids: the pieces write disjoint rows
        rows_in_parallel(pool, lambda part: op(0, ids[part], rows[part]), ids.numel())

    # ---------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Wait until every submitted gather and write has completed (host rows are current)."""
        if self._pool is not None:
            self._pool.submit(lambda: None).result()  # FIFO: everything before it is done
            writes, self._writes = self._writes, []
            for done in writes:
                done.result()  # re-raise a failed write here
        self.kit.synchronize()

    def close(self) -> None:
        self.flush()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._disk_pool is not None:
            self._disk_pool.shutdown(wait=True)
            self._disk_pool = None
        self.aliases.clear()


def pipelined(transfers: Transfers, items: Iterable, requests_of: Callable[[object], list[Request]]) -> Iterator:
    """Yield ``(position, item, rows)`` with item ``j+1``'s gathers submitted before item ``j`` is handed out."""
    items = list(items)
    if not items:
        return
    ticket = transfers.gather(requests_of(items[0]))
    for j, item in enumerate(items):
        following = transfers.gather(requests_of(items[j + 1])) if j + 1 < len(items) else None
        rows = transfers.wait(ticket)
        transfers.note("compute_start", ticket.index)
        yield j, item, rows
        transfers.note("compute_end", ticket.index)
        ticket = following

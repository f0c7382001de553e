"""Feature rows of a memory-mapped graph read through a bounded cache of hot rows, and the next batch's prefetch.

A mini-batch worker whose graph is a memory-mapped graph directory (the ``host-shared`` view) does not hold the
feature table: it reads the rows each mini-batch needs. :class:`HotRowCache` keeps the ``capacity`` hottest rows in
(anonymous) host memory for the whole run and reads every other row from the mapped file:

* **which rows**: the highest degree in the sampling direction first (a vertex's out-degree: how often it can be
  drawn as a source), ties by ascending id, as the data-parallel device caches rank them
  (:func:`~graphscale.data.feature_cache.hotness_order`); or, given ``reads`` (each row's read count over a
  replayed epoch, :func:`count_reads`: Ginex's inspect pass), the most-read rows first, ties by degree then id
  (:func:`~graphscale.data.feature_cache.access_order`). The set is fixed at setup, so the rows held never exceed
  ``capacity`` and no batch evicts another's rows;
* **how many**: ``capacity`` rows; :func:`cache_capacity` sizes it from the run's ``--host-memory`` budget: at most
  :data:`FEATURE_CACHE_SHARE` of it, in rows of the model's dtype; none when the whole table fits that share (the
  page cache then holds the mapped file, one copy per host);
* **a miss**, when the cache is given the table's file (``file``, a :class:`~graphscale.data.row_file.RowFile`:
  what :func:`~graphscale.strategies.minibatch_common.host_row_cache` does when the table does not fit the cache's
  share of the budget), is read from the file with positioned reads (sorted by id, read in spans, several reads in
  flight); the mapping is not touched. With ``stage_bytes``, :mod:`graphscale.data.superbatch` reads the distinct
  misses of several batches at once (:meth:`HotRowCache.stage`, a :class:`Staged` buffer) and each batch takes its
  misses from that buffer (the rows the file holds, the same bytes); two buffers are live at a time at most (the
  superbatch in training and the next one being read).
  Without ``file`` a miss is read from the mapped table in ascending id order (the page cache turns nearby ids
  into one read); a table larger than the cache's share is then advised random (:func:`advise_random`,
  ``madvise(MADV_RANDOM)``): a miss reads its own pages, not the kernel's read-around window around each
  faulting page, which under a memory cgroup is reclaimed again before most of it is used. Even so a missed row
  is a page fault, taken one at a time on the gathering thread; the positioned reads keep many in flight.

A gathered row is the file's row cast to the model's dtype, the same values whether it came from the cache or
from the file, so training is bit for bit the in-memory run's whatever the capacity (tested with caches of 0, 1
and a few rows).

:func:`prefetched` runs the next batch's sampling and row gathering in a background thread while the caller
trains on the current one (one batch ahead). The sampler and the gathers are pure functions of the batch, so the
order of the results, hence the run, is unchanged.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from graphscale.data.feature_cache import access_order, hotness_order
from graphscale.data.row_file import RowFile

#: share of the ``--host-memory`` budget the hot-row feature cache of a mini-batch worker may take
FEATURE_CACHE_SHARE = 0.25
#: rows copied into the cache per read at setup (a bounded staging buffer)
FILL_ROWS = 1 << 16

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Staged:
    """Rows read from the file ahead of their batches: ``ids`` ascending and distinct, ``rows`` their rows in the
    file's dtype (:meth:`HotRowCache.stage`)."""

    ids: torch.Tensor
    rows: torch.Tensor


def cache_capacity(budget: int, row_bytes: int, num_rows: int, share: float = FEATURE_CACHE_SHARE) -> int:
    """Rows of :class:`HotRowCache` that fit ``share`` of ``budget`` bytes; ``0`` when all ``num_rows`` rows fit it
    (the mapped file then stays in the page cache, one copy that every worker of the host shares: a private copy
    would only add to it)."""
    room = max(0, int(budget * share))
    if row_bytes <= 0 or num_rows * row_bytes <= room:
        return 0
    return int(room // row_bytes)


def count_reads(sources: Iterable[torch.Tensor], num_rows: int) -> torch.Tensor:
    """int64 ``[num_rows]``: how many times the id arrays of ``sources`` (one per batch: its input rows) read each
    row."""
    counts = torch.zeros(num_rows, dtype=torch.int64)
    for ids in sources:
        counts += torch.bincount(torch.as_tensor(ids, dtype=torch.int64), minlength=num_rows)
    return counts


def advise_random(x: torch.Tensor) -> bool:
    """Advise the kernel that the pages behind ``x`` (a memory-mapped table) are read at random
    (``madvise(MADV_RANDOM)`` over the pages it spans): a page fault reads that page only. Returns whether the
    advice was taken (``False`` off Linux, or for an empty tensor). The data read is unchanged."""
    advice = getattr(mmap, "MADV_RANDOM", None)
    if advice is None or not sys.platform.startswith("linux") or x.numel() == 0:
        return False
    page = mmap.PAGESIZE
    start = x.data_ptr() // page * page
    end = x.data_ptr() + x.numel() * x.element_size()
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise(start, end - start, advice) == 0


class HotRowCache:
    """Rows ``x[ids]`` in ``dtype``: the ``capacity`` hottest from memory, the rest from ``x`` (module docstring).

    Args:
        x: the ``[N, F]`` feature table (memory-mapped, or in memory with ``capacity`` 0).
        capacity: rows to keep in memory, ``0 <= capacity``; more than ``N`` holds every row.
        degrees: the degree that ranks the rows (default: ``x``'s graph's out-degrees, which the caller passes).
        dtype: the dtype gathered rows come in (default ``x``'s).
        file: the file ``x`` is mapped from, opened for positioned reads: misses are read from it, not from ``x``
            (its shape and dtype must be ``x``'s).
        stage_bytes: bytes a superbatch may hold (:mod:`graphscale.data.superbatch`), with ``file`` only; ``0``:
            each batch reads its own misses.
        reads: int64 ``[N]`` read counts that rank the rows before ``degrees`` (:func:`count_reads`), or ``None``.

    Attributes:
        ids: int64 cached vertex ids, in slot order (hottest first).
        rows: ``[len(ids), F]`` their rows, in ``dtype``.
        hits, misses: rows gathered from the cache and from ``x`` since construction.
        staged: the :class:`Staged` buffers :meth:`stage` read and :meth:`unstage` has not freed, oldest first;
            ``staged_hits``: misses gathered from staged rows since construction; ``superbatches``: :meth:`stage`
            calls.
        on_stage: called with the tensors of every live staged buffer whenever they change (a memory tracker's
            ``track``; calls are serialised), or ``None``.
    """

    def __init__(self, x: torch.Tensor, capacity: int, degrees: torch.Tensor | None = None,
                 dtype: torch.dtype | None = None, file: RowFile | None = None, stage_bytes: int = 0,
                 reads: torch.Tensor | None = None) -> None:
        if x.dim() != 2:
            raise ValueError(f"the feature table must be 2-D [N, F], got shape {tuple(x.shape)}")
        if int(capacity) < 0:
            raise ValueError(f"the feature cache capacity must be >= 0 rows, got {capacity}")
        if file is not None and (file.shape != tuple(x.shape) or file.dtype != torch.empty(0, dtype=x.dtype).numpy().dtype):
            raise ValueError(f"{file.path} holds a [{file.shape[0]}, {file.shape[1]}] {file.dtype} table, not the "
                             f"cached [{x.shape[0]}, {x.shape[1]}] {x.dtype} one")
        self.x = x
        self.file = file
        self.dtype = x.dtype if dtype is None else dtype
        n = x.shape[0]
        capacity = min(int(capacity), n)
        self.capacity = capacity
        self.hits = self.misses = 0
        if int(stage_bytes) < 0 or (stage_bytes and file is None):
            raise ValueError(f"a superbatch's stage_bytes must be >= 0, and positive only with a file to read, got "
                             f"{stage_bytes}")
        self.stage_bytes = int(stage_bytes)
        self.staged: tuple[Staged, ...] = ()
        self._staging = threading.Lock()  # stage() and unstage() run on different threads
        self.staged_hits = self.superbatches = 0
        self.on_stage: Callable[..., None] | None = None
        if capacity == 0:
            self.ids = torch.zeros(0, dtype=torch.int64)
            self.slot = None
            self.rows = torch.zeros(0, x.shape[1], dtype=self.dtype)
            return
        if degrees is None or degrees.shape != (n,):
            raise ValueError(f"a feature cache of {capacity} rows needs the [{n}] degrees that rank the rows")
        if reads is not None and reads.shape != (n,):
            raise ValueError(f"the read counts that rank the cache's rows must be [{n}], got {tuple(reads.shape)}")
        order = hotness_order(degrees) if reads is None else access_order(reads, degrees)
        self.ids = order[:capacity].clone()
        self.slot = torch.full((n,), -1, dtype=torch.int32 if n < 2**31 else torch.int64)
        self.slot[self.ids] = torch.arange(capacity, dtype=self.slot.dtype)
        self.rows = torch.empty(capacity, x.shape[1], dtype=self.dtype)
        order = torch.argsort(self.ids)  # fill in ascending id order: sequential reads of the file
        for start in range(0, capacity, FILL_ROWS):
            pos = order[start: start + FILL_ROWS]
            self.rows[pos] = self.x.index_select(0, self.ids[pos]).to(self.dtype)

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds in memory (its rows and its ``[N]`` slot map)."""
        slot = 0 if self.slot is None else self.slot.numel() * self.slot.element_size()
        return self.rows.numel() * self.rows.element_size() + slot

    @property
    def file_row_bytes(self) -> int:
        """Bytes of one row as the file (or ``x``) stores it."""
        return self.x.shape[1] * self.x.element_size()

    def missed(self, ids: torch.Tensor) -> torch.Tensor:
        """The distinct ids among ``ids`` the cache does not hold, ascending."""
        ids = torch.unique(torch.as_tensor(ids, dtype=torch.int64).cpu())
        return ids if self.slot is None else ids[self.slot[ids] < 0]

    def stage(self, ids: torch.Tensor) -> Staged:
        """Read the rows of the ascending distinct ``ids`` (a superbatch's misses) from the file into memory and
        return them: :meth:`gather` given the buffer takes its misses among them from there. The buffer stays in
        :attr:`staged` until :meth:`unstage`."""
        if self.file is None:
            raise ValueError("rows can be staged only by a cache that reads its misses from a file")
        ids = torch.as_tensor(ids, dtype=torch.int64)
        staged = Staged(ids, self.file.read(ids))
        with self._staging:
            self.staged += (staged,)
            self.superbatches += 1
            self._report()
        return staged

    def unstage(self, staged: Staged) -> None:
        """Free a buffer :meth:`stage` returned."""
        with self._staging:
            self.staged = tuple(s for s in self.staged if s is not staged)
            self._report()

    def _report(self) -> None:
        if self.on_stage is not None:
            self.on_stage(*(t for s in self.staged for t in (s.ids, s.rows)))

    def gather(self, ids: torch.Tensor, staged: Staged | None = None) -> torch.Tensor:
        """``x[ids]`` in ``dtype``, ``[len(ids), F]`` (a new tensor): cached rows from memory, the others from
        ``staged`` where it holds them, else read from the file (or from ``x`` in ascending id order)."""
        ids = torch.as_tensor(ids, dtype=torch.int64).cpu()
        if self.slot is None:
            self.misses += ids.numel()
            return self._read(ids, staged)
        slot = self.slot[ids].long()
        hit = slot >= 0
        out = torch.empty(ids.numel(), self.num_features, dtype=self.dtype)
        hit_pos = torch.nonzero(hit).flatten()
        miss_pos = torch.nonzero(~hit).flatten()
        out[hit_pos] = self.rows.index_select(0, slot[hit_pos])
        if miss_pos.numel():
            out[miss_pos] = self._read(ids[miss_pos], staged)
        self.hits += hit_pos.numel()
        self.misses += miss_pos.numel()
        return out

    def _read(self, ids: torch.Tensor, staged: Staged | None) -> torch.Tensor:
        """Rows ``ids`` of ``x`` in ``dtype``: from ``staged`` where it holds them, else from ``file`` when there is
        one, else from ``x`` in ascending id order."""
        if self.file is not None:
            if staged is None:
                return self.file.read(ids).to(self.dtype)
            pos = torch.searchsorted(staged.ids, ids).clamp_(max=max(staged.ids.numel() - 1, 0))
            found = staged.ids[pos] == ids if staged.ids.numel() else torch.zeros_like(ids, dtype=torch.bool)
            out = torch.empty(ids.numel(), self.num_features, dtype=self.dtype)
            out[found] = staged.rows.index_select(0, pos[found]).to(self.dtype)
            rest = torch.nonzero(~found).flatten()
            if rest.numel():
                out[rest] = self.file.read(ids[rest]).to(self.dtype)
            self.staged_hits += int(found.sum())
            return out
        if ids.numel() < 2:
            return self.x.index_select(0, ids).to(self.dtype)
        sorted_ids, order = torch.sort(ids)
        rows = self.x.index_select(0, sorted_ids).to(self.dtype)
        out = torch.empty_like(rows)
        out[order] = rows
        return out


def prefetched(produce: Callable[[int], T], count: int) -> Iterator[T]:
    """``produce(0), ..., produce(count - 1)`` in order, ``produce(i + 1)`` running in a background thread while
    the caller works on ``produce(i)`` (one item ahead; an error raised by ``produce`` is raised here)."""
    if count <= 0:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphscale-prefetch") as pool:
        future = pool.submit(produce, 0)
        for i in range(count):
            item = future.result()
            if i + 1 < count:
                future = pool.submit(produce, i + 1)
            yield item

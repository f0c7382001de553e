"""Superbatches: the missed feature rows of several mini-batches read from disk in one ascending sweep.

A mini-batch worker whose feature table is read from its file (:class:`~graphscale.data.row_cache.HotRowCache` with
a :class:`~graphscale.data.row_file.RowFile`) would read each batch's misses on their own: tens of thousands of
random reads a batch, each costing the kernel about as much CPU as a 512 KiB sequential read. :func:`superbatched`
samples the batches ahead instead, in groups (**superbatches**): it samples batch after batch (the same batches and
sampling keys as one at a time, so the run is unchanged bit for bit) while the group's distinct missed rows and the
sampled batches it holds fit the cache's ``stage_bytes`` (:func:`superbatch_bytes`: :data:`SUPERBATCH_SHARE` of
``--host-memory`` over :data:`SUPERBATCH_BUFFERS`), then reads the group's distinct misses at once
(:meth:`~graphscale.data.row_cache.HotRowCache.stage`): sorted, they are dense in the file, and the reader's spans
turn them into large sequential reads of the file in ascending order, skipping little. Each batch of the group then
gathers its rows from the cache and the staged buffer; the buffer is freed as the group's last batch is gathered.

**Double buffering** (:data:`SUPERBATCH_BUFFERS` ``= 2``). The next group is sampled and its misses read in a
background thread (the **sweep thread**) while the current group's batches are gathered and trained, so training
waits on a sweep only where the sweep takes longer than the group's training. Two groups are held at most (the one
in training and the one read ahead), each within ``stage_bytes`` (half the share), plus the first batch of the
group after them (sampled to learn that it does not fit): the same :data:`SUPERBATCH_SHARE` of the budget as one
group of twice the bytes. With one buffer (the default) the sweep thread samples and reads the next group once the
current group's last batch has gathered its rows, while that batch trains. Either way the groups, the order of the
sampling calls and each batch's rows are the same for the same ``stage_bytes``.

Why one buffer by default: at 3M vertices with a 20% cache (``docs/large-graphs.md``) halving the groups to hold
two made each sweep sparser in the file (twice the sweeps, 3.3x the spans: 192,317 against 58,053, 1.8x the
kernel's CPU time) and the epoch 1.4-1.7x slower on a machine whose cores were busy: the reads are the kernel's CPU
time on the same cores, which overlapping does not remove. Two buffers of the full share each read what one does
and gained nothing consistent (0.85-1.52x the one-buffer epoch), with the peak over the budget.

A group takes at least one batch: a batch whose misses alone exceed ``stage_bytes`` is a group of its own (its
buffer is then the one a batch read on its own would take). The gathers run in the prefetch thread
(:func:`~graphscale.data.row_cache.prefetched`), one item ahead of the training loop, as a batch's gather does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

from graphscale.data.row_cache import HotRowCache, prefetched

#: share of the ``--host-memory`` budget the superbatches held at once may take (their staged rows and their
#: sampled batches), beside the hot-row cache's :data:`~graphscale.data.row_cache.FEATURE_CACHE_SHARE` (the rest:
#: the worker's own arrays, the batch in training, and the page cache the sampler's reads of the mapped CSR need)
SUPERBATCH_SHARE = 0.125
#: superbatches held at once: ``1``, or ``2`` (the one in training and the next one, read ahead while it trains;
#: each then takes half the share; module docstring)
SUPERBATCH_BUFFERS = 1

S = TypeVar("S")


def superbatch_bytes(budget: int, share: float = SUPERBATCH_SHARE) -> int:
    """Bytes one superbatch may hold (a cache's ``stage_bytes``): ``share`` of ``budget`` bytes over
    :data:`SUPERBATCH_BUFFERS`."""
    if SUPERBATCH_BUFFERS not in (1, 2):
        raise ValueError(f"SUPERBATCH_BUFFERS must be 1 or 2, got {SUPERBATCH_BUFFERS}")
    return int(budget * share) // SUPERBATCH_BUFFERS


def held_bytes(obj, _seen: set[int] | None = None) -> int:
    """Bytes of the tensors and arrays ``obj`` holds (through tuples, lists, dicts, dataclasses and objects'
    attributes), each counted once."""
    seen = set() if _seen is None else _seen
    if obj is None or isinstance(obj, (int, float, bool, str)) or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(held_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(held_bytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj):
        return sum(held_bytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    fields = getattr(obj, "__dict__", None)
    return sum(held_bytes(v, seen) for v in fields.values()) if isinstance(fields, dict) else 0


def superbatched(sample: Callable[[int], tuple[S, torch.Tensor | None]],
                 gather: Callable[[torch.Tensor], torch.Tensor] | None, count: int,
                 cache: HotRowCache | None = None) -> Iterator[tuple[S, torch.Tensor | None]]:
    """``(state_i, gather(ids_i))`` for ``i`` in ``range(count)``, where ``sample(i)`` is ``(state_i, ids_i)``,
    produced one item ahead in a background thread (``None`` rows where ``ids_i`` or ``gather`` is ``None``).

    With a ``cache`` whose ``stage_bytes`` is positive (it reads its misses from a file; ``gather`` must then be
    its :meth:`~graphscale.data.row_cache.HotRowCache.gather`), the batches are sampled and read in superbatches,
    in the sweep thread (the next one while the current one trains with :data:`SUPERBATCH_BUFFERS` ``= 2``; module
    docstring); otherwise one at a time."""
    if cache is None or cache.stage_bytes <= 0 or gather is None:
        def one(i: int):
            state, ids = sample(i)
            return state, None if ids is None or gather is None else gather(ids)

        return prefetched(one, count)
    items = _superbatches(sample, cache, count)
    return prefetched(lambda i: next(items), count)


def _groups(sample, cache: HotRowCache, count: int):
    """The superbatches, in order: each a list of ``sample(i)`` items and their distinct misses, ascending."""
    pending, i = None, 0
    while i < count:
        group, missed, held = [], torch.zeros(0, dtype=torch.int64), 0
        while i + len(group) < count:
            item = sample(i + len(group)) if pending is None else pending
            pending = None
            _, ids = item
            union = missed if ids is None else torch.unique(torch.cat([missed, cache.missed(ids)]))
            size = held + held_bytes(item)
            if group and size + union.numel() * cache.file_row_bytes > cache.stage_bytes:
                pending = item  # the next group's first batch
                break
            group.append(item)
            missed, held = union, size
        i += len(group)
        yield group, missed


def _superbatches(sample, cache: HotRowCache, count: int):
    groups = _groups(sample, cache, count)
    double = SUPERBATCH_BUFFERS == 2

    def read_next():  # in the sweep thread: the next group sampled, its misses read
        group = next(groups, None)
        return None if group is None else (group[0], cache.stage(group[1]))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphscale-sweep") as sweep:
        ahead = sweep.submit(read_next)
        try:
            while (current := ahead.result()) is not None:
                if double:
                    ahead = sweep.submit(read_next)  # read while this group trains
                items, staged = current
                current = None
                for k, (state, ids) in enumerate(items):
                    rows = None if ids is None else cache.gather(ids, staged)
                    if k == len(items) - 1:
                        cache.unstage(staged)
                        staged = None  # freed before the next group is read
                        if not double:
                            ahead = None  # the finished read's future held the buffer too
                            ahead = sweep.submit(read_next)  # read while this group's last batch trains
                    items[k] = None  # the consumer holds what it trains on
                    yield state, rows
        finally:  # stopped early: the buffers held and read ahead are freed
            if not ahead.cancel():
                ahead.exception()  # waits for a read in flight
            for left in cache.staged:  # this generator's: the cache stages for one superbatched() at a time
                cache.unstage(left)

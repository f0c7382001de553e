"""Output buffers the CPU kernels keep across calls, handed out again only once nothing else holds them.

Why. A full-graph epoch allocates the same ``[N, d]`` outputs every epoch. glibc serves each with a fresh
``mmap`` (above its mmap threshold, at most 32 MiB) and unmaps it on free, so the kernel faults in and zeroes
gigabytes of pages per epoch: on the default install that was about half of an epoch.
:func:`empty` hands a kernel an output whose pages are already resident.

Safety. The pool keeps the *storage* of every buffer it handed out and hands it out again only when its use count
is 1, i.e. no tensor (an output still in use, a tensor autograd saved for the backward pass, a view, a numpy array
over it, a strategy's cache) refers to it any more; a new tensor object is made each time (its own version counter,
no autograd history). So a reused buffer never aliases a live tensor, and results are bit-identical with and
without the pool (tested): a kernel writes every element of its output.

Bounds. Only buffers of at least :data:`MIN_BYTES` are pooled (smaller ones come from malloc's heap without page
faults). A request takes the smallest free buffer of its byte size up to :data:`FIT` times it (a view of its
first bytes), so shapes that vary a lot between calls (mini-batches) miss: on a miss, idle
buffers that no call has taken for :data:`IDLE_CALLS` calls are dropped, and at most :data:`MAX_IDLE` idle ones
are kept, so memory held idle stays bounded where nothing recurs, while a full-graph epoch, whose sizes recur
every epoch, reallocates nothing after the first.

Switch: on by default; :func:`set_enabled` or the environment variable ``GRAPHSCALE_BUFFER_POOL=0`` turns it off. The
large outputs it serves on a full-graph epoch are the aggregations, :func:`~graphscale.nn.layers.linear_relu`'s
output, :func:`~graphscale.nn.layers.linear_relu_linear`'s dropped hidden rows and
:meth:`~graphscale.nn.dropout.RowKeep.linear`'s output and input gradient (where a layer's input is not fused that
way). Measured on a 1M-vertex GCN (hidden 128, one thread, glibc's malloc): page faults per epoch 393k -> 6k, epoch
4.2-4.6 s -> 3.5-3.6 s, RSS peak above the data 1,581 -> 1,601 MiB (a retaining malloc configuration, ``--allocator
retain``, reached 3.3-3.4 s but 1,953 MiB: its heap fragments; both before the fused dense products of
:func:`~graphscale.nn.layers.linear_relu_linear`, which took the peak to about 1,145 MiB). Its idle buffers are
bounded (above) and the OS-measured memory tests of every strategy hold with it (it was off by default while it raised
a graph-parallel worker's anonymous peak to 1.24x its design figure, before the fused dropout and ReLU removed most of
the per-epoch outputs).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from graphscale.nn.backend import kernel_setting

#: Buffers smaller than this are not pooled.
MIN_BYTES = 1 << 20
#: A free buffer serves a request of at least ``1 / FIT`` of its size (a partition's inner-row and inner-plus-halo
#: outputs share buffers instead of each keeping its own).
FIT = 1.25
#: On a miss, an idle buffer not handed out for this many calls is dropped.
IDLE_CALLS = 64
#: On a miss, at most this many idle buffers are kept (the most recently used).
MAX_IDLE = 8

_lock = threading.Lock()
_entries: list[list] = []  # [storage, nbytes, last call]
_calls = 0
_enabled = os.environ.get("GRAPHSCALE_BUFFER_POOL", "1") != "0"


def _use_count(storage: torch.UntypedStorage) -> int:
    return torch._C._storage_Use_Count(storage._cdata)


def empty(shape: tuple[int, ...] | list[int], dtype: torch.dtype, device: torch.device | None = None) -> Tensor:
    """An uninitialised contiguous tensor, on CPU from the pool when one of the same byte size is free (on any
    other ``device``, or on the device kernel backend (:mod:`graphscale.nn.backend`), a plain ``torch.empty``).

    The caller must write every element (as ``torch.empty``'s callers do).
    """
    global _calls
    shape = tuple(int(s) for s in shape)
    if (device is not None and torch.device(device).type != "cpu") or kernel_setting() == "torch":
        return torch.empty(shape, dtype=dtype, device=device)  # the device allocator caches; the pool is the CPU's
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    if not _enabled or nbytes < MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    with _lock:
        _calls += 1
        fits = [e for e in _entries if nbytes <= e[1] <= nbytes * FIT and _use_count(e[0]) == 1]
        if fits:
            entry = min(fits, key=lambda e: e[1])  # the best fit: an exact size first
            entry[2] = _calls
            storage = entry[0]
        else:
            _evict()
            storage = torch.empty(nbytes, dtype=torch.uint8).untyped_storage()
            _entries.append([storage, nbytes, _calls])
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def _evict() -> None:
    idle = [e for e in _entries if _use_count(e[0]) == 1]
    idle.sort(key=lambda e: e[2], reverse=True)
    drop = {id(e) for i, e in enumerate(idle) if i >= MAX_IDLE or _calls - e[2] > IDLE_CALLS}
    _entries[:] = [e for e in _entries if id(e) not in drop]


def held_bytes() -> tuple[int, int]:
    """``(bytes in use, bytes idle)`` of the pooled buffers."""
    with _lock:
        busy = sum(e[1] for e in _entries if _use_count(e[0]) > 1)
        return busy, sum(e[1] for e in _entries) - busy


def clear() -> None:
    """Forget every pooled buffer (idle ones are freed; those in use live on with their tensors)."""
    with _lock:
        _entries.clear()


def enabled() -> bool:
    """Whether this process's kernels take their outputs from the pool."""
    return _enabled


def set_enabled(enabled: bool) -> bool:
    """Turn the pool on or off for this process; returns the previous setting. Off also clears it."""
    global _enabled
    previous, _enabled = _enabled, bool(enabled)
    if not enabled:
        clear()
    return previous


@contextmanager
def disabled() -> Iterator[None]:
    """The pool off inside the block (tests compare results with and without it)."""
    previous = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)

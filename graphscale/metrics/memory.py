"""Peak memory per worker.

On CUDA the allocator knows: :attr:`MemoryTracker.peak` is
``torch.cuda.max_memory_allocated`` since the start of the current
:meth:`MemoryTracker.epoch`. On CPU, where the process's RSS mixes the model
with the interpreter, the library and the allocator's caching, the tracker
keeps a ledger of

* tensors a strategy declares resident (:meth:`MemoryTracker.track`: the
  partition's features, its block, parameters, communication buffers), and
* tensors autograd saves for the backward pass, counted by a
  ``torch.autograd.graph.saved_tensors_hooks`` pack hook and released when
  autograd frees them (after ``backward`` or when the graph is dropped).

Both are counted by *storage*: a storage shared by several saved tensors, or by
a saved tensor and a tracked one, counts once, with its full size. The running
maximum of the total is :attr:`MemoryTracker.modelled_peak` (the CPU
:attr:`~MemoryTracker.peak`). Temporaries that autograd does not keep are not
counted. :func:`rss_bytes` / :func:`peak_rss_bytes` give the process's
resident set for a cross-check.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def rss_bytes() -> int:
    """Current resident set size of this process in bytes (``/proc/self/statm``; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - non-Linux
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (``getrusage``; KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _storage_key(t: torch.Tensor) -> tuple[str, int, int]:
    storage = t.untyped_storage()
    return (str(t.device), storage.data_ptr(), storage.nbytes())


class _Packed:
    """What the pack hook hands autograd: the tensor plus a reference that is released on ``__del__``."""

    __slots__ = ("key", "tensor", "tracker")

    def __init__(self, tensor: torch.Tensor, key: tuple, tracker: MemoryTracker) -> None:
        self.tensor, self.key, self.tracker = tensor, key, tracker

    def __del__(self) -> None:
        self.tracker._release(self.key)


class MemoryTracker:
    """Peak bytes held by one worker, per epoch.

    Usage::

        tracker = MemoryTracker(env.device)
        tracker.track("features", x_local)
        with tracker.epoch():
            loss = forward(); loss.backward()
        stats.peak_memory = tracker.peak

    Args:
        device: the worker's device, or its DistEnv (its ``device`` is used); CUDA devices report the
            allocator's peak.
    """

    def __init__(self, device: torch.device | str | object = "cpu") -> None:
        self.device = torch.device(getattr(device, "device", device))
        self._lock = threading.Lock()
        self._refs: dict[tuple, int] = {}
        self._resident: dict[str, list[tuple]] = {}
        self._current = 0
        self._peak = 0

    # ----------------------------------------------------------- accounting
    def _acquire(self, key: tuple) -> None:
        with self._lock:
            count = self._refs.get(key, 0)
            self._refs[key] = count + 1
            if count == 0:
                self._current += key[2]
                self._peak = max(self._peak, self._current)

    def _release(self, key: tuple) -> None:
        with self._lock:
            count = self._refs.get(key, 0)
            if count <= 1:
                if count == 1:
                    del self._refs[key]
                    self._current -= key[2]
            else:
                self._refs[key] = count - 1

    def track(self, name: str, *tensors: torch.Tensor | None) -> None:
        """Declare ``tensors`` resident under ``name`` (replacing what ``name`` held before)."""
        self.untrack(name)
        keys = [_storage_key(t) for t in tensors if t is not None]
        self._resident[name] = keys
        for key in keys:
            self._acquire(key)

    def untrack(self, name: str) -> None:
        """Forget the tensors registered under ``name`` (no error if none)."""
        for key in self._resident.pop(name, []):
            self._release(key)

    def track_module(self, name: str, module: torch.nn.Module) -> None:
        """Declare a module's parameters and buffers resident (gradients are not included)."""
        self.track(name, *module.parameters(), *module.buffers())

    @property
    def current(self) -> int:
        """Bytes counted right now (resident + saved for backward)."""
        return self._current

    @property
    def modelled_peak(self) -> int:
        """Running maximum of :attr:`current` since the last :meth:`reset_peak`."""
        return self._peak

    @property
    def peak(self) -> int:
        """Peak bytes of the current / last epoch: the CUDA allocator's on GPUs, else :attr:`modelled_peak`."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return self._peak

    def reset_peak(self) -> None:
        """Restart the peak from what is held now (and the CUDA allocator's peak statistics)."""
        with self._lock:
            self._peak = self._current
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    # -------------------------------------------------------------- hooks
    def _pack(self, tensor: torch.Tensor) -> _Packed:
        key = _storage_key(tensor)
        self._acquire(key)
        return _Packed(tensor, key, self)

    @staticmethod
    def _unpack(packed: _Packed) -> torch.Tensor:
        return packed.tensor

    @contextmanager
    def saved_tensors(self) -> Iterator[MemoryTracker]:
        """Count the tensors autograd saves inside this block (until autograd frees them)."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield self

    @contextmanager
    def epoch(self) -> Iterator[MemoryTracker]:
        """Reset the peak, then count saved tensors for the duration of the block."""
        self.reset_peak()
        with self.saved_tensors():
            yield self

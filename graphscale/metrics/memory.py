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

What the operating system confirms (Linux; :func:`os_memory`,
:class:`OSMemorySampler`, :class:`EpochMemory`): the process's resident set
split into

* **anonymous** memory (``RssAnon``: heap, ``malloc`` / tensor storage, stacks,
  private copies), which is where a worker's data lives unless it is mapped
  from a file, and
* **file-backed** memory (``RssFile + RssShmem``: mapped files such as
  memory-mapped ``.npy`` arrays and shared libraries, plus shared memory, which
  the kernel keeps as tmpfs files; the shared part is also reported on its own
  as ``shmem``). A page shared by several workers counts in each worker's RSS.

``anon + file == VmRSS``. The kernel keeps only the peak of the total
(``VmHWM``); :class:`EpochMemory` resets it at the start of every epoch
(``/proc/self/clear_refs`` ``5``; where that is refused the figure is the
process-lifetime peak and ``peak_rss_since`` says ``"process start"``). The
peaks of the anonymous and file-backed parts are *sampled*: a daemon thread
reads ``/proc/self/status`` every few milliseconds (about 7 us a read) and
keeps the maxima, so a spike shorter than the interval (or one during which
the GIL is held for longer) can be missed; ``peak_rss_sampled`` next to the
exact ``peak_rss`` shows how close the sampling came (it can also exceed it
by the kernel's per-CPU RSS-counter slack, well under a MiB). On other systems only
the ``getrusage`` peak is known and the split is ``None``.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from typing_extensions import Self


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


# ----------------------------------------------------------------------------- what the OS confirms
_STATUS = "/proc/self/status"
_STATUS_FIELDS = re.compile(rb"^(VmHWM|VmRSS|RssAnon|RssFile|RssShmem):\s+(\d+) kB", re.MULTILINE)
_KIB_LINE = re.compile(r"^(\w+):\s+(\d+) kB$", re.MULTILINE)


def _parse_status(text: bytes) -> dict[str, int]:
    """The memory fields of ``/proc/self/status`` in bytes."""
    return {k.decode(): int(v) * 1024 for k, v in _STATUS_FIELDS.findall(text)}


@dataclass
class OSMemory:
    """One reading of this process's memory from the OS, in bytes.

    Attributes:
        rss: resident set now (``VmRSS``; on non-Linux the ``getrusage`` peak).
        peak_rss: peak resident set (``VmHWM``) since process start or the last
            :func:`reset_peak_rss`; on non-Linux ``getrusage``'s process-lifetime peak.
        anon: anonymous resident memory (``RssAnon``); ``None`` where unknown.
        file: file-backed resident memory including shared memory (``RssFile + RssShmem``); ``None`` where unknown.
        shmem: the shared-memory part of ``file`` (``RssShmem``); ``None`` where unknown.
        smaps: ``/proc/self/smaps_rollup`` in bytes (``Rss``, ``Pss``, ``Anonymous``, ``Private_Dirty``, ...)
            when asked for and available, else ``None``.
    """

    rss: int
    peak_rss: int
    anon: int | None = None
    file: int | None = None
    shmem: int | None = None
    smaps: dict[str, int] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def smaps_rollup() -> dict[str, int] | None:
    """``/proc/self/smaps_rollup`` as ``{field: bytes}`` (``None`` where the kernel has no such file)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    return {k: int(v) * 1024 for k, v in _KIB_LINE.findall(text)}


def os_memory(smaps: bool = False) -> OSMemory:
    """This process's memory as the OS reports it (``/proc/self/status``; ``getrusage`` elsewhere).

    Args:
        smaps: also read ``/proc/self/smaps_rollup`` (walks every mapping: ~0.3 ms, so not for sampling).
    """
    try:
        with open(_STATUS, "rb") as f:
            fields = _parse_status(f.read())
    except OSError:  # pragma: no cover - non-Linux
        fields = {}
    if "VmRSS" not in fields:  # pragma: no cover - non-Linux
        peak = peak_rss_bytes()
        return OSMemory(rss=peak, peak_rss=peak)
    anon = fields.get("RssAnon")
    shmem = fields.get("RssShmem")
    file = fields["RssFile"] + (shmem or 0) if "RssFile" in fields else None
    return OSMemory(rss=fields["VmRSS"], peak_rss=fields.get("VmHWM", fields["VmRSS"]), anon=anon, file=file,
                    shmem=shmem, smaps=smaps_rollup() if smaps else None)


def reset_peak_rss() -> bool:
    """Reset the kernel's peak resident set (``VmHWM``) to the current RSS; ``False`` where that is refused.

    Writes ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0). It does not touch ``getrusage``'s
    ``ru_maxrss`` in every kernel, so read the reset peak from ``VmHWM`` (:func:`os_memory`).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class SampledPeaks:
    """Maxima of ``/proc/self/status`` fields over a sampled interval, in bytes (``None`` where unknown).

    Attributes:
        rss: highest ``VmRSS`` seen (a lower bound of the true peak; compare ``VmHWM``).
        anon: highest ``RssAnon`` seen.
        file: highest ``RssFile + RssShmem`` seen.
        shmem: highest ``RssShmem`` seen.
        samples: readings taken (at least two: at start and at stop).
        seconds: length of the interval.
    """

    rss: int | None = None
    anon: int | None = None
    file: int | None = None
    shmem: int | None = None
    samples: int = 0
    seconds: float = 0.0


class OSMemorySampler:
    """Samples this process's anonymous / file-backed resident memory in a background thread.

    The kernel records only the peak of the total resident set; the peaks of its parts are
    found by reading ``/proc/self/status`` every ``interval`` seconds between :meth:`start` and
    :meth:`stop` (and once at each end). Spikes shorter than the interval may be missed, so
    the peaks are lower bounds. :meth:`lap` closes a sub-interval (e.g. the training half of an
    epoch) without stopping. On systems without ``/proc`` the sampler records nothing and
    every peak is ``None``.

    Usage::

        sampler = OSMemorySampler()
        with sampler:
            work()
        print(sampler.peaks.anon)

    Args:
        interval: seconds between readings (default 5 ms).
    """

    def __init__(self, interval: float = 0.005) -> None:
        if interval <= 0:
            raise ValueError(f"OSMemorySampler: interval must be > 0, got {interval}")
        self.interval = interval
        self.peaks = SampledPeaks()
        self._lap = SampledPeaks()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_time = self._lap_time = 0.0

    @staticmethod
    def _update(p: SampledPeaks, values: dict[str, int | None]) -> None:
        p.samples += 1
        for name, value in values.items():
            if value is not None:
                old = getattr(p, name)
                setattr(p, name, value if old is None else max(old, value))

    def _sample(self) -> None:
        try:
            fields = _parse_status(os.pread(self._fd, 8192, 0))
        except OSError:  # pragma: no cover - /proc vanished
            return
        values = {"rss": fields.get("VmRSS"), "anon": fields.get("RssAnon"), "shmem": fields.get("RssShmem"),
                  "file": fields["RssFile"] + fields.get("RssShmem", 0) if "RssFile" in fields else None}
        with self._lock:
            self._update(self.peaks, values)
            self._update(self._lap, values)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        """Start a new interval (its peaks start from the current reading)."""
        if self._thread is not None:
            raise RuntimeError("OSMemorySampler.start: already running")
        self.peaks, self._lap = SampledPeaks(), SampledPeaks()
        self._start_time = self._lap_time = time.perf_counter()
        try:
            self._fd = os.open(_STATUS, os.O_RDONLY)
        except OSError:  # pragma: no cover - non-Linux
            self._fd = None
            return
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="graphscale-os-memory", daemon=True)
        self._thread.start()

    def lap(self) -> SampledPeaks:
        """Close the current sub-interval with a reading now: its maxima since :meth:`start` or the last lap.

        The next sub-interval starts from this reading; :attr:`peaks` keeps covering the whole interval.
        """
        if self._fd is not None:
            self._sample()
        with self._lock:
            lap, self._lap = self._lap, SampledPeaks()
        now = time.perf_counter()
        lap.seconds, self._lap_time = now - self._lap_time, now
        if self._fd is not None:
            self._sample()  # the new sub-interval starts from the current reading
        return lap

    def stop(self) -> SampledPeaks:
        """End the interval with one last reading; returns (and keeps in :attr:`peaks`) its maxima."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._fd is not None:
            self._sample()
            os.close(self._fd)
            self._fd = None
        self.peaks.seconds = time.perf_counter() - self._start_time
        return self.peaks

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class EpochMemory:
    """Per-epoch OS memory of one worker: what the trainer records as ``os_memory`` for every strategy.

    Usage::

        memory = EpochMemory(baseline=os_memory())   # read at worker start, before data is loaded
        with memory.measure() as record:
            strategy.train_epoch(epoch)
            memory.end_training()
            strategy.evaluate()
        history[-1]["os_memory"] = record

    The record (bytes; ``None`` where the OS does not say):

    * ``peak_rss``: the kernel's peak resident set (``VmHWM``) over the block, exact;
      ``peak_rss_since`` is ``"epoch"`` when the peak could be reset at the block's start,
      else ``"process start"`` (the process-lifetime peak);
    * ``peak_anon``, ``peak_file``, ``peak_shmem``, ``peak_rss_sampled``: *sampled* maxima of
      ``RssAnon``, ``RssFile + RssShmem`` (file-backed including shared memory), ``RssShmem``
      and ``VmRSS`` (see :class:`OSMemorySampler`); ``samples`` readings were taken;
    * ``train_peak_anon``, ``train_peak_file``: the same sampled maxima up to :meth:`end_training`
      (the training step alone, which is what the tracked ``peak_memory`` covers); ``None`` if it
      was not called;
    * ``baseline_anon``, ``baseline_rss``: the process's anonymous and total resident set at
      ``baseline_at``: ``"worker start"`` when a baseline reading was passed in (the interpreter
      and the torch runtime, before any data), else ``"trainer start"`` (read when this object
      was made, after the strategy's setup: data included). ``peak_anon - baseline_anon`` is
      then what the worker added on top of that.

    Args:
        baseline: an :func:`os_memory` reading taken at worker start, before data is loaded.
        interval: sampling interval in seconds.
    """

    def __init__(self, baseline: OSMemory | None = None, interval: float = 0.005) -> None:
        self.baseline_at = "worker start" if baseline is not None else "trainer start"
        self.baseline = baseline if baseline is not None else os_memory()
        self.sampler = OSMemorySampler(interval)
        self._train: SampledPeaks | None = None

    def end_training(self) -> None:
        """Mark the end of the training step inside :meth:`measure` (evaluation follows)."""
        self._train = self.sampler.lap()

    @contextmanager
    def measure(self) -> Iterator[dict]:
        """Reset the kernel's peak, sample during the block; the yielded dict is filled in on exit."""
        record: dict = {}
        self._train = None
        reset = reset_peak_rss()
        self.sampler.start()
        try:
            yield record
        finally:
            peaks = self.sampler.stop()
            now = os_memory()
            train = self._train or SampledPeaks()
            record.update({
                "peak_rss": now.peak_rss, "peak_rss_since": "epoch" if reset else "process start",
                "peak_anon": peaks.anon, "peak_file": peaks.file, "peak_shmem": peaks.shmem,
                "peak_rss_sampled": peaks.rss, "samples": peaks.samples,
                "train_peak_anon": train.anon, "train_peak_file": train.file,
                "baseline_anon": self.baseline.anon, "baseline_rss": self.baseline.rss,
                "baseline_at": self.baseline_at,
            })


def max_os_memory(records: list[dict | None]) -> dict | None:
    """Field-wise maximum of one worker's per-epoch ``os_memory`` records (what a report's ``final`` shows).

    Numbers take their maximum over the records that have one (``None`` only where none has); labels
    (``peak_rss_since``, ``baseline_at``) are kept from the first record. Records that are ``None`` (epochs
    without a measurement) are skipped; ``None`` if all are.
    """
    out: dict = {}
    for rec in records:
        for key, value in (rec or {}).items():
            old = out.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = value if old is None else max(old, value)
            elif key not in out:
                out[key] = value
    return out or None


#: the :attr:`MemoryTracker.peak_breakdown` category of autograd's saved tensors
SAVED = "saved for backward"


def _storage_key(t: torch.Tensor) -> tuple[str, int, int]:
    if t.layout != torch.strided:  # a sparse matrix autograd saved (torch.sparse.mm): its values; the indices are
        t = t._values() if t.layout == torch.sparse_coo else t.values()  # the block's topology, tracked as such
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
        self._category_of: dict[tuple, str] = {}  # storage -> the category of its first holder
        self._by_category: dict[str, int] = {}
        self._at_peak: dict[str, int] = {}

    # ----------------------------------------------------------- accounting
    def _acquire(self, key: tuple, category: str) -> None:
        with self._lock:
            count = self._refs.get(key, 0)
            self._refs[key] = count + 1
            if count == 0:
                self._current += key[2]
                self._category_of[key] = category
                self._by_category[category] = self._by_category.get(category, 0) + key[2]
                if self._current > self._peak:
                    self._peak = self._current
                    self._at_peak = dict(self._by_category)

    def _release(self, key: tuple) -> None:
        with self._lock:
            count = self._refs.get(key, 0)
            if count <= 1:
                if count == 1:
                    del self._refs[key]
                    self._current -= key[2]
                    category = self._category_of.pop(key)
                    self._by_category[category] -= key[2]
            else:
                self._refs[key] = count - 1

    def track(self, name: str, *tensors: torch.Tensor | None, category: str | None = None) -> None:
        """Declare ``tensors`` resident under ``name`` (replacing what ``name`` held before), counted in
        ``category`` (default ``name``) by :attr:`peak_breakdown`."""
        self.untrack(name)
        keys = [_storage_key(t) for t in tensors if t is not None]
        self._resident[name] = keys
        for key in keys:
            self._acquire(key, category or name)

    def untrack(self, name: str) -> None:
        """Forget the tensors registered under ``name`` (no error if none)."""
        for key in self._resident.pop(name, []):
            self._release(key)

    def track_module(self, name: str, module: torch.nn.Module, category: str | None = None) -> None:
        """Declare a module's parameters and buffers resident (gradients are not included)."""
        self.track(name, *module.parameters(), *module.buffers(), category=category)

    @property
    def current(self) -> int:
        """Bytes counted right now (resident + saved for backward)."""
        return self._current

    @property
    def modelled_peak(self) -> int:
        """Running maximum of :attr:`current` since the last :meth:`reset_peak`."""
        return self._peak

    @property
    def peak_breakdown(self) -> dict[str, int]:
        """Bytes per category at the moment of :attr:`modelled_peak` (they sum to it): the ``track`` categories,
        and :data:`SAVED` for autograd's saved tensors."""
        return {k: v for k, v in self._at_peak.items() if v}

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
            self._at_peak = dict(self._by_category)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    # -------------------------------------------------------------- hooks
    def _pack(self, tensor: torch.Tensor) -> _Packed:
        key = _storage_key(tensor)
        self._acquire(key, SAVED)
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

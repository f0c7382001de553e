"""The price of a mini-batch worker's host rows: the hot-row cache under ``--host-memory`` and the misses it reads
from disk (``single --minibatch``, ``data-parallel``, ``split-parallel``; :mod:`graphscale.data.row_cache`).

A mini-batch worker on a memory-mapped graph directory keeps ``capacity`` feature rows in its own memory (the
highest out-degree ones; ``single --minibatch`` whose misses go to disk: the ones its replayed first epoch reads
most, ``reads``) (:func:`~graphscale.data.row_cache.cache_capacity` of the budget: at most a quarter of it, none when
the whole table fits that quarter) and reads the others from the mapped file. Its prediction holds:

* **memory**: the cache's rows and its ``[N]`` int32 slot map (the run tracks both as ``host_cache``), plus
  :data:`RESIDENT_BYTES_PER_VERTEX` of every vertex beyond the cache, resident in the worker's own memory (the
  sampler's degree array, the schedule's and loader's id arrays, the labels and masks it reads); the per-batch
  term (the batch's rows and activations) is the strategy's own;
* **hit rate**: the share of the rows the epoch reads from host memory that the cache holds, counted over the rows
  of the replayed epoch's sampled batches (the predictors replay the run's seeded samples; no feature row is read);
* **time**: when the table exceeds the cache's share of the budget the misses are read from the file a
  superbatch at a time (:mod:`graphscale.data.superbatch`): each worker's batches are grouped by the run's rule
  (their distinct missed rows and sampled batches within :func:`~graphscale.data.superbatch.superbatch_bytes` of
  the budget: :data:`~graphscale.data.superbatch.SUPERBATCH_SHARE` over the superbatches the run holds at once;
  the batches' bytes are those of the blocks or splits the predictor samples, a little less than the run
  holds with them, so its groups can be a batch longer), and each group's distinct misses are planned
  into the reader's spans (:func:`~graphscale.data.row_file.plan_spans`): each span priced at
  :data:`DISK_SPAN_READ_S`, its bytes (the rows and the gaps it reads through) at :data:`DISK_READ_BANDWIDTH`,
  added to the epoch (the reads are system time on the same cores, so they are not counted as overlapped with the
  step). A table within the cache's share stays in the page cache: its reads are memory gathers, priced with the
  strategy's host rows.
"""

from __future__ import annotations

import torch

from graphscale.data.handle import HOST_SHARED
from graphscale.data.row_cache import FEATURE_CACHE_SHARE, cache_capacity
from graphscale.data.row_file import plan_spans, span_rows
from graphscale.data.superbatch import superbatch_bytes
from graphscale.metrics.host_memory import resolve_host_memory

#: bytes per vertex a mini-batch worker's resident set holds beyond its hot-row cache (rows and slot map): the
#: measured slope of ``single --minibatch`` from 1M to 20M vertices (18.4 bytes per vertex beyond the cache's rows,
#: of which the cache's slot map is 4; ``docs/large-graphs.md``)
RESIDENT_BYTES_PER_VERTEX = 14.4
#: seconds per span the reader reads from disk (a random read: one row, or rows a few KiB apart): an epoch of 3M
#: vertices whose 673,039 missed rows took 668,000 single-row reads ran 33.1 s and 29.0 s longer than in memory,
#: side by side on the development machine under load (``docs/large-graphs.md``): 43-50 us a read
DISK_SPAN_READ_S = 45e-6
#: bytes per second of the spans' reads: the same epoch read in three superbatches (58,053 spans, 3.10 GB) ran
#: 12.3 s and 11.7 s longer than in memory, of which 2.6 s are its spans at :data:`DISK_SPAN_READ_S`: 320-340 MB/s
#: for the rest (the disk's sequential rate alone is 1.7 GB/s: the rest is the reads' kernel time and the wait)
DISK_READ_BANDWIDTH = 330e6


class HostRowPrice:
    """One run's hot-row cache and the rows its epoch reads (module docstring); one per prediction, the same cache
    for every worker (each holds its own copy)."""

    def __init__(self, data, config, elem: int, graph=None, mapped: bool | None = None, reads=None) -> None:
        """``graph``: the graph whose out-degrees rank the rows (default ``data``'s: ``single --task link`` ranks
        its message-passing graph's); ``mapped``: whether the run reads the rows from the mapped graph directory
        (default: ``data``'s view is host-shared; ``single`` is priced from one whatever view it trains on);
        ``reads``: called, only when the misses go to disk and there is a cache, for the rows' read counts over
        the replayed first epoch that rank the run's cache (as the run's
        :func:`~graphscale.strategies.minibatch_common.host_row_cache` is given them), or ``None``."""
        n = data.num_nodes
        self.row_bytes = data.num_features * elem
        self.mapped = data.view == HOST_SHARED if mapped is None else mapped
        budget = resolve_host_memory(config.host_memory)
        self.capacity = min(cache_capacity(budget, self.row_bytes, n), n) if self.mapped else 0
        #: the table exceeds the cache's share: its misses are read from disk
        self.on_disk = self.mapped and n * self.row_bytes > budget * FEATURE_CACHE_SHARE
        self.resident = int(RESIDENT_BYTES_PER_VERTEX * n) if self.mapped else 0
        self.slot_bytes = 4 * n if self.capacity else 0
        self.cached = torch.zeros(n, dtype=torch.bool)
        if self.capacity:
            from graphscale.data.feature_cache import access_order, hotness_order

            degrees = (graph if graph is not None else data.open_graph()).out_degrees()
            ranked = access_order(reads(), degrees) if reads is not None and self.on_disk else hotness_order(degrees)
            self.cached[ranked[: self.capacity]] = True
        self.reads = self.hits = 0
        self.stage_bytes = superbatch_bytes(budget) if self.on_disk else 0
        self._groups: dict[int, tuple[torch.Tensor, int]] = {}  # per worker: its open superbatch's misses, held bytes
        self._seconds: dict[int, float] = {}

    @property
    def cache_bytes(self) -> int:
        """Bytes one worker's cache holds: its rows and its slot map."""
        return self.capacity * self.row_bytes + self.slot_bytes

    def read(self, ids: torch.Tensor, worker: int = 0, held: int = 0) -> int:
        """Count the host rows ``ids`` one batch of ``worker`` reads (its sampled batch holding ``held`` bytes) and
        add its misses to the worker's superbatch; returns its misses."""
        hits = int(self.cached[ids].sum()) if self.capacity and ids.numel() else 0
        self.reads += ids.numel()
        self.hits += hits
        if self.on_disk:
            missed = torch.unique(ids)
            missed = missed[~self.cached[missed]] if self.capacity else missed
            group, group_held = self._groups.get(worker, (torch.zeros(0, dtype=torch.int64), 0))
            union = torch.unique(torch.cat([group, missed]))
            if group_held and group_held + held + union.numel() * self.row_bytes > self.stage_bytes:
                self._close(worker)  # the batch opens the next superbatch
                union, group_held = missed, 0
            self._groups[worker] = (union, group_held + held)
        return ids.numel() - hits

    def _close(self, worker: int) -> None:
        group, _ = self._groups.pop(worker, (torch.zeros(0, dtype=torch.int64), 0))
        ids = group.numpy()
        starts = plan_spans(ids, self.row_bytes)
        seconds = (starts.size - 1) * DISK_SPAN_READ_S + span_rows(ids, starts) * self.row_bytes / DISK_READ_BANDWIDTH
        self._seconds[worker] = self._seconds.get(worker, 0.0) + seconds

    def disk_seconds(self, worker: int = 0) -> float:
        """Time of ``worker``'s misses read from disk over the epoch (none where the table stays in the page
        cache)."""
        if worker in self._groups:
            self._close(worker)
        return self._seconds.get(worker, 0.0)

    def worker_bytes(self, device: str) -> tuple[int, int]:
        """``(tracked, untracked)`` host bytes of one worker: on CPU the cache is in the tracked figure (the run
        tracks it); on CUDA both are host memory beside the device's."""
        if str(device).startswith("cuda"):
            return 0, self.cache_bytes + self.resident
        return self.cache_bytes, self.resident

    def summary(self) -> dict:
        """What ``advise`` shows: the cache's rows and bytes, the hit rate over the epoch's host reads, the misses
        and whether they are read from disk."""
        return {"rows": self.capacity, "bytes": self.cache_bytes,
                "hit_rate": self.hits / self.reads if self.reads else 0.0, "reads": self.reads,
                "misses": self.reads - self.hits, "from_disk": self.on_disk}

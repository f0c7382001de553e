"""The skeleton of a training epoch that every strategy's ``train_epoch`` fills in.

:class:`Epoch` puts the model in training mode with the epoch's key (the keyed dropout masks), starts the
wall-clock timer and takes the Ledger snapshot; the strategy runs its epoch (inside its tracker's ``epoch()``
scope) and its reductions, then :meth:`Epoch.stats` gives the :class:`~graphscale.metrics.stats.EpochStats`: the
seconds since the start (or those the strategy measured itself), the bytes by category since the snapshot and the
tracker's peak.
"""

from __future__ import annotations

import time

import torch

from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats


class Epoch:
    """One training epoch of one worker, begun at construction.

    Args:
        model: the worker's model (``train()`` and ``set_epoch(epoch)`` are called).
        epoch: the epoch's index (0-based).
        env: the worker's environment (its Ledger is snapshotted).
        tracker: the strategy's memory tracker (its peak goes into the stats).
    """

    def __init__(self, model: torch.nn.Module, epoch: int, env: DistEnv, tracker: MemoryTracker) -> None:
        model.train()
        model.set_epoch(epoch)
        self.ledger, self.tracker = env.ledger, tracker
        self.start = time.perf_counter()
        self.before = self.ledger.snapshot()

    def seconds(self) -> float:
        """Wall-clock seconds since the epoch began."""
        return time.perf_counter() - self.start

    def bytes(self) -> dict[str, int]:
        """Bytes this worker sent since the epoch began, by Ledger category."""
        return self.ledger.since(self.before)

    def stats(self, loss: float, extra: dict | None = None, *, seconds: float | None = None,
              bytes: dict[str, int] | None = None) -> EpochStats:
        """The epoch's stats: ``seconds`` (default: until now), ``bytes`` (default: since the snapshot, now), the
        tracker's peak, the strategy's ``loss`` and ``extra``."""
        seconds = self.seconds() if seconds is None else seconds
        return EpochStats(loss=loss, seconds=seconds, bytes=self.bytes() if bytes is None else bytes,
                          peak_memory=self.tracker.peak, extra={} if extra is None else extra)

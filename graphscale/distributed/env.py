"""DistEnv: who this worker is and how it talks to the others, passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import torch

from graphscale.config import DEFAULT_TIMEOUT_S
from graphscale.metrics.ledger import Ledger


@dataclass
class DistEnv:
    """The distributed context of one worker.

    Nothing below the strategy layer calls ``torch.distributed.get_rank()``: it
    receives a DistEnv. ``world_size == 1`` needs no process group; the
    collectives in :mod:`graphscale.distributed.comm` short-circuit.

    Attributes:
        rank: this worker's rank.
        world_size: number of workers.
        device: the torch device this worker computes on.
        backend: ``"gloo"``, ``"nccl"`` or ``"none"`` (single process).
        group: the process group (``None`` = the default group).
        timeout: collective timeout; a dead peer fails the run instead of hanging it.
        ledger: this worker's byte Ledger.
        comm_log: when a list, :class:`~graphscale.distributed.comm.Comm` appends ``(name, category, seconds)``
            for every collective this worker blocked in (for an asynchronous one, its wait), in call order, which
            every worker shares (``graphscale bench scaling`` splits communication from waiting with it);
            ``None`` (the default) records nothing.
        receives: point-to-point receives this worker posted (:meth:`~graphscale.distributed.comm.Comm.recv`,
            each a blocking wait; counted always, reset by whoever reads it per epoch).
    """

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "none"
    group: object | None = None
    timeout: timedelta = field(default_factory=lambda: timedelta(seconds=DEFAULT_TIMEOUT_S))
    ledger: Ledger = field(default_factory=Ledger)
    comm_log: list | None = None
    receives: int = 0

    @classmethod
    def local(cls, device: str | torch.device = "cpu") -> DistEnv:
        """A single-process environment (no process group)."""
        return cls(device=torch.device(device))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

"""Per-epoch statistics a strategy returns to the trainer."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class EpochStats:
    """What one training epoch did, as seen by one worker.

    Attributes:
        loss: the global training loss of the epoch (identical on every worker).
        seconds: wall time of the epoch on this worker.
        bytes: bytes this worker sent during the epoch, by Ledger category.
        peak_memory: peak bytes this worker held during the epoch, as the strategy's
            :class:`~graphscale.metrics.memory.MemoryTracker` counts them (the design's figure).
        extra: strategy-specific numbers (e.g. edges computed).
        os_memory: what the OS measured over the epoch and its evaluation (peak resident set, sampled
            anonymous / file-backed peaks, the worker's baseline; see
            :class:`~graphscale.metrics.memory.EpochMemory`). Filled in by the trainer, not the strategy.
    """

    loss: float
    seconds: float = 0.0
    bytes: dict[str, int] = field(default_factory=dict)
    peak_memory: int = 0
    extra: dict = field(default_factory=dict)
    os_memory: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

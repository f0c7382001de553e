"""Per-stage timestamps of a pipeline epoch and what they give: bubble time apart from transfer time.

Every stage records, per ``(phase, chunk)`` step of its schedule, the start and end of the step and of the
receive wait inside it (the rows from the previous stage in a forward, the gradient from the next in a backward),
and when it issued its own send of the chunk (the end of its compute of the chunk). After the epoch each stage
learns its neighbours' send times (``2 K`` float64 per boundary, category ``control``) and splits every wait at
the moment the peer sent what it waited for:

* **bubble**: the part before the peer had sent it -- the peer was still computing that chunk (or earlier ones),
  so the schedule had no chunk for this stage; plus the tail after its last step (waiting for its last sends to be
  taken, while the others finish);
* **transfer**: the part after the peer had sent it -- the rows were on their way (or the receive was not
  served yet).

The rest of the schedule (``compute``) is the stages' own work, a hybrid's group halo exchanges included (reported
apart as ``halo_s``). ``bubble_frac + transfer_frac + compute_frac = 1`` per stage and epoch. The send times
and waits are read from one clock (``time.monotonic``, system-wide on Linux), so the split needs the stages on
one host; the ideal GPipe bubble for equal chunk times is :func:`ideal_bubble_fraction`.
"""

from __future__ import annotations

import math
import time

from graphscale.strategies.pipeline.plan import BACKWARD, FORWARD

clock = time.monotonic


def ideal_bubble_fraction(stages: int, chunks: int) -> float:
    """``(S - 1) / (K + S - 1)``: the bubble of GPipe (and of 1F1B) when every chunk takes the same time."""
    return (stages - 1) / (chunks + stages - 1)


def split_waits(waits: list[tuple[str, int, float, float]], upstream_sent: list[float] | None,
                downstream_sent: list[float] | None) -> tuple[float, float]:
    """``(bubble, transfer)`` seconds of ``waits`` (``(phase, chunk, start, end)``): each wait's part before the
    peer sent the chunk (the previous stage's forward send for a forward wait, the next stage's backward send for
    a backward one) is bubble, the rest transfer. A send time of ``nan`` (unknown) counts the whole wait as
    transfer."""
    bubble = transfer = 0.0
    for phase, chunk, start, end in waits:
        sent = (upstream_sent if phase == FORWARD else downstream_sent)[chunk]
        idle = 0.0 if math.isnan(sent) else min(max(min(end, sent) - start, 0.0), end - start)
        bubble += idle
        transfer += end - start - idle
    return bubble, transfer


class StageTimeline:
    """One stage's timestamps of one epoch (module docstring).

    Attributes:
        steps: ``(phase, chunk, start, end)`` of every schedule step, in order.
        waits: ``(phase, chunk, start, end)`` of every receive wait.
        sent: ``{phase: [K]}`` when the stage issued its send of each chunk (``nan``: none).
        halo: seconds spent in a hybrid group's halo exchanges.
    """

    def __init__(self, num_chunks: int) -> None:
        self.num_chunks = num_chunks
        self.start()

    def start(self) -> None:
        """Forget the last epoch; the schedule starts now."""
        self.steps: list[tuple[str, int, float, float]] = []
        self.waits: list[tuple[str, int, float, float]] = []
        self.sent = {phase: [math.nan] * self.num_chunks for phase in (FORWARD, BACKWARD)}
        self.halo = 0.0
        self.began, self.ended = clock(), math.nan

    def stop(self) -> None:
        """The schedule ended now (its last sends taken)."""
        self.ended = clock()

    def split(self, upstream_sent: list[float] | None, downstream_sent: list[float] | None) -> dict[str, float]:
        """The epoch's seconds and fractions: ``schedule_s``, ``compute_s``, ``bubble_s``, ``transfer_s``,
        ``halo_s``, ``bubble_frac``, ``transfer_frac`` (module docstring)."""
        total = self.ended - self.began
        bubble, transfer = split_waits(self.waits, upstream_sent, downstream_sent)
        if self.steps:
            bubble += self.ended - self.steps[-1][3]
        compute = total - bubble - transfer
        return {"schedule_s": total, "compute_s": compute, "bubble_s": bubble, "transfer_s": transfer,
                "halo_s": self.halo, "bubble_frac": bubble / total if total > 0 else 0.0,
                "transfer_frac": transfer / total if total > 0 else 0.0}

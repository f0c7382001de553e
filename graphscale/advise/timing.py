"""The timing rule of the machine profile's measurements (:mod:`graphscale.advise.profile`,
:mod:`graphscale.advise.host_costs`)."""

from __future__ import annotations

import time


def best_of(fn, seconds: float, at_least: int = 1) -> float:
    """The shortest of repetitions of ``fn`` over ``seconds`` and at least ``at_least`` of them (the best of
    many: a shared machine's other load only ever adds time)."""
    fn()
    best, deadline, count = float("inf"), time.perf_counter() + seconds, 0
    while True:
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        best, count = min(best, end - start), count + 1
        if end >= deadline and count >= at_least:
            return best

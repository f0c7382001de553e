"""The traced memory peak of a call: a deterministic count of the bytes Python and numpy allocate (``tracemalloc``),
for tests that bound a step's memory without measuring the OS's figure."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def traced_peak(call: Callable[[], object]) -> int:
    """Peak bytes traced while ``call()`` runs (allocations by Python objects and numpy arrays; torch's are not
    traced)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

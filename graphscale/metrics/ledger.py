"""The byte Ledger: every byte a strategy moves, by category and peer.

Convention: a transfer is recorded once, by the worker that *sends* it (for a
host->device copy, the worker that owns the device), with ``peer`` the
receiving rank (``-1`` for the host). Sends to oneself move nothing and are not
recorded. Summing ``total(category)`` over workers therefore gives the volume
that crossed the wire, which is what the specs' closed forms count.
"""

from __future__ import annotations

from collections import defaultdict

HOST = -1

#: Categories that record bytes read in place (e.g. HongTu's rows reused from the previous batch's
#: device buffer), kept for cost models but not moved over any link.
LOCAL_CATEGORIES = frozenset({"reuse"})


def moved_bytes(by_category: dict[str, int]) -> int:
    """Bytes that crossed a link: every category except :data:`LOCAL_CATEGORIES`."""
    return sum(n for category, n in by_category.items() if category not in LOCAL_CATEGORIES)


class Ledger:
    """Per-worker counters of bytes moved, keyed by ``(category, peer)``."""

    def __init__(self) -> None:
        self._bytes: dict[tuple[str, int], int] = defaultdict(int)

    def add(self, category: str, nbytes: int, peer: int = HOST) -> None:
        """Record ``nbytes`` moved under ``category`` to ``peer``."""
        if nbytes < 0:
            raise ValueError(f"Ledger.add: negative byte count {nbytes} for {category!r}")
        if nbytes:
            self._bytes[(category, int(peer))] += int(nbytes)

    def total(self, category: str | None = None) -> int:
        """Bytes in one category, or in all categories when ``category`` is None."""
        return sum(v for (c, _), v in self._bytes.items() if category is None or c == category)

    def by_category(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (c, _), v in self._bytes.items():
            out[c] += v
        return dict(sorted(out.items()))

    def by_peer(self, category: str) -> dict[int, int]:
        return dict(sorted((p, v) for (c, p), v in self._bytes.items() if c == category))

    def snapshot(self) -> dict[tuple[str, int], int]:
        return dict(self._bytes)

    def since(self, snapshot: dict[tuple[str, int], int]) -> dict[str, int]:
        """Bytes per category added after ``snapshot`` was taken."""
        out: dict[str, int] = defaultdict(int)
        for key, v in self._bytes.items():
            delta = v - snapshot.get(key, 0)
            if delta:
                out[key[0]] += delta
        return dict(sorted(out.items()))

    def reset(self) -> None:
        self._bytes.clear()

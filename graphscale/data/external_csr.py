"""The CSR of an edge list too large for memory, built out of core: bucketed by destination range on disk.

:class:`ExternalCSR` takes ``(src, dst)`` records in chunks (:meth:`ExternalCSR.add`): self-loops are dropped,
the reverse of every record is added when it symmetrises (as every dataset reader does), and each record is
spilled as its key ``dst * N + src`` (int64) into the bucket file of its destination range, in a scratch
directory. :meth:`ExternalCSR.write` then takes the buckets in order: a bucket of at most ``chunk_edges`` keys is
read, sorted and deduplicated (``np.unique``, so rows come out with ascending, distinct sources, the layout of
:func:`graphscale.data.graph.csr_from_edges` after ``Graph.symmetrize``) and appended to a
:class:`~graphscale.data.formats.GraphDirWriter`; a larger one is first split by its rows' key counts into
sub-buckets of at most ``chunk_edges`` keys (reading it ``chunk_edges`` keys at a time). Memory: O(``chunk_edges``)
for the current chunk or bucket (a single destination row with more keys than that is read whole), plus one
count per row of the bucket being split; the scratch disk holds 8 bytes per key (twice the records when
symmetrising), one bucket twice while it is split.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: at most this many bucket files are written to at once (the first spill, and each split of a large bucket)
MAX_BUCKETS = 256
#: ``dst * N + src`` must fit in int64
MAX_NODES = 3_000_000_000


class ExternalCSR:
    """Destination-major CSR of ``num_nodes`` vertices built from records spilled into ``scratch`` (module docstring).

    Args:
        scratch: a directory for the bucket files (created; :meth:`close` removes it).
        num_nodes: ``N``; every id must lie in ``[0, N)``.
        chunk_edges: keys per bucket held in memory at once (at least 1).
        symmetrize: add the reverse of every record.
        expected_records: about how many records :meth:`add` will receive (sizes the first spill's buckets).
    """

    def __init__(self, scratch: str | Path, num_nodes: int, *, chunk_edges: int, symmetrize: bool = True,
                 expected_records: int | None = None) -> None:
        if chunk_edges < 1:
            raise ValueError(f"ExternalCSR: chunk_edges must be >= 1, got {chunk_edges}")
        if num_nodes > MAX_NODES:
            raise ValueError(f"ExternalCSR: {num_nodes} vertices is more than the {MAX_NODES} whose edge keys "
                             "dst * N + src fit in int64")
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.num_nodes, self.chunk_edges, self.symmetrize = num_nodes, chunk_edges, symmetrize
        keys = (2 if symmetrize else 1) * (expected_records if expected_records is not None else
                                           MAX_BUCKETS * chunk_edges)
        buckets = int(min(MAX_BUCKETS, max(num_nodes, 1), max(1, -(-keys // chunk_edges))))
        self._rows = -(-max(num_nodes, 1) // buckets)  # destination rows per bucket
        self._starts = np.minimum(np.arange(buckets + 1, dtype=np.int64) * self._rows, num_nodes)
        self._files: dict[int, object] = {}
        self._counts = np.zeros(buckets, dtype=np.int64)
        self.records = 0  # records given to add(), self-loops included
        self._serial = 0

    # ------------------------------------------------------------ spilling
    def add(self, src, dst) -> None:
        """Spill the records ``src[i] -> dst[i]`` (int arrays of one length, ids in ``[0, N)``)."""
        src = np.asarray(src, dtype=np.int64).reshape(-1)
        dst = np.asarray(dst, dtype=np.int64).reshape(-1)
        if src.shape != dst.shape:
            raise ValueError(f"ExternalCSR.add: src and dst differ in length ({src.size} and {dst.size})")
        self.records += src.size
        if not src.size:
            return
        low, high = min(int(src.min()), int(dst.min())), max(int(src.max()), int(dst.max()))
        if low < 0 or high >= self.num_nodes:
            raise ValueError(f"ExternalCSR.add: ids must lie in [0, {self.num_nodes}), got [{low}, {high}]")
        keep = src != dst
        src, dst = src[keep], dst[keep]
        n = max(self.num_nodes, 1)
        keys = dst * n + src
        if self.symmetrize:
            keys = np.concatenate([keys, src * n + dst])
        del src, dst
        keys.sort()
        bounds = np.searchsorted(keys, self._starts * n)
        for b in np.flatnonzero(np.diff(bounds)):
            if b not in self._files:
                self._files[b] = open(self._bucket(b), "ab", buffering=0)  # noqa: SIM115 - closed by _close_files
            keys[bounds[b]: bounds[b + 1]].tofile(self._files[b])
            self._counts[b] += bounds[b + 1] - bounds[b]

    def _bucket(self, b: int) -> Path:
        return self.scratch / f"bucket-{b}.bin"

    def _close_files(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}

    # ------------------------------------------------------------ writing
    def write(self, writer, progress: Callable[[str, int, int], None] | None = None) -> int:
        """Append every destination row, in order, to ``writer`` (``append_rows(counts, indices)``); returns the
        number of edges written. ``progress(step, rows done, rows)`` is called after each bucket."""
        self._close_files()
        edges = 0
        for b in range(self._starts.size - 1):
            lo, hi = int(self._starts[b]), int(self._starts[b + 1])
            edges += self._write_bucket(writer, self._bucket(b), lo, hi, int(self._counts[b]))
            if progress is not None:
                progress("build CSR", hi, self.num_nodes)
        return edges

    def _write_bucket(self, writer, file: Path, lo: int, hi: int, count: int) -> int:
        """Rows ``lo..hi-1``, whose ``count`` keys are in ``file`` (absent when none), appended to ``writer``."""
        n = max(self.num_nodes, 1)
        if count <= self.chunk_edges or hi - lo == 1:
            keys = np.unique(np.fromfile(file, dtype=np.int64)) if count else np.empty(0, np.int64)
            file.unlink(missing_ok=True)
            dst = keys // n
            writer.append_rows(np.bincount(dst - lo, minlength=hi - lo), keys - dst * n)
            return keys.size
        per_row = np.zeros(hi - lo, dtype=np.int64)
        for keys in self._chunks(file):
            per_row += np.bincount(keys // n - lo, minlength=hi - lo)
        # sub-ranges of consecutive rows holding at most `target` keys each (a heavier row alone), at most MAX_BUCKETS
        target = max(self.chunk_edges, -(-count // MAX_BUCKETS))
        ends, total, cum = [], 0, np.cumsum(per_row)
        while total < count:
            end = max(int(np.searchsorted(cum, total + target, side="right")), (ends[-1] if ends else 0) + 1)
            ends.append(min(end, hi - lo))
            total = int(cum[ends[-1] - 1])
        starts = np.array([lo, *(lo + e for e in ends[:-1]), hi], dtype=np.int64)
        self._serial += 1
        parts = [self.scratch / f"split-{self._serial}-{i}.bin" for i in range(starts.size - 1)]
        part_counts = np.zeros(len(parts), dtype=np.int64)
        handles = [open(p, "ab", buffering=0) for p in parts]  # noqa: SIM115 - closed below
        try:
            for keys in self._chunks(file):
                keys.sort()
                bounds = np.searchsorted(keys, starts * n)
                for i in np.flatnonzero(np.diff(bounds)):
                    keys[bounds[i]: bounds[i + 1]].tofile(handles[i])
                    part_counts[i] += bounds[i + 1] - bounds[i]
        finally:
            for f in handles:
                f.close()
        file.unlink()
        del per_row, cum
        return sum(self._write_bucket(writer, part, int(starts[i]), int(starts[i + 1]), int(part_counts[i]))
                   for i, part in enumerate(parts))

    def _chunks(self, file: Path):
        """The keys of ``file``, ``chunk_edges`` at a time."""
        with open(file, "rb") as f:
            while True:
                keys = np.fromfile(f, dtype=np.int64, count=self.chunk_edges)
                if not keys.size:
                    return
                yield keys

    def close(self) -> None:
        """Remove the scratch directory and everything in it."""
        self._close_files()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> ExternalCSR:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

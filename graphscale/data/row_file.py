"""Rows of a 2-D ``.npy`` table read from the file with positioned reads (``pread``), not through a memory map.

:class:`RowFile` reads ``table[ids]`` for arbitrary ``ids`` (any order, duplicates allowed): it sorts the distinct
ids and reads them in **spans**, one ``pread`` each: a span runs from a needed row through the following ones while
the rows it skips to reach the next needed row take at most :data:`SPAN_GAP` bytes, up to :data:`SPAN_BYTES` in
all. A span of adjacent rows is read straight into the call's buffer; one with gaps is read into a scratch buffer
(one per reading thread, at most :data:`SPAN_BYTES`) and its needed rows copied out, the skipped ones dropped. So
ids far apart are random reads of their own rows, and ids dense in the file (a superbatch's misses,
:mod:`graphscale.data.superbatch`) become large sequential reads of the file in ascending order. The reads run on
up to :data:`READ_THREADS` threads (a numba kernel compiled ``nogil``, over contiguous slices of the spans, at least
:data:`RUNS_PER_THREAD` spans each), so many reads are in flight at once, and the file descriptor is advised random
(``posix_fadvise(POSIX_FADV_RANDOM)``: no read-ahead), so a read brings in only the pages it asks for.

Why not the memory map. A row of a mapped table that is not resident is a page fault, taken on the gathering thread
one at a time: the kernel reads the page (and, unless the mapping is advised random, its read-around window) and
maps it. The same rows read with ``pread`` keep many reads queued at the disk, and the mapping is left alone. The
kernel's CPU time per cold read is about the same either way (about 20 us per random 4 KiB read on a virtual
machine's disk): what the reads gain is the disk's answer to a queue of requests instead of one at a time.

The bytes are the file's: a row read is bit for bit the row ``np.load`` would give. The header is checked against
the shape and dtype the caller expects (a different file, or one shorter than its header says, is refused, naming
it), and a read that ends before the bytes asked for (a file truncated since) raises :class:`OSError` naming it.
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import numba as nb
import numpy as np
import torch

#: threads that issue the reads of one call (reads in flight at once)
READ_THREADS = 32
#: spans each reading thread takes at least (a call of fewer spans reads on fewer threads, or on the calling one)
RUNS_PER_THREAD = 16
#: bytes of unneeded rows a span reads through to reach its next needed row: a gap up to this is read and dropped
#: (sequential bytes cost less than another random read: about 10 us of wall time for 16 KiB at this machine's
#: 1.7 GB/s, against 8-20 us of kernel time per random read), a longer one starts a new span
SPAN_GAP = 16 << 10
#: bytes one span reads at most (its rows, and the gaps between them)
SPAN_BYTES = 512 << 10
#: a span of at least this many bytes leaves the page cache once read (``POSIX_FADV_DONTNEED``): a superbatch's
#: sweep through the file would otherwise fill the page cache (under a memory cgroup: the process's own memory)
#: with rows already copied out, evicting the pages the sampler reads
DROP_BYTES = 64 << 10

_libc = ctypes.CDLL(None, use_errno=True)
_pread = _libc.pread
_pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64)
_pread.restype = ctypes.c_ssize_t
#: ``posix_fadvise`` where the C library has one (Linux); elsewhere ``_DONTNEED`` is 0 and it is never called, and a
#: fresh handle of ``pread`` (also four arguments) stands in so that the compiled reader has a function to type
_fadvise = _libc["posix_fadvise" if hasattr(_libc, "posix_fadvise") else "pread"]
_fadvise.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int)
_fadvise.restype = ctypes.c_int
_memcpy = _libc.memcpy
_memcpy.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcpy.restype = ctypes.c_void_p
#: ``POSIX_FADV_DONTNEED`` (Linux's value; ``0``: not advised where the platform has no such advice)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 0)


@nb.njit(nogil=True, cache=True)
def _plan_spans(ids, row_bytes, gap_bytes, span_bytes):  # pragma: no cover - numba
    """Starts (indices into the ascending distinct ``ids``, then ``ids.size``) of the spans: a span grows over the
    next id while the rows skipped to reach it take at most ``gap_bytes`` and the span's rows at most ``span_bytes``
    (one row at least)."""
    starts = np.empty(ids.size + 1, np.int64)
    count = 0
    first = -1
    for k in range(ids.size):
        if k == 0 or ((ids[k] - ids[k - 1] - 1) * row_bytes > gap_bytes
                      or (ids[k] - first + 1) * row_bytes > span_bytes):
            starts[count] = k
            count += 1
            first = ids[k]
    starts[count] = ids.size
    return starts[:count + 1]


@nb.njit(nogil=True)
def _read_spans(fd, data_offset, row_bytes, ids, starts, out, scratch, lo, hi, drop_bytes, dontneed):  # pragma: no cover
    """Read spans ``lo..hi`` of the ascending distinct ``ids`` into ``out`` (``row_bytes`` a row, row ``k`` for
    ``ids[k]``): a span without gaps straight into ``out``, one with gaps into ``scratch`` (bytes, at least the
    longest span) whose needed rows are copied out; a span of ``drop_bytes`` or more is then advised ``dontneed``
    (unless ``0``). Returns ``-1``, or the first span whose read failed or ended early."""
    out_base = np.int64(out.ctypes.data)
    scratch_base = np.int64(scratch.ctypes.data)
    for r in range(lo, hi):
        a, b = starts[r], starts[r + 1]
        first = ids[a]
        want = (ids[b - 1] - first + 1) * row_bytes
        offset = data_offset + first * row_bytes
        direct = ids[b - 1] - first + 1 == b - a
        dest = out_base + a * row_bytes if direct else scratch_base
        done = 0
        while done < want:
            got = _pread(fd, dest + done, want - done, offset + done)
            if got <= 0:
                return r
            done += got
        if dontneed and want >= drop_bytes:
            _fadvise(fd, offset, want, dontneed)
        if not direct:
            for k in range(a, b):
                _memcpy(out_base + k * row_bytes, scratch_base + (ids[k] - first) * row_bytes, row_bytes)
    return -1


def npy_layout(path: str | Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of a C-ordered ``.npy`` file, from its header; refuses anything else, and a
    file shorter than its header says."""
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)  # maps the file; touches no data page
    except (ValueError, OSError) as err:
        raise ValueError(f"{path} is not a readable .npy file: {err}") from None
    if not isinstance(mapped, np.memmap) or not mapped.flags.c_contiguous:
        raise ValueError(f"{path} must hold a C-ordered array to be read by rows")
    layout = tuple(mapped.shape), mapped.dtype, int(mapped.offset)
    del mapped
    return layout


def plan_spans(ids: np.ndarray, row_bytes: int) -> np.ndarray:
    """Starts of the spans that read the ascending distinct ``ids`` of a table of ``row_bytes`` rows (indices into
    ``ids``, then ``ids.size``; :data:`SPAN_GAP`, :data:`SPAN_BYTES`)."""
    return _plan_spans(np.ascontiguousarray(ids, dtype=np.int64), row_bytes, SPAN_GAP, max(SPAN_BYTES, row_bytes))


def span_rows(ids: np.ndarray, starts: np.ndarray) -> int:
    """Rows the spans ``starts`` of ``ids`` read: the needed ones and the gaps between them."""
    return int((ids[starts[1:] - 1] - ids[starts[:-1]] + 1).sum()) if ids.size else 0


class RowFile:
    """Rows of the 2-D ``.npy`` table at ``path`` read with ``pread`` (module docstring).

    Args:
        path: the ``.npy`` file.
        shape, dtype: what its header must say (the table the caller holds); a different file is refused.

    Attributes:
        rows_read: distinct rows read since construction; ``reads``: the spans they took (one ``pread`` each, but
            for short reads); ``bytes_read``: the bytes of those spans (the rows asked for and the gaps between).
    """

    def __init__(self, path: str | Path, shape: tuple[int, int], dtype: np.dtype | torch.dtype) -> None:
        self.path = Path(path)
        want = torch.empty(0, dtype=dtype).numpy().dtype if isinstance(dtype, torch.dtype) else np.dtype(dtype)
        have_shape, have_dtype, self.data_offset = npy_layout(self.path)
        if len(have_shape) != 2 or have_shape != tuple(shape) or have_dtype != want:
            raise ValueError(f"{self.path} holds shape {have_shape} and dtype {have_dtype}; the feature table read "
                             f"from it has shape {tuple(shape)} and dtype {want}")
        self.shape, self.dtype = (int(shape[0]), int(shape[1])), want
        self.row_bytes = self.shape[1] * want.itemsize
        self.rows_read = self.reads = self.bytes_read = 0
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._pool: ThreadPoolExecutor | None = None

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """``table[ids]`` as a new ``[len(ids), F]`` tensor of the file's dtype (``ids`` int64, any order,
        duplicates allowed)."""
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if ids.numel() == 0:
            return torch.from_numpy(np.empty((0, self.shape[1]), self.dtype))
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.shape[0]:
            raise IndexError(f"row ids must lie in [0, {self.shape[0]}) to be read from {self.path}, got {lo}..{hi}")
        distinct, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        rows = self._read_sorted(distinct.numpy())
        if distinct.numel() == ids.numel() and bool((inverse == torch.arange(ids.numel())).all()):
            return rows
        return rows.index_select(0, inverse)

    def _read_sorted(self, ids: np.ndarray) -> torch.Tensor:
        """Rows of the ascending distinct ``ids`` into one buffer, read in spans (:data:`SPAN_GAP`,
        :data:`SPAN_BYTES`)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        starts = plan_spans(ids, self.row_bytes)
        spans = starts.size - 1
        buf = np.empty((ids.size, self.shape[1]), self.dtype)
        threads = max(1, min(READ_THREADS, spans // RUNS_PER_THREAD))
        longest = int((ids[starts[1:] - 1] - ids[starts[:-1]]).max()) + 1 if spans else 0
        scratch = np.empty((threads, longest * self.row_bytes), np.uint8)  # one per reading thread
        args = (self._fd, self.data_offset, self.row_bytes, ids, starts, buf)
        if threads == 1:
            failed = [_read_spans(*args, scratch[0], 0, spans, DROP_BYTES, _DONTNEED)]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="graphscale-pread")
            bounds = np.linspace(0, spans, threads + 1).astype(np.int64)
            futures = [self._pool.submit(_read_spans, *args, scratch[t], int(a), int(b), DROP_BYTES, _DONTNEED)
                       for t, (a, b) in enumerate(pairwise(bounds))]
            failed = [f.result() for f in futures]
        bad = [r for r in failed if r >= 0]
        if bad:
            first, last = int(ids[starts[bad[0]]]), int(ids[starts[bad[0] + 1] - 1])
            raise OSError(f"reading rows {first}..{last} of {self.path} failed or ended early "
                          f"(truncated, or a read error)")
        self.rows_read += int(ids.size)
        self.reads += int(spans)
        self.bytes_read += span_rows(ids, starts) * self.row_bytes
        return torch.from_numpy(buf)

    def close(self) -> None:
        """Close the file and stop the reading threads (reads after this raise)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # the reading threads end with their executor; the descriptor is closed here
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1

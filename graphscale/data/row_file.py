"""Rows of a 2-D ``.npy`` table read from the file with positioned reads (``pread``), not through a memory map.

:class:`RowFile` reads ``table[ids]`` for arbitrary ``ids`` (any order, duplicates allowed): it sorts the distinct
ids, coalesces each run of adjacent ids into one ``pread`` of the run's bytes at its offset in the file, and reads
into one buffer allocated for the call. The reads run on up to :data:`READ_THREADS` threads (a numba kernel compiled
``nogil``, over contiguous slices of the runs, at least :data:`RUNS_PER_THREAD` runs each), so many reads are in
flight at once, and the file descriptor is advised random (``posix_fadvise(POSIX_FADV_RANDOM)``: no read-ahead), so
a read brings in only the pages it asks for.

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
#: runs each reading thread takes at least (a call of fewer runs reads on fewer threads, or on the calling one)
RUNS_PER_THREAD = 16

_libc = ctypes.CDLL(None, use_errno=True)
_pread = _libc.pread
_pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64)
_pread.restype = ctypes.c_ssize_t


@nb.njit(nogil=True)
def _read_runs(fd, data_offset, row_bytes, first_id, run_rows, buf_row, buf, lo, hi):  # pragma: no cover - numba
    """Read runs ``lo..hi``: run ``r`` is rows ``first_id[r] ..`` (``run_rows[r]`` of them) into ``buf`` from byte
    ``buf_row[r] * row_bytes``. Returns ``-1``, or the first run whose read failed or ended early."""
    base = buf.ctypes.data
    for r in range(lo, hi):
        want = run_rows[r] * row_bytes
        offset = data_offset + first_id[r] * row_bytes
        dest = buf_row[r] * row_bytes
        done = 0
        while done < want:
            got = _pread(fd, base + dest + done, want - done, offset + done)
            if got <= 0:
                return r
            done += got
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


class RowFile:
    """Rows of the 2-D ``.npy`` table at ``path`` read with ``pread`` (module docstring).

    Args:
        path: the ``.npy`` file.
        shape, dtype: what its header must say (the table the caller holds); a different file is refused.

    Attributes:
        rows_read: distinct rows read since construction; ``reads``: ``pread`` runs they took (adjacent rows
            coalesce into one run).
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
        self.rows_read = self.reads = 0
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
        """Rows of the ascending distinct ``ids`` into one buffer, adjacent ids read as one run."""
        starts = np.flatnonzero(np.diff(ids, prepend=ids[0] - 2) != 1)  # a run begins where ids stop being adjacent
        run_rows = np.diff(np.append(starts, ids.size)).astype(np.int64)
        first_id = ids[starts].astype(np.int64)
        buf_row = starts.astype(np.int64)
        buf = np.empty((ids.size, self.shape[1]), self.dtype)
        runs = starts.size
        args = (self._fd, self.data_offset, self.row_bytes, first_id, run_rows, buf_row, buf)
        threads = min(READ_THREADS, runs // RUNS_PER_THREAD)
        if threads <= 1:
            failed = [_read_runs(*args, 0, runs)]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="graphscale-pread")
            bounds = np.linspace(0, runs, threads + 1).astype(np.int64)
            futures = [self._pool.submit(_read_runs, *args, int(a), int(b)) for a, b in pairwise(bounds)]
            failed = [f.result() for f in futures]
        bad = [r for r in failed if r >= 0]
        if bad:
            row = int(first_id[bad[0]])
            raise OSError(f"reading rows {row}..{row + int(run_rows[bad[0]]) - 1} of {self.path} failed or ended "
                          f"early (truncated, or a read error)")
        self.rows_read += int(ids.size)
        self.reads += int(runs)
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

"""Rows gathered from a referencing store's base graph directory into a private file, and mapped from it.

A store written by reference (:mod:`graphscale.partition.store_base`) holds no copies of its parts' node rows: a
worker that trains on a part's feature rows gathers them from the base directory's ``x.npy`` by the part's
``orig_ids``. Gathered into an array, those rows are the worker's anonymous memory (``[inner, F]``: 5.1 GB per
worker of a 20M-vertex, 128-feature graph on two parts), where a copying store's rows are pages of a mapped file,
which the kernel reads on demand and drops under memory pressure. :func:`rows_to_file` writes the gathered rows
instead, one block at a time in the order they come, to a private file and returns its copy-on-write memory map
(``mode="c"``, as a copying store's rows are opened): the same values, bit for bit, held as file pages.

The file is written sequentially, each block flushed to disk before the next is read (``fdatasync``: its dirty
pages never pile up in the process's memory or its memory cgroup), with its whole size reserved first
(``posix_fallocate``); a directory without room is refused before anything is written, in one line naming it and
the bytes needed. The file lives in a hidden folder (``.rows.mapped-HOST-PID-RANDOM``) registered with the
launcher before it is created (:func:`~graphscale.distributed.launch.remove_with_run`: removed however the run
ends, also by SIGKILL) and removed as soon as the file is mapped: the mapping keeps the pages, nothing is left on
disk once the array is freed; a folder a killed process of this host left is removed by the next one
(:func:`~graphscale.data.siblings.temp_sibling`).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from graphscale.data.siblings import temp_sibling


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged user may still write to the file system of ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def rows_to_file(blocks: Iterable[tuple[int, np.ndarray]], shape: tuple[int, ...], dtype, directory: str | Path,
                 what: str = "rows") -> np.ndarray:
    """The ``shape`` array of ``dtype`` whose consecutive row blocks ``blocks`` yields (``(first row, rows)``, in
    order), written to a private file in ``directory`` and returned as its copy-on-write memory map (module
    docstring); ``what`` names the rows in errors.

    Raises:
        ValueError: ``directory`` has too little free space (names it, the bytes needed and the bytes free).
        OSError: writing failed (the partial file is removed).
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    free = free_bytes(directory)
    if nbytes > free:
        raise ValueError(f"cannot write {what} ({nbytes:,} bytes) to {directory}: only {free:,} bytes are free "
                         "there; free disk space there, or give --cache-dir a disk with room")
    from graphscale.distributed.launch import remove_with_run  # torch.distributed: only when rows are written

    folder = temp_sibling(directory / "rows", "mapped")
    remove_with_run(folder)  # before it exists: the launcher (or its janitor) removes it however the run ends
    try:
        folder.mkdir(mode=0o700)
        file = folder / "rows.bin"
        written = 0
        with open(file, "xb", buffering=0) as out:
            try:
                os.posix_fallocate(out.fileno(), 0, nbytes)
            except OSError as err:
                raise ValueError(f"cannot write {what} ({nbytes:,} bytes) to {directory}: {err.strerror}; free "
                                 "disk space there, or give --cache-dir a disk with room") from None
            for first, block in blocks:
                if first * math.prod(shape[1:]) * dtype.itemsize != written:
                    raise ValueError(f"{what}: block at row {first} out of order ({written:,} bytes written)")
                data = memoryview(np.ascontiguousarray(block, dtype)).cast("B")
                while data:
                    data = data[out.write(data):]
                written += len(block) * math.prod(shape[1:]) * dtype.itemsize
                os.fdatasync(out.fileno())  # the block's pages are clean (reclaimable) before the next is read
        if written != nbytes:
            raise ValueError(f"{what}: {written:,} bytes written, {nbytes:,} expected")
        return np.memmap(file, dtype, mode="c", shape=shape)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the mapping outlives the file

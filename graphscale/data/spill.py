"""Tables that go to disk when host memory does not hold them: file-backed tensors in a temporary file.

:class:`TableMemory` allocates the large per-vertex tables of a computation (evaluation's layer outputs, one row per
vertex a worker evaluates) in anonymous memory while a table takes at most ``limit`` bytes, and otherwise in a file
under ``directory`` that is memory-mapped shared (``torch.from_file``): its pages are written back to the file and
dropped by the kernel under memory pressure, so the process's anonymous memory never holds the table.

The file is created with its whole size reserved (``posix_fallocate``: a disk without room fails at once, naming
the path and the bytes, instead of the process dying on a write to a mapped page), and its name is removed as soon
as it is mapped: nothing is left on disk when the tensor is freed, even if the process is killed.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import torch


def file_backed(shape: tuple[int, ...], dtype: torch.dtype, directory: str | Path) -> torch.Tensor:
    """An uninitialised ``shape`` tensor of ``dtype`` mapped from a temporary file in ``directory`` (module
    docstring; the file is removed at once, the space is freed with the tensor).

    Raises:
        OSError: ``directory`` cannot hold the table (names it and the bytes needed).
    """
    numel = math.prod(shape)
    nbytes = max(1, numel) * torch.empty(0, dtype=dtype).element_size()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="table-", suffix=".bin", dir=directory)
    try:
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as err:
            raise OSError(err.errno, f"cannot write a {nbytes:,}-byte table to {directory} ({err.strerror}); free "
                                     "disk space there or raise --host-memory") from None
        table = torch.from_file(name, shared=True, size=max(1, numel), dtype=dtype)
    finally:
        os.close(fd)
        os.unlink(name)
    return table[:numel].view(shape)


class TableMemory:
    """Where per-vertex tables are allocated: in memory up to ``limit`` bytes each, else file-backed.

    Args:
        limit: the most bytes a table may take in anonymous memory; ``None``: every table stays in memory.
        directory: where file-backed tables go (a temporary directory by default).

    Attributes:
        spilled: tables allocated file-backed so far.
    """

    def __init__(self, limit: int | None = None, directory: str | Path | None = None) -> None:
        if limit is not None and int(limit) < 0:
            raise ValueError(f"a table memory limit must be >= 0 bytes, got {limit}")
        self.limit = None if limit is None else int(limit)
        self.directory = Path(directory) if directory is not None else Path(tempfile.gettempdir())
        self.spilled = 0

    def fits(self, nbytes: int) -> bool:
        """Whether a table of ``nbytes`` stays in anonymous memory."""
        return self.limit is None or int(nbytes) <= self.limit

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
        """An uninitialised table: ``torch.empty`` when it fits (or lives on an accelerator), else file-backed."""
        device = torch.device(device)
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        if device.type != "cpu" or self.fits(nbytes):
            return torch.empty(shape, dtype=dtype, device=device)
        self.spilled += 1
        return file_backed(tuple(shape), dtype, self.directory)

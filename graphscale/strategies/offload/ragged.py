"""Ragged index arrays on disk: many 1-D parts of one dtype as one ``.npy`` file plus ``[parts + 1]`` offsets.

:func:`save_ragged` writes parts held in memory; :class:`RaggedWriter` appends them one at a time (the offload
planner writes every chunk's sets and every batch's plan so, holding one at a time), producing the very same
files; :func:`load_ragged` maps every part on its own.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header :func:`numpy.save` writes for an array of ``dtype`` and ``shape``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


def _read(folder: Path, name: str) -> torch.Tensor:
    """``folder/name.npy`` memory-mapped copy-on-write (pages are shared with every process mapping the file)."""
    return torch.from_numpy(np.load(folder / f"{name}.npy", mmap_mode="c"))


def save_ragged(folder: Path, name: str, parts: list[torch.Tensor]) -> None:
    """Write ``parts`` (1-D tensors of one dtype) as ``name.npy``, their concatenation, and ``name_offsets.npy``."""
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([t.numel() for t in parts], out=offsets[1:])
    np.save(folder / f"{name}.npy", torch.cat(parts).numpy() if parts else np.zeros(0, np.int64))
    np.save(folder / f"{name}_offsets.npy", offsets)


def load_ragged(folder: Path, name: str, count: int) -> list[torch.Tensor]:
    """The ``count`` parts :func:`save_ragged` wrote, each memory-mapped on its own (copy-on-write, pages shared
    with every process mapping the file): a part's tensor owns a storage of its own bytes, as a part built in
    memory does, so the memory tracker (which counts storages) counts one chunk's topology, not the file's.

    Raises:
        ValueError: the file holds another number of parts.
    """
    path = folder / f"{name}.npy"
    flat, offsets = np.load(path, mmap_mode="c"), _read(folder, f"{name}_offsets").tolist()
    if len(offsets) != count + 1:
        raise ValueError(f"{folder / (name + '_offsets.npy')}: expected {count + 1} offsets, found {len(offsets)}")
    if offsets[-1] != flat.shape[0]:
        raise ValueError(f"{path}: {flat.shape[0]} entries, but its offsets end at {offsets[-1]}")
    item = flat.dtype.itemsize
    return [torch.from_numpy(np.memmap(path, flat.dtype, "c", flat.offset + offsets[g] * item,
                                       (offsets[g + 1] - offsets[g],)))
            if offsets[g + 1] > offsets[g] else torch.from_numpy(np.zeros(0, flat.dtype)) for g in range(count)]


class RaggedWriter:
    """Append 1-D parts to ``folder/name.npy`` and write ``name_offsets.npy`` on :meth:`close`: the files
    :func:`save_ragged` writes for the same parts (the dtype is the first part's, ``int64`` when there is none).

    The ``.npy`` header of a 1-D array is 128 bytes whatever its length, so it is written last, over a
    placeholder of that size.
    """

    def __init__(self, folder: Path, name: str) -> None:
        self.path = Path(folder) / f"{name}.npy"
        self.offsets_path = Path(folder) / f"{name}_offsets.npy"
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._dtype: np.dtype | None = None
        self._offsets = [0]
        self._header = len(_npy_header(np.dtype(np.int64), (0,)))
        self._file.write(b"\0" * self._header)

    def append(self, part) -> None:
        array = part.numpy() if isinstance(part, torch.Tensor) else np.asarray(part)
        if self._dtype is None:
            self._dtype = array.dtype
        self._file.write(np.ascontiguousarray(array, dtype=self._dtype).tobytes())
        self._offsets.append(self._offsets[-1] + array.size)

    def close(self) -> None:
        header = _npy_header(self._dtype or np.dtype(np.int64), (self._offsets[-1],))
        if len(header) != self._header:
            raise RuntimeError(f"{self.path}: a .npy header of {len(header)} bytes, {self._header} reserved")
        self._file.seek(0)
        self._file.write(header)
        self._file.close()
        np.save(self.offsets_path, np.asarray(self._offsets, np.int64))

"""Host-resident vertex data shared by the workers of one machine (HongTu's CPU memory).

HongTu keeps every layer's representations ``H^0..H^L``, gradients ``G^l`` and
the hybrid's cached aggregates ``A^l`` in host memory that all GPUs of the
machine can read (pinned, NUMA-local per owner), and streams rows to and from
the devices. Worker processes here are spawned fresh (``launch`` uses the spawn
context), so nothing allocated before the spawn is inherited. The arrays are
therefore *shared-memory files*:

1. rank 0 checks that the shared-memory directory (``--shm-dir``, default
   ``/dev/shm``) has room for all arrays (:func:`check_free_space`), removes
   the directories of dead runs (``.graphscale-offload.run-HOST-PID-*`` whose
   PID is gone on this host), registers a new one with the launcher
   (:func:`~graphscale.distributed.launch.remove_with_run`), creates it and
   broadcasts its path (category ``"setup"``);
2. rank 0 creates one file per array, sized ``rows * width * element_size``
   (``torch.from_file(shared=True)``: ``MAP_SHARED``, zero-filled), and every
   other rank maps the same files after a barrier. The files are sparse: a
   tmpfs that runs out of room later would kill the workers with ``SIGBUS``,
   hence the check;
3. after a second barrier rank 0 unlinks the files and the directory: the
   mappings stay valid until the workers exit. A worker or launcher killed
   before that (SIGKILL included) leaves nothing either: the launcher, or its
   janitor once the launcher is gone, removes the registered directory.

Every worker therefore reads and writes the very same host rows, as GPUs do
through zero-copy access to pinned memory. The *ownership discipline* of the
strategy (only the owner of ``v`` writes row ``v`` of ``H`` and ``G``) is what
makes this race-free, as in HongTu; the array object does not enforce it.

Host <-> device copies are not this module's: the transfer pipeline
(:mod:`~graphscale.strategies.offload.transfer`) reads and writes the arrays.
On an accelerator the mapped arrays are page-locked once, in place
(``cudaHostRegister``, :class:`~graphscale.strategies.offload.device.DeviceKit`),
so copies from and to them are asynchronous and kernels can read them through
UVA. That path has not been run here (no GPU was available).

The byte accounting is the caller's: the strategy records every copy in its
Ledger with the category and owner it belongs to.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from graphscale.data.formats import temp_sibling
from graphscale.distributed.comm import Comm
from graphscale.distributed.launch import remove_with_run
from graphscale.metrics.units import format_bytes
from graphscale.strategies.offload.device import DeviceKit

_PATH_BYTES = 1024


def free_bytes(path: str) -> int:
    """Bytes an unprivileged user may still write to the file system of ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def check_free_space(shm_dir: str, needed: int) -> None:
    """Fail, naming both sizes and the fix, when ``shm_dir`` is not a writable directory with ``needed`` bytes free.

    Raises:
        ValueError: not a writable directory, or too little free space.
    """
    if not (os.path.isdir(shm_dir) and os.access(shm_dir, os.W_OK)):
        raise ValueError(f"--shm-dir {shm_dir} is not a writable directory; point --shm-dir at one")
    free = free_bytes(shm_dir)
    if needed > free:
        raise ValueError(f"offload's host arrays need {format_bytes(needed)} ({needed:,} bytes) in {shm_dir}, "
                         f"which has {format_bytes(free)} ({free:,} bytes) free; point --shm-dir at a directory "
                         f"with room (a larger tmpfs, or a disk directory: slower) or free space in {shm_dir}")


def host_array_specs(num_nodes: int, dims, modes: list[str]) -> dict[str, tuple[int, int]]:
    """``name -> (rows, width)`` of the run's host arrays: ``H^0..H^L``, ``G^1..G^L``, the hybrid layers' ``A^l``
    and, when the input map learns, ``G^0`` and the raw input ``X`` (``dims``: the model's
    :class:`~graphscale.cost.dims.ModelDims`; ``modes``: the per-layer modes)."""
    n, layers = num_nodes, len(dims.widths)
    specs = {f"H{l}": (n, w) for l, w in enumerate(dims.widths)}
    specs[f"H{layers}"] = (n, dims.out[-1])
    for l in range(layers):
        specs[f"G{l + 1}"] = (n, dims.out[l])
        if modes[l] == "hybrid":
            specs[f"A{l}"] = (n, dims.agg[l])
    if dims.learned_input:
        specs["G0"] = (n, dims.widths[0])
        specs["X"] = (n, dims.in_dim)
    return specs


def host_array_bytes(specs: dict[str, tuple[int, int]], element_size: int) -> int:
    """Bytes of the host arrays ``specs`` describe (what :meth:`HostArrays.nbytes` gives once they are mapped)."""
    return sum(rows * width for rows, width in specs.values()) * element_size


class HostArrays:
    """Named ``[rows, width]`` host arrays in shared memory, mapped by every worker.

    A collective: every rank constructs it with the same ``specs``.

    Args:
        comm: the worker's Comm (its rank 0 creates the files).
        specs: ``name -> (rows, width)``.
        dtype: element type of every array.
        device: the worker's compute device (CUDA: the arrays are page-locked).
        shm_dir: the directory holding the files (``--shm-dir``; its free space is checked first).

    Raises:
        ValueError: on rank 0, ``shm_dir`` is not writable or has too little free space.
    """

    def __init__(self, comm: Comm, specs: dict[str, tuple[int, int]], dtype: torch.dtype,
                 device: torch.device, shm_dir: str) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        self.arrays: dict[str, torch.Tensor] = {}
        self._registered: list[torch.Tensor] = []
        self._kit = DeviceKit(self.device)
        elem = torch.empty(0, dtype=dtype).element_size()
        path = self._agree_on_directory(comm, shm_dir, sum(rows * width for rows, width in specs.values()) * elem)
        try:
            if comm.rank == 0:
                for name, (rows, width) in specs.items():
                    self._map(path, name, rows, width)
            comm.barrier()
            if comm.rank != 0:
                for name, (rows, width) in specs.items():
                    file = Path(path) / name
                    expected = rows * width * elem
                    if file.stat().st_size != expected:
                        raise RuntimeError(f"host array {file} has {file.stat().st_size} bytes, expected {expected}")
                    self._map(path, name, rows, width)
            comm.barrier()
        finally:
            if comm.rank == 0:
                shutil.rmtree(path, ignore_errors=True)  # mappings outlive the files
        for t in self.arrays.values():
            if self._kit.register(t):  # page-locked in place on an accelerator (pinned once, for the whole run)
                self._registered.append(t)

    @staticmethod
    def _agree_on_directory(comm: Comm, shm_dir: str, needed: int) -> str:
        buf = torch.zeros(_PATH_BYTES, dtype=torch.uint8, device=comm.env.device)
        if comm.rank == 0:
            check_free_space(shm_dir, needed)
            # .graphscale-offload.run-HOST-PID-RANDOM: the directories of dead runs on this host are removed first
            path = str(temp_sibling(Path(shm_dir) / "graphscale-offload", "run"))
            remove_with_run(path)  # before it exists: the launcher (or its janitor) removes it however the run ends
            os.mkdir(path, 0o700)
            raw = path.encode()
            if len(raw) >= _PATH_BYTES:
                raise RuntimeError(f"host-array directory path is too long: {path}")
            buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        buf = comm.broadcast(buf, 0, "setup").cpu()
        return bytes(buf[buf != 0].tolist()).decode()

    def _map(self, path: str, name: str, rows: int, width: int) -> None:
        if rows < 0 or width < 0:
            raise ValueError(f"host array {name!r}: negative shape ({rows}, {width})")
        size = rows * width
        if size == 0:
            self.arrays[name] = torch.zeros(rows, width, dtype=self.dtype)
            return
        flat = torch.from_file(str(Path(path) / name), shared=True, size=size, dtype=self.dtype)
        self.arrays[name] = flat.view(rows, width)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def nbytes(self) -> int:
        """Bytes of host memory held by all arrays."""
        return sum(t.numel() * t.element_size() for t in self.arrays.values())

    # ------------------------------------------------------------------ host-side edits
    def zero_rows(self, name: str, ids: torch.Tensor) -> None:
        """Set host rows ``ids`` of ``name`` to zero (a host-side operation, no transfer)."""
        self.arrays[name].index_fill_(0, ids.cpu(), 0)

    def close(self) -> None:
        """Unregister pinned pages (CUDA) and drop the mappings."""
        for t in self._registered:
            self._kit.unregister(t)
        self._registered.clear()
        self.arrays.clear()

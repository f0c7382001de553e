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
from graphscale.data.row_cache import advise_random
from graphscale.distributed.comm import Comm
from graphscale.distributed.launch import remove_with_run
from graphscale.metrics.units import format_bytes
from graphscale.strategies.offload.device import DeviceKit

_PATH_BYTES = 1024
#: the ``--shm-dir`` default: shared memory, unless the arrays exceed the host budget (:func:`array_directory`)
DEFAULT_SHM_DIR = "/dev/shm"
#: the share of a worker's ``--host-memory`` its share of the host arrays may take in shared memory; the rest is
#: the worker's own working memory (chunks in flight, plans, the model)
ARRAY_SHARE = 0.5


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


def array_directory(shm_dir: str, needed: int, workers: int, budget: int | None, spill_dir: str | None
                    ) -> tuple[str, bool]:
    """Where the host arrays go: ``(directory, in_memory)``.

    A ``--shm-dir`` other than the default is used as given (in memory: page-locked on an accelerator). With the
    default, the arrays live in shared memory (``/dev/shm``) when each worker's share, ``needed / workers``, fits in
    :data:`ARRAY_SHARE` of its host budget ``budget`` (``--host-memory``) and ``/dev/shm`` has room; otherwise they
    are files in ``spill_dir`` on disk (the cache directory), which the kernel pages in and writes back as the
    budget allows, not page-locked (copies from them are pageable: slower on an accelerator, bounded in memory).
    """
    if shm_dir != DEFAULT_SHM_DIR or spill_dir is None:
        return shm_dir, True
    fits = budget is None or needed <= workers * budget * ARRAY_SHARE
    if fits and os.path.isdir(shm_dir) and free_bytes(shm_dir) >= needed:
        return shm_dir, True
    os.makedirs(spill_dir, exist_ok=True)
    return spill_dir, False


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


def input_array(dims) -> str:
    """The host array holding the model's input rows: ``X`` when the input map learns, else ``H0``."""
    return "X" if dims.learned_input else "H0"


def shares_input(x: torch.Tensor | None, dtype: torch.dtype, device) -> bool:
    """Whether the graph's own features ``x`` serve as the input array (:func:`input_array`) instead of a copy:
    they are read only, so on a CPU device, in the run's dtype, the memory-mapped graph directory's features are
    used as they are (an accelerator reads page-locked host arrays)."""
    return x is not None and x.dtype == dtype and torch.device(device).type == "cpu" and x.is_contiguous()


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
        external: arrays of ``specs`` the caller already holds, used as they are (read-only inputs such as ``H^0``,
            the graph directory's memory-mapped features: never copied, never page-locked).
        budget: a worker's host memory budget (``--host-memory``, bytes; :func:`array_directory`).
        spill_dir: where the arrays go on disk when they exceed the budget (``None``: always ``shm_dir``).

    Raises:
        ValueError: on rank 0, ``shm_dir`` is not writable or has too little free space.
    """

    def __init__(self, comm: Comm, specs: dict[str, tuple[int, int]], dtype: torch.dtype,
                 device: torch.device, shm_dir: str, external: dict[str, torch.Tensor] | None = None,
                 budget: int | None = None, spill_dir: str | None = None) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        self.arrays: dict[str, torch.Tensor] = {}
        self._registered: list[torch.Tensor] = []
        self._kit = DeviceKit(self.device)
        elem = torch.empty(0, dtype=dtype).element_size()
        external = dict(external or {})
        for name, array in external.items():
            if tuple(array.shape) != tuple(specs[name]) or array.dtype != dtype:
                raise ValueError(f"host array {name!r}: given {tuple(array.shape)} {array.dtype}, expected "
                                 f"{tuple(specs[name])} {dtype}")
        specs = {name: shape for name, shape in specs.items() if name not in external}
        needed = sum(rows * width for rows, width in specs.values()) * elem
        path, self.in_memory = self._agree_on_directory(comm, shm_dir, needed, budget, spill_dir)
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
        for t in self.arrays.values() if self.in_memory else ():
            if self._kit.register(t):  # page-locked in place on an accelerator (pinned once, for the whole run)
                self._registered.append(t)
        self.arrays.update(external)
        self.external = frozenset(external)
        self.advised = tuple(name for name, t in self.arrays.items() if self._read_at_random(name, t, budget)
                             and advise_random(t))

    def _read_at_random(self, name: str, array: torch.Tensor, budget: int | None) -> bool:
        """Whether ``array`` is a mapped file the kernel cannot keep resident: an array spilled to disk, or an
        external input larger than a worker's :data:`ARRAY_SHARE` of ``budget``. Its rows are then read by
        chunk at random, so it is advised ``MADV_RANDOM``: a missed row reads its own page, not the kernel's
        read-around window (at 20M vertices, without the advice, a chunk of 190k source rows read 5.5 GB)."""
        if name in self.external:
            return budget is not None and array.numel() * array.element_size() > ARRAY_SHARE * budget
        return not self.in_memory

    @staticmethod
    def _agree_on_directory(comm: Comm, shm_dir: str, needed: int, budget: int | None,
                            spill_dir: str | None) -> tuple[str, bool]:
        """Rank 0 picks the directory (:func:`array_directory`) and creates the run's folder in it; every rank
        receives ``(folder, in_memory)``."""
        buf = torch.zeros(_PATH_BYTES, dtype=torch.uint8, device=comm.env.device)
        if comm.rank == 0:
            shm_dir, in_memory = array_directory(shm_dir, needed, comm.world_size, budget, spill_dir)
            buf[-1] = int(in_memory)
            check_free_space(shm_dir, needed)
            # .graphscale-offload.run-HOST-PID-RANDOM: the directories of dead runs on this host are removed first
            path = str(temp_sibling(Path(shm_dir) / "graphscale-offload", "run"))
            remove_with_run(path)  # before it exists: the launcher (or its janitor) removes it however the run ends
            os.mkdir(path, 0o700)
            raw = path.encode()
            if len(raw) >= _PATH_BYTES - 1:
                raise RuntimeError(f"host-array directory path is too long: {path}")
            buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        buf = comm.broadcast(buf, 0, "setup").cpu()
        text = buf[:-1]
        return bytes(text[text != 0].tolist()).decode(), bool(buf[-1])

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
        """Bytes of the arrays this object created (in shared memory, or spilled to disk); the caller's
        ``external`` arrays are not counted."""
        return sum(t.numel() * t.element_size() for name, t in self.arrays.items() if name not in self.external)

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

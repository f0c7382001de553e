"""The process's ``malloc``: which one is loaded, the retaining glibc configuration, preloaded alternatives.

Why. glibc serves every allocation above its mmap threshold (dynamic, at most 32 MiB on 64-bit) with a fresh
``mmap`` and returns it with ``munmap`` on free. A training epoch allocates several ``[N, d]`` tensors, so every
epoch the kernel hands out, and zeroes, the same gigabytes again: on a 1M-vertex GCN about half of the epoch is
system time (page faults). A *retaining* allocator keeps freed memory for the next request.

Modes (``--allocator`` of ``graphscale train``, :envvar:`GRAPHSCALE_ALLOCATOR`, ``bench peers --allocator``):

* ``retain`` - glibc configured in-process with ``mallopt``: ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` at
  :data:`RETAIN_BYTES` (2 GiB - 1, ``mallopt``'s largest value), so large blocks come from the heap and freed ones
  stay there for the next epoch (up to 2 GiB of free heap top is kept; beyond that it is trimmed). Applied only
  when it is safe (:func:`configure`): the process runs glibc's malloc (a preloaded tcmalloc / jemalloc already
  retains), and the user set no glibc malloc tuning of their own (``MALLOC_*_`` variables or ``glibc.malloc``
  tunables in ``GLIBC_TUNABLES``: theirs win). Otherwise the mode is reported as not applied, with the reason.
* ``default`` - leave malloc as the process found it.
* ``tcmalloc`` / ``jemalloc`` - a different malloc, which can only be chosen when a process starts
  (``LD_PRELOAD``): :func:`child_environment` gives the variables for a child process, :func:`configure` in that
  child checks that the library really is loaded. A missing library is an :class:`AllocatorUnavailable` error
  naming the Debian package that provides it.

What a process really uses is read back from the process itself (:func:`state`): the malloc library mapped into
it (``/proc/self/maps``), the settings this module applied, and optionally a probe that frees and reallocates 64
MiB and counts the minor page faults of touching it again (:func:`probe_refaults`: about 16,000 when freed memory
went back to the kernel, about 0 when it was retained).

Cost, and why ``retain`` is not the default. Retained memory stays resident after it is freed, and a heap fragments
where mmap'd blocks cannot, which raises the peak: on a 1M-vertex GCN (hidden 128, one thread) the RSS peak above the
data was 1,953 MiB with ``retain`` against 1,601 MiB without (since the hidden layer's gradient is no longer held
whole, :func:`~graphscale.nn.layers.linear_relu_linear`: 1,124-1,231 against 1,135-1,175 MiB), and a graph-parallel
worker's anonymous peak exceeded 1.2x its designed figure (1.27x at 300k vertices). The large per-epoch tensors come
from :mod:`graphscale.nn.buffers` instead, which keeps them across epochs without a heap (page faults per epoch 393k
-> 6k there, no peak cost), so ``retain`` only saves the page faults of the smaller tensors torch allocates: opt-in,
for runs that trade memory for the last of that system time.

The launcher applies the run's mode in every spawned worker and, for a one-worker run, in the calling process
for the duration of the run (:func:`applied`: glibc's default thresholds are restored afterwards and the retained
memory is given back with ``malloc_trim``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

#: Modes a run can ask for (``train --allocator``); ``tcmalloc`` / ``jemalloc`` need a fresh process.
MODES = ("retain", "default")
#: Modes ``bench peers --allocator`` offers (each applied to every measured process alike).
BENCH_MODES = ("default", "retain", "tcmalloc", "jemalloc")
#: Environment variable that sets a run's mode when ``--allocator`` is not given (``default`` when unset).
ENV_VAR = "GRAPHSCALE_ALLOCATOR"
#: ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` of the retaining configuration (mallopt takes an ``int``).
RETAIN_BYTES = 2**31 - 1
#: glibc's ``mallopt`` parameters (``<malloc.h>``).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: glibc's defaults, restored by :func:`restore` (the mmap threshold stops adapting once it has been set).
_GLIBC_DEFAULT_BYTES = 128 * 1024
#: Preloadable allocators: library file names (first found wins) and the Debian package that provides them.
PRELOAD = {
    "tcmalloc": (("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"), "libtcmalloc-minimal4"),
    "jemalloc": (("libjemalloc.so.2", "libjemalloc.so.1"), "libjemalloc2"),
}
_USER_MALLOC_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                     "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST")

_applied: dict | None = None  # the settings this process applied, or why not (None: configure not called)
_bounded: int | None = None  # the fixed mmap threshold bound_heap applied (None: not applied)
_mode: str | None = None  # the mode configure was last asked for


class AllocatorUnavailable(ValueError):
    """The asked-for allocator cannot be used here (library not installed, or not loaded in this process)."""


def resolve_mode(mode: str | None) -> str:
    """A run's mode: ``mode`` when given (non-empty), else :envvar:`GRAPHSCALE_ALLOCATOR`, else ``default``.

    Raises:
        ValueError: not one of :data:`MODES`.
    """
    value = mode or os.environ.get(ENV_VAR, "") or "default"
    if value not in MODES:
        where = "--allocator" if mode else f"${ENV_VAR}"
        raise ValueError(f"{where}: unknown allocator mode {value!r}; choose from {', '.join(MODES)} "
                         f"(tcmalloc / jemalloc: preload them with LD_PRELOAD, or compare them with "
                         f"`graphscale bench peers --allocator`)")
    return value


@functools.cache
def loaded_library() -> str:
    """The malloc this process runs: ``tcmalloc``, ``jemalloc`` or ``glibc``, from the libraries mapped into it
    (``/proc/self/maps``; ``glibc`` where that cannot be read). Read once: a malloc is chosen when the process
    starts (``LD_PRELOAD``), and :func:`trim` runs on training's hot path."""
    try:
        with open("/proc/self/maps") as maps:
            text = maps.read()
    except OSError:  # pragma: no cover - non-Linux
        return "glibc"
    for name in ("tcmalloc", "jemalloc"):
        if f"lib{name}" in text:
            return name
    return "glibc"


def library_path(name: str) -> str:
    """The file of preloadable allocator ``name`` on this machine.

    Raises:
        AllocatorUnavailable: not installed (the message names the Debian package).
    """
    files, package = PRELOAD[name]
    for folder in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)):
        for file in files:  # a library unpacked without root (`dpkg -x`) is found through LD_LIBRARY_PATH
            if os.path.exists(os.path.join(folder, file)):
                return os.path.join(folder, file)
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        listing = ""
    for file in files:
        for line in listing.splitlines():
            parts = line.strip().split(" => ")
            if len(parts) == 2 and parts[0].split(" ")[0] == file and os.path.exists(parts[1]):
                return parts[1]
    found = ctypes.util.find_library(files[0].split(".so")[0][3:])
    if found:
        return found
    raise AllocatorUnavailable(f"allocator {name!r} is not installed on this machine (none of {', '.join(files)} "
                               f"found in LD_LIBRARY_PATH or by ldconfig); install the Debian package {package} "
                               f"(apt-get install {package}; without root: `apt-get download {package} && "
                               f"dpkg -x {package}_*.deb DIR` and add DIR/usr/lib/x86_64-linux-gnu to "
                               f"LD_LIBRARY_PATH) or pick another --allocator")


def user_tuning() -> list[str]:
    """The glibc malloc settings the user gave through the environment (their settings win over ``retain``)."""
    given = [name for name in _USER_MALLOC_VARS if name in os.environ]
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    given += [f"GLIBC_TUNABLES={t}" for t in tunables.split(":") if t.startswith("glibc.malloc.")]
    return given


def _mallopt(param: int, value: int) -> bool:
    return bool(ctypes.CDLL(None).mallopt(ctypes.c_int(param), ctypes.c_int(value)))


def configure(mode: str) -> dict:
    """Apply ``mode`` to this process where it is safe, and return :func:`state`.

    ``retain`` sets glibc's thresholds (module docstring) unless another malloc is loaded or the user tuned
    glibc's; ``default`` changes nothing; ``tcmalloc`` / ``jemalloc`` check that the library is loaded (it must
    have been preloaded when the process started).

    Raises:
        AllocatorUnavailable: ``tcmalloc`` / ``jemalloc`` asked for but not loaded in this process.
        ValueError: unknown mode.
    """
    global _applied, _mode
    if mode not in BENCH_MODES:
        raise ValueError(f"unknown allocator mode {mode!r}; choose from {', '.join(BENCH_MODES)}")
    library = loaded_library()
    if mode in PRELOAD:
        if library != mode:
            raise AllocatorUnavailable(f"allocator {mode!r} asked for but this process runs {library}'s malloc: "
                                       f"{mode} must be preloaded when the process starts (LD_PRELOAD)")
        _mode = mode
        return state()
    if mode == "default" and _applied is not None:
        restore()
    if mode == "retain" and _applied is None:
        reason = None
        if library != "glibc":
            reason = f"{library} is loaded (it retains freed memory itself)"
        elif user_tuning():
            reason = f"the user's glibc malloc settings are kept ({', '.join(user_tuning())})"
        if reason is None:
            ok = _mallopt(_M_MMAP_THRESHOLD, RETAIN_BYTES) and _mallopt(_M_TRIM_THRESHOLD, RETAIN_BYTES)
            _applied = ({"mmap_threshold": RETAIN_BYTES, "trim_threshold": RETAIN_BYTES} if ok
                        else {"not_applied": "mallopt refused the settings"})
        else:
            _applied = {"not_applied": reason}
    _mode = mode
    return state()


def restore() -> None:
    """Undo :func:`configure`'s ``retain`` (and :func:`bound_heap`) in this process: glibc's default thresholds,
    retained memory given back (``malloc_trim``)."""
    global _applied, _mode
    if _applied is not None and "not_applied" not in _applied:
        _mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_BYTES)
        _mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_BYTES)
        ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(0))
    unbound_heap()
    _applied = _mode = None


#: the fixed mmap threshold :func:`bound_heap` sets by default
BOUNDED_MMAP_BYTES = 1 << 20


def bound_heap(nbytes: int = BOUNDED_MMAP_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` in this process, so that every block of that size or more is
    mapped on its own and unmapped when freed; return whether it was applied.

    glibc's threshold otherwise adapts: it rises to the largest block freed so far (up to 32 MiB), and later blocks
    below it come from the heap, where blocks of varying sizes allocated and freed in turn fragment it. A worker
    that streams chunks of varying size through a fixed working set (offload) then grows by several chunks'
    worth of freed, unreturned memory per pass (measured: 150 MiB on a pass whose tracked working set is 30 MiB);
    with the fixed threshold it stays at its working set, for a page fault per large block. Applied only under the
    ``default`` mode with glibc's malloc and no glibc tuning of the user's (``retain``, another malloc or the
    user's settings win); :func:`restore` undoes it."""
    global _bounded
    retained = _applied is not None and "not_applied" not in _applied
    if retained or loaded_library() != "glibc" or user_tuning():
        return False
    if _bounded is None and not _mallopt(_M_MMAP_THRESHOLD, nbytes):
        return False
    _bounded = _bounded or nbytes
    return True


def unbound_heap() -> None:
    """Undo :func:`bound_heap` (glibc's default threshold, which no longer adapts once set, as :func:`restore`)."""
    global _bounded
    if _bounded is not None:
        _mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_BYTES)
        _bounded = None


def trim() -> bool:
    """Give the free memory this process's malloc keeps back to the OS now (glibc's ``malloc_trim(0)``: the free
    top of every heap and the free pages inside them); ``False`` where the malloc is not glibc's.

    A worker calls it between loading its data and its first epoch, so that loading's temporaries are not held
    through training by the retaining configuration."""
    if loaded_library() != "glibc":
        return False
    ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(0))
    return True


@contextmanager
def applied(mode: str) -> Iterator[dict]:
    """``configure(mode)`` for the duration of the block in this process (a run in the caller's process), then
    :func:`restore` if this block applied it."""
    first = _mode is None
    info = configure(mode)
    try:
        yield info
    finally:
        if first:
            restore()


def state() -> dict:
    """What this process really uses: the ``mode`` :func:`configure` was asked for (``None``: not called), the
    malloc ``library`` mapped into it, ``retaining`` (whether freed large blocks stay with the process: another
    malloc, or glibc with the settings applied), and the ``settings`` applied (or why not)."""
    library = loaded_library()
    settings = dict(_applied) if _applied is not None else {}
    retaining = library != "glibc" or ("mmap_threshold" in settings)
    if _bounded is not None:
        settings["bounded_mmap_threshold"] = _bounded
    return {"mode": _mode, "library": library, "retaining": retaining, "settings": settings, "pid": os.getpid()}


def probe_refaults(nbytes: int = 64 << 20) -> int:
    """Minor page faults of touching ``nbytes`` that were just freed and allocated again: about
    ``nbytes / page size`` when freed memory went back to the kernel, about 0 when the allocator retained it."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(nbytes)
    ctypes.memset(block, 1, nbytes)
    libc.free(block)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(nbytes)
    ctypes.memset(block, 2, nbytes)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    libc.free(block)
    return after - before


def child_environment(mode: str) -> dict[str, str]:
    """Environment variables that give a child process started afterwards the allocator ``mode``: ``LD_PRELOAD``
    for ``tcmalloc`` / ``jemalloc`` (prepended to any there is), :envvar:`GRAPHSCALE_ALLOCATOR` for ``retain`` /
    ``default`` (which the child applies with :func:`configure`).

    Raises:
        AllocatorUnavailable: the library is not installed.
    """
    if mode in PRELOAD:
        path = library_path(mode)
        current = os.environ.get("LD_PRELOAD", "")
        return {"LD_PRELOAD": f"{path}:{current}" if current else path}
    if mode not in BENCH_MODES:
        raise ValueError(f"unknown allocator mode {mode!r}; choose from {', '.join(BENCH_MODES)}")
    return {ENV_VAR: mode}


@contextmanager
def environment(changes: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` inside the block (children spawned there inherit them), restored after."""
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

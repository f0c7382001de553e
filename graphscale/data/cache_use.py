"""The locks of the cache directory's entries: who writes an entry, and who is using it.

Every entry a run writes into the cache (a dataset's graph directory, a training graph directory, a partition store,
a vertex partition, a strategy's shared folder, ...) has a key (the digest in its name) and two lock files in
``CACHE/locks``:

* ``KEY.lock``: held exclusively (``flock``) while a process checks for the entry and writes it when it is missing
  (:func:`writing`), so concurrent runs write an entry once;
* ``KEY.use``: held *shared* by every process that prepared or found the entry, from that moment until the process
  exits (:func:`mark_in_use`; taken before the write lock is released, so there is no moment in between; a process
  holds at most :data:`MAX_IN_USE`, releasing its least recently used beyond), and its modification time set then:
  the entry's last use.

``graphscale cache clear`` (:mod:`graphscale.data.cache_entries`) removes an entry only while it holds both
exclusively, taken without waiting: a run writing the entry or one that is using it makes the clear skip it. The lock
files themselves are never removed (an empty file each): a process that opened one before it was unlinked would lock
a file the next process no longer sees, and two writers would both proceed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

#: ``KEY.use`` files this process holds a shared lock on (path -> descriptor, least recently used first)
_IN_USE: dict[Path, int] = {}
#: the most in-use locks a process holds (one descriptor each); beyond, the least recently used is released: a run
#: uses a handful of entries, so only a long session (many runs in one Python process) lets go of its oldest ones
MAX_IN_USE = 256


def lock_file(cache: Path, key: str) -> Path:
    """``CACHE/locks/KEY.lock``: held exclusively while the entry is checked and written."""
    return Path(cache) / "locks" / f"{key}.lock"


def use_file(cache: Path, key: str) -> Path:
    """``CACHE/locks/KEY.use``: held shared by the processes using the entry; its modification time is the last use."""
    return Path(cache) / "locks" / f"{key}.use"


def mark_in_use(cache: Path, key: str) -> None:
    """Hold a shared lock on the entry ``key`` until this process exits, and record the use (module docstring)."""
    path = use_file(cache, key)
    if path in _IN_USE:
        fd = _IN_USE.pop(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
    os.utime(fd)
    _IN_USE[path] = fd  # the most recently used last
    while len(_IN_USE) > MAX_IN_USE:
        os.close(_IN_USE.pop(next(iter(_IN_USE))))


@contextlib.contextmanager
def writing(cache: Path, key: str) -> Iterator[None]:
    """An exclusive lock on entry ``key`` while the block checks and writes it (released when the block ends or the
    process dies); a block that completes marks the entry in use by this process (:func:`mark_in_use`)."""
    path = lock_file(cache, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
            mark_in_use(cache, key)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def exclusive_or_none(cache: Path, key: str) -> Iterator[str | None]:
    """Both locks of entry ``key`` exclusively, without waiting: yields ``None`` while they are held, else why not
    (``being written by a running process`` / ``in use by a running process``; this process's own use counts:
    ``flock``s of two descriptors conflict within a process too)."""
    with contextlib.ExitStack() as stack:
        for path, busy in ((lock_file(cache, key), "being written by a running process"),
                           (use_file(cache, key), "in use by a running process")):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            stack.callback(os.close, fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield busy
                return
        yield None

"""An exclusive lock on an output a run writes (``--checkpoint``, ``--json``, ``--tensorboard``, ``partition
--out``, ...), held from the checks before any work until the command ends, so that two runs naming the same
output do not overwrite each other: the second gets one line naming the first's process and stops before it
starts any work.

The lock is an ``flock`` on a hidden sibling of the output, ``.NAME.lock`` in the directory of the output (a
symlink's target, resolved first), holding the holder's PID and host. It is removed when released; a holder that
died (SIGKILL) holds nothing (the kernel drops its ``flock``), and the next run takes the file over. A FIFO or
character device (``/dev/stdout``) is not locked: it keeps no output for a second run to overwrite. ``flock`` is
per host on most network file systems: two hosts writing one shared path are not told apart.

Use::

    with output_locks([("--json", "run.json"), ("--checkpoint", "ckpt.pt")]):
        ...  # write them
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path


class OutputLocked(ValueError):
    """Another process holds the lock of an output; the message names the option, the path and that process."""


def lock_path(path: str | os.PathLike) -> Path | None:
    """The lock file of output ``path`` (``.NAME.lock`` beside its resolved target); ``None`` for a FIFO or
    character device (not locked, module docstring)."""
    target = Path(os.path.realpath(Path(path).expanduser()))
    with contextlib.suppress(OSError):
        mode = os.stat(target).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            return None
    return target.with_name(f".{target.name}.lock")


class OutputLock:
    """An exclusive, non-blocking lock on one output (module docstring); :meth:`acquire` raises
    :class:`OutputLocked` when another process holds it. Re-entrant within a process: a second lock of the same
    output in the holding process is a no-op (``--repeat`` runs and the Python API share one command's locks)."""

    _held: dict[Path, list[int]] = {}  # lock file -> [its descriptor, how many OutputLocks of this process hold it]

    def __init__(self, path: str | os.PathLike, option: str = "") -> None:
        self.path, self.option = Path(path), option
        self.file = lock_path(path)
        self._counted = False

    def acquire(self) -> OutputLock:
        if self.file is None or self._counted:
            return self
        if self.file in OutputLock._held:
            OutputLock._held[self.file][1] += 1
            self._counted = True
            return self
        while True:
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise ValueError(f"{self.option} {self.path}: cannot create its lock file {self.file} "
                                 f"({err.strerror or err})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                name = f"{self.option} {self.path}" if self.option else str(self.path)
                raise OutputLocked(f"{name} is being written by another graphscale run ({holder}); wait for it to "
                                   "finish or give another path") from None
            # the file may have been removed by a holder releasing it between our open and flock: retry on the new one
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.file))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        OutputLock._held[self.file] = [fd, 1]
        self._counted = True
        return self

    def release(self) -> None:
        if not self._counted or self.file is None:
            return
        self._counted = False
        held = OutputLock._held[self.file]
        held[1] -= 1
        if held[1] > 0:
            return
        del OutputLock._held[self.file]
        with contextlib.suppress(OSError):
            self.file.unlink()  # while locked: a process that opened it meanwhile retries on a fresh file
        os.close(held[0])

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text:
            return text
    return "its PID not recorded yet"


@contextlib.contextmanager
def output_locks(outputs: Iterable[tuple[str, str | os.PathLike | None]]) -> Iterator[list[OutputLock]]:
    """Hold the locks of every ``(option, path)`` output (``None`` paths skipped) for the ``with`` block; all or
    none: a lock held elsewhere releases those taken and raises :class:`OutputLocked`."""
    with contextlib.ExitStack() as stack:
        locks = [stack.enter_context(OutputLock(path, option)) for option, path in outputs if path]
        yield locks

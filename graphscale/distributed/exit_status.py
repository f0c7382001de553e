"""What a worker's exit status says about how it ended, in words for the one-line error of a run it ended.

A spawned worker that returns or raises writes its outcome; one that ends without (killed by a signal, a crash in
native code, ``os._exit``) leaves only its exit status, which ``subprocess`` and ``multiprocessing`` report as a
negative number for a signal (``-9``: SIGKILL) and as the code otherwise.
"""

from __future__ import annotations

import signal

#: what usually sends a signal that ends a worker (the signals a user of a training run meets)
_CAUSES = {
    "SIGKILL": "the kernel's out-of-memory killer sends it when memory runs out; also `kill -9`",
    "SIGSEGV": "a segmentation fault: a crash in native code, e.g. an out-of-bounds access in a kernel",
    "SIGBUS": "a bus error: a memory-mapped file was truncated or its file system (e.g. /dev/shm) is full",
    "SIGABRT": "aborted: a failed check in native code",
    "SIGILL": "an illegal instruction: native code built for another CPU",
    "SIGFPE": "an arithmetic fault in native code, e.g. an integer division by zero",
    "SIGTERM": "terminated by another process (a scheduler, `kill`)",
    "SIGINT": "interrupted",
    "SIGHUP": "its terminal closed",
    "SIGPIPE": "it wrote to a closed pipe",
    "SIGXFSZ": "a file grew past the file-size limit (`ulimit -f`)",
    "SIGXCPU": "it ran past the CPU-time limit (`ulimit -t`)",
}


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number this platform has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(exitcode: int | None) -> str:
    """How a worker that left no outcome ended, as the end of ``worker R ...``.

    ``-9``: ``was killed by signal 9 (SIGKILL; the kernel's out-of-memory killer sends it when memory runs out;
    also `kill -9`)``; ``3``: ``exited with code 3 and left no traceback (os._exit or a crash)``; ``None``:
    ``ended without a result``.
    """
    if exitcode is None:
        return "ended without a result"
    if exitcode < 0:
        name = signal_name(-exitcode)
        cause = _CAUSES.get(name)
        return f"was killed by signal {-exitcode} ({name}{'; ' + cause if cause else ''})"
    return f"exited with code {exitcode} and left no traceback (os._exit or a crash)"

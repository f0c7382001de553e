"""The entry point of a spawned worker: a fresh interpreter started by :func:`graphscale.distributed.launch.launch`.

The launcher starts ``python -c BOOTSTRAP LAUNCH_FILE WORKDIR RANK LAUNCHER_PID`` (:class:`WorkerProcess`); the
bootstrap sets ``sys.path`` to the launcher's (read from ``LAUNCH_FILE``) and calls
:func:`graphscale.distributed.launch.worker_main`, the worker's body. The
launcher's script is imported only when the run refers to something defined there
(:mod:`graphscale.distributed.main_module`), never otherwise.
"""

from __future__ import annotations

import subprocess

#: the ``-c`` program of a spawned worker (argv: the launch file, the launch directory, the rank, the launcher's pid)
BOOTSTRAP = ("import pickle, sys; f = open(sys.argv[1], 'rb'); sys.path[:] = pickle.load(f)['preparation']"
             "['sys_path']; f.close(); from graphscale.distributed.launch import worker_main; "
             "worker_main(sys.argv[1:])")


class WorkerProcess:
    """A spawned worker: a fresh interpreter running :data:`BOOTSTRAP` (``subprocess``), with
    the part of ``multiprocessing.Process``'s interface the launcher uses."""

    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        self.pid = self.popen.pid

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()  # negative: killed by that signal, as multiprocessing reports it

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        if self.is_alive():
            self.popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self.popen.kill()

"""The entry point of a spawned worker: a fresh interpreter started by :func:`graphscale.distributed.launch.launch`.

The launcher starts ``python -c BOOTSTRAP LAUNCH_FILE WORKDIR RANK LAUNCHER_PID``; the bootstrap sets ``sys.path``
to the launcher's (read from ``LAUNCH_FILE``) and calls :func:`main`, which runs the launcher's worker body. The
launcher's script is imported only when the run refers to something defined there
(:mod:`graphscale.distributed.main_module`), never otherwise.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

#: the ``-c`` program of a spawned worker (argv: the launch file, the launch directory, the rank, the launcher's pid)
BOOTSTRAP = ("import pickle, sys; f = open(sys.argv[1], 'rb'); sys.path[:] = pickle.load(f)['preparation']"
             "['sys_path']; f.close(); from graphscale.distributed.worker import main; main(sys.argv[1:])")


def main(argv: list[str]) -> None:
    """Run worker ``argv[2]`` of the launch described by the file ``argv[0]`` (launch directory ``argv[1]``)."""
    from graphscale.distributed.launch import _worker

    launch_file, workdir, rank, launcher_pid = argv[0], argv[1], int(argv[2]), int(argv[3])
    with open(launch_file, "rb") as f:
        header = pickle.load(f)
    _worker(rank, workdir, launcher_pid, header)


class WorkerProcess:
    """A spawned worker: a fresh interpreter running :mod:`graphscale.distributed.worker` (``subprocess``), with
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


if __name__ == "__main__":  # pragma: no cover - started through BOOTSTRAP
    main(sys.argv[1:])

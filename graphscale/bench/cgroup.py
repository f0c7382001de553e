"""One command measured as the OS sees it, optionally under a Linux memory cgroup limit.

:func:`run_measured` runs a command (a whole process tree: a training run's launcher and its workers) and reports its
wall time, the largest peak resident set of any process in the tree (``ru_maxrss`` of the waited-for children:
the largest over the processes it waited for), the bytes it read from and wrote to storage (``ru_inblock`` /
``ru_oublock``, 512-byte blocks that reached the block layer; page-cache hits read nothing) and, under a memory
cgroup, the cgroup's peak charge: anonymous memory, shared memory and the page cache together, as Ginex measures a
memory limit. With ``limit`` the tree runs in a fresh cgroup (v1 ``memory`` controller, else v2) whose
``memory.limit_in_bytes`` (``memory.max``) is ``limit``: the kernel reclaims page cache to stay below it and kills
a process when anonymous memory does not fit (reported as ``oom_killed``). Creating cgroups needs root; without
the controller or the rights the command runs unconfined and :attr:`Measured.cgroup` says why.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


@dataclass
class Measured:
    """What :func:`run_measured` measured of one command."""

    returncode: int
    seconds: float
    max_rss: int            # bytes, the largest process of the tree
    read_bytes: int
    written_bytes: int
    cgroup_peak: int | None  # bytes charged to the cgroup at most (None: no cgroup)
    oom_killed: bool
    cgroup: str             # the cgroup's path, or why there was none
    stdout: str
    stderr: str


class _Cgroup:
    """A fresh memory cgroup with a limit (v1 or v2), removed on :meth:`close`."""

    def __init__(self, limit: int) -> None:
        name = f"graphscale-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if (V1_ROOT / "memory.limit_in_bytes").exists():
            self.v1, self.path = True, V1_ROOT / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            try:  # no swap here, but where there is, keep the limit a limit on memory
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            except OSError:
                pass
        elif "memory" in (V2_ROOT / "cgroup.controllers").read_text().split():
            self.v1, self.path = False, V2_ROOT / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit))
            (self.path / "memory.swap.max").write_text("0")
        else:
            raise OSError("no memory cgroup controller is mounted")

    def join(self) -> None:
        """Move the calling process into the cgroup (run in the child before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int | None:
        file = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        try:
            return int((self.path / file).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        try:
            if self.v1:
                fields = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
                return int(fields.get("oom_kill", 0))
            fields = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            return int(fields.get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        for _ in range(50):  # the tree's last processes may still be leaving
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def run_measured(cmd: list[str], *, limit: int | None = None, env: dict | None = None,
                 timeout: float | None = None) -> Measured:
    """Run ``cmd`` to completion and measure it (module docstring); ``limit``: a memory cgroup limit in bytes."""
    group, why = None, "no limit asked"
    if limit is not None:
        try:
            group = _Cgroup(limit)
            why = str(group.path)
        except OSError as err:
            why = f"unconfined: cannot create a memory cgroup ({err})"
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                preexec_fn=group.join if group is not None else None)
        while True:  # wait4: the child's own rusage (its tree's largest RSS, its blocks), not this process's
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if timeout is not None and time.perf_counter() - start > timeout:
                proc.kill()
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    peak = group.peak() if group is not None else None
    oom = group.oom_kills() > 0 if group is not None else False
    if group is not None:
        group.close()
    return Measured(returncode=proc.returncode, seconds=seconds, max_rss=usage.ru_maxrss * 1024,
                    read_bytes=usage.ru_inblock * 512, written_bytes=usage.ru_oublock * 512, cgroup_peak=peak,
                    oom_killed=oom, cgroup=why, stdout=stdout, stderr=stderr)

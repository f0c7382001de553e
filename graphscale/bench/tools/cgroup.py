"""One command measured as the OS sees it, optionally under a Linux memory cgroup limit.

:func:`run_measured` runs a command (a whole process tree: a training run's launcher and its workers) and reports its
wall time, the largest peak resident set of any process in the tree (``ru_maxrss`` of the command as its own small
parent process sees it: the largest over the processes waited for), the bytes it read from and wrote to storage
(``ru_inblock`` / ``ru_oublock``, 512-byte blocks that reached the block layer; page-cache hits read nothing) and,
under a memory cgroup, the cgroup's peak charge (anonymous memory, shared memory and the page cache together, as
Ginex measures a memory limit) and the peak of its anonymous plus shared memory, sampled every 50 ms (what the kernel
cannot reclaim: the resident set also counts mapped file pages, which it can). With ``limit`` the tree runs in a
fresh cgroup (v1 ``memory`` controller, else v2) whose
``memory.limit_in_bytes`` (``memory.max``) is ``limit``: the kernel reclaims page cache to stay below it and kills
a process when anonymous memory does not fit (reported as ``oom_killed``). Creating cgroups needs root; without
the controller or the rights the command runs unconfined and :attr:`Measured.cgroup` says why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

#: the small process (``python -S``) that forks the command, waits for it and writes its rusage as JSON to the fd
#: given: a command forked straight from this process would count this process's resident set in its peak
#: (``ru_maxrss`` keeps the pre-exec high-water mark)
_REPORTER = """import json, os, sys
fd, procs = int(sys.argv[1]), sys.argv[2]
if procs:
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
pid = os.fork()
if pid == 0:
    os.close(fd)
    try:
        os.execvp(sys.argv[3], sys.argv[3:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
code = os.waitstatus_to_exitcode(status)
os.write(fd, json.dumps({"code": code, "maxrss": ru.ru_maxrss, "inblock": ru.ru_inblock,
                         "oublock": ru.ru_oublock}).encode())
sys.exit(code if code >= 0 else 128 - code)
"""
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
    anon_peak: int | None    # the cgroup's anonymous + shared memory at most, sampled (None: no cgroup)
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

    def peak(self) -> int | None:
        file = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        try:
            return int((self.path / file).read_text())
        except (OSError, ValueError):
            return None

    def anon(self) -> int | None:
        """The cgroup's anonymous memory plus shared memory (tmpfs) now: what reclaiming page cache cannot free."""
        try:
            fields = dict(line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        except (OSError, ValueError):
            return None
        if self.v1:
            return int(fields.get("total_rss", 0)) + int(fields.get("total_shmem", 0))
        return int(fields.get("anon", 0)) + int(fields.get("shmem", 0))

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
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        procs = str(group.path / "cgroup.procs") if group is not None else ""  # the reporter joins it first
        proc = subprocess.Popen([sys.executable, "-S", "-c", _REPORTER, str(write_end), procs, *cmd], env=env,
                                stdout=out, stderr=err, pass_fds=(write_end,), start_new_session=True)
        os.close(write_end)
        anon_peak = None
        while proc.poll() is None:
            now = group.anon() if group is not None else None
            if now is not None:
                anon_peak = max(anon_peak or 0, now)
            if timeout is not None and time.perf_counter() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        with os.fdopen(read_end) as pipe:
            usage = json.loads(pipe.read() or '{"code": null, "maxrss": 0, "inblock": 0, "oublock": 0}')
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    code = usage["code"] if usage["code"] is not None else proc.returncode
    peak = group.peak() if group is not None else None
    oom = group.oom_kills() > 0 if group is not None else False
    if group is not None:
        group.close()
    return Measured(returncode=code, seconds=seconds, max_rss=usage["maxrss"] * 1024,
                    read_bytes=usage["inblock"] * 512, written_bytes=usage["oublock"] * 512, cgroup_peak=peak,
                    anon_peak=anon_peak,
                    oom_killed=oom, cgroup=why, stdout=stdout, stderr=stderr)

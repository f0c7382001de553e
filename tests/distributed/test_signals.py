"""Workers die with the launcher: SIGKILL, SIGTERM and Ctrl-C of ``graphscale train`` leave no worker processes and
no launch directory behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:  # it just exited
                continue
            if int(ppid) == pid and state != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal and /proc are Linux-only")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_stopping_the_launcher_stops_its_workers(tmp_path, sig):
    err = tmp_path / "stderr"
    with err.open("w") as stderr:  # a file, not a pipe: orphaned workers would hold a pipe open
        launcher = subprocess.Popen(
            [sys.executable, "-m", "graphscale.cli", "train", "--strategy", "graph-parallel", "--workers", "2",
             "--epochs", "100000", "--no-progress"],
            cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.DEVNULL, stderr=stderr,
            # as from a terminal: a process started with SIGINT ignored keeps ignoring it (Python installs its
            # Ctrl-C handler only when SIGINT has the default action), whatever the test runner inherited
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - async-signal-safe
    workers: list[int] = []
    try:
        # the workers are training once both have joined the group (its store file is in the launch directory)
        _wait_for(lambda: list(tmp_path.glob("graphscale-launch-*/store")), 60, "the workers to start")
        workers = [pid for pid in _children(launcher.pid)  # the worker entry point's bootstrap (worker.BOOTSTRAP)
                   if b"import worker_main" in (Path("/proc") / str(pid) / "cmdline").read_bytes()]
        assert len(workers) == 2
        time.sleep(0.5)
        launcher.send_signal(sig)
        launcher.wait(timeout=30)  # generous: a loaded 2-core machine once needed more than 10 s
        _wait_for(lambda: not any(map(_alive, workers)), 5, "the workers to exit")
        _wait_for(lambda: not list(tmp_path.glob("graphscale-launch-*")), 5, "the launch directory to go")
    finally:
        launcher.kill()
        launcher.wait()
        for pid in filter(_alive, workers):  # only when the test failed
            os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == {signal.SIGKILL: -9, signal.SIGTERM: 143, signal.SIGINT: 130}[sig]
    if sig == signal.SIGINT:
        assert err.read_text() == "graphscale: interrupted\n"
    if sig == signal.SIGTERM:
        assert "Traceback" not in err.read_text()

"""Outputs a user names: special files written in place, symlinks followed, write failures in one line naming the
option, path, cause and bytes (fault injection: FIFOs, symlinks, a file-size limit), and the exclusive lock on every
output of a run (a second process holding it)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from graphscale.cli import main
from graphscale.data.formats import write_json_atomic
from graphscale.data.output_lock import OutputLock, OutputLocked, lock_path
from graphscale.data.outputs import check_output_dir, check_output_path, write_output

ROOT = Path(__file__).resolve().parents[1]


def _read_fifo(path: Path, into: list) -> threading.Thread:
    def reader():
        with open(path, "rb") as handle:
            into.append(handle.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread


def test_a_fifo_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    got: list = []
    thread = _read_fifo(fifo, got)
    check_output_path(fifo, "--json")
    write_json_atomic(fifo, {"a": 1}, option="--json")
    thread.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got[0]) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left


def test_a_character_device_is_written_in_place(tmp_path):
    before = os.stat("/dev/null")
    write_output("/dev/null", b"x" * 100, option="--json")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev
    link = tmp_path / "out.json"
    link.symlink_to("/dev/null")  # a link to a device: the device, written in place; the link stays
    write_output(link, b"{}", option="--json")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_is_resolved_and_its_target_replaced(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ckpt.pt"
    target.write_text("old")
    link = tmp_path / "link.pt"
    link.symlink_to(target)
    write_output(link, b"new", option="--checkpoint")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "fresh.json")  # a link to a file not written yet: created there
    write_json_atomic(dangling, [1], option="--json")
    assert dangling.is_symlink() and json.loads((tmp_path / "real" / "fresh.json").read_text()) == [1]
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["ckpt.pt", "fresh.json"]


def test_what_is_neither_file_fifo_nor_device_is_refused_in_one_line(tmp_path):
    (tmp_path / "d").mkdir()
    link = tmp_path / "l"
    link.symlink_to(tmp_path / "d")
    for path in (tmp_path / "d", link):
        with pytest.raises(ValueError, match=r"^--json .* is a directory; give a file path$"):
            write_output(path, b"{}", option="--json")
        with pytest.raises(ValueError, match=r"^--json .* is a directory"):
            check_output_path(path, "--json")


def test_train_writes_its_report_into_a_fifo_and_its_checkpoint_through_a_symlink(tmp_path, capsys):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    (tmp_path / "store").mkdir()
    link = tmp_path / "ckpt.pt"
    link.symlink_to(tmp_path / "store" / "ckpt.pt")
    got: list = []
    thread = _read_fifo(fifo, got)
    assert main(["train", "--epochs", "1", "--no-progress", "--hidden", "8", "--json", str(fifo),
                 "--checkpoint", str(link)]) == 0
    thread.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and json.loads(got[0])["final"]["best_epoch"] == 0
    assert link.is_symlink() and (tmp_path / "store" / "ckpt.pt").stat().st_size > 0
    assert not [p for p in tmp_path.rglob(".*")]  # no lock file or temporary left behind


def _python(script: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=env, timeout=120, **kwargs)


def test_a_write_past_the_file_size_limit_names_option_path_cause_and_bytes(tmp_path):
    """RLIMIT_FSIZE below the output's size: one line naming the option, the path, ``File too large`` and the bytes;
    the old contents stay and no temporary is left (the report's JSON and a checkpoint alike)."""
    (tmp_path / "r.json").write_text("old")
    (tmp_path / "c.pt").write_text("old")
    result = _python("""
        import resource, sys, torch
        from graphscale.checkpoint import write_checkpoint
        from graphscale.data.formats import write_json_atomic
        from graphscale.data.outputs import OutputError
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        for write in (lambda: write_json_atomic(sys.argv[1], list(range(5000)), option="--json"),
                      lambda: write_checkpoint(sys.argv[2], {"w": torch.zeros(10000)})):
            try:
                write()
            except OutputError as err:
                print(err)
        """, str(tmp_path / "r.json"), str(tmp_path / "c.pt"))
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 2, result.stderr
    assert lines[0].startswith(f"cannot write --json {tmp_path / 'r.json'} (File too large; ")
    assert lines[1].startswith(f"cannot write --checkpoint {tmp_path / 'c.pt'} (File too large; ")
    assert all(" bytes to write)" in line and "ulimit -f" in line for line in lines)
    assert (tmp_path / "r.json").read_text() == "old" and (tmp_path / "c.pt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt", "r.json"]


@pytest.mark.slow
def test_train_prints_its_results_before_a_report_write_that_fails(tmp_path):
    """The file-size limit set just before the outputs are written: the results table and the test score are out,
    then one line naming --json and the cause, exit 1."""
    result = _python("""
        import resource, sys
        import graphscale.run
        from graphscale.cli import main
        write = graphscale.run.write_outputs
        def limited(report, config):
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            write(report, config)
        graphscale.run.write_outputs = limited
        sys.exit(main(["train", "--epochs", "1", "--hidden", "8", "--no-progress", "--json", sys.argv[1]]))
        """, str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stderr
    assert "test accuracy at best validation: " in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"graphscale: error: cannot write --json {tmp_path / 'r.json'} (File too large; ")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any directory")
def test_an_unwritable_output_directory_is_refused_before_any_work(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ValueError, match=r"^--out .*: cannot write in .* \(Permission denied\)$"):
            check_output_dir(locked / "store", "--out", through_sibling=True)
        with pytest.raises(ValueError, match=r"cannot write in .* \(Permission denied\)"):
            check_output_path(locked / "r.json", "--json")
    finally:
        locked.chmod(0o700)


# ------------------------------------------------------------------ locks
HOLD = """
    import sys, time
    from graphscale.data.output_lock import OutputLock
    with OutputLock(sys.argv[1], "--x"):
        print("held", flush=True)
        sys.stdin.read()
    """


@pytest.fixture
def holder():
    """Start a process that holds the lock of a path until its stdin closes; yields (start(path) -> Popen)."""
    procs = []

    def start(path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLD), str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in procs:
        proc.stdin.close()
        proc.wait(30)


@pytest.mark.parametrize("option", ["--checkpoint", "--json", "--tensorboard"])
def test_a_second_train_naming_a_locked_output_stops_naming_the_holder(option, tmp_path, capsys, holder):
    if option == "--tensorboard":
        pytest.importorskip("tensorboard")
    path = tmp_path / ("tb" if option == "--tensorboard" else "out")
    proc = holder(path)
    assert main(["train", "--epochs", "1", "--no-progress", option, str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"graphscale: error: {option} {path} is being written by another graphscale run (pid {proc.pid} "
                   f"on {os.uname().nodename}); wait for it to finish or give another path\n")


def test_a_second_partition_to_a_locked_store_stops_naming_the_holder(tmp_path, capsys, holder):
    out = tmp_path / "store"
    proc = holder(out)
    assert main(["partition", "--dataset", "cora", "--method", "random", "--parts", "2", "--out", str(out)]) == 2
    assert f"--out {out} is being written by another graphscale run (pid {proc.pid} " in capsys.readouterr().err
    assert not out.exists()


def test_a_second_convert_to_a_locked_directory_stops_naming_the_holder(tmp_path, capsys, holder):
    out = tmp_path / "graph"
    proc = holder(out)
    assert main(["convert", "--dataset", "sbm:nodes=50,degree=4,features=2", "--out", str(out)]) == 2
    assert f"--out {out} is being written by another graphscale run (pid {proc.pid} " in capsys.readouterr().err
    assert not out.exists()


def test_locks_are_released_removed_and_taken_over_from_a_dead_holder(tmp_path):
    path = tmp_path / "ckpt.pt"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLD), str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(OutputLocked, match=f"pid {proc.pid} "):
        OutputLock(path, "--checkpoint").acquire()
    proc.kill()  # SIGKILL: its lock file stays, its flock goes with it
    proc.wait(30)
    assert lock_path(path).exists()
    with OutputLock(path, "--checkpoint"), OutputLock(path, "--checkpoint"):  # re-entrant in one process
        assert f"pid {os.getpid()} " in lock_path(path).read_text()
    assert not lock_path(path).exists()
    assert lock_path("/dev/null") is None  # a device is not locked


@pytest.mark.slow
def test_sigterm_during_a_partition_store_write_leaves_no_temporary(tmp_path):
    """SIGTERM while the store's temporary directory exists: the command unwinds as on Ctrl-C (exit 143), the
    temporary and the lock file are removed, no store is left half-written."""
    import signal
    import time

    out = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-m", "graphscale", "partition", "--dataset",
                             "sbm:nodes=200000,degree=8,features=16,seed=1", "--method", "random", "--parts", "4",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 300
    while not any(".tmp-" in p.name for p in tmp_path.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, "the store was never being written"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 143, proc.stderr.read()
    assert list(tmp_path.iterdir()) == []

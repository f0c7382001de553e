"""Error logs (the tracebacks of one-line errors) live in the cache directory, at most MAX_ERROR_LOGS of them."""

from __future__ import annotations

import os

from graphscale.cli import MAX_ERROR_LOGS, write_error_log


def test_error_logs_go_to_the_cache_directory_and_their_count_is_bounded(tmp_path):
    errors = tmp_path / "errors"
    errors.mkdir()
    for i in range(MAX_ERROR_LOGS + 5):  # older logs of dead processes
        log = errors / f"graphscale-error-{10_000_000 + i}.log"
        log.write_text("old")
        os.utime(log, (1_000_000 + i, 1_000_000 + i))
    path = write_error_log("Traceback ...", str(tmp_path))
    assert path == errors / f"graphscale-error-{os.getpid()}.log" and path.read_text() == "Traceback ..."
    kept = sorted(p.name for p in errors.iterdir())
    assert len(kept) == MAX_ERROR_LOGS and path.name in kept
    assert f"graphscale-error-{10_000_000 + 5}.log" not in kept  # the oldest went first
    assert f"graphscale-error-{10_000_000 + MAX_ERROR_LOGS + 4}.log" in kept


def test_a_killed_worker_is_one_line_naming_the_signal_and_keeps_no_log(tmp_path, monkeypatch, capsys):
    """A worker that left no traceback (killed by a signal) has nothing for a log: the line names the signal."""
    from graphscale import cli
    from graphscale.distributed.launch import WorkerError

    def killed(args):
        raise WorkerError(1, "", -9)

    monkeypatch.setattr(cli, "cmd_info", killed)
    monkeypatch.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path))
    assert cli.main(["info"]) == 1
    assert capsys.readouterr().err == ("graphscale: error: worker 1 was killed by signal 9 (SIGKILL; the kernel's "
                                       "out-of-memory killer sends it when memory runs out; also `kill -9`)\n")
    assert not (tmp_path / "errors").exists()

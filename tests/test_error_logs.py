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

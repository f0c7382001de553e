"""`graphscale partition --progress` with stderr redirected: a line when each step starts and at every tenth."""

from __future__ import annotations

import io

from graphscale.cli import main
from graphscale.partition.command import ProgressBars


def test_redirected_partition_progress_prints_lines(tmp_path, capsys):
    assert main(["partition", "--dataset", "cora", "--method", "random", "--parts", "2", "--out",
                 str(tmp_path / "st"), "--progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "graphscale partition: write partitions: started (2)" in err
    assert err[-1] == "graphscale partition: write partitions: 2 / 2 (100%)"


def test_progress_lines_are_one_per_tenth():
    stream = io.StringIO()
    bars = ProgressBars(True, stream)
    for done in range(101):
        bars("route records", done, 100)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "graphscale partition: route records: started (100)"
    assert lines[1:] == [f"graphscale partition: route records: {d} / 100 ({d}%)" for d in range(10, 101, 10)]
    quiet = io.StringIO()
    ProgressBars(False, quiet)("route records", 5, 10)
    assert quiet.getvalue() == ""

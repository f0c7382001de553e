"""``graphscale bench averaging`` on a tiny grid: every run lands in the table with its figures."""

from __future__ import annotations

import argparse

from graphscale.bench import averaging


def test_bench_averaging_runs_the_grid_and_plots(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path / "cache"))
    parser = argparse.ArgumentParser()
    averaging.add_arguments(parser)
    args = parser.parse_args(["--parts", "2", "--workers", "1", "--epochs", "3", "--correction-steps", "0,1",
                              "--plot", str(tmp_path / "acc.png")])
    rows = averaging.run(args)
    assert [(r["run"], r["correction"]) for r in rows] == [("single", 0), ("model-averaging", 0),
                                                          ("model-averaging", 1)]
    assert all(r.get("error") is None for r in rows)
    plain = rows[1]
    assert plain["bytes_per_epoch"] == 0  # q = 1: averaging moves nothing
    assert plain["graph_parallel_bytes"] > 0 and plain["rss_peak"] > 0
    out = capsys.readouterr().out
    assert "gap (points)" in out and "graph-parallel bytes" in out and (tmp_path / "acc.png").stat().st_size > 0

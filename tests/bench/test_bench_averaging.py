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


def test_a_failed_run_is_listed_with_its_configuration(capsys, monkeypatch):
    rows = [{"dataset": "d", "model": "gcn", "run": "single", "partitioner": "", "p": 1, "q": 1, "correction": 0,
             "test_acc": 0.8, "gap_points": 0.0, "reach_epoch": 3, "bytes_per_epoch": 0, "rss_peak": 100},
            {"dataset": "d", "model": "gcn", "run": "model-averaging", "partitioner": "spring", "p": 4, "q": 2,
             "correction": 1, "error": "timed out after 900 s"}]
    monkeypatch.setattr(averaging, "measure", lambda args: (rows, []))
    parser = argparse.ArgumentParser()
    averaging.add_arguments(parser)
    averaging.run(parser.parse_args([]))
    assert "failed: d gcn model-averaging partitioner=spring p=4 q=2 correction=1: timed out after 900 s" in \
        capsys.readouterr().out

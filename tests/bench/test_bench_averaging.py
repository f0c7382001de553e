"""``graphscale bench averaging`` on a tiny grid: every run lands in the table with its figures."""

from __future__ import annotations

import argparse

import pytest

from graphscale.bench.papers.sdt_gnn import averaging


@pytest.mark.slow
def test_bench_averaging_runs_the_grid_and_plots(tmp_path, capsys, monkeypatch, train_in_process):
    monkeypatch.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(averaging, "train_once", train_in_process)  # the grid and its table, not fresh processes
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


def test_full_is_the_sdt_gnn_papers_grid_and_optimizer_states_are_an_axis(monkeypatch):
    parser = argparse.ArgumentParser()
    averaging.add_arguments(parser)
    full = averaging.full_grid(parser.parse_args(["--full", "--musae", "/data/musae_facebook"]))
    assert (full.parts, full.workers, full.correction_steps, full.seeds) == ([2, 4, 8, 16], [1, 2, 4], [0, 1], 3)
    assert full.models == "sage,gcn,gat" and full.partitioners == "spring,hdrf,metis,random"
    assert full.datasets == f"cora,musae:/data/musae_facebook,{averaging.NESTED_SBM}"
    assert averaging.full_grid(parser.parse_args(["--full", "--datasets", "cora"])).datasets == "cora"
    default = parser.parse_args([])
    assert averaging.full_grid(default) is default and default.optimizer_states == "averaged"
    calls = []

    def fake(dataset, strategy, workers, epochs, model, extra, timeout):
        calls.append((strategy, extra))
        return {"final": {"test_acc": 0.8, "val_acc": 0.8, "bytes_per_epoch": {}, "os_memory_per_worker": []},
                "epochs": [{"epoch": 0, "val_acc": 0.8}]}

    monkeypatch.setattr(averaging, "train_once", fake)
    rows, _ = averaging.measure(parser.parse_args(["--parts", "2", "--workers", "2", "--correction-steps", "0",
                                                   "--optimizer-states", "averaged,local"]))
    assert [r.get("optimizer_state") for r in rows] == [None, "averaged", "local"]
    states = [e[e.index("--optimizer-state") + 1] for s, e in calls if s == "model-averaging"]
    assert states == ["averaged", "local"]

"""``graphscale bench offload`` runs end to end on small inputs (closed-form tables only, in-process)."""

from __future__ import annotations

import argparse

from graphscale.bench.papers import hongtu as bench


def test_bench_offload_prints_the_tables(capsys):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graphs", "it-like,cora", "--nodes", "3000", "--parts", "2,8", "--workers", "2",
                              "--total-chunks", "8", "--skip-measured"])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    for title in ("Table 3 analogue", "Table 8 analogue", "MODELLED transfer time"):
        assert title in out
    assert "it-like" in out and "cora" in out


def test_traffic_rows_reduce_host_traffic():
    graph = bench._load("friendster-like", 3000)
    traffic, modelled = bench.traffic_rows(graph, 2, 16, 64)
    assert traffic["alpha (baseline)"] > 1.5
    assert float(traffic["total cut"].rstrip("%")) > 25.0
    assert modelled["speed-up"] > 1.0


def test_bench_offload_prints_the_link_rates(capsys):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--graphs", "cora", "--parts", "2", "--workers", "2", "--total-chunks", "4",
                              "--skip-measured", "--device", "cpu", "--link-rows", "2000", "--link-width", "8",
                              "--link-batch", "500", "--link-graph", "sbm:nodes=600,degree=5,features=8,seed=0",
                              "--link-chunks", "2"])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "MEASURED host-to-device rate on cpu" in out
    for row in ("plain pinned copy", "pipeline gather (staged)", "pipeline gather (uva)", "offload epoch"):
        assert row in out
    rows = bench.link_rows("cpu", 1000, 4, 100, batches=2, repeats=1)
    assert [r["mechanism"] for r in rows] == ["plain pinned copy (contiguous)", "pipeline gather (uva)",
                                              "pipeline gather (staged)"]
    assert rows[1]["GB/s"] == "n/a" and rows[2]["check"] == "yes"

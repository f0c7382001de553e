"""``graphscale bench offload`` runs end to end on small inputs (closed-form tables only, in-process)."""

from __future__ import annotations

import argparse

from graphscale.bench import offload as bench


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

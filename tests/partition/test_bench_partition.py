"""``graphscale bench partition``: the quality and throughput suites on a tiny graph, and the table logic."""

from __future__ import annotations

import argparse
import json

import pytest

from graphscale.bench import partition as bench


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_quality_and_throughput_suites(tmp_path, capsys):
    args = parse("--suite", "quality,throughput", "--dataset", "cora", "--dataset", "sbm:nodes=600,degree=8,features=0",
                 "--methods", "ldg,hdrf,dbh,spring,spring:merge=code", "--parts", "2,4", "--order", "shuffled",
                 "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "plots"), "--throughput-parts", "3")
    report = bench.run(args)
    out = capsys.readouterr().out
    assert "replication factor" in out and "below HDRF's on average" in out and "M records/s" in out
    assert len(report["quality"]) == 2 * 2 * 5
    assert {r["method"] for r in report["quality"]} == {"ldg", "hdrf", "dbh", "spring", "spring(code)"}
    assert all(r["rf"] >= 1 for r in report["quality"])
    assert {r["method"] for r in report["throughput"]} == {"hdrf", "dbh", "spring", "spring(code)"}
    assert json.loads((tmp_path / "r.json").read_text())["suites"] == ["quality", "throughput"]
    assert len(list((tmp_path / "plots").glob("*.png"))) == 3


def test_quality_tables_compare_against_spring():
    def row(p, method, rf, seconds, edge_balance=1.0):
        return {"dataset": "d", "p": p, "method": method, "rf": rf, "vertex_balance": 1.0,
                "edge_balance": edge_balance, "seconds": seconds}

    rows = [row(2, "spring", 1.5, 1.0), row(2, "hdrf", 2.0, 3.0, 1.2), row(4, "spring", 2.0, 1.0),
            row(4, "hdrf", 2.5, 1.0)]
    pivot, summary, goals = bench.quality_tables(rows)
    assert "hdrf" in pivot and "spring" in summary
    assert goals["HDRF"]["spring RF below it %"] == pytest.approx(100 * (1 - (0.75 + 0.8) / 2))
    assert goals["HDRF"]["spring lower in"] == "2/2" and goals["HDRF"]["time / spring"] == pytest.approx(2.0)
    assert goals["HDRF"]["worst edge bal"] == 1.2 and goals["HDRF"]["lopsided"] == "0/2"


def test_bad_suite():
    with pytest.raises(ValueError, match="unknown suite"):
        bench.run(parse("--suite", "speed"))

"""``graphscale bench partition``: the quality and throughput suites on a tiny graph, and the table logic."""

from __future__ import annotations

import argparse
import json

import pytest

from graphscale.bench.papers.sdt_gnn import partition as bench


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


def test_edge_imbalance_is_flagged():
    def row(p, method, edge_balance, vertex_balance=1.0):
        return {"dataset": "d", "p": p, "method": method, "rf": 2.0, "vertex_balance": vertex_balance,
                "edge_balance": edge_balance, "seconds": 1.0}

    rows = [row(4, "spring", 1.2), row(4, "spring(lpt=edges)", 1.05, 1.2), row(4, "hdrf", 1.1),
            row(16, "spring", 2.4), row(16, "spring(lpt=edges)", 1.04, 1.3), row(16, "hdrf", 1.5)]
    table, flags = bench.balance_tables(rows)
    assert "2.40!" in table and "1.50!" not in table and "1.20 " in table  # strictly above the threshold
    assert flags == [(f"EDGE IMBALANCE: spring's edge balance exceeds {bench.EDGE_IMBALANCED:g} in 1/2 cases "
                      "(worst 2.40: d, p = 16); its slowest partition does that many times the mean aggregation work")]
    _, summary, _ = bench.quality_tables(rows)
    assert "edge bal > 1.5" in summary
    lpt = bench.lpt_table(rows)
    assert "spring(lpt=edges)" in lpt and "hdrf" in lpt and lpt.count("edge!") == 1
    assert bench.lpt_table([r for r in rows if r["method"] != "spring(lpt=edges)"]) is None


def test_spring_lpt_rows_in_the_quality_suite(capsys):
    """Each LPT load is its own row, labelled; on Cora at p = 16 the volume LPT balances edges better (1.03 vs 1.34)."""
    args = parse("--suite", "quality", "--dataset", "cora", "--methods", "spring,spring:lpt=edges,spring:lpt=mix",
                 "--parts", "16")
    report = bench.run(args)
    out = capsys.readouterr().out
    rows = {r["method"]: r for r in report["quality"]}
    assert set(rows) == {"spring", "spring(lpt=edges)", "spring(lpt=mix)"}
    assert rows["spring(lpt=edges)"]["edge_balance"] < rows["spring"]["edge_balance"]
    assert "SPRING's LPT load" in out and "edge balance max / mean" in out
    assert bench._label("spring:lpt=vertices") == "spring"


def test_bad_suite():
    with pytest.raises(ValueError, match="unknown suite"):
        bench.run(parse("--suite", "speed"))


def test_training_spring_goal_line():
    """The training store's SPRING (lpt=edges, refine=2) gets its own label and a goal line against HDRF."""
    def row(d, method, rf, edge):
        return {"dataset": d, "p": 8, "method": method, "rf": rf, "vertex_balance": 1.0, "edge_balance": edge,
                "seconds": 1.0}

    assert bench._label(bench.TRAINING_SPRING) == bench.TRAINING_LABEL == "spring(train)"
    rows = [row("a", "spring(train)", 1.5, 1.05), row("a", "hdrf", 2.0, 1.1), row("b", "spring(train)", 3.0, 1.02),
            row("b", "hdrf", 4.0, 1.07), row("c", "spring(train)", 1.0, 1.0)]
    line = bench.training_goal(rows)
    assert "RF 25.0% below HDRF's on average over 2 cases (per case 25.0, 25.0)" in line
    assert "worst edge balance 1.05 against HDRF's 1.10" in line
    assert bench.training_goal([r for r in rows if r["method"] != "hdrf"]) is None
    assert "spring(train)" in bench.lpt_table([*rows, row("a", "spring", 1.7, 1.3)])

"""``graphscale bench task`` on a tiny graph with a few sections."""

from __future__ import annotations

import argparse

import pytest

from graphscale.bench import task

TINY = "sbm:nodes=300,degree=8,features=16,classes=4,seed=0"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    task.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_replication_and_modelled_pipeline_sections(tmp_path, capsys):
    args = parse("--sections", "replication,pipeline,comm", "--graphs", TINY, "--parts", "1,2,4", "--depths", "2,4",
                 "--hybrid-workers", "4", "--measure-nodes", "0", "--hidden", "16", "--plot", str(tmp_path / "t.png"))
    replication, pipeline, comm = task.run(args)
    (_, rows), (_, hybrid) = replication.tables
    assert rows[0]["p=1"] == 1.0 and 1.0 < rows[0]["p=2"] <= rows[0]["p=4"]
    assert hybrid[0]["alpha P group"] == 1.0  # 4 workers, 2 layers: P groups of one rank, no mirrors
    assert hybrid[0]["reduction"] == pytest.approx(hybrid[0]["alpha graph-parallel (4 parts)"], abs=0.01)
    _, rows = pipeline.tables[0]
    assert [r["L"] for r in rows] == [2, 4]
    assert all(r["serial ms"] >= r["pipelined ms"] > 0 and r["serial / pipelined"] >= 1.0 for r in rows)
    _, rows = comm.tables[0]
    assert all(r["graph-parallel (closed form)"] and r["graph-parallel (Ledger)"] == "" for r in rows)
    out = capsys.readouterr().out
    assert "Modelled epoch (not measured)" in out and "Table 2 analogue" in out
    assert (tmp_path / "t.png").stat().st_size > 0


def test_comm_ratios_against_the_ledger_of_the_same_run(monkeypatch):
    # graph-parallel's Ledger = its closed form is tested with the strategy; here the bench's plumbing: the
    # measured totals, their comparison with the closed form and the ratios against graph-parallel of the same run
    totals = {"graph-parallel": 1000, "TP": 500, "TP+TD": 300}

    def train_once(dataset, strategy, *a, extra=(), **k):
        label = "graph-parallel" if strategy == "graph-parallel" else ("TP+TD" if "on" in extra else "TP")
        return {"final": {"bytes_per_epoch": {"halo": totals[label] - 8, "control": 8}}}

    monkeypatch.setattr(task, "train_once", train_once)
    section = task.comm(parse("--graphs", TINY, "--depths", "2", "--hidden", "16"))
    (_, rows), = section.tables
    assert rows[0]["graph-parallel (Ledger)"] == "1000 B" and rows[0]["closed form = Ledger"].startswith("no (")
    assert rows[0]["TP / GP"] == 0.5 and rows[0]["TP+TD / GP"] == 0.3
    assert any("TP+TD against graph-parallel on the sparse graphs" in note and "-70.0%" in note
               for note in section.notes)


def test_failed_runs_are_listed_under_the_table(monkeypatch, capsys):
    monkeypatch.setattr(task, "train_once", lambda *a, **k: {"error": "exit 2: boom"})
    task.run(parse("--sections", "accuracy", "--accuracy-graphs", TINY, "--seeds", "1", "--epochs", "1"))
    out = capsys.readouterr().out
    assert "(no rows)" in out
    assert f"failed: single GCN on {TINY} (--strategy single, 1 workers, 2 layers, seed 0): exit 2: boom" in out


def test_expected_keep_rate():
    assert task.keep_rate(4, 2) == pytest.approx(2 / 3)  # the spec's M = 4, k = 2
    assert task.keep_rate(60, 60) == pytest.approx(0.5)  # k = 1


@pytest.mark.parametrize(("argv", "message"), [
    (["--sections", "comm,speed"], "--sections: unknown speed"),
    (["--workers", "1"], "--workers must be >= 2"),
    (["--gamma", "2"], "--gamma"),
    (["--sections", "replication", "--hybrid-workers", "5"], "--hybrid-workers must be even"),
    (["--link-bandwidth", "0"], "--link-bandwidth"),
])
def test_bad_options_are_named(argv, message):
    with pytest.raises(ValueError, match=message):
        task.run(parse(*argv))


def test_subgraph_counts_must_divide_the_chunks():
    with pytest.raises(ValueError, match="--subgraph-counts 4 do not divide --chunks 6"):
        task.subgraphs(parse("--subgraph-counts", "1,4", "--chunks", "6"))

"""``graphscale bench task`` on a tiny graph with a few sections."""

from __future__ import annotations

import argparse

import pytest

from graphscale.bench.papers.neutrontask import accuracy as task_accuracy
from graphscale.bench.papers.neutrontask import cost as task_cost
from graphscale.bench.papers.neutrontask import runs as task_runs
from graphscale.bench.papers.neutrontask import speed as task_speed
from graphscale.bench.papers.neutrontask import task

TINY = "sbm:nodes=300,degree=8,features=16,classes=4,seed=0"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    task.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_replication_and_modelled_pipeline_sections(tmp_path, capsys):
    args = parse("--sections", "replication,pipeline,comm", "--graphs", TINY, "--parts", "1,2,4", "--depths", "2,4",
                 "--hybrid-workers", "4", "--measure-nodes", "0", "--hidden", "16", "--pipeline-graphs", "",
                 "--plot", str(tmp_path / "t.png"))
    replication, pipeline, comm = task.run(args)
    (_, rows), (_, hybrid) = replication.tables
    assert rows[0]["p=1"] == 1.0 and 1.0 < rows[0]["p=2"] <= rows[0]["p=4"]
    assert hybrid[0]["alpha P group"] == 1.0  # 4 workers, 2 layers: P groups of one rank, no mirrors
    assert hybrid[0]["reduction"] == pytest.approx(hybrid[0]["alpha graph-parallel (4 parts)"], abs=0.01)
    _, rows = pipeline.tables[0]
    assert [r["L"] for r in rows] == [2, 4]
    assert all(r["serial ms"] >= r["pipelined ms"] > 0 and r["serial / pipelined"] >= 1.0 for r in rows)
    _, rows = comm.tables[0]
    assert all(r["graph-parallel"] and r["TP"] and r["TP+TD"] and r["closed form = Ledger (trained)"] == ""
               for r in rows)  # closed forms only: nothing trained
    (_, measured) = pipeline.tables[1]
    assert measured == []  # no --pipeline-graphs
    out = capsys.readouterr().out
    assert "Modelled epoch (not measured)" in out and "Table 2 analogue" in out
    assert (tmp_path / "t.png").stat().st_size > 0


def test_comm_closed_forms_and_their_check_against_the_ledger(monkeypatch):
    """TP and TP+TD come from the strategy's closed form for the plan the bench picks; a trained run's Ledger is
    compared category by category (here a fake report: one matching, one not)."""
    from graphscale.strategies.task_parallel.chain import epoch_bytes

    args = parse("--graphs", TINY, "--depths", "2", "--hidden", "16", "--measure-nodes", "1000")
    graph = task_runs.load(TINY, args)
    closed = {label: epoch_bytes(task_runs.tp_model(graph, 2, 16, decoupled),
                                 task_runs.tp_plan(graph, 2, args, decoupled), graph.num_nodes, graph.num_features, 4)
              for label, decoupled in (("TP", False), ("TP+TD", True))}

    def train_once(dataset, strategy, *a, extra=(), **k):
        if strategy == "graph-parallel":
            return {"final": {"bytes_per_epoch": {"halo": 8}}}
        label = "TP+TD" if "on" in extra else "TP"
        return {"final": {"bytes_per_epoch": dict(closed[label], **({"halo": 1} if label == "TP" else {}))}}

    monkeypatch.setattr(task_runs, "train_once", train_once)
    section = task_cost.comm(args)
    (_, rows), = section.tables
    check = rows[0]["closed form = Ledger (trained)"]
    assert "graph-parallel NO" in check and "TP+TD yes" in check and "; TP NO" in check
    gp = rows[0]["TP / GP"] and sum(closed["TP"].values()) / rows[0]["TP / GP"]
    assert rows[0]["TP+TD / GP"] == pytest.approx(sum(closed["TP+TD"].values()) / gp)
    assert rows[0]["TP+TD h2d share"] == pytest.approx(closed["TP+TD"]["h2d"] / sum(closed["TP+TD"].values()))
    assert any(note.startswith("TP+TD against graph-parallel on the sparse graphs") for note in section.notes)


def test_failed_runs_are_listed_under_the_table(monkeypatch, capsys):
    monkeypatch.setattr(task_runs, "train_once", lambda *a, **k: {"error": "exit 2: boom"})
    task.run(parse("--sections", "accuracy", "--accuracy-graphs", TINY, "--seeds", "1", "--epochs", "1"))
    out = capsys.readouterr().out
    assert "(no rows)" in out
    assert (f"failed: single GCN on {TINY} (--strategy single --repeat 1, 1 workers, 2 layers, seed 0): exit 2: boom"
            in out)


def test_timeline_records_and_boundary_rows():
    epoch = {"extra_per_worker": [{"timeline": [(0, "T", "fwd", 1, 0, 1.0, 2.0)]},
                                  {"timeline": [(1, "P", "bwd", 0, 1, 3.0, 4.5)]}]}
    assert task_speed.timeline_records(epoch) == [(0, 1, "T_fwd", 1.0, 2.0), (1, 0, "P_bwd", 3.0, 4.5)]
    import torch

    from graphscale.strategies.task_parallel.chunks import layout
    from graphscale.testing import random_graph

    graph = random_graph(40, 4.0, seed=0)
    chunk_of = torch.arange(40) * 4 // 40
    lay = layout(4, 2, 0, 0)
    rows = task_cost.boundary_rows(graph, chunk_of, lay)
    dst = torch.repeat_interleave(torch.arange(40), torch.diff(graph.indptr))
    src = graph.indices
    sub_of = lay.sub[chunk_of]
    for i in range(2):  # causal: rows of earlier subgraphs read by subgraph i
        expected = {int(u) for u, v in zip(src, dst) if sub_of[v] == i and sub_of[u] < i}
        assert rows[i] == len(expected)


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
        task_accuracy.subgraphs(parse("--subgraph-counts", "1,4", "--chunks", "6"))


def test_memory_totals_read_the_os_growth_above_each_workers_start():
    """The totals next to the tracked peaks: anonymous memory above the worker's start, summed and the largest;
    unknown when a worker's baseline was not taken at its start."""
    def report(*workers):
        return {"final": {"peak_memory_per_worker": [t for t, _ in workers],
                          "os_memory_per_worker": [{"peak_anon": anon, "baseline_anon": 100, "baseline_at": at}
                                                   for _, (anon, at) in workers]}}

    start = "worker start"
    assert task_cost._memory_totals(report((10, (300, start)), (40, (150, start)))) == (50, 40, 250, 200)
    assert task_cost._memory_totals(report((10, (300, start)), (40, (150, "epoch")))) == (50, 40, None, None)

"""`graphscale bench scaling`: rows for single and graph-parallel (overlapped and not), shares that add up."""

from __future__ import annotations

import json

import pytest

from graphscale.bench.tools.scaling import shares
from graphscale.cli import main


def test_shares_split_communication_from_waiting():
    """Worker 0 spent 3 s in a collective worker 1 spent 1 s in: 1 s of communication each, 2 s of waiting for 0."""
    results = [{"seconds": [10.0], "comm": [[3.0, 0.5]]}, {"seconds": [10.0], "comm": [[1.0, 0.5]]}]
    out = shares(results)
    assert out[0] == {"comm": 1.5, "wait": 2.0, "total": 10.0, "compute": 6.5}
    assert out[1] == {"comm": 1.5, "wait": 0.0, "total": 10.0, "compute": 8.5}
    assert shares([{"seconds": [1.0], "comm": [[1.0]]}, {"seconds": [1.0], "comm": [[]]}]) is None


@pytest.mark.slow
@pytest.mark.parametrize("allocator", [None, "retain"])
def test_bench_scaling_prints_single_and_both_graph_parallel_modes(tmp_path, capsys, allocator):
    out = tmp_path / "scaling.json"
    extra = ["--allocator", allocator] if allocator else []
    assert main(["bench", "scaling", "--dataset", "sbm:nodes=3000,degree=6,features=16,seed=0", "--strategies",
                 "graph-parallel", "--workers", "2", "--epochs", "1", "--json", str(out), *extra]) == 0
    printed = capsys.readouterr().out
    for word in ("single", "graph-parallel overlap", "graph-parallel no-overlap", "efficiency", "vs single",
                 "sys s/epoch"):
        assert word in printed
    report = json.loads(out.read_text())
    for run in report["runs"]:  # every worker, in-process (single) or spawned, ran the asked-for malloc
        assert all(r["allocator"]["mode"] == (allocator or "default") for r in run["results"])
    if allocator == "retain" and all(r["allocator"]["library"] == "glibc" for run in report["runs"]
                                 for r in run["results"]):
        assert {row["malloc"] for row in report["rows"]} == {"glibc retaining"}
    labels = [(r["strategy"], r["W"]) for r in report["rows"]]
    assert labels == [("single", 1), ("graph-parallel overlap", 2), ("graph-parallel no-overlap", 2)]
    for run in report["runs"]:
        if run["strategy"].startswith("graph-parallel"):
            assert len(run["results"]) == 2 and run["shares"] is not None
            for s in run["shares"]:
                assert s["comm"] > 0 and s["comm"] + s["wait"] + s["compute"] == pytest.approx(s["total"])

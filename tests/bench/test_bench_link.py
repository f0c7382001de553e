"""``graphscale bench link``: the real command on a tiny graph (its runs in this process and the suite's worker pool),
its rows' numbers, a failing run's row, and PyG's loop on graphscale's split."""

from __future__ import annotations

import json
import math

import pytest

from graphscale.bench.peers import link, pyg_link
from graphscale.cli import main

GRAPH = "sbm:nodes=300,degree=4,features=8"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_bench_link_tabulates_strategies_next_to_pyg(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(link, "train_fresh", lambda dataset, options, warm, timeout: (  # in this process
        link._train_child(dataset, options, False)))
    monkeypatch.setattr(pyg_link, "measure_pyg", lambda spec, fractions, seed, hidden, epochs, lr, hits_k: (
        pyg_link._child(spec, fractions, seed, hidden, epochs, lr, hits_k, 0)))
    out = tmp_path / "link.json"
    assert main(["bench", "link", "--dataset", GRAPH, "--strategies", "single,graph-parallel", "--epochs", "3",
                 "--hidden", "8", "--hits-k", "5,20", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for word in ("pyg", "single", "graph-parallel", "time/PyG", "memory/PyG", "bytes/epoch", "Hits@5", "Hits@20",
                 "MRR", "link "):
        assert word in printed, word
    rows = {r["strategy"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["pyg", "single", "graph-parallel"]
    for name, r in rows.items():
        assert r["error"] is None, (name, r["error"])
        assert _finite(r["s_per_epoch"]) and r["s_per_epoch"] > 0, name
        assert _finite(r["time_per_pyg"]) and r["time_per_pyg"] > 0, name
        assert all(_finite(p) and p > 0 for p in r["rss_peak"]), name
        assert _finite(r["above_base"]), name
        for key in ("auc", "hits@5", "hits@20", "mrr"):
            assert _finite(r[key]) and 0 <= r[key] <= 1, (name, key)
    assert rows["pyg"]["time_per_pyg"] == 1.0
    assert len(rows["graph-parallel"]["tracked"]) == len(rows["graph-parallel"]["rss_peak"]) == 2
    assert all(t > 0 for t in rows["single"]["tracked"] + rows["graph-parallel"]["tracked"])
    assert rows["single"]["bytes"].get("link", 0) == 0 and rows["graph-parallel"]["bytes"]["link"] > 0


@pytest.mark.slow  # 30 epochs, each evaluated against 100 candidates per pair
def test_pyg_loop_trains_on_graphscales_split():
    """PyG's loop scores graphscale's candidates and learns: its loss falls and its test AUC beats chance."""
    from graphscale.data.datasets import load_dataset

    result = pyg_link.train_pyg_link(load_dataset("sbm:nodes=400,degree=8,features=16"), (0.85, 0.05, 0.1), 0,
                                     16, 30, 0.01, [10])
    assert len(result["times"]) == len(result["losses"]) == 30
    assert result["losses"][-1] < result["losses"][0]
    assert result["final"]["test_auc"] > 0.6
    assert {"val_auc", "test_hits@10", "test_mrr"} <= set(result["final"])


def test_unknown_strategies_are_refused_by_name():
    with pytest.raises(ValueError, match="--strategies: unknown pipeline; choose from single, single-minibatch"):
        link.check_strategies("single,pipeline")
    with pytest.raises(ValueError, match="--strategies: unknown empty list"):
        link.check_strategies(" , ")


def test_a_failing_run_shows_its_error_in_its_row():
    row = link.strategy_row("offload", 2, {"error": "ValueError: boom"}, [20])
    (shown,) = link.display_rows([row], [20])
    assert shown == {"strategy": "offload", "workers": "2", "s/epoch": "ValueError: boom"}
    assert link.add_ratios([link.pyg_row({"times": [2.0, 1.0, 3.0], "peak_rss": 30, "baseline_rss": 10,
                                          "final": {"test_auc": 0.5}}, [20]), row])[1] is row

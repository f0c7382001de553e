"""``graphscale.bench.tools.scale``'s pieces: the slope fit, the disk count, the measured subprocess."""

from __future__ import annotations

import os
import sys

import pytest

from graphscale.bench.tools.cgroup import run_measured
from graphscale.bench.tools.scale import disk_bytes, fit_slopes, step_argv


def _rows(points):
    return [{"vertices": n, "edges": e, "feature_bytes": f, "max_rss": m} for n, e, f, m in points]


def test_slope_per_vertex_from_sizes_of_one_shape():
    fit = fit_slopes(_rows([(1000, 10_000, 512_000, 100 + 64 * 1000), (4000, 40_000, 2_048_000, 100 + 64 * 4000),
                            (16000, 160_000, 8_192_000, 100 + 64 * 16000)]))
    assert fit["vertex"] == pytest.approx(64) and fit["fixed"] == pytest.approx(100, abs=1e-6)
    assert "edge" not in fit and "feature_byte" not in fit  # not separable from the vertex count here
    assert fit_slopes(_rows([(1000, 1, 1, 5)])) == {"points": 1}


def test_edge_and_feature_slopes_when_the_graphs_vary_them():
    def rss(n, e, f):
        return 1000 + 16 * n + 8 * e + 0.5 * f
    points = [(n, e, f, rss(n, e, f)) for n, e, f in
              ((1000, 5000, 1000), (1000, 20000, 1000), (1000, 5000, 9000), (4000, 5000, 1000), (4000, 40000, 64000))]
    fit = fit_slopes(_rows(points))
    assert (fit["vertex"], fit["edge"], fit["feature_byte"]) == pytest.approx((16, 8, 0.5))


def test_minibatch_step_evaluates_on_its_training_fanouts(tmp_path):
    """The minibatch step's command samples its evaluation with the training fanouts (``--eval-fanouts``), one
    model layer per fanout; the train parser reads it into that configuration."""
    from graphscale.cli import build_parser, overrides_from_args
    from graphscale.config import build_config

    for given, fanouts in (([], [10, 10]), (["--fanouts", "4,-1,3"], [4, -1, 3])):
        argv = ["bench", "scale", "--workdir", str(tmp_path), *given]
        args = build_parser(argv).parse_args(argv)
        command = step_argv("minibatch", "sbm:nodes=100", tmp_path, args)
        assert command[:3] == [sys.executable, "-m", "graphscale"]
        config = build_config(overrides_from_args(build_parser(command[3:]).parse_args(command[3:])))
        assert config.strategy.minibatch and config.strategy.fanouts == fanouts
        assert config.strategy.eval_fanouts == fanouts and config.model.layers == len(fanouts)


def test_chunk_edges_reach_the_convert_and_partition_steps(tmp_path):
    """``--chunk-edges`` is passed to the two streaming steps (fixed buffers, so small sizes fit the per-vertex
    slope), and left out by default (theirs)."""
    from graphscale.cli import build_parser

    for given, expected in (([], None), (["--chunk-edges", "4096"], "4096")):
        argv = ["bench", "scale", "--workdir", str(tmp_path), *given]
        args = build_parser(argv).parse_args(argv)
        for step in ("convert", "partition"):
            command = step_argv(step, "sbm:nodes=100", tmp_path, args)
            parsed = build_parser(command[3:]).parse_args(command[3:])
            assert parsed.chunk_edges == (int(expected) if expected else 1 << 22), (step, given)
        assert "--chunk-edges" not in step_argv("minibatch", "sbm:nodes=100", tmp_path, args)


def test_disk_counts_hard_links_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    os.link(tmp_path / "a", tmp_path / "b")
    assert 100_000 <= disk_bytes(tmp_path) < 200_000
    assert disk_bytes(tmp_path / "missing") == 0


def test_measured_command_reports_its_own_peak_and_exit_code():
    small = run_measured([sys.executable, "-c", "print('hi')"])
    big = run_measured([sys.executable, "-c", "import numpy as np; a = np.ones(40_000_000); print(a.sum())"])
    assert small.returncode == 0 and small.stdout.strip() == "hi" and small.cgroup == "no limit asked"
    assert big.max_rss > small.max_rss + 250 * 2**20  # 320 MB of float64 in the second command only
    failed = run_measured([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert failed.returncode == 3


def test_a_memory_limit_kills_what_does_not_fit_and_lets_through_what_does():
    script = "import numpy as np; a = np.ones({n}); print(a.sum())"
    over = run_measured([sys.executable, "-c", script.format(n=50_000_000)], limit=300 * 2**20)
    if over.cgroup.startswith("unconfined"):
        pytest.skip(over.cgroup)
    assert over.oom_killed and over.returncode != 0
    under = run_measured([sys.executable, "-c", script.format(n=10_000_000)], limit=300 * 2**20)
    assert under.returncode == 0 and not under.oom_killed
    assert 80 * 2**20 < under.cgroup_peak <= 300 * 2**20 and under.anon_peak <= under.cgroup_peak


@pytest.mark.slow
def test_every_step_from_spec_to_trained_epoch_on_a_tiny_graph(tmp_path, capsys):
    """The whole bounded path on a small graph with a 1 KiB host budget (hot-row cache, evaluation spill, offload's
    host arrays on disk): every step succeeds, the table and slopes print, the rows are written."""
    from graphscale.cli import main

    rows_file = tmp_path / "rows.json"
    code = main(["bench", "scale", "--sizes", "300,600", "--features", "8", "--degree", "4", "--host-memory", "1KiB",
                 "--offload-chunks", "2", "--batch-size", "64", "--workdir", str(tmp_path / "w"),
                 "--json", str(rows_file)])
    out = capsys.readouterr().out
    import json

    rows = json.loads(rows_file.read_text())
    assert code == 0, [r["error"] for r in rows if not r["ok"]]
    assert [r["step"] for r in rows] == ["convert", "partition", "minibatch", "graph-parallel", "offload"] * 2
    assert all(r["ok"] and r["vertices"] in (300, 600) for r in rows)
    assert all(r["loss"] is not None for r in rows if r["step"] not in ("convert", "partition"))
    assert "bytes/vertex" in out and "sbm:nodes=600" in out

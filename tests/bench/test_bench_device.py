"""``graphscale bench device`` on CPU: every system in its own process, the table with ops and traced memory."""

from __future__ import annotations

import pytest

from graphscale.cli import main


def test_bench_device_runs_on_cpu_and_prints_the_table(capsys):
    pytest.importorskip("torch_geometric")
    assert main(["bench", "device", "--dataset", "sbm:nodes=600,degree=6,features=16", "--hidden", "16",
                 "--repeats", "1", "--warmup", "1", "--systems", "graphscale,pyg-csr"]) == 0
    out = capsys.readouterr().out
    assert "on CPU (device kernel backend on CPU tensors)" in out and "peak: traced live tensor bytes" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("graphscale ", "pyg-csr"))}
    assert set(rows) == {"graphscale", "pyg-csr"}
    assert "kernels/epoch" not in out  # CUDA only
    assert "graphscale / pyg-csr: time" in out


@pytest.mark.parametrize("argv, message", [(["--device", "tpu"], "only cpu and cuda"),
                                           (["--systems", "dgl"], "unknown"), (["--repeats", "0"], "must be >= 1")])
def test_bench_device_bad_input_is_one_line(argv, message, capsys):
    assert main(["bench", "device", "--dataset", "sbm:nodes=200,degree=4,features=8", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err

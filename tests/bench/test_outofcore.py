"""The out-of-core bench's row on a tiny synthetic graph: both epochs run, equal losses, a cache of 20% of the rows."""

from __future__ import annotations

from graphscale.bench.tools.outofcore import outofcore_row, write_synthetic


def test_outofcore_row_equal_epochs_with_a_fifth_of_the_rows_cached(tmp_path):
    folder = write_synthetic("sbm:nodes=400,degree=6,features=16,classes=3", tmp_path / "g")
    assert write_synthetic("sbm:nodes=400,degree=6,features=16,classes=3", folder) == folder  # reused
    row = outofcore_row(folder, batch_size=64, fanouts=(4, 4), hidden=8)
    assert row["equal"] and row["nodes"] == 400 and row["features"] == 16
    assert row["cache_rows"] == 80 and 0 < row["hit_rate"] < 1 and row["batches"] == -(-40 // 64)
    assert row["read_bytes"] > 0 and row["memory_s"] > 0 and row["disk_s"] > 0

"""Superbatches: batches sampled ahead in groups bounded by the cache's stage bytes, each group's distinct misses
read from the file at once; every batch's rows are the file's, in order, and the staged buffer is freed after each
group."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphscale.data import row_file
from graphscale.data.row_cache import HotRowCache
from graphscale.data.row_file import RowFile
from graphscale.data.superbatch import held_bytes, superbatched

ROWS, FEATURES = 400, 3  # float32 rows of 12 bytes


def cache_over(tmp_path, capacity: int, stage_bytes: int) -> tuple[HotRowCache, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="c"))
    degrees = torch.arange(ROWS, dtype=torch.int64) % 13
    file = RowFile(tmp_path / "x.npy", x.shape, torch.float32)
    return HotRowCache(mapped, capacity, degrees if capacity else None, torch.float64, file, stage_bytes), x


@pytest.mark.parametrize("capacity", [0, 50])
def test_superbatches_give_each_batch_the_files_rows_in_order(tmp_path, monkeypatch, capacity):
    """Twelve batches of ids with duplicates, within and across batches, read through spans with gaps (gaps up to
    two 12-byte rows, spans up to 48 bytes): several superbatches of several batches, each staging no more than
    its bound but for a batch that is one on its own, and nothing staged after the last."""
    monkeypatch.setattr(row_file, "SPAN_GAP", 24)
    monkeypatch.setattr(row_file, "SPAN_BYTES", 48)
    rng = np.random.default_rng(1)
    batches = [torch.from_numpy(rng.integers(0, ROWS, size)) for size in (30, 5, 40, 12, 300, 7, 25, 25, 60, 3, 9, 44)]
    batches[3] = torch.cat([batches[2][:6], batches[2][:6]])  # a batch made of another's rows, twice
    stage = 2000
    cache, x = cache_over(tmp_path, capacity, stage)
    staged = []
    cache.on_stage = lambda *t: staged.append(t)
    sampled = []

    def sample(i: int):
        sampled.append(i)
        return {"batch": i, "ids": batches[i]}, batches[i]

    out = list(superbatched(sample, cache.gather, len(batches), cache))
    assert sampled == list(range(len(batches)))  # each batch sampled once, in order
    assert [state["batch"] for state, _ in out] == list(range(len(batches)))
    for (state, rows), ids in zip(out, batches):
        assert rows.dtype == torch.float64 and np.array_equal(rows.numpy(), x[ids.numpy()].astype(np.float64))
    assert staged[-1] == () and cache.staged_rows is None and cache.staged.numel() == 0  # freed at the end
    groups = [t[0] for t in staged if t]
    assert len(groups) == cache.superbatches and 1 < len(groups) < len(batches)
    for ids in groups:
        assert torch.equal(ids, torch.unique(ids))  # distinct, ascending
        assert ids.numel() * 12 <= stage or ids.numel() == cache.missed(batches[4]).numel()  # the 300-id batch
    missed = sum(cache.missed(ids).numel() for ids in batches)
    distinct = sum(ids.numel() for ids in groups)
    assert distinct < missed  # rows shared by a group's batches read once
    assert cache.file.rows_read == distinct and cache.staged_hits == cache.misses
    assert cache.file.reads < distinct  # rows read in spans, through the gaps
    assert cache.file.bytes_read > 12 * distinct  # the gaps' bytes read and dropped


def test_without_stage_bytes_batches_are_read_one_at_a_time(tmp_path):
    cache, x = cache_over(tmp_path, 10, 0)
    ids = [torch.tensor([5, 5, 399]), torch.tensor([0])]
    out = list(superbatched(lambda i: (i, ids[i]), cache.gather, 2, cache))
    assert [s for s, _ in out] == [0, 1] and cache.superbatches == 0
    assert all(np.array_equal(r.numpy(), x[i.numpy()]) for (_, r), i in zip(out, ids))
    assert list(superbatched(lambda i: (i, None), None, 3)) == [(0, None), (1, None), (2, None)]


def test_stage_bytes_need_a_file_and_staging_needs_one(tmp_path):
    cache, _ = cache_over(tmp_path, 0, 0)
    with pytest.raises(ValueError, match="stage_bytes must be >= 0, and positive only with a file"):
        HotRowCache(cache.x, 0, stage_bytes=100)
    with pytest.raises(ValueError, match="stage_bytes must be >= 0"):
        HotRowCache(cache.x, 0, file=cache.file, stage_bytes=-1)
    with pytest.raises(ValueError, match="staged only by a cache that reads its misses from a file"):
        HotRowCache(cache.x, 0).stage(torch.tensor([1]))


def test_held_bytes_counts_each_tensor_once():
    @dataclasses.dataclass
    class Block:
        a: torch.Tensor
        b: np.ndarray

    t = torch.zeros(10, dtype=torch.int64)
    state = ({"x": t, "y": [t, Block(torch.zeros(3), np.zeros(4, np.int16))]}, None, 3, "s")
    assert held_bytes(state) == 80 + 12 + 8

"""Superbatches: batches sampled ahead in groups bounded by the cache's stage bytes, each group's distinct misses
read from the file at once, the next group read while the current one is consumed; every batch's rows are the
file's, in order, two staged buffers are live at most, and each is freed after its group."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref

import numpy as np
import pytest
import torch

from graphscale.data import row_file, superbatch
from graphscale.data.row_cache import HotRowCache
from graphscale.data.row_file import RowFile
from graphscale.data.superbatch import SUPERBATCH_BUFFERS, held_bytes, superbatch_bytes, superbatched

ROWS, FEATURES = 400, 3  # float32 rows of 12 bytes


def cache_over(tmp_path, capacity: int, stage_bytes: int) -> tuple[HotRowCache, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="c"))
    degrees = torch.arange(ROWS, dtype=torch.int64) % 13
    file = RowFile(tmp_path / "x.npy", x.shape, torch.float32)
    return HotRowCache(mapped, capacity, degrees if capacity else None, torch.float64, file, stage_bytes), x


@pytest.mark.parametrize("buffers", [1, 2])
@pytest.mark.parametrize("capacity", [0, 50])
def test_superbatches_give_each_batch_the_files_rows_in_order(tmp_path, monkeypatch, capacity, buffers):
    """Twelve batches of ids with duplicates, within and across batches, read through spans with gaps (gaps up to
    two 12-byte rows, spans up to 48 bytes): several superbatches of several batches, each staging no more than
    its bound but for a batch that is one on its own, ``buffers`` buffers live at most, and nothing staged after
    the last."""
    monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", buffers)
    monkeypatch.setattr(row_file, "SPAN_GAP", 24)
    monkeypatch.setattr(row_file, "SPAN_BYTES", 48)
    rng = np.random.default_rng(1)
    batches = [torch.from_numpy(rng.integers(0, ROWS, size)) for size in (30, 5, 40, 12, 300, 7, 25, 25, 60, 3, 9, 44)]
    batches[3] = torch.cat([batches[2][:6], batches[2][:6]])  # a batch made of another's rows, twice
    stage = 2000
    cache, x = cache_over(tmp_path, capacity, stage)
    staged, groups = [], []
    cache.on_stage = lambda *t: staged.append(t)
    stage_rows = cache.stage

    refs = []

    def record(ids):  # a buffer freed by the generator is unreachable before the one after the next is read
        assert sum(ref() is not None for ref in refs) <= buffers - 1
        groups.append(ids)
        out = stage_rows(ids)
        refs.append(weakref.ref(out))
        return out

    cache.stage = record
    sampled = []

    def sample(i: int):
        sampled.append(i)
        return {"batch": i, "ids": batches[i]}, batches[i]

    out = list(superbatched(sample, cache.gather, len(batches), cache))
    assert sampled == list(range(len(batches)))  # each batch sampled once, in order
    assert [state["batch"] for state, _ in out] == list(range(len(batches)))
    for (state, rows), ids in zip(out, batches):
        assert rows.dtype == torch.float64 and np.array_equal(rows.numpy(), x[ids.numpy()].astype(np.float64))
    assert staged[-1] == () and cache.staged == ()  # freed at the end
    assert max(len(t) for t in staged) <= 2 * buffers  # (ids, rows) of each live buffer
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


@pytest.mark.parametrize("buffers", [1, 2])
def test_the_next_superbatch_is_read_while_the_current_one_is_consumed(tmp_path, monkeypatch, buffers):
    """Two buffers: with the first batch taken and the rest of its superbatch not, the next superbatch's rows are
    read (two buffers live); one buffer: the next is read only once the current one is freed. Stopping early frees
    what is staged."""
    monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", buffers)
    # three batches a superbatch: 6 rows of 12 bytes and three 16-byte id tensors within each superbatch's bytes
    cache, x = cache_over(tmp_path, 0, 150)
    batches = [torch.tensor([3 * i, 3 * i + 1]) for i in range(6)] + [torch.tensor([0, 1, 2])]
    two, live = threading.Event(), []
    cache.on_stage = lambda *t: (live.append(len(t) // 2), two.set() if len(t) == 4 else None)
    out = superbatched(lambda i: (i, batches[i]), cache.gather, len(batches), cache)
    state, rows = next(out)  # batch 0 taken; batch 2 (the last of its superbatch) not gathered yet
    assert state == 0 and np.array_equal(rows.numpy(), x[[0, 1]])
    if buffers == 2:
        assert two.wait(timeout=10)  # batches 3 to 5's superbatch read ahead, beside the first
        assert [s.ids.tolist() for s in cache.staged] == [[0, 1, 3, 4, 6, 7], [9, 10, 12, 13, 15, 16]]
    else:
        assert [s.ids.tolist() for s in cache.staged] == [[0, 1, 3, 4, 6, 7]]
        assert [state for state, _ in out] == list(range(1, len(batches)))
        assert max(live) == 1
    out.close()
    del out
    gc.collect()
    assert cache.staged == ()


def test_one_superbatch_takes_the_share_over_the_buffers(monkeypatch):
    assert SUPERBATCH_BUFFERS == 1 and superbatch_bytes(1000) == 125
    monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", 2)
    assert superbatch_bytes(1000) == 62 and superbatch_bytes(1 << 20, 1.0) == 1 << 19
    monkeypatch.setattr(superbatch, "SUPERBATCH_BUFFERS", 3)
    with pytest.raises(ValueError, match="SUPERBATCH_BUFFERS must be 1 or 2, got 3"):
        superbatch_bytes(1000)


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

"""Feature rows read from a ``.npy`` file with positioned reads: the file's rows bit for bit, whatever the ids, and
the hot-row cache's misses read that way rather than through the mapping."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from graphscale.data import row_file
from graphscale.data.row_cache import HotRowCache
from graphscale.data.row_file import RowFile


def table(tmp_path, rows: int = 5000, features: int = 3, dtype=np.float32):
    """A table whose rows are 12 bytes (float32 x 3): rows straddle page boundaries, none is page-aligned."""
    x = np.random.default_rng(0).standard_normal((rows, features)).astype(dtype)
    path = tmp_path / "x.npy"
    np.save(path, x)
    return path, x


def reference_spans(distinct: np.ndarray, row_bytes: int, gap: int, span: int) -> list[tuple[int, int]]:
    """``(first row, rows)`` of each span, planned one id at a time as the module docstring says."""
    spans: list[list[int]] = []
    for i in distinct.tolist():
        if spans and (i - spans[-1][1] - 1) * row_bytes <= gap and (i - spans[-1][0] + 1) * row_bytes <= span:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return [(a, b - a + 1) for a, b in spans]


@pytest.mark.parametrize("threads", [1, row_file.READ_THREADS])
@pytest.mark.parametrize("gap, span", [(0, 1 << 20), (40, 120), (row_file.SPAN_GAP, row_file.SPAN_BYTES)])
def test_rows_read_equal_the_files_for_unaligned_adjacent_and_duplicate_ids(tmp_path, monkeypatch, threads, gap,
                                                                            span):
    """Spans of adjacent rows only (gap 0), spans through gaps of up to three 12-byte rows capped at ten rows, and
    the defaults (every case one or a few spans through the whole 60 KB table): the rows are the file's."""
    monkeypatch.setattr(row_file, "READ_THREADS", threads)
    monkeypatch.setattr(row_file, "SPAN_GAP", gap)
    monkeypatch.setattr(row_file, "SPAN_BYTES", span)
    path, x = table(tmp_path)
    rows = RowFile(path, x.shape, torch.float32)
    rng = np.random.default_rng(1)
    cases = {
        "one": [4999],
        "adjacent": [10, 11, 12, 13, 340, 341, 0, 1],
        "gaps": [20, 22, 25, 29, 34, 35, 36, 4990, 4994, 4998],
        "duplicates, unsorted": [7, 3, 7, 7, 4999, 3, 0, 4, 5, 6],
        "every row, reversed": list(range(4999, -1, -1)),
        "random with repeats": rng.integers(0, 5000, 20000).tolist(),  # many spans: the threaded reads
        "sparse": rng.choice(5000, 300, replace=False).tolist(),  # gaps of every length
        "empty": [],
    }
    for name, ids in cases.items():
        before = rows.rows_read, rows.reads, rows.bytes_read
        got = rows.read(torch.tensor(ids, dtype=torch.int64))
        assert got.dtype == torch.float32 and got.shape == (len(ids), 3), name
        assert np.array_equal(got.numpy(), x[np.asarray(ids, dtype=np.int64)]), name
        distinct = np.unique(np.asarray(ids, dtype=np.int64))
        spans = reference_spans(distinct, 12, gap, max(span, 12))
        assert (rows.rows_read - before[0], rows.reads - before[1], rows.bytes_read - before[2]) == (
            distinct.size, len(spans), 12 * sum(n for _, n in spans)), name
    rows.close()


def test_a_different_or_truncated_file_is_refused_naming_it(tmp_path):
    path, x = table(tmp_path, rows=100)
    with pytest.raises(ValueError, match="x.npy holds shape \\(100, 3\\) and dtype float32; .* shape \\(100, 4\\)"):
        RowFile(path, (100, 4), torch.float32)
    with pytest.raises(ValueError, match="x.npy holds .* dtype float64"):
        RowFile(path, (100, 3), torch.float64)
    rows = RowFile(path, x.shape, torch.float32)
    with pytest.raises(IndexError, match="\\[0, 100\\) to be read from .*x.npy, got 5..100"):
        rows.read(torch.tensor([5, 100]))
    size = os.path.getsize(path)
    os.truncate(path, size - 12 * 10)  # the last ten rows gone after the reader checked the size
    with pytest.raises(OSError, match="reading rows 3..99 of .*x.npy failed or ended early"):  # one span
        rows.read(torch.tensor([3, 95, 96, 97, 98, 99]))
    rows.close()
    with pytest.raises(ValueError, match="x.npy is not a readable .npy file: .*greater than file size"):
        RowFile(path, x.shape, torch.float32)
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match="bad.npy is not a readable .npy file"):
        RowFile(tmp_path / "bad.npy", x.shape, torch.float32)


def test_the_cache_reads_its_misses_from_the_file_not_the_mapping(tmp_path):
    """The mapping is copy-on-write: rows changed in this process's copy after the cache filled are seen by a read
    through the mapping, not by a read from the file. With a file, every gathered row is the file's (hits from the
    fill, misses from pread), and the reader read exactly the distinct missed rows; without, the misses show the
    changed copy."""
    path, x = table(tmp_path, rows=200, features=5, dtype=np.float64)
    mapped = torch.from_numpy(np.load(path, mmap_mode="c"))
    degrees = torch.arange(200, dtype=torch.int64) % 17
    ids = torch.tensor([16, 0, 33, 33, 199, 1, 2, 3, 16, 150, 151])
    with_file = HotRowCache(mapped, 20, degrees, torch.float32, RowFile(path, x.shape, torch.float64))
    through_map = HotRowCache(mapped, 20, degrees, torch.float32)
    mapped.mul_(-1.0)  # private pages now differ from the file
    cached = set(with_file.ids.tolist())
    missed = [int(v) for v in ids if int(v) not in cached]
    assert 0 < len(missed) < ids.numel()
    expect = torch.from_numpy(x[ids.numpy()]).to(torch.float32)
    assert torch.equal(with_file.gather(ids), expect)
    assert (with_file.hits, with_file.misses) == (ids.numel() - len(missed), len(missed))
    assert with_file.file.rows_read == len(set(missed))
    mixed = through_map.gather(ids)
    miss = torch.tensor([int(v) not in cached for v in ids])
    assert torch.equal(mixed[~miss], expect[~miss]) and torch.equal(mixed[miss], -expect[miss])
    with pytest.raises(ValueError, match="x.npy holds a \\[200, 5\\] float64 table, not the cached \\[200, 4\\]"):
        HotRowCache(mapped[:, :4].contiguous(), 0, None, torch.float32, with_file.file)

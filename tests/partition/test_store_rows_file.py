"""Rows gathered into a private mapped file (graphscale.partition.store_rows_file): the gathered rows bit for bit,
held as pages of a file that is gone from disk once mapped, registered for removal with the run before it exists,
and refused in one line naming the directory and the bytes where the disk has no room."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from graphscale.distributed.launch import LAUNCH_DIR_ENV
from graphscale.partition import store_rows_file
from graphscale.partition.store_base import gather_rows, part_rows, row_blocks
from graphscale.partition.store_rows_file import rows_to_file


def mapping_of(address: int) -> str | None:
    """The path of the file mapping that holds ``address`` in this process (``""``: an anonymous mapping)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(a, 16) for a in fields[0].split("-"))
            if start <= address < end:
                return fields[5].strip() if len(fields) > 5 else ""
    return None


pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps (Linux)")


@pytest.fixture
def base(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((500, 24)).astype(np.float32))
    return tmp_path


def _ids():
    return np.random.default_rng(1).permutation(500)[:333]


def test_rows_written_to_a_file_equal_the_gathered_rows_and_are_its_pages(base, tmp_path):
    ids, rows_dir = _ids(), tmp_path / "rows"
    # blocks of 3 pages: every gather crosses block boundaries
    shape, dtype, blocks = row_blocks(base / "x.npy", ids, 3 * mmap.PAGESIZE)
    mapped = rows_to_file(blocks, (ids.size, *shape[1:]), dtype, rows_dir)
    expected = np.load(base / "x.npy")[ids]
    assert mapped.dtype == expected.dtype and np.array_equal(mapped, expected)
    assert np.array_equal(mapped, gather_rows(base / "x.npy", ids, chunk_bytes=3 * mmap.PAGESIZE))
    where = mapping_of(mapped.ctypes.data)
    assert where is not None and where.startswith(str(rows_dir)) and where.endswith("rows.bin (deleted)"), where
    assert list(rows_dir.iterdir()) == []  # nothing left on disk: the mapping holds the pages
    via_part = part_rows(base, "x", ids, ids.size, 0, None, 3 * mmap.PAGESIZE, rows_dir)
    assert np.array_equal(via_part, expected) and mapping_of(via_part.ctypes.data).endswith("(deleted)")


def test_the_file_is_registered_with_the_launcher_before_it_exists(base, tmp_path, monkeypatch):
    launch_dir = tmp_path / "launch"
    launch_dir.mkdir()
    monkeypatch.setenv(LAUNCH_DIR_ENV, str(launch_dir))
    ids = _ids()
    shape, dtype, blocks = row_blocks(base / "x.npy", ids)
    rows_to_file(blocks, (ids.size, *shape[1:]), dtype, tmp_path / "rows")
    marks = [Path(m.read_text()) for m in (launch_dir / "remove").iterdir()]
    assert len(marks) == 1 and marks[0].parent == tmp_path / "rows" and marks[0].name.startswith(".rows.mapped-")
    assert not marks[0].exists()


def test_a_directory_without_room_is_refused_naming_it_and_the_bytes(base, tmp_path, monkeypatch):
    ids = _ids()
    shape, dtype, blocks = row_blocks(base / "x.npy", ids)
    monkeypatch.setattr(store_rows_file, "free_bytes", lambda directory: 1000)
    with pytest.raises(ValueError) as err:
        rows_to_file(blocks, (ids.size, *shape[1:]), dtype, tmp_path / "rows", "the rows of x.npy")
    message = str(err.value)
    assert message.count("\n") == 0 and str(tmp_path / "rows") in message and f"{333 * 24 * 4:,} bytes" in message
    assert "1,000 bytes are free" in message and list((tmp_path / "rows").iterdir()) == []


def test_a_write_that_fails_midway_leaves_nothing(tmp_path):
    def blocks():
        yield 0, np.ones((4, 3), np.float32)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        rows_to_file(blocks(), (8, 3), np.float32, tmp_path / "rows")
    assert list((tmp_path / "rows").iterdir()) == []
    with pytest.raises(ValueError, match="4 bytes written, 96 expected|48 bytes written, 96 expected"):
        rows_to_file(iter([(0, np.ones((4, 3), np.float32))]), (8, 3), np.float32, tmp_path / "rows")
    assert list((tmp_path / "rows").iterdir()) == []
    empty = rows_to_file(iter(()), (0, 3), np.float32, tmp_path / "rows")
    assert empty.shape == (0, 3)

"""What a graph directory's ``meta.json`` records about its array files, and the check that they are unchanged.

Each array file is recorded as ``{"bytes": SIZE, "crc32": CRC}``: its size and the CRC-32 of its first and last
:data:`FINGERPRINT_BYTES` (the whole file when it is shorter than twice that), computed once when the directory is
written. Loading compares both, reading at most 2 MiB per file, so it stays fast at any size; a truncated or
extended file, and a change within a MiB of either end, is refused with the file named. A change confined to the
middle of a larger file keeps the fingerprint (a full checksum would read every byte on every load).

:func:`reserve` allocates a file's blocks up front, so that a disk too small fails when the file is created
(ENOSPC) rather than with SIGBUS when a page of a sparse memory-mapped file is written later.
"""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

#: bytes at each end of an array file that its fingerprint covers (:func:`file_fingerprint`)
FINGERPRINT_BYTES = 1 << 20
_PIECE = 1 << 16  # bytes read at a time


def file_fingerprint(file: Path) -> dict:
    """``{"bytes": size, "crc32": CRC-32 of the first and last FINGERPRINT_BYTES}`` of ``file`` (the whole file
    when it is shorter than twice that): what ``meta.json`` records per array file and loading compares."""
    size = file.stat().st_size
    crc = 0
    with open(file, "rb") as f:
        for start, end in ((0, min(size, FINGERPRINT_BYTES)), (max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES), size)):
            f.seek(start)
            for offset in range(start, end, _PIECE):
                crc = zlib.crc32(f.read(min(_PIECE, end - offset)), crc)
    return {"bytes": size, "crc32": f"{crc:08x}"}


def reserve(file: Path) -> None:
    """Allocate ``file``'s blocks now (``posix_fallocate``), so that a disk too small fails here with ENOSPC, not
    later with SIGBUS when a page of a sparse memory-mapped file is written; file systems without it are skipped."""
    if not hasattr(os, "posix_fallocate"):
        return
    size = file.stat().st_size
    if not size:
        return
    fd = os.open(file, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise OSError(err.errno, err.strerror, str(file)) from None
    finally:
        os.close(fd)


def check_files(path: Path, meta: dict) -> None:
    """Refuse a graph directory whose array files differ from what ``meta.json`` records under ``files`` (size and
    :func:`file_fingerprint`), naming the first such file; nothing is checked when there is no record."""
    for name, record in (meta.get("files") or {}).items():
        file = path / name
        if not file.is_file():
            continue  # a listed array that is missing is named by the loader
        size = file.stat().st_size
        if size != record.get("bytes"):
            raise ValueError(f"{file} has {size} bytes but {path / 'meta.json'} records {record.get('bytes')}: it "
                             "was truncated or changed since the graph directory was written; write it again")
        if file_fingerprint(file)["crc32"] != record.get("crc32"):
            raise ValueError(f"{file} was changed since the graph directory was written (its first or last MiB "
                             f"differs from the checksum {path / 'meta.json'} records); write it again")

"""Text the edge-list readers share: the compiled scanner of integer pairs (SNAP, KONECT, MUSAE, Network
Repository edge lists), a text file's bytes with binary formats refused by name, and lines for error messages."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path

import numba as nb
import numpy as np

from graphscale.data.readers.common import binary_kind, wrong_kind

_PAIR_ERRORS = {1: "fewer than two {what} on the line", 2: "{what} must be integers",
                3: "{what} must be non-negative", 4: "{what} must be below 2**63"}


@nb.njit(nogil=True, cache=True, inline="always")
def k_int_field(buf, i):  # pragma: no cover - compiled
    """Parse the integer token at ``buf[i]`` (``buf`` ends with a newline): returns (value, status, end);
    status 0 ok, 2 not an integer, 3 negative, 4 too large. A token ends at a blank, a comma or a newline."""
    negative = buf[i] == 45  # '-'
    if negative:
        i += 1
    while buf[i] == 48 and 48 <= buf[i + 1] <= 57:  # leading zeros
        i += 1
    start, value = i, 0
    d = np.int64(buf[i]) - 48
    while 0 <= d <= 9:
        value = value * 10 + d
        i += 1
        d = np.int64(buf[i]) - 48
    c = buf[i]
    if i == start or not (c == 32 or c == 9 or c == 10 or c == 44 or c == 13):
        return 0, 2, i
    if negative:
        return 0, 3, i
    if i - start > 19 or value < 0:  # 20+ digits, or 19 that wrapped past 2**63 - 1
        return 0, 4, i
    return value, 0, i


@nb.njit(nogil=True, cache=True)
def _k_int_pairs(buf, out):  # pragma: no cover - compiled
    """Read the first two integers of every line of ``buf`` (bytes ending with a newline) into ``out``
    [capacity, 2].

    Blank lines and lines starting with ``#`` or ``%`` are skipped; fields are separated by runs of
    blanks and/or commas; further fields are ignored; the first non-comment line is skipped as a
    header when one of its first two fields is not an integer. Returns ``(count, status, line,
    line_start, header_line)`` where ``status`` is 0 or the error code of line ``line`` (1-based)
    that starts at byte ``line_start``; ``header_line`` is 0 when there was no header.
    """
    n = buf.shape[0]
    i, line, count, header_line = 0, 0, 0, 0
    seen_data = False
    while i < n:
        line += 1
        start = i
        c = buf[i]
        while c == 32 or c == 9 or c == 13:
            i += 1
            c = buf[i]
        if c == 10 or c == 35 or c == 37:  # blank line, '#' or '%' comment
            while buf[i] != 10:
                i += 1
            i += 1
            continue
        value0, status, i = k_int_field(buf, i)
        value1 = 0
        if status == 0:
            c = buf[i]
            while c == 32 or c == 9 or c == 44 or c == 13:
                i += 1
                c = buf[i]
            if c == 10:
                status = 1
            else:
                value1, status, i = k_int_field(buf, i)
        if status != 0:
            if status == 2 and not seen_data:
                header_line = line
            else:
                return count, status, line, start, header_line
        else:
            out[count, 0] = value0
            out[count, 1] = value1
            count += 1
        seen_data = True
        while buf[i] != 10:
            i += 1
        i += 1
    return count, 0, line, 0, header_line


def read_int_pairs(file: str | Path, what: str = "node ids") -> np.ndarray:
    """Read the first two integers of every line of a text file into an ``[rows, 2]`` int64 array.

    The format edge lists are shipped in (SNAP, KONECT, MUSAE, Network Repository): fields separated
    by blanks and/or commas, lines starting with ``#`` or ``%`` are comments, a first non-comment
    line that is not two integers is a header and skipped, columns after the first two (weights,
    timestamps) are ignored. The file is read whole and parsed by a compiled single-pass scanner.

    Raises:
        ValueError: naming the file and line for a line with fewer than two fields, a non-integer
            or negative value.
    """
    file = Path(file)
    return int_pairs(text_bytes(file, what), file, what)


def text_bytes(file: Path, what: str) -> bytes:
    """The bytes of a text file, without a UTF-8 BOM and ending with a newline (the scanners rely on a final
    newline instead of bounds checks); a directory or a known binary format (a ``.mat``, ``.npz``, gzip, ...)
    is refused with an error naming it."""
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected a text file of {what}") from None
    kind, text = binary_kind(data[:128])
    if kind:
        raise wrong_kind(file, kind, text, f"a text file of {what}")
    data = data.removeprefix(codecs.BOM_UTF8)
    return data if data.endswith(b"\n") else data + b"\n"


def line_text(data: bytes, start: int) -> str:
    """The line of ``data`` that starts at byte ``start``, shortened for an error message."""
    end = data.find(b"\n", start)
    text = data[start: end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
    return text if len(text) <= 80 else text[:77] + "..."


def int_pairs(data: bytes, file: Path, what: str) -> np.ndarray:
    """:func:`read_int_pairs` on the bytes of ``file`` (as :func:`text_bytes` returns them)."""
    return _scan_pairs(data, file, what, 0, False)


def _scan_pairs(data: bytes, file: Path, what: str, lines_before: int, seen_data: bool) -> np.ndarray:
    """The pairs of ``data``, a run of whole lines of ``file`` after its first ``lines_before`` lines; ``seen_data``:
    a non-comment line came before (then no line here may be a header). Errors name the line in the whole file."""
    buf = np.frombuffer(data, dtype=np.uint8)
    out = np.empty((data.count(b"\n"), 2), dtype=np.int64)
    count, status, line, start, header_line = _k_int_pairs(buf, out)
    if header_line and seen_data:  # not the file's first non-comment line: a line that is not two integers
        text = _nth_line(data, header_line)
        raise ValueError(f"{file}, line {lines_before + header_line}: {_PAIR_ERRORS[2].format(what=what)}, got "
                         f"{text!r}")
    if status:
        raise ValueError(f"{file}, line {lines_before + line}: {_PAIR_ERRORS[status].format(what=what)}, got "
                         f"{line_text(data, start)!r}")
    if header_line:  # a header names its columns: a line of numbers is data that is not two integers
        text = _nth_line(data, header_line)
        fields = [f for f in re.split(r"[\s,]+", text.strip()) if f][:2]
        if all(_is_number(f) for f in fields):
            raise ValueError(f"{file}, line {lines_before + header_line}: expected two integers ({what}), got "
                             f"{text!r} (a first line is skipped as a header only when it is not numeric)")
    return out[:count]


#: bytes of text read at a time by :func:`text_blocks` / :func:`iter_int_pairs`
TEXT_BLOCK = 1 << 24


def text_blocks(file: Path, what: str, block_bytes: int = TEXT_BLOCK) -> Iterator[bytes]:
    """The bytes of a text file in blocks of whole lines (about ``block_bytes`` each; a longer line is one block),
    as :func:`text_bytes` would give them whole: without a UTF-8 BOM, every block ending with a newline, a
    directory or a known binary format refused. Only one block is held at a time."""
    try:
        f = open(file, "rb")  # noqa: SIM115 - closed below
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected a text file of {what}") from None
    with f:
        kind, text = binary_kind(f.read(128))
        if kind:
            raise wrong_kind(file, kind, text, f"a text file of {what}")
        f.seek(0)
        rest = f.read(max(block_bytes, 8)).removeprefix(codecs.BOM_UTF8)
        while True:
            chunk = f.read(max(block_bytes, 8))
            data = rest + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            if cut:
                block = data[:cut]
                yield block if block.endswith(b"\n") else block + b"\n"
            rest = data[cut:]
            if not chunk:
                return


def iter_int_pairs(file: Path, what: str = "node ids", block_bytes: int = TEXT_BLOCK) -> Iterator[np.ndarray]:
    """:func:`read_int_pairs` in chunks: the ``[rows, 2]`` pairs of each block of :func:`text_blocks`, the same rows
    and the same errors (naming the line in the whole file) as the whole read, one block in memory at a time."""
    lines, seen_data = 0, False
    for data in text_blocks(file, what, block_bytes):
        pairs = _scan_pairs(data, file, what, lines, seen_data)
        seen_data = seen_data or pairs.shape[0] > 0 or has_data_line(data)
        lines += data.count(b"\n")
        yield pairs


def has_data_line(data: bytes) -> bool:
    """Whether ``data`` holds a line that is neither blank nor a ``#`` / ``%`` comment."""
    for line in data.splitlines():
        text = line.strip(b" \t\r")
        if text and text[:1] not in (b"#", b"%"):
            return True
    return False


def _nth_line(data: bytes, number: int) -> str:
    """Line ``number`` (1-based) of ``data``, shortened for an error message."""
    start = 0
    for _ in range(number - 1):
        start = data.index(b"\n", start) + 1
    return line_text(data, start)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


"""The METIS graph-file reader (the input format of METIS / KaHIP / Chaco), and the test that tells a METIS
file from an edge list."""

from __future__ import annotations

from pathlib import Path

import numba as nb
import numpy as np

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, require
from graphscale.data.readers.text import has_data_line, k_int_field, line_text, text_blocks, text_bytes

_METIS_ERRORS = {2: "expected integers", 3: "values must be non-negative", 4: "values must be below 2**63",
                 5: "the line ends before the vertex's {front} size/weight field(s) that fmt {fmt} puts first",
                 6: "more vertex lines than the {n} the header announces",
                 7: "a neighbour outside 1..{n} (METIS ids are 1-based)",
                 8: "more adjacency entries than the header's 2*m = {entries}",
                 9: "a neighbour without its edge weight (fmt {fmt} puts a weight after every neighbour)"}


@nb.njit(nogil=True, cache=True)
def _k_blank(buf, i):  # pragma: no cover - compiled
    """The first byte at or after ``i`` that is not a blank (space, tab, carriage return)."""
    c = buf[i]
    while c == 32 or c == 9 or c == 13:
        i += 1
        c = buf[i]
    return i


@nb.njit(nogil=True, cache=True)
def _k_count_lines(buf, i):  # pragma: no cover - compiled
    """``(lines, non-blank lines)`` of ``buf`` from byte ``i`` on, lines starting with '%' or '#' not counted."""
    lines, nonblank, n = 0, 0, buf.shape[0]
    while i < n:
        i = _k_blank(buf, i)
        c = buf[i]
        if c != 37 and c != 35:
            lines += 1
            nonblank += c != 10
        while buf[i] != 10:
            i += 1
        i += 1
    return lines, nonblank


@nb.njit(nogil=True, cache=True)
def _k_metis(buf, i, line, n, front, edge_weights, indptr, indices):  # pragma: no cover - compiled
    """Read the vertex lines of a METIS graph from byte ``i`` (after the header, which is line ``line``):
    ``front`` leading integers (vertex size and weights) are skipped, then 1-based neighbours, each followed
    by an edge weight when ``edge_weights``; neighbour ``j`` of vertex ``v`` becomes ``indices[...] = j - 1``
    and ``indptr[v + 1]`` ends the row. '%' lines are comments; a blank line is a vertex without neighbours;
    after ``n`` vertex lines only blank lines may follow. Returns ``(status, line, line_start, vertices,
    entries)``: status 0 or a code of ``_METIS_ERRORS`` for line ``line`` that starts at ``line_start``.
    """
    size, cap = buf.shape[0], indices.shape[0]
    v, e = 0, 0
    while i < size:
        line += 1
        start = i
        i = _k_blank(buf, i)
        if buf[i] == 37 or buf[i] == 35:  # a comment
            while buf[i] != 10:
                i += 1
            i += 1
            continue
        if v == n:
            if buf[i] != 10:
                return 6, line, start, v, e
            i += 1
            continue
        for _ in range(front):
            if buf[i] == 10:
                return 5, line, start, v, e
            _, status, i = k_int_field(buf, i)
            if status != 0:
                return status, line, start, v, e
            i = _k_blank(buf, i)
        while buf[i] != 10:
            value, status, i = k_int_field(buf, i)
            if status != 0:
                return status, line, start, v, e
            if value < 1 or value > n:
                return 7, line, start, v, e
            if e == cap:
                return 8, line, start, v, e
            indices[e] = value - 1
            e += 1
            i = _k_blank(buf, i)
            if edge_weights:
                if buf[i] == 10:
                    return 9, line, start, v, e
                _, status, i = k_int_field(buf, i)
                if status != 0:
                    return status, line, start, v, e
                i = _k_blank(buf, i)
        v += 1
        indptr[v] = e
        i += 1
    return 0, line, 0, v, e


def _metis_header(data: bytes, file: Path | None) -> tuple[int, int, str, int, int, int]:
    """``(n, m, fmt as 3 digits, ncon, header line number, byte after the header line)`` of a METIS file; the
    header is the first line that is neither blank nor a '%' comment. ``file=None``: a malformed header raises
    a bare ValueError (for :func:`is_metis`)."""
    pos, line = 0, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        line += 1
        text = data[pos:end].strip()
        if text and not text.startswith((b"%", b"#")):
            break
        pos = end + 1
    else:
        if file is None:
            raise ValueError
        raise ValueError(f"{file} holds no METIS header; expected a first line 'n m [fmt [ncon]]' (vertices, "
                         "edges, weight format, weights per vertex)")
    fields = text.split()
    valid = 2 <= len(fields) <= 4 and all(f.isdigit() for f in fields) and (
        len(fields) < 3 or (len(fields[2]) <= 3 and set(fields[2]) <= set(b"01")))
    if not valid:
        if file is None:
            raise ValueError
        raise ValueError(f"{file}, line {line}: expected a METIS header 'n m [fmt [ncon]]' (integers; fmt of up to "
                         f"three 0/1 digits), got {line_text(data, pos)!r}")
    fmt = (fields[2].decode() if len(fields) >= 3 else "0").zfill(3)
    ncon = int(fields[3]) if len(fields) == 4 else 1
    return int(fields[0]), int(fields[1]), fmt, ncon, line, end + 1


def _metis_adjacency(data: bytes, file: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr [n+1], indices [2m], 0-based)`` of a METIS file; ``file=None``: any problem raises a bare
    ValueError (for :func:`is_metis`), else an error naming the file, the line and what was expected."""
    n, m, fmt, ncon, line, pos = _metis_header(data, file)
    front = int(fmt[0]) + (ncon if fmt[1] == "1" else 0)
    hint = "" if file is None else f"; is it an edge list? (read those with edgelist:{file})"
    if 2 * m > len(data):  # every entry takes at least a digit and a separator
        if file is None:
            raise ValueError
        raise ValueError(f"{file}: the METIS header says {m:,} edges, more than its {len(data):,} bytes can "
                         f"list{hint}")
    buf = np.frombuffer(data, dtype=np.uint8)
    indptr, indices = np.zeros(n + 1, dtype=np.int64), np.empty(2 * m, dtype=np.int64)
    status, line, start, vertices, entries = _k_metis(buf, pos, line, n, front, fmt[2] == "1", indptr, indices)
    if file is None and (status or vertices != n or entries != 2 * m):
        raise ValueError
    if status:
        what = _METIS_ERRORS[status].format(n=n, entries=2 * m, front=front, fmt=fmt)
        raise ValueError(f"{file}, line {line}: {what}, got {line_text(data, start)!r}"
                         f"{hint if status in (6, 7, 8) else ''}")
    if vertices != n:
        raise ValueError(f"{file}: the METIS header says {n:,} vertices but only {vertices:,} vertex lines follow"
                         f"{hint}")
    if entries != 2 * m:
        raise ValueError(f"{file}: the METIS header says {m:,} edges, so 2*m = {2 * m:,} adjacency entries (every "
                         f"undirected edge listed by both ends), but the vertex lines hold {entries:,}{hint}")
    return indptr, indices


def is_metis(data: bytes) -> bool:
    """Whether the text ``data`` is a METIS graph: a header ``n m [fmt [ncon]]`` and exactly ``n`` vertex lines
    after it whose entries parse as 1-based neighbours, ``2*m`` of them, and either vary in number from line to
    line (an edge list has two ids on every line) or list every edge from both ends. Cheap for edge lists:
    only a file whose line count after the first line matches the first number is parsed."""
    try:
        n, _, _, _, _, pos = _metis_header(data, None)
    except ValueError:
        return False
    lines, nonblank = _k_count_lines(np.frombuffer(data, dtype=np.uint8), pos)
    if not nonblank <= n <= lines:
        return False
    try:
        indptr, indices = _metis_adjacency(data, None)
    except ValueError:
        return False
    degrees = np.diff(indptr)
    if degrees.size and degrees.min() != degrees.max():
        return True
    dst = np.repeat(np.arange(n, dtype=np.int64), degrees)
    return np.array_equal(np.sort(dst * n + indices), np.sort(indices * n + dst))


def is_metis_file(file: Path, block_bytes: int) -> bool:
    """:func:`is_metis` of a text file read in blocks of ``block_bytes`` (:func:`text_blocks`): the header and the
    line counts are taken block by block, and only a file whose line counts match the header's ``n`` (a METIS
    file, or a rare edge list that looks like one) is read whole for the rest of the test."""
    n = None
    lines = nonblank = 0
    for data in text_blocks(file, "node ids", block_bytes):
        start = 0
        if n is None:
            try:
                n, _, _, _, _, start = _metis_header(data, None)
            except ValueError:
                if has_data_line(data):  # the first line that is not a comment is no METIS header
                    return False
                continue
        more, more_nonblank = _k_count_lines(np.frombuffer(data, dtype=np.uint8), start)
        lines, nonblank = lines + more, nonblank + more_nonblank
        if nonblank > n:
            return False
    if n is None or not nonblank <= n <= lines:
        return False
    return is_metis(text_bytes(file, "node ids"))


def read_metis(file: str | Path) -> Graph:
    """Read a METIS graph file (the input format of METIS / KaHIP / Chaco).

    The first line that is not a '%' comment is the header ``n m [fmt [ncon]]``: ``n`` vertices, ``m``
    undirected edges (each counted once), ``fmt`` up to three 0/1 digits ``[sizes][weights][edge weights]``
    (leading zeros may be left out: ``1`` = edge weights, ``11`` = vertex and edge weights, ``100`` = vertex
    sizes) and ``ncon`` weights per vertex (default 1). Then one line per vertex ``1..n``: its size and
    weights when ``fmt`` says so, then its neighbours (1-based), each followed by the edge's weight when
    ``fmt`` says so; a blank line is a vertex without neighbours. Sizes and weights are checked to be
    integers and dropped. The vertex lines must hold ``2*m`` neighbour entries (every edge from both ends);
    the graph is symmetrised, duplicates and self-loops dropped. There are no features or labels.

    Raises:
        ValueError: a malformed header or line (file and line named), a neighbour outside ``1..n``, fewer or
            more vertex lines than ``n``, or an entry count other than ``2*m``.
    """
    file = require(Path(file), "a METIS graph file (a header 'n m [fmt [ncon]]', then one line per vertex)")
    data = text_bytes(file, "a METIS graph")
    indptr, indices = _metis_adjacency(data, file)
    del data
    n = indptr.size - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return build_graph(indices, dst, n, name=file.stem, num_classes=0, source=f"metis:{file.resolve()}")



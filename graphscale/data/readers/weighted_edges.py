"""A weighted text edge list (``edgelist:FILE[:LABELS]:weighted``): ``src dst weight`` lines.

The same lines as an unweighted edge list (blanks or commas between fields, ``#`` / ``%`` comment lines, a first
non-comment line that does not start with two integers skipped as a header), with a third column, the edge's weight
(any finite number; columns after it are ignored). Edges are undirected: ``u v w`` gives ``u -> v`` and ``v -> u``
the weight ``w``; an edge listed again (in either direction) must repeat its weight, and self-loops are dropped, as
the unweighted reader drops them. The file is read whole (O(edges) memory).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

_FIELDS = re.compile(r"[\s,]+")


def _int(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def weighted_edges(data: bytes, file: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, weight, line)`` of every ``src dst weight`` line of ``file`` (``data``: its bytes), in file order.

    Raises:
        ValueError: a line without two integer ids or without a weight, or a weight that is not a finite number,
            naming the file and the line.
    """
    src, dst, weight, lines = [], [], [], []
    seen_data = False
    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        text = raw.strip()
        if not text or text[0] in "#%":
            continue
        fields = [f for f in _FIELDS.split(text) if f]
        u, v = (_int(fields[0]), _int(fields[1])) if len(fields) >= 2 else (None, None)
        if u is None or v is None or u < 0 or v < 0:
            if not seen_data and not _is_number(fields[0]):
                seen_data = True  # a header line naming its columns
                continue
            raise ValueError(f"{file}, line {number}: expected 'src dst weight' (two non-negative integer ids and a "
                             f"number), got {raw[:80]!r}")
        seen_data = True
        if len(fields) < 3:
            raise ValueError(f"{file}, line {number}: no weight (the spec says weighted: expected 'src dst weight'), "
                             f"got {raw[:80]!r}")
        try:
            w = float(fields[2])
        except ValueError:
            w = math.nan
        if not math.isfinite(w):
            raise ValueError(f"{file}, line {number}: weight {fields[2]!r} is not a finite number")
        src.append(u)
        dst.append(v)
        weight.append(w)
        lines.append(number)
    return (np.array(src, np.int64), np.array(dst, np.int64), np.array(weight, np.float64),
            np.array(lines, np.int64))


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def undirected(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, lines: np.ndarray,
               file: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both directions of every distinct undirected edge with its weight, self-loops dropped.

    Raises:
        ValueError: an edge listed twice with two different weights, naming both lines.
    """
    keep = src != dst
    src, dst, weight, lines = src[keep], dst[keep], weight[keep], lines[keep]
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    order = np.lexsort((lines, hi, lo))
    lo, hi, weight, lines = lo[order], hi[order], weight[order], lines[order]
    same = (lo[1:] == lo[:-1]) & (hi[1:] == hi[:-1])
    clash = same & (weight[1:] != weight[:-1])
    if clash.any():
        i = int(np.flatnonzero(clash)[0])
        raise ValueError(f"{file}, line {int(lines[i + 1])}: edge {int(lo[i])}-{int(hi[i])} has weight "
                         f"{float(weight[i + 1])!r}, but line {int(lines[i])} gave it {float(weight[i])!r}; an "
                         "undirected edge has one weight")
    first = np.concatenate([[True], ~same])
    lo, hi, weight = lo[first], hi[first], weight[first]
    return np.concatenate([lo, hi]), np.concatenate([hi, lo]), np.concatenate([weight, weight])

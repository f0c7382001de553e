"""Node data by reference: a partition store that reads its parts' node rows from the graph directory it was written
from, instead of holding copies of them.

A store written from a graph directory on the same machine with ``graphscale partition --node-data reference`` (the
default is ``copy``, and a run's own cached stores copy) records that directory under ``node_data_base`` in its
``meta.json``::

    "node_data_base": {"path": "/abs/graph/dir", "num_nodes": N,
                       "arrays": {"x": {"bytes": SIZE, "crc32": CRC}, "y": {...}, "train_mask": {...}, ...}}

and writes no ``x.npy``, ``y.npy`` or mask files into its parts: a part's rows are the base rows of its
``orig_ids.npy`` (the original id of every local vertex), gathered through short-lived memory maps in blocks of
at most :data:`DEFAULT_GATHER_BYTES` (so no process reads the whole feature table, and pages read do not pile
up in its resident set), into memory or, for a worker's feature rows, into a private file it maps
(:mod:`graphscale.partition.store_rows_file`); masks are set on inner rows only, as a copying store stores them. Each referenced
file is recorded with its size and fingerprint (:func:`graphscale.data.integrity.file_fingerprint`), and a
store whose base directory is missing, moved or changed since is refused in one line naming the directory and
what to do. Arrays the base directory does not hold as files (a split made when the dataset was read) are
copied as usual.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from graphscale.data.integrity import file_fingerprint
from graphscale.partition.store_rows_file import rows_to_file

#: ``graphscale partition --node-data``: copy every part's node rows into the store, or reference the base's
NODE_DATA_MODES = ("copy", "reference")
#: the key of the base record in a store's ``meta.json``
BASE_KEY = "node_data_base"
#: bound on one block of rows gathered from a base array (bytes)
DEFAULT_GATHER_BYTES = 64 << 20
MASKS = ("train_mask", "val_mask", "test_mask")
_FIX = "partition the graph again (graphscale partition), or write the store with --node-data copy"


def block_rows(row_bytes: int, chunk_bytes: int, mapped: bool) -> int:
    """Rows per block of at most about ``chunk_bytes`` (a row gathered through a memory map keeps its whole page
    resident until the map is closed, so a mapped row counts at least a page)."""
    return max(1, chunk_bytes // (max(row_bytes, mmap.PAGESIZE) if mapped else max(row_bytes, 1)))


def base_record(folder: str | Path, names) -> dict:
    """What a store records of its base graph directory ``folder`` for the referenced arrays ``names``."""
    from graphscale.data.formats import read_graph_meta

    folder = Path(folder).resolve()
    return {"path": str(folder), "num_nodes": int(read_graph_meta(folder)["num_nodes"]),
            "arrays": {name: file_fingerprint(folder / f"{name}.npy") for name in names}}


def referenced(meta: dict) -> tuple[str, ...]:
    """The node arrays a store reads from its base directory (none for a copying store)."""
    return tuple((meta.get(BASE_KEY) or {}).get("arrays") or ())


def check_base(store: str | Path, meta: dict) -> Path | None:
    """The base graph directory of a referencing store (``None`` for a copying store), checked to be the one the
    store was written from: present, the same vertex count, every referenced file of the recorded size and
    fingerprint.

    Raises:
        FileNotFoundError: the directory or a referenced file is missing (moved or deleted).
        ValueError: a referenced file or the vertex count changed since the store was written.
    """
    record = meta.get(BASE_KEY)
    if not record:
        return None
    try:
        base, arrays, n = Path(record["path"]), dict(record["arrays"]), int(record["num_nodes"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{Path(store) / 'meta.json'}: malformed {BASE_KEY} record ({err})") from None
    where = f"partition store {store} reads its node rows from the graph directory {base}"
    if not (base / "meta.json").is_file():
        raise FileNotFoundError(f"{where}, which is missing (moved or deleted): {_FIX}")
    for name, fingerprint in arrays.items():
        file = base / f"{name}.npy"
        if not file.is_file():
            raise FileNotFoundError(f"{where}, which no longer holds {file.name}: {_FIX}")
        if file_fingerprint(file) != fingerprint:
            raise ValueError(f"{where}, whose {file.name} changed since the store was written (its size or "
                             f"checksum differs): {_FIX}")
    if n != int(meta.get("num_nodes", n)):
        raise ValueError(f"{where}, which has {n} vertices but the store {meta.get('num_nodes')}: {_FIX}")
    return base


def row_blocks(file: Path, rows: np.ndarray, chunk_bytes: int = DEFAULT_GATHER_BYTES):
    """The ``.npy`` file ``file``'s shape and dtype, and a generator of ``(first, array[rows[first:last]])`` for
    consecutive blocks of about ``chunk_bytes`` of ``rows``, each read through a memory map opened for that block."""
    rows = np.asarray(rows, np.int64)
    probe = np.load(file, mmap_mode="r")
    shape, dtype = probe.shape, probe.dtype
    del probe
    step = block_rows(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize, chunk_bytes, mapped=True)

    def blocks():
        for first in range(0, rows.size, step):
            mapped = np.load(file, mmap_mode="r")
            block = mapped[rows[first:first + step]]
            del mapped
            yield first, block

    return shape, dtype, blocks()


def gather_rows(file: Path, rows: np.ndarray, *, zero_from: int | None = None, dtype=None,
                chunk_bytes: int = DEFAULT_GATHER_BYTES) -> np.ndarray:
    """``array[rows]`` of the ``.npy`` file ``file``, gathered in blocks of about ``chunk_bytes`` through a memory
    map opened per block; rows from ``zero_from`` on are zeros (cast to ``dtype`` when given)."""
    rows = np.asarray(rows, np.int64)
    stop = rows.size if zero_from is None else min(zero_from, rows.size)
    shape, stored, blocks = row_blocks(file, rows[:stop], chunk_bytes)
    out = np.zeros((rows.size, *shape[1:]), np.dtype(dtype or stored))
    for first, block in blocks:
        out[first:first + len(block)] = block
    return out


def part_rows(base: Path, name: str, orig_ids, num_inner: int, start: int = 0, stop: int | None = None,
              chunk_bytes: int = DEFAULT_GATHER_BYTES, directory: Path | None = None) -> np.ndarray:
    """Local rows ``[start, stop)`` of node array ``name`` of a part whose local vertices have the original ids
    ``orig_ids`` (``num_inner`` inner ones first), read from the base directory ``base`` (masks zero on halo
    rows, as stored by a copying store). With ``directory`` the rows of an array other than a mask are written
    to a private file there and returned memory-mapped (:func:`~graphscale.partition.store_rows_file.rows_to_file`):
    file pages, as a copying store's rows are, not anonymous memory."""
    ids = np.asarray(orig_ids[start:stop], np.int64)
    if name in MASKS:
        return gather_rows(base / f"{name}.npy", ids, zero_from=max(num_inner - start, 0), dtype=np.bool_,
                           chunk_bytes=chunk_bytes)
    if directory is not None:
        shape, dtype, blocks = row_blocks(base / f"{name}.npy", ids, chunk_bytes)
        return rows_to_file(blocks, (ids.size, *shape[1:]), dtype, directory, f"the gathered rows of {name}.npy")
    return gather_rows(base / f"{name}.npy", ids, chunk_bytes=chunk_bytes)

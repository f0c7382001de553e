"""The entries of the cache directory: what each is, its size on disk, its last use, and their safe removal.

The cache directory (``--cache-dir``, else ``$GRAPHSCALE_CACHE_DIR``, ``$XDG_CACHE_HOME/graphscale``,
``~/.cache/graphscale``: :func:`graphscale.data.cache.default_cache_dir`) holds, one entry per file or directory:

========== ============ =================================================================================
kind       folder       what
========== ============ =================================================================================
source     sources/     a dataset written as a graph directory (``graphscale convert``'s format)
graph      graphs/      a training graph directory (``--features``, normalisation and dtype applied)
store      stores/      a partition store (graph-parallel, model-averaging; an in-memory graph's too)
partition  owners/      a vertex partition into ``--workers`` parts (``.npy``)
shared     shared/      what a strategy prepared for its workers (split plan, chunks, offload layout, tasks)
size       sizes/       a dataset's size in bytes, for the allocation of parts (a few bytes)
input      inputs/      an in-memory graph given to the Python API, as a graph directory
averaging  averaging/   model-averaging's partition states
offload    offload/     offload's host arrays spilled to disk (removed when their run ends)
table      tmp/         an evaluation table spilled to disk (removed at once; one left is a crashed run's)
error-log  errors/      the traceback of a one-line error (the newest 20 are kept)
profile    advise/      the machine profile ``graphscale advise`` measured
temporary  (any)        a writer's temporary sibling ``.NAME.TAG-HOST-PID-RANDOM`` (a partial entry)
========== ============ =================================================================================

An entry's size is the blocks its files take on disk, a file with several hard links counted once in a listing; its
last use is the newest of its files' modification times and of its in-use lock's (set by every run that uses it:
:mod:`graphscale.data.cache_use`).

:func:`clear` removes an entry only when no running process holds it: a keyed entry while it holds the entry's write
and in-use locks exclusively (taken without waiting), a temporary or an offload folder when the process named in
its name is gone (on this host), an evaluation table when it is older than :data:`TABLE_GRACE_S`. What it skips
it reports with the reason. An entry is renamed to a hidden temporary sibling first, then deleted, so an
interrupted removal leaves no entry that looks complete.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from graphscale.data.cache_use import exclusive_or_none, use_file
from graphscale.data.siblings import sibling_writer, temp_sibling

#: folder -> kind (module docstring); ``locks/`` holds the entries' lock files, not entries
FOLDERS = {"sources": "source", "graphs": "graph", "stores": "store", "owners": "partition", "shared": "shared",
           "sizes": "size", "inputs": "input", "averaging": "averaging", "offload": "offload", "tmp": "table",
           "errors": "error-log", "advise": "profile"}
KINDS = (*FOLDERS.values(), "temporary")
#: an evaluation table file younger than this may belong to a live run (which removes it milliseconds after creating)
TABLE_GRACE_S = 3600.0
_DIGEST = re.compile(r"-([0-9a-f]{20})(\.json|\.npy)?$")


@dataclass
class CacheEntry:
    """One entry: ``kind`` (:data:`KINDS`), ``path``, ``size`` (bytes on disk), ``last_use`` (seconds since the
    epoch), ``key`` (its lock key, or ``None`` for an unkeyed entry)."""

    kind: str
    path: Path
    size: int
    last_use: float
    key: str | None


def _key(folder: str, name: str) -> str | None:
    """The lock key of entry ``name`` in ``folder`` (the digest its writer locked), or ``None``."""
    if folder == "averaging":
        return f"averaging-{name}"
    found = _DIGEST.search(name)
    if folder in ("offload", "tmp", "errors", "advise") or not found:
        return None
    return f"input-{found.group(1)}" if folder == "inputs" else found.group(1)


def _walk(path: Path, seen: set) -> tuple[int, float]:
    """``(bytes on disk, newest modification time)`` of ``path`` and everything below it (symlinks not followed;
    a file whose ``(device, inode)`` is in ``seen`` is not counted again)."""
    size, newest = 0, 0.0
    stack = [path]
    while stack:
        item = stack.pop()
        try:
            info = item.lstat()
        except OSError:  # removed meanwhile
            continue
        newest = max(newest, info.st_mtime)
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(OSError):
                stack.extend(item.iterdir())
        elif (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            size += info.st_blocks * 512
    return size, newest


def list_entries(cache: Path) -> list[CacheEntry]:
    """Every entry of the cache directory ``cache`` (module docstring), by kind and path; none when it is missing."""
    cache = Path(cache)
    seen: set = set()
    out = []
    for folder, kind in FOLDERS.items():
        try:
            names = sorted((cache / folder).iterdir())
        except OSError:
            continue
        for path in names:
            key = _key(folder, path.name)
            size, newest = _walk(path, seen)
            if key is not None:
                with contextlib.suppress(OSError):
                    newest = max(newest, use_file(cache, key).stat().st_mtime)
            is_temporary = sibling_writer(path.name) is not None and folder != "offload"
            out.append(CacheEntry("temporary" if is_temporary else kind, path, size, newest,
                                  None if is_temporary else key))
    return out


def total_size(cache: Path) -> int:
    """Bytes on disk of everything in the cache directory (lock files and all), each file counted once."""
    return _walk(Path(cache), set())[0] if Path(cache).is_dir() else 0


def _busy(entry: CacheEntry, now: float) -> str | None:
    """Why ``entry`` must not be removed now, else ``None`` (unkeyed entries; keyed ones are checked under their
    locks by :func:`clear`)."""
    writer = sibling_writer(entry.path.name)
    if writer is not None and writer[1]:
        return f"its writer, process {writer[0]}, is running" if writer[0] else "its writer is on another host"
    if entry.kind == "table" and now - entry.last_use < TABLE_GRACE_S:
        return f"younger than {TABLE_GRACE_S / 60:.0f} minutes (a running evaluation may hold it)"
    return None


def _remove(path: Path) -> None:
    """Rename ``path`` to a hidden sibling, then delete it (an interrupted removal leaves no complete-looking
    entry)."""
    doomed = temp_sibling(path, "clear")
    try:
        os.replace(path, doomed)
    except FileNotFoundError:  # removed meanwhile
        return
    if doomed.is_dir() and not doomed.is_symlink():
        shutil.rmtree(doomed)
    else:
        doomed.unlink()


def clear(cache: Path, kinds: list[str] | None = None, older_than_days: float | None = None,
          dry_run: bool = False) -> tuple[list[CacheEntry], list[tuple[CacheEntry, str]]]:
    """Remove the entries of ``kinds`` (all when empty) whose last use is older than ``older_than_days`` (any when
    ``None``), except those in use (module docstring). ``dry_run``: remove nothing, report the same.

    Returns:
        ``(removed, skipped)``: the entries removed (or that would be), and the entries kept with the reason.

    Raises:
        ValueError: an unknown kind or a negative age (naming them).
    """
    unknown = [k for k in kinds or [] if k not in KINDS]
    if unknown:
        raise ValueError(f"graphscale cache clear: unknown kind {unknown[0]!r}; the kinds are {', '.join(KINDS)}")
    if older_than_days is not None and not older_than_days >= 0:
        raise ValueError(f"graphscale cache clear: --older-than {older_than_days} is not a number of days >= 0")
    now = time.time()
    removed, skipped = [], []
    for entry in list_entries(cache):
        if kinds and entry.kind not in kinds:
            continue
        if older_than_days is not None and now - entry.last_use < older_than_days * 86400:
            continue
        reason = _busy(entry, now)
        if reason is None and entry.key is not None:
            with exclusive_or_none(Path(cache), entry.key) as reason:
                if reason is None and not dry_run:
                    _remove(entry.path)
        elif reason is None and not dry_run:
            _remove(entry.path)
        if reason is None:
            removed.append(entry)
        else:
            skipped.append((entry, reason))
    return removed, skipped

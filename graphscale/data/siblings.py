"""Hidden temporary siblings of an output (``.NAME.TAG-HOST-PID-RANDOM``), written and renamed into place, and the
removal of those a dead writer of this host left behind."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

#: this host in temporary names (a writer's PID says whether it lives only on its own host)
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def temp_sibling(path: Path, tag: str) -> Path:
    """A unique hidden sibling of ``path`` (``.NAME.TAG-HOST-PID-RANDOM``) for atomic writes; the siblings of
    writers that died on this host before renaming theirs (SIGKILL, power loss) are removed first
    (:func:`remove_dead_siblings`)."""
    path = Path(path)
    remove_dead_siblings(path, tag)
    return path.with_name(f".{path.name}.{tag}-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_dead_siblings(path: Path, tag: str) -> list[Path]:
    """Remove the temporary siblings of ``path`` (:func:`temp_sibling`) left by writers of this host whose process
    is gone; a sibling of a live process, of another host, or of an unknown form is kept. Returns what was removed."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.{re.escape(tag)}-{re.escape(_HOST)}-(\d+)-[0-9a-f]{{8}}$")
    removed = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        found = pattern.match(sibling.name)
        if not found or int(found.group(1)) == os.getpid() or _pid_alive(int(found.group(1))):
            continue
        if sibling.is_dir() and not sibling.is_symlink():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                sibling.unlink()
        removed.append(sibling)
    return removed


_ANY_SIBLING = re.compile(r"^\..+\.[A-Za-z_]+-([A-Za-z0-9_.]+)-(\d+)-[0-9a-f]{8}$")


def sibling_writer(name: str) -> tuple[int, bool] | None:
    """For a temporary sibling's name (:func:`temp_sibling`, any output and tag): ``(its writer's PID, whether the
    writer may still be running)``, ``(0, True)`` for a writer of another host (whose process cannot be checked);
    ``None`` for any other name."""
    found = _ANY_SIBLING.match(name)
    if not found:
        return None
    if found.group(1) != _HOST:
        return 0, True
    pid = int(found.group(2))
    return pid, pid == os.getpid() or _pid_alive(pid)

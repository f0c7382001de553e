"""How much host memory a process may use: the ``--host-memory`` budget a run plans within.

The default (``--host-memory`` empty or ``auto``) is what the machine can spare now: the smallest of the memory the
kernel reports available (``MemAvailable`` in ``/proc/meminfo``) and the room left under the memory cgroup the
process runs in (cgroup v2 ``memory.max`` less ``memory.current``, or cgroup v1 ``memory.limit_in_bytes`` less
``memory.usage_in_bytes``), so that a run started under a cgroup limit plans within it. A size (``4GiB``, ``512MB``,
``1073741824``) is taken as given.
"""

from __future__ import annotations

from pathlib import Path

from graphscale.metrics.units import parse_bytes

#: what ``--host-memory`` accepts besides a size
AUTO = ("", "auto")
#: cgroup v1 reports "no limit" as a page-rounded 2**63 - 1; anything this large is no limit
_UNLIMITED = 1 << 60


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _own_cgroup_dirs() -> list[Path]:
    """The directories of this process's memory cgroup (v2 unified and v1 ``memory`` controller) that exist."""
    out = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":
            out.append(Path("/sys/fs/cgroup") / rel)
        elif "memory" in controllers.split(","):
            out.append(Path("/sys/fs/cgroup/memory") / rel)
    return [d for d in out if d.is_dir()]


def cgroup_room() -> int | None:
    """Bytes left under this process's memory cgroup limit (``None``: no limit found)."""
    rooms = []
    for d in _own_cgroup_dirs():
        for limit_file, usage_file in (("memory.max", "memory.current"),
                                       ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit = _read_int(d / limit_file)
            if limit is None or limit >= _UNLIMITED:
                continue
            usage = _read_int(d / usage_file) or 0
            rooms.append(max(limit - usage, 0))
    return min(rooms) if rooms else None


def available_host_memory() -> int:
    """What this process can spare now: ``MemAvailable`` and the room under its memory cgroup, the smaller."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        available = None
    if available is None:  # pragma: no cover - hosts without /proc/meminfo
        import os

        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    room = cgroup_room()
    return available if room is None else min(available, room)


def resolve_host_memory(text: str | int | None, option: str = "--host-memory") -> int:
    """``--host-memory`` in bytes: a size as given, or (empty, ``auto``) :func:`available_host_memory`.

    Raises:
        ValueError: not a positive size (one line naming ``option``).
    """
    if text is None or (isinstance(text, str) and text.strip().lower() in AUTO):
        return available_host_memory()
    return parse_bytes(text, option)

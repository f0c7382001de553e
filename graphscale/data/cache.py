"""The cache directory where runs keep the partition stores and graph directories they write."""

from __future__ import annotations

import os
from pathlib import Path

from graphscale.config import RunConfig


def default_cache_dir() -> Path:
    """``$GRAPHSCALE_CACHE_DIR``, else ``$XDG_CACHE_HOME/graphscale``, else ``~/.cache/graphscale``."""
    if os.environ.get("GRAPHSCALE_CACHE_DIR"):
        return Path(os.environ["GRAPHSCALE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "graphscale"


def resolve_cache_dir(config: RunConfig) -> Path:
    """The run's cache directory, created and checked writable.

    Raises:
        ValueError: it cannot be created or written (names the directory and ``--cache-dir``).
    """
    path = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"--cache-dir {path} is not a writable directory ({err.strerror or err}); "
                         "pass --cache-dir DIR (or set GRAPHSCALE_CACHE_DIR) to a writable place") from None
    return path

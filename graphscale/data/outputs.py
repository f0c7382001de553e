"""Checks that an output the user named can be written, before anything is: a file (``--json``, ``--checkpoint``,
``--out``) or a directory the run creates (``--cache-dir``, ``--state-dir``, ``--tensorboard``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def check_output_path(path: str | os.PathLike, option: str) -> Path:
    """Check that a file can be written at ``path`` (its directory exists and takes a new file); never creates
    directories.

    Raises:
        ValueError: names ``option`` and the path.
    """
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file path")
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: directory {parent} does not exist (create it first)")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.probe-"):
            pass
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot write in {parent} ({err.strerror or err})") from None
    return path


def check_output_dir(path: str | os.PathLike, option: str) -> Path:
    """An output directory the run creates when missing (``--cache-dir``, ``--state-dir``, ``--tensorboard``): its
    parent must exist, as for an output file (one policy: the run creates the file or directory it is told to
    write, never the directories above it).

    Raises:
        ValueError: names ``option``, the path and what is wrong.
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file; give a directory")
    if not path.exists() and not path.parent.is_dir():
        raise ValueError(f"{option} {path}: directory {path.parent} does not exist (create it first)")
    return path

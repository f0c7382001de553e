"""The outputs a user names (``--json``, ``--checkpoint``, ``--out``, ...): checked before any work, and written so
that what the path is stays what it is.

* A regular file (or a path that does not exist yet) is replaced atomically: written into a temporary sibling,
  then renamed over it, so a reader never sees half a file.
* A symlink is resolved: its final target is written (atomically, in the target's directory); the link stays.
* A FIFO or character device (``/dev/stdout``, ``/dev/null``, a named pipe) is opened for writing and written in
  place: no rename (which would replace it by a plain file).
* Anything else (a directory, a block device, a socket) is refused with one line.

A write that fails (disk full, file-size limit, permission) raises :class:`OutputError`: one line naming the
option, the path, the cause (``No space left on device``, ``File too large``, ``Permission denied``) and the bytes
to write; nothing is left behind (the temporary sibling is removed, the target keeps its old contents).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from graphscale.errors import RunError


class OutputError(RunError):
    """Writing an output failed; the message names the option, the path, the cause and the bytes to write."""


def _label(option: str, path: Path) -> str:
    return f"{option} {path}" if option else str(path)


def resolve_output(path: str | os.PathLike, option: str = "") -> tuple[Path, bool]:
    """Where writing ``path`` goes: ``(target, in_place)``. ``target`` is ``path`` with every symlink resolved;
    ``in_place`` is True for a FIFO or character device (written as it is, never replaced).

    Raises:
        ValueError: a directory, block device, socket or other file that is neither (names ``option``).
    """
    path = Path(path).expanduser()
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new file (its directory is checked where it is written)
        return target, False
    except OSError as err:
        raise ValueError(f"{_label(option, path)}: cannot be inspected ({err.strerror or err})") from None
    if stat.S_ISREG(mode):
        return target, False
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return target, True
    via = f" (a link to {target})" if target != path.absolute() else ""
    if stat.S_ISDIR(mode):
        raise ValueError(f"{_label(option, path)}{via} is a directory; give a file path")
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise ValueError(f"{_label(option, path)}{via} is {kind}; refusing to write there (give a file path)")


def check_output_path(path: str | os.PathLike, option: str) -> Path:
    """Check that a file can be written at ``path`` (its directory exists and takes a new file, or it is a FIFO or
    character device open for writing; a symlink is judged by its target); never creates directories.

    Raises:
        ValueError: names ``option`` and the path.
    """
    path = Path(path)
    target, in_place = resolve_output(path, option)
    if in_place:
        if not os.access(target, os.W_OK):
            raise ValueError(f"{option} {path}: cannot write to {target} (Permission denied)")
        return path
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: directory {parent} does not exist (create it first)")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{target.name}.probe-"):
            pass
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot write in {parent} ({err.strerror or err})") from None
    return path


def check_output_dir(path: str | os.PathLike, option: str, *, through_sibling: bool = False) -> Path:
    """An output directory the run creates when missing (``--cache-dir``, ``--state-dir``, ``--tensorboard``,
    ``partition --out``): its parent must exist, as for an output file (one policy: the run creates the file or
    directory it is told to write, never the directories above it), and the directory (when it exists) or its
    parent (when not, or with ``through_sibling``: a directory written beside it and renamed into place, as
    ``partition --out``) must take new entries.

    Raises:
        ValueError: names ``option``, the path and what is wrong.
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file; give a directory")
    if not path.exists() and not path.parent.is_dir():
        raise ValueError(f"{option} {path}: directory {path.parent} does not exist (create it first)")
    folders = [path] if path.exists() else []
    if through_sibling or not path.exists():
        folders.append(path.parent)
    for folder in folders:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {path}: cannot write in {folder} (Permission denied)")
    return path


def write_failure(option: str, path: Path, err: OSError, size: int | None) -> OutputError:
    """The one-line error of a failed write: option, path, cause and the bytes to write where known."""
    cause = err.strerror or (os.strerror(err.errno) if err.errno else str(err))
    need = f"; {size:,} bytes to write" if size is not None else ""
    hint = {errno.ENOSPC: "free space on its file system or write elsewhere",
            errno.EDQUOT: "free space in your quota or write elsewhere",
            errno.EFBIG: "the process's file-size limit (ulimit -f) or the file system's is below it",
            errno.EACCES: "write elsewhere or change the directory's permissions",
            errno.EROFS: "write elsewhere"}.get(err.errno, "")
    return OutputError(f"cannot write {_label(option, path)} ({cause}{need}){': ' + hint if hint else ''}")


def write_output(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None], *, option: str = "",
                 tag: str = "tmp") -> Path:
    """Write ``data`` (bytes, or a function writing to a binary file) to ``path`` as the module docstring says.

    Returns:
        ``path``.

    Raises:
        ValueError: ``path`` is neither a regular file, a FIFO nor a character device (:func:`resolve_output`).
        OutputError: the write failed (one line: option, path, cause, bytes).
    """
    from graphscale.data.siblings import temp_sibling

    path = Path(path).expanduser()
    target, in_place = resolve_output(path, option)
    size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else None

    def fill(handle: BinaryIO) -> None:
        if callable(data):
            data(handle)
        else:
            handle.write(data)

    if in_place:
        try:
            with open(target, "wb") as handle:
                fill(handle)
        except OSError as err:
            raise write_failure(option, path, err, size) from None
        return path
    tmp = temp_sibling(target, tag)  # a writer killed mid-write leaves it; the next writer removes it
    try:
        with open(tmp, "wb") as handle:
            fill(handle)
        os.replace(tmp, target)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_failure(option, path, err, size) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path

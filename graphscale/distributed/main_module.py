"""What a spawned worker needs of the launcher's ``__main__`` module, and the refusal when it cannot have it.

A spawned worker is a fresh interpreter running graphscale's own entry point (:mod:`graphscale.distributed.worker`).
It imports the launcher's script (``__main__``, as ``__mp_main__``, the way ``multiprocessing``'s spawn does) only
when the run's function or arguments refer to something defined there: a model class or factory defined in the
script itself (:func:`main_references`). Everything else (a model name, a PyG model whose class PyG defines, a
factory in an importable module) reaches the worker without the script being run again, so a script without
``if __name__ == "__main__":`` trains with any number of workers.

A worker that must import the script runs its top level again. When the call that starts the workers is not under
``if __name__ == "__main__":`` that top level would start workers itself (and so on): :func:`unguarded_call` finds
the script's statement that led to the call, and the launcher refuses with one line naming the guard before any
worker starts. Should a worker still reach a launch while it imports the script (the guard check did not see the
call: an ``exec``, a script that starts workers twice), :func:`refuse_while_importing_main` ends it with the same
one-line reason, which the launcher reports as the worker's error.
"""

from __future__ import annotations

import ast
import io
import pickle
import sys
import types
from collections.abc import Callable
from pathlib import Path

#: set in a worker while it imports the launcher's script (:func:`importing_main`)
_IMPORTING_MAIN = False
#: the attribute through which a pre-pickled payload (``graphscale.api.ModuleCopy``) names the ``__main__``
#: definitions its bytes refer to
MAIN_NAMES_ATTR = "main_names"


class _MainTracker(pickle.Pickler):
    """A pickler that records the ``__main__`` classes and functions an object's pickle refers to by name."""

    def __init__(self, file) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.names: list[str] = []

    def persistent_id(self, obj):  # called for every object pickled; None pickles it as usual
        if isinstance(obj, (type, types.FunctionType)):
            if getattr(obj, "__module__", None) == "__main__":
                self.names.append(obj.__qualname__)
        elif type(obj).__module__ != "builtins":
            nested = getattr(type(obj), MAIN_NAMES_ATTR, None) is not None and getattr(obj, MAIN_NAMES_ATTR, None)
            if nested:
                self.names.extend(nested)


def pickle_tracking_main(obj) -> tuple[bytes, list[str]]:
    """``(pickle of obj, names of the __main__ definitions it refers to)``, in first-reference order, unique."""
    buffer = io.BytesIO()
    tracker = _MainTracker(buffer)
    tracker.dump(obj)
    return buffer.getvalue(), list(dict.fromkeys(tracker.names))


def main_references(obj) -> list[str]:
    """The qualified names of the ``__main__`` classes and functions ``obj``'s pickle refers to (a worker can only
    unpickle it after importing the launcher's script)."""
    return pickle_tracking_main(obj)[1]


def job_payload(fn: Callable, args: tuple, world_size: int) -> tuple[bytes, bool]:
    """``(pickle of (fn, args), whether a worker must import the launcher's script to read it)``.

    Raises:
        ValueError: it cannot be pickled; or the workers must import the script and the call that starts them is
            not under ``if __name__ == "__main__":`` (:mod:`graphscale.distributed.main_module`).
    """
    try:
        pickle.dumps(fn)
    except Exception as err:  # noqa: BLE001 - pickling raises several types
        raise ValueError(f"launch: fn={fn!r} cannot be sent to spawned workers ({err}); "
                         "pass a module-level function") from None
    payload, names = pickle_tracking_main((fn, args))
    _check_guard(names, world_size)
    return payload, bool(names)


def check_guard(obj, world_size: int) -> None:
    """Refuse, before anything runs, sending ``obj`` to ``world_size`` spawned workers when they must import the
    launcher's script (``obj`` refers to definitions there) and the call is not under the guard.

    Raises:
        ValueError: one line naming the call's line and ``if __name__ == "__main__":``.
    """
    if world_size > 1:
        _check_guard(main_references(obj), world_size)


def _check_guard(names: list[str], world_size: int) -> None:
    if names:
        where = unguarded_call()
        if where is not None:
            raise ValueError(guard_message(where, names, world_size))


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either order)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def unguarded_call() -> str | None:
    """``"FILE:LINE"`` of the launcher script's top-level statement that led to this call when it is not under
    ``if __name__ == "__main__":`` (a worker importing the script would run it again), else ``None`` (guarded, or
    not called from a script's top level: a function called by a test runner, an interactive session)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path:
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None  # not Python source we can read (a frozen or compiled entry point): nothing to check
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_guard(node.test) and node.lineno <= line <= (node.end_lineno or 0):
            return None
    return f"{path}:{line}"


def guard_message(where: str, names: list[str], world_size: int) -> str:
    """The one-line refusal: the workers must import the script (``names`` are defined there) and the call at
    ``where`` is not under the guard."""
    defined = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (f"{where} starts {world_size} worker processes from the script's top level, and each worker must "
            f"import the script because {defined} is defined in it, which would start workers again: put the "
            "call under `if __name__ == \"__main__\":`, or define the model in a module the script imports")


def importing_main() -> bool:
    """Whether this process is a worker importing the launcher's script."""
    return _IMPORTING_MAIN


def refuse_while_importing_main() -> None:
    """Raise the guard's one-line error when a worker importing the launcher's script reaches a launch.

    Raises:
        RuntimeError: this process is a worker importing the script (module docstring).
    """
    if _IMPORTING_MAIN:
        main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
        path = getattr(main, "__file__", None) or "the script"
        raise RuntimeError(f"{path} starts worker processes from its top level, which every worker runs again "
                           "when it imports the script (its model is defined there): put the call under "
                           "`if __name__ == \"__main__\":`")


def import_main(preparation: dict) -> None:
    """In a worker: ``multiprocessing``'s preparation (``sys.path``, ``sys.argv``, the working directory, and the
    launcher's script imported as ``__mp_main__`` when ``preparation`` names it), with a launch refused meanwhile."""
    from multiprocessing import spawn

    global _IMPORTING_MAIN
    _IMPORTING_MAIN = True
    try:
        spawn.prepare(preparation)
    finally:
        _IMPORTING_MAIN = False

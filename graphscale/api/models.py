"""The model argument of :func:`graphscale.train` as what worker processes can rebuild.

Workers are separate processes (spawned), so the model is sent to them: a ``torch.nn.Module`` as a pickled copy of
itself as it is at the call (:class:`ModuleCopy`: its initial parameters; the module passed is never trained in
place), a zero-argument callable by reference (its module and name, imported by each worker, which calls it with
the torch RNG seeded by ``seed``). :func:`model_factory` refuses what cannot be sent (a lambda, a function or class
defined inside a function or at an interactive prompt, an object pickle refuses) before anything runs, for every
worker count, naming the factory form.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable
from pathlib import Path

from graphscale.config import USER_MODEL_OPTIONS  # the [model] options a model object or factory reads


class ModuleCopy:
    """A zero-argument factory returning a copy of a module as it was when the factory was made (its pickle), so
    a module object passed to :func:`train` can be rebuilt by every worker with the same initial parameters."""

    #: the ``__main__`` classes and functions the pickle refers to: a worker imports the launcher's script to read
    #: it (:mod:`graphscale.distributed.main_module`)
    main_names: tuple[str, ...] = ()

    def __init__(self, module) -> None:
        from graphscale.distributed.main_module import pickle_tracking_main

        self.payload, names = pickle_tracking_main(module)
        self.main_names = tuple(names)
        # how messages and the report (graphscale.nn.models.qualified_name) name this factory: the module's class
        self.__module__ = type(module).__module__
        self.__qualname__ = f"{type(module).__qualname__} instance"

    def __call__(self):
        return pickle.loads(self.payload)

    def __repr__(self) -> str:
        return f"ModuleCopy({self.__qualname__})"


def _interactive(module_name: str) -> bool:
    """Whether a name defined in module ``module_name`` exists only in this process: ``__main__`` of an
    interactive session or a notebook (no file to run again), which a spawned worker cannot import."""
    main = sys.modules.get("__main__")
    return module_name == "__main__" and not getattr(main, "__file__", None)


def _cannot_send(what: str, why: str, example: str) -> ValueError:
    return ValueError(f"model: {what} cannot be sent to the worker processes ({why}); pass a zero-argument factory "
                      f"defined at the top level of a module or script, e.g. {example}")


def model_factory(model) -> tuple[Callable, str]:
    """``(factory, name)`` for a model object or callable (module docstring): the zero-argument callable the
    workers call, checked to be sendable, and how the report names it (``module:function`` for a function, the
    ``graphscale train --model`` form; ``Class instance`` for a module).

    Raises:
        ValueError: it cannot be sent to worker processes (one line naming the factory form).
        TypeError: neither a ``torch.nn.Module`` nor a callable.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        cls = type(model)
        example = f"def make_model(): return {cls.__qualname__}(...)"
        if _interactive(cls.__module__) or "<locals>" in cls.__qualname__:
            where = "inside a function" if "<locals>" in cls.__qualname__ else "in an interactive session"
            raise _cannot_send(f"this {cls.__qualname__} instance", f"its class is defined {where}, where a worker "
                               "cannot import it", f"make_model in a module that defines {cls.__qualname__}")
        try:
            return ModuleCopy(model), f"{cls.__qualname__} instance"
        except (pickle.PicklingError, AttributeError, TypeError, RecursionError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise _cannot_send(f"this {cls.__qualname__} instance", f"it cannot be pickled: {first}",
                               example) from None
    if not callable(model):
        raise TypeError(f"model: expected a graphscale model name (str), a torch.nn.Module or a zero-argument "
                        f"callable returning one; got {type(model).__name__}")
    name = getattr(model, "__qualname__", type(model).__qualname__)
    module = getattr(model, "__module__", None) or type(model).__module__
    if name == "<lambda>" or "<locals>" in name or _interactive(module):
        why = ("a lambda has no name to import it by" if name == "<lambda>" else
               "it is defined inside a function" if "<locals>" in name else
               "it is defined in an interactive session, which a worker cannot import")
        raise _cannot_send(f"factory {name}", why, "def make_model(): return GraphSAGE(...) in a module")
    try:
        pickle.dumps(model)
    except (pickle.PicklingError, AttributeError, TypeError, RecursionError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise _cannot_send(f"factory {name}", f"it cannot be pickled: {first}",
                           "def make_model(): return GraphSAGE(...)") from None
    return model, f"{module}:{name}"


def check_user_model_options(overrides: dict, config_file) -> None:
    """With a model object or factory, a ``[model]`` option that describes a graphscale model by name (``hidden``,
    ``layers``, ...) conflicts with it: refused (keyword or TOML table) rather than ignored."""
    given = [f"{key}=" for key in overrides.get("model", {}) if key not in USER_MODEL_OPTIONS]
    if config_file is not None:
        import tomllib

        try:
            table = tomllib.loads(Path(config_file).read_text()).get("model", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
            table = {}  # build_config reports what is wrong with the file
        given += [f"{config_file}: [model] {key}" for key in table if key not in USER_MODEL_OPTIONS]
    if given:
        raise ValueError(f"{given[0]} conflicts with the model argument: a model object or factory defines its own "
                         "layers, widths and dropout (those options configure a graphscale model given by name)")

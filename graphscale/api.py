"""The Python API: ``graphscale.train(model, data, **options) -> Report``.

::

    import graphscale as gs
    report = gs.train("gcn", "cora", strategy="graph-parallel", workers=2, epochs=50)
    report.final.test_acc; report.epochs[-1].bytes; report.to_json("r.json"); report.plot("curves.png")

:func:`train` is ``graphscale train`` from Python: it builds the same :class:`~graphscale.config.RunConfig` (the
keywords are the command line's options, :func:`keyword_fields`) and runs it with :func:`graphscale.run.run`, so a
call and the command with the same options train the same model on the same data.

``model`` is a graphscale model name (``"gcn"``, ``"sage"``, ...), a ``torch.nn.Module`` (a graphscale ``GNN``, a
PyG model: :mod:`graphscale.nn.pyg`), or a zero-argument callable returning one. Worker processes rebuild the model
(:func:`model_factory`): a module is sent as a pickled copy of itself as it is at the call (its initial
parameters), a callable by reference (its module and name, so it must be defined at a module's top level); the
module passed is never changed. Something that cannot be sent (a lambda, a function or class defined inside a
function or typed at an interactive prompt) is refused before anything runs, naming the factory form, for every
worker count (one worker would not need to send it; the same call must keep working with more).

``data`` is a dataset spec (``"cora"``, ``"ogb:DIR"``, ...: ``graphscale datasets``), a graphscale ``Graph``, a PyG
``Data``, or an OGB node-property dataset object (:mod:`graphscale.data.convert`), or ``None`` (the dataset of
``partitions=``, else Cora). An in-memory graph is written once, as a graph directory, under the cache directory
(``cache_dir=``, else ``$GRAPHSCALE_CACHE_DIR`` or ``~/.cache/graphscale``: ``inputs/NAME-DIGEST``,
:func:`graphscale.prepare.input_dataset`) and read from there by every strategy, as ``--dataset graphdir:DIR``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import pickle
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path

from graphscale.config import RunConfig
from graphscale.report import Report

#: keywords of :func:`train` that are not a configuration field: ``--config FILE`` (a TOML file the keywords
#: override) and ``--repeat N``
EXTRA_KEYWORDS = ("config", "repeat")
#: the ``[model]`` options a model object or factory reads (the others describe a graphscale model by name)
USER_MODEL_OPTIONS = frozenset({"pyg_dropout"})


# ------------------------------------------------------------ keywords
def _walk(obj, path: tuple[str, ...]) -> typing.Iterator[tuple[tuple[str, ...], dataclasses.Field, type]]:
    """``(path, field, owner class)`` of every leaf field of the configuration dataclass ``obj``."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(value, (*path, f.name))
        else:
            yield (*path, f.name), f, type(obj)


def _keyword(path: tuple[str, ...], f: dataclasses.Field) -> str:
    """The keyword of a configuration field: its declared command-line flag (``metadata["flag"]``, dashes as
    underscores) where it has one, else its name; a table's ``name`` is the table's (``model``, ``strategy``)."""
    if f.metadata.get("flag"):
        return str(f.metadata["flag"]).removeprefix("--").replace("-", "_")
    return path[-2] if path[-1] == "name" and len(path) > 1 else path[-1]


def keyword_fields() -> dict[str, tuple[str, ...]]:
    """Every keyword of :func:`train` -> the path of the configuration field it sets (``"hidden"`` ->
    ``("model", "hidden")``, ``"seed"`` -> ``("seed",)``), read from the configuration dataclasses
    (:class:`~graphscale.config.RunConfig` and its tables), so a field added there is a keyword here and an option
    of ``graphscale train`` there. Fields set from Python only (``metadata["python_only"]``: the model factory,
    which is :func:`train`'s ``model``) are not keywords.

    Raises:
        RuntimeError: two fields would share a keyword (the configuration must name them apart).
    """
    out: dict[str, tuple[str, ...]] = {}
    for path, f, _ in _walk(RunConfig(), ()):
        if f.metadata.get("python_only"):
            continue
        key = _keyword(path, f)
        if key in out:
            raise RuntimeError(f"configuration fields {'.'.join(out[key])} and {'.'.join(path)} share the keyword "
                               f"{key!r}")
        out[key] = path
    return out


def _field_types() -> dict[tuple[str, ...], object]:
    """The annotated type of every configuration field, by path."""
    out = {}
    for path, f, owner in _walk(RunConfig(), ()):
        out[path] = typing.get_type_hints(owner)[f.name]
    return out


def _type_name(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) is list:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    return getattr(hint, "__name__", str(hint))


def _convert(key: str, value, hint):
    """``value`` as the field's type (an int where a float is expected, a path where a string is, a tuple where a
    list is), or a one-line ``TypeError`` naming the keyword."""
    def wrong() -> TypeError:
        return TypeError(f"{key}= expects {_type_name(hint)}, got {value!r} ({type(value).__name__})")

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(key, value, arg)
            except TypeError:
                continue
        raise wrong()
    if hint is bool:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong()
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong()
        return float(value)
    if hint is str:
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if not isinstance(value, str):
            raise wrong()
        return value
    if typing.get_origin(hint) is list:
        if not isinstance(value, (list, tuple)):
            raise wrong()
        (item,) = typing.get_args(hint)
        return [_convert(key, v, item) for v in value]
    raise wrong()  # a field type this function does not know: refused rather than passed on unchecked


def unknown_keyword(key: str, known) -> str:
    """The message for an unknown keyword, with the closest valid one."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}=?" if close else "; the keywords are graphscale train's options (--batch-size " \
                                                        "is batch_size=)"
    return f"train() got an unknown keyword {key}={hint}"


def keyword_overrides(options: dict) -> dict:
    """``{keyword: value}`` -> the nested overrides :func:`~graphscale.config.build_config` takes (shaped like the
    TOML file: ``{"model": {"hidden": 64}, "seed": 1}``), each value checked against its field's type.

    Raises:
        TypeError: an unknown keyword (naming the closest valid one), or a value of the wrong type.
    """
    fields = keyword_fields()
    hints = _field_types()
    out: dict = {}
    for key, value in options.items():
        if key not in fields:
            raise TypeError(unknown_keyword(key, [*fields, *EXTRA_KEYWORDS]))
        path = fields[key]
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = _convert(key, value, hints[path])
    return out


# ------------------------------------------------------------ the model
class ModuleCopy:
    """A zero-argument factory returning a copy of a module as it was when the factory was made (its pickle), so
    a module object passed to :func:`train` can be rebuilt by every worker with the same initial parameters."""

    def __init__(self, module) -> None:
        self.payload = pickle.dumps(module)
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


def _check_user_model_options(overrides: dict, config_file) -> None:
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


# ------------------------------------------------------------ train
def train(model, data, /, **options) -> Report:
    """Train ``model`` on ``data`` with a strategy and return the run's :class:`~graphscale.report.Report`.

    Args:
        model: a graphscale model name (``"gcn"``, ``"sage"``, ``"gat"``, ``"gcnii"``, ``"resgcn"``), a
            ``torch.nn.Module`` (a graphscale ``GNN``, a PyG model), or a zero-argument callable returning one,
            defined at a module's top level (module docstring).
        data: a dataset spec string, a graphscale ``Graph``, a PyG ``Data``, an OGB node-property dataset object,
            or ``None`` (the dataset of ``partitions=``, else ``"cora"``).
        **options: the options of ``graphscale train``, spelled as keywords (``--batch-size 256`` is
            ``batch_size=256``; ``strategy=``, ``workers=``, ``epochs=``, ``lr=``, ``fanouts=[10, 5]``,
            ``partitioner="metis"``, ``json="r.json"``, ...); ``config="run.toml"`` reads a TOML file first, which
            the keywords override, as the command line's flags do.

    Returns:
        the report (``report.final.test_acc``, ``report.epochs[-1].bytes``, ``report.to_json(path)``,
        ``report.plot(path)``).

    Raises:
        TypeError: an unknown keyword (naming the closest valid one), a value of the wrong type, a ``model`` or
            ``data`` of an unsupported kind.
        ValueError: bad input (a keyword that conflicts with ``model`` or ``data``, an option the strategy does not
            read, a model that cannot be sent to workers, data without labels or a training split, ...): one line,
            before any worker starts.
        graphscale.distributed.launch.WorkerError: a worker failed during training (``err.one_line()``).
    """
    from graphscale.config import build_config
    from graphscale.run import run
    from graphscale.validation import check_path_conflicts, validate

    options = dict(options)
    config_file = options.pop("config", None)
    if config_file is not None:
        config_file = _convert("config", config_file, str)
    repeat = _convert("repeat", options.pop("repeat", 1), int)
    if repeat != 1:
        raise ValueError(f"repeat={repeat}: train() runs one seed and returns its Report; call it once per seed "
                         "(seed=s) for several")
    for key, argument in (("model", "model"), ("dataset", "data")):
        if key in options:
            raise ValueError(f"{key}= conflicts with the {argument} argument: give the {argument} once, as "
                             f"train's {'first' if argument == 'model' else 'second'} argument")
    overrides = keyword_overrides(options)
    if overrides.get("strategy", {}).get("name") == "auto":
        raise ValueError("strategy='auto' is graphscale train's (--strategy auto); from Python, run `graphscale "
                         "advise` (or graphscale.advise) and pass the strategy it recommends")

    factory, label = None, None
    if isinstance(model, str):
        overrides.setdefault("model", {})["name"] = model
    else:
        factory, label = model_factory(model)
        _check_user_model_options(overrides, config_file)

    graph = None
    if isinstance(data, str):
        overrides.setdefault("data", {})["dataset"] = data
    elif data is not None:
        from graphscale.data.convert import to_graph

        graph = to_graph(data)
        features = overrides.get("data", {}).get("features")
        if graph.x is None and not features:
            raise ValueError("data has no node features (x); give features=\"degree\", \"onehot\", \"random:D\" or "
                             "\"learnable:D\" to train on its structure")
    config = build_config(overrides, config_file)
    if factory is not None:
        config.model.factory, config.model.name = factory, label
    validate(config)  # (run validates again, with the dataset) before the graph is written
    check_path_conflicts(config, None, config_file)
    if graph is not None:
        from graphscale.prepare import input_dataset

        config.data.dataset = input_dataset(graph, config)
    return Report.from_dict(run(config))

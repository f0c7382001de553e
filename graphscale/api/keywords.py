"""The keywords of :func:`graphscale.train`: ``graphscale train``'s options, read from the configuration dataclasses.

:func:`keyword_fields` maps every keyword to the configuration field it sets (``hidden`` -> ``[model] hidden``,
``strategy`` -> ``[strategy] name``, ``seed`` -> ``seed``): the field's declared command-line flag
(:func:`graphscale.config.declared_options`, which the command line reads too), so a field declared in the
configuration is a keyword here as it is an option there (a test walks the command line's options against it). :func:`keyword_overrides` turns keywords into the nested overrides
:func:`~graphscale.config.build_config` takes, each value checked against its field's annotated type; an unknown
keyword names the closest valid one.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import types
import typing

from graphscale.config import RunConfig, declared_options

#: keywords of :func:`graphscale.train` that are not a configuration field: ``--config FILE`` (a TOML file the
#: keywords override) and ``--repeat N``
EXTRA_KEYWORDS = ("config", "repeat")


def _walk(obj, path: tuple[str, ...]) -> typing.Iterator[tuple[tuple[str, ...], dataclasses.Field, type]]:
    """``(path, field, owner class)`` of every leaf field of the configuration dataclass ``obj``."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(value, (*path, f.name))
        else:
            yield (*path, f.name), f, type(obj)


def keyword_fields() -> dict[str, tuple[str, ...]]:
    """Every keyword of :func:`train` -> the path of the configuration field it sets (``"hidden"`` ->
    ``("model", "hidden")``, ``"seed"`` -> ``("seed",)``): the declared options of
    :func:`~graphscale.config.declared_options`, each keyword its command-line flag with underscores (``--strategy``
    is ``strategy=``), so a field declared there is a keyword here and an option of ``graphscale train``. Fields set
    from Python only (the model factory, which is :func:`train`'s ``model``) are not keywords.

    Raises:
        RuntimeError: two fields would share a keyword (the configuration must name them apart).
    """
    return {key: path for key, (path, _) in declared_options().items()}


@functools.cache
def _field_types() -> dict[tuple[str, ...], object]:
    """The annotated type of every configuration field, by path (read once: resolving the annotations is slow)."""
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


def convert_keyword(key: str, value, hint):
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
                return convert_keyword(key, value, arg)
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
        return [convert_keyword(key, v, item) for v in value]
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
        target[path[-1]] = convert_keyword(key, value, hints[path])
    return out

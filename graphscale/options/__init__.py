"""How a configuration option is declared: its help text, allowed values and command-line form.

Every ``[strategy]`` option is a field of one option dataclass with :func:`option`, one module per strategy in
this package (``<name>.py``; ``shared.py`` for the single-module strategies, the options several strategies share
and the constants the lower layers read with them; :mod:`.by_strategy` maps each strategy's name to its dataclass).
:class:`graphscale.config.StrategyConfig` is assembled from those dataclasses; the command line (its argument groups), the TOML reader and
the checks of :mod:`graphscale.validation` read the declarations, and each strategy class reads its own
(``options = option_names(...)``). A name has one meaning: several strategies read one option only through one
shared declaration.

This package is the bottom of the import layers (``docs/architecture.md``): the declarations import nothing else,
and nothing in it imports a strategy, so every layer may read them.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any

#: how a bool option is given on the command line: ``--flag`` / ``--no-flag`` (``toggle``) or ``--flag`` only
#: (``switch``: sets True; False is the default)
TOGGLE, SWITCH = "toggle", "switch"


def option(default: Any, help: str = "", *,
           choices: tuple[str, ...] | None = None, metavar: str | None = None, flag: str | None = None,
           parse: Any = None, bool_form: str = TOGGLE, check_choices_on_parse: bool = True) -> Any:
    """A declared option: a dataclass field whose metadata the command line and the checks read.

    Args:
        default: the default (a mutable one: write the field out with :func:`meta`).
        help: one-line help, as ``graphscale train --help`` shows it (the default and the strategies that read it
            are appended there).
        choices: the allowed values; :func:`graphscale.validation.validate` checks them (for TOML files too).
        metavar: the value's name in ``--help``.
        flag: the command-line flag without ``--`` when it is not the field name with dashes (``--strategy`` for
            ``name``).
        parse: the argparse type of the value when it is not the field's type (:func:`int_list`).
        bool_form: ``toggle`` (``--x`` / ``--no-x``) or ``switch`` (``--x`` only).
        check_choices_on_parse: whether argparse refuses a value outside ``choices`` (off where the parent's
            check gives the better message).
    """
    metadata = meta(help, choices=choices, metavar=metavar, flag=flag, parse=parse, bool_form=bool_form,
                    check_choices_on_parse=check_choices_on_parse)
    return dataclasses.field(default=default, metadata=metadata)


def meta(help: str = "", *, choices: tuple[str, ...] | None = None, metavar: str | None = None,
         flag: str | None = None, parse: Any = None, bool_form: str = TOGGLE,
         check_choices_on_parse: bool = True) -> dict:
    """The metadata of a declared option (:func:`option`'s arguments), for a ``dataclasses.field`` written out
    (a mutable default: ``field(default_factory=..., metadata=meta(...))``)."""
    return {"help": help, "choices": choices, "metavar": metavar, "flag": flag, "parse": parse,
            "bool_form": bool_form, "parse_choices": check_choices_on_parse}


def declared(cls) -> list[dataclasses.Field]:
    """The fields ``cls`` itself declares (not those of its bases), in order."""
    own = inspect.get_annotations(cls)
    return [f for f in dataclasses.fields(cls) if f.name in own]


def option_names(cls) -> frozenset[str]:
    """The options a strategy whose declaration is ``cls`` reads: its fields (the shared ones included), the
    ``chunks`` alias when it declares a chunk count (``CHUNKS``) and the ``[data]`` options it reads
    (``DATA_OPTIONS``)."""
    names = {f.name for f in dataclasses.fields(cls)} | set(getattr(cls, "DATA_OPTIONS", ()))
    return frozenset(names | ({"chunks"} if getattr(cls, "CHUNKS", None) else set()))


def flag_of(f: dataclasses.Field) -> str:
    """``--batch-size`` for field ``batch_size`` (or the declared ``flag``)."""
    return "--" + (f.metadata.get("flag") or f.name.replace("_", "-"))


def integer(text: str) -> int:
    """An integer option's value as a user types it: ``200``, or a float form of an integer (``1e3`` -> 1000,
    ``2.0`` -> 2); anything else is an error (an option type)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r} (not a whole number)")
    return int(value)


def int_list(text: str) -> list[int]:
    """``"10,5"`` -> ``[10, 5]`` (an option type)."""
    fields = text.split(",")
    if any(not field.strip() for field in fields):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r} (an empty field)")
    try:
        return [integer(v) for v in fields]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None

"""Command-line flags made from the option declarations, for every command.

A flag whose name is a declared option's (:func:`graphscale.config.declared_options`: ``--dataset``, ``--model``,
``--hidden``, ``--workers``, ``--seed``, ...) is made here from the declaration, in every command that has it
(``train``, ``advise``, ``partition``, the benches): the same name, argparse type, choices, metavar and help, so
the commands cannot drift apart. What a command may add:

* its own default, with the reason in ``why`` (``--hidden 128`` in ``bench peers``: the comparison width of
  docs/benchmarks.md), shown in the help as ``(default 128: why)``; the declaration's default needs no reason;
* a ``note`` after the declared help, saying what the value is for in that command;
* ``grid=True``: several values, one run each (``--workers 1,2``: comma-separated for an int option; a repeated
  flag for a text option).

A command's flag that shares a declared option's name but means something else (``--timeout`` of a bench: seconds
per run, not the collective timeout) is made with :func:`add_own`, which records why it differs. Every action made
here carries which it is (``declared_option`` or ``own_flag``), and ``tests/test_flags.py`` walks the built
parsers: an action with a declared option's flag made any other way fails it.

``graphscale train`` uses :data:`NOT_GIVEN` defaults: an option not given leaves the preset, the TOML file or the
declaration's default in force, which its help formatter shows.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from graphscale.config import declared_options
from graphscale.options import TOGGLE, flag_of, int_list, integer

#: ``default=DECLARED``: the declaration's default; ``default=NOT_GIVEN``: None, and no default in the help (the
#: caller's configuration supplies it: ``graphscale train``)
DECLARED, NOT_GIVEN = object(), object()

#: a declared option's type (as written in its dataclass) -> the argparse type of its value
ARG_TYPES = {"int": integer, "int | None": integer, "float": float, "float | None": float, "str": None,
             "str | None": None}


def declaration(name: str) -> dataclasses.Field:
    """The declared option whose flag is ``--NAME`` (``name`` as an argparse dest: ``batch_size``).

    Raises:
        KeyError: no declared option has that flag.
    """
    options = declared_options()
    if name not in options:
        raise KeyError(f"no declared option has the flag --{name.replace('_', '-')}")
    return options[name][1]


def declared_default(spec: dataclasses.Field) -> Any:
    """The default a declaration gives its field."""
    if spec.default is not dataclasses.MISSING:
        return spec.default
    return spec.default_factory()


def declared_flags() -> dict[str, str]:
    """Every option string a declared option takes (``--shuffle`` and ``--no-shuffle`` for a toggle) -> its
    dest."""
    out = {}
    for dest, (_path, spec) in declared_options().items():
        flag = flag_of(spec)
        out[flag] = dest
        if str(spec.type) == "bool" and spec.metadata["bool_form"] == TOGGLE:
            out["--no-" + flag[2:]] = dest
    return out


def show(value) -> str:
    """A value as the command line writes it (``""`` when there is none to show)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value in ("", None) else str(value)


def value_kwargs(spec: dataclasses.Field, grid: bool = False) -> dict:
    """The argparse keywords of one declared option's value (action, type, choices, metavar); ``grid``: several
    values (a comma-separated list of an int option, a repeated text option)."""
    md, kind = spec.metadata, str(spec.type)
    if kind == "bool":
        if grid:
            raise TypeError(f"option {spec.name}: a bool option has no grid form")
        if md["bool_form"] == TOGGLE:
            return {"action": argparse.BooleanOptionalAction}
        return {"action": "store_const", "const": True}
    if md["parse"] is None and kind not in ARG_TYPES:
        raise TypeError(f"option {spec.name}: no command-line type for {kind!r}; declare parse=")
    kwargs: dict[str, Any] = {"type": md["parse"] or ARG_TYPES[kind]}
    if md["choices"] and md["parse_choices"]:
        kwargs["choices"] = md["choices"]
    if md["metavar"]:
        kwargs["metavar"] = md["metavar"]
    if grid:
        if kwargs["type"] is integer:
            kwargs.update(type=int_list, metavar=f"{md['metavar'] or spec.name.upper()},...")
        elif kwargs["type"] is None:
            kwargs["action"] = "append"
        else:
            raise TypeError(f"option {spec.name}: no grid form for {kind!r}")
    return kwargs


def grid_note(kwargs: dict) -> str:
    """How a grid flag takes several values (:func:`value_kwargs`)."""
    return "several values, one run each: repeat the flag" if kwargs.get("action") == "append" else \
        "several values, one run each: comma-separated"


def add_declared(parser: argparse.ArgumentParser, name: str, *, default: Any = DECLARED, why: str = "",
                 note: str = "", grid: bool = False, required: bool = False, group=None) -> argparse.Action:
    """Add the declared option ``--NAME`` (``name`` as an argparse dest) to ``parser``, made from its declaration
    (module docstring), shown under ``group`` (``None``: the parser's own options).

    Args:
        default: :data:`DECLARED` (the declaration's), :data:`NOT_GIVEN` (None, shown nowhere) or the command's own
            default, which needs ``why`` when it is not the declaration's.
        why: why the command's default differs, shown in the help.
        note: what the value is for in this command, appended to the declared help.
        grid: several values, one run each (:func:`value_kwargs`).
        required: the command needs it (no default).

    Returns:
        the action, its ``declared_option`` the declared dest and ``grid`` whether it takes several values.

    Raises:
        KeyError: no declared option has the flag.
        ValueError: a default other than the declaration's without ``why``.
    """
    spec = declaration(name)
    kwargs = value_kwargs(spec, grid)
    help_text = spec.metadata["help"] + "".join(f"; {part}".replace("%", "%%") for part in (
        note, grid_note(kwargs) if grid else "") if part)
    own_default = default not in (DECLARED, NOT_GIVEN)
    if own_default and default != declared_default(spec) and not why:
        raise ValueError(f"{flag_of(spec)}: the default {default!r} is not the declaration's "
                         f"({declared_default(spec)!r}); say why (why=...)")
    value = None if default is NOT_GIVEN else declared_default(spec) if default is DECLARED else default
    if required:
        kwargs["required"] = True
    elif default is not NOT_GIVEN:
        shown = show(value)
        text = f"default {shown}: {why}" if shown and why else f"default: {why or shown}" if why or shown else ""
        help_text += f" ({text})".replace("%", "%%") if text else ""
        kwargs["default"] = value
    action = parser.add_argument(flag_of(spec), **kwargs)
    action.help = help_text  # after argparse, which may append its own default to a toggle's help
    action.declared_option, action.grid = name, grid
    if group is not None:
        move_into(parser, group, action)
    return action


def add_own(parser: argparse.ArgumentParser, flag: str, *, differs: str, **kwargs) -> argparse.Action:
    """Add a command's own flag that shares a declared option's name but not its meaning (``differs`` says how, and
    its help says so after its own text); ``kwargs`` are ``add_argument``'s.

    Raises:
        ValueError: ``flag`` is no declared option's, or ``differs`` is empty.
    """
    if flag not in declared_flags():
        raise ValueError(f"{flag} is no declared option's flag: add it with add_argument")
    if not differs:
        raise ValueError(f"{flag}: say how it differs from the declared option (differs=...)")
    action = parser.add_argument(flag, **kwargs)
    action.help = (action.help or "") + f" [unlike train's {flag}: {differs}]".replace("%", "%%")
    action.own_flag = differs
    return action


def move_into(parser: argparse.ArgumentParser, group, action: argparse.Action) -> None:
    """Show ``action`` (added by ``parser.add_argument``, so subclasses see every option) under ``group``."""
    for other in parser._action_groups:
        if action in other._group_actions:
            other._group_actions.remove(action)
    group._group_actions.append(action)

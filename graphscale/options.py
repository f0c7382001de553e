"""How a configuration option is declared: its help text, allowed values and command-line form.

The option dataclasses (:mod:`graphscale.config`'s sections and each strategy's ``options.py``) declare every field
with :func:`option`; the command line, the TOML reader and the checks read those declarations.
"""

from __future__ import annotations

import argparse


def int_list(text: str) -> list[int]:
    """``"10,5"`` -> ``[10, 5]`` (an option type)."""
    fields = text.split(",")
    if any(not field.strip() for field in fields):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r} (an empty field)")
    try:
        return [int(v) for v in fields]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None

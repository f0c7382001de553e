"""``python -m graphscale`` = the ``graphscale`` command."""

from graphscale.cli import console_entry

console_entry()

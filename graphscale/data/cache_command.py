"""``graphscale cache``: the cache directory's entries (kind, size on disk, last use) and their total; ``graphscale
cache clear`` removes entries no running process holds (:mod:`graphscale.data.cache_entries`).

Example::

    graphscale cache                                  # list the entries and the total
    graphscale cache clear --older-than 30 --dry-run  # what clearing entries unused for 30 days would remove
    graphscale cache clear store graph                # remove every partition store and training graph directory
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from graphscale.data.cache_entries import KINDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``graphscale cache``'s options and its ``clear`` action on ``parser``."""
    from graphscale.flags import NOT_GIVEN, add_declared

    add_declared(parser, "cache_dir", default=NOT_GIVEN, note="here: the cache directory to show or clear")
    actions = parser.add_subparsers(dest="action", metavar="clear")
    clear = actions.add_parser("clear", help="remove cache entries that no running process holds",
                               description="Remove cache entries (all, or those of the KINDs given) that no running "
                                           "process is writing or using; those are kept and named with the reason")
    clear.add_argument("kinds", nargs="*", metavar="KIND",
                       help=f"only entries of these kinds: {', '.join(KINDS)} (default: every kind)")
    clear.add_argument("--older-than", type=_days, metavar="DAYS",
                       help="only entries whose last use is at least DAYS days ago (a number, e.g. 30 or 0.5)")
    clear.add_argument("--dry-run", action="store_true", help="remove nothing; list what would be removed")
    add_declared(clear, "cache_dir", default=NOT_GIVEN,
                 note="here: the cache directory to clear").default = argparse.SUPPRESS  # keeps `cache --cache-dir`


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of days >= 0, got {text!r}")
    return value


def _when(seconds: float, now: float) -> str:
    """``2026-11-28 15:40 (3 days ago)``."""
    age = now - seconds
    ago = (f"{age / 86400:.0f} days ago" if age >= 2 * 86400 else f"{age / 3600:.0f} h ago" if age >= 7200
           else f"{max(age, 0) / 60:.0f} min ago")
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(seconds))} ({ago})"


def run(args: argparse.Namespace) -> int:
    """List the entries (``graphscale cache``) or clear them (``graphscale cache clear``); returns 0."""
    from graphscale.data.cache import default_cache_dir
    from graphscale.data.cache_entries import clear, list_entries, total_size
    from graphscale.metrics.table import format_table
    from graphscale.metrics.units import format_bytes

    cache = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"--cache-dir {cache} is not a directory")
    now = time.time()
    if args.action == "clear":
        removed, skipped = clear(cache, args.kinds, args.older_than, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        for entry in removed:
            print(f"{verb} {entry.kind} {entry.path} ({format_bytes(entry.size)})")
        for entry, reason in skipped:
            print(f"kept {entry.kind} {entry.path}: {reason}")
        freed = sum(entry.size for entry in removed)
        holds = "holds" if args.dry_run else "now holds"
        print(f"graphscale cache: {verb} {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} "
              f"({format_bytes(freed)}), kept {len(skipped)} in use; {cache} {holds} {format_bytes(total_size(cache))}")
        return 0
    entries = list_entries(cache)
    rows = [{"kind": e.kind, "size": format_bytes(e.size), "last use": _when(e.last_use, now),
             "entry": str(e.path.relative_to(cache))} for e in entries]
    if rows:
        print(format_table(rows, title=f"cache {cache}"))
    print(f"graphscale cache: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
          f"{format_bytes(total_size(cache))} on disk in {cache}"
          + ("" if cache.is_dir() else " (not created yet)"))
    return 0

"""Plain-text tables: what the commands print (train, partition, advise, the benches)."""

from __future__ import annotations

import math
import textwrap


def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
        return f"{value:.3e}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def format_table(rows: list[dict], columns: list[str] | None = None, title: str | None = None,
                 width: int | None = None) -> str:
    """Render ``rows`` (dicts) as an aligned text table; numbers right-aligned.

    With ``width``, the last column's text is wrapped onto continuation lines so that every line fits in
    ``width`` characters (as far as the other columns leave room: the last one keeps at least 20).
    """
    if not rows:
        return (title + "\n" if title else "") + "(no rows)"
    columns = columns or list(rows[0])
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns]
    if width is not None and not numeric[-1]:
        widths[-1] = min(widths[-1], max(20, len(columns[-1]), width - sum(widths[:-1]) - 2 * (len(widths) - 1)))

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    def lines(values):
        if width is None:
            wrapped = [values[-1]]
        else:
            wrapped = textwrap.wrap(values[-1], widths[-1], break_on_hyphens=False) or [""]
        blank = [""] * (len(values) - 1)
        return [line([*(values[:-1] if i == 0 else blank), text]) for i, text in enumerate(wrapped)]

    out = [title] if title else []
    out += [line(columns), "  ".join("-" * w for w in widths)]
    out += [text for r in cells for text in lines(r)]
    return "\n".join(out)

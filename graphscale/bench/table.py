"""Plain-text tables and optional plots for benchmark commands."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path


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


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units up to GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


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


#: title characters per inch of figure width (matplotlib's default title font, with a margin)
TITLE_CHARS_PER_INCH = 8


def wrap_title(title: str, fig_width_in: float) -> str:
    """``title`` wrapped onto lines that fit a figure ``fig_width_in`` inches wide (at spaces)."""
    return "\n".join(textwrap.wrap(title, max(16, int(fig_width_in * TITLE_CHARS_PER_INCH)),
                                   break_on_hyphens=False)) or title


def save_bar_plot(path: str | Path, labels: list[str], series: dict[str, list[float]], ylabel: str, title: str) -> Path:
    """Grouped bar chart written to ``path`` (PNG/PDF by extension), written atomically.

    The title is wrapped to the figure's width and the layout made room for it (and for tick labels, turned when
    long), so nothing is clipped."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    width_in = max(4.0, 1.2 * len(labels) * max(1, len(series)) / 2)
    title = wrap_title(title, width_in)
    height_in = 3.2 + 0.25 * title.count("\n")
    fig, ax = plt.subplots(figsize=(width_in, height_in))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=name)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    if sum(len(str(label)) for label in labels) > width_in * TITLE_CHARS_PER_INCH:  # would overlap: turn them
        ax.tick_params(axis="x", labelrotation=30)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend()
    return save_figure(fig, path)


def save_figure(fig, path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``path`` atomically (a temporary sibling, then a rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp" + path.suffix)
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def int_list(text: str) -> list[int]:
    """``"2,4,8"`` -> ``[2, 4, 8]`` (an argparse type of the bench commands)."""
    import argparse

    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def split_specs(text: str) -> list[str]:
    """Split a comma list of dataset specs whose own parameters also use commas (``key=value`` continues a spec)."""
    specs: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if specs and "=" in part and ":" not in part:
            specs[-1] += "," + part
        else:
            specs.append(part)
    return specs

"""Plain-text tables and optional plots for benchmark commands."""

from __future__ import annotations

import textwrap
from pathlib import Path

# the text helpers live in the metrics layer (partition, advise and the strategies print with them too); importable
# from here as well, as the benches (and their modules on other branches) always have
from graphscale.metrics.table import format_table  # noqa: F401
from graphscale.metrics.units import format_bytes  # noqa: F401

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
    from graphscale.data.outputs import write_output

    try:
        write_output(path, lambda handle: fig.savefig(handle, format=path.suffix[1:] or "png"), option="--plot")
    finally:
        plt.close(fig)
    return path


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

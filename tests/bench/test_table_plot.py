"""Bench plots keep their titles inside the figure."""

from graphscale.bench.table import TITLE_CHARS_PER_INCH, save_bar_plot, wrap_title

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_wrap_title_fits_the_width():
    title = "replication factor of every vertex partitioner on sbm:nodes=10000,classes=8 for 2 and 4 parts (seed 0)"
    lines = wrap_title(title, 4.0).split("\n")
    assert len(lines) > 1 and all(len(line) <= 4 * TITLE_CHARS_PER_INCH for line in lines)
    assert " ".join(lines) == title and wrap_title("short", 4.0) == "short"


def test_bar_plot_title_is_not_clipped(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seen = {}
    close = plt.close

    def keep(fig):  # measure the title before the figure is closed
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = fig.axes[0].title.get_window_extent(renderer)
        seen["inside"] = box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    title = "host traffic per epoch of every dedup mode on sbm:nodes=100000,degree=20,classes=16 with 4 workers"
    path = save_bar_plot(tmp_path / "p.png", ["baseline", "inter"], {"MiB": [3.0, 2.0]}, "MiB", title)
    assert path.read_bytes()[:8] == PNG_MAGIC and seen["inside"]
    assert [p.name for p in tmp_path.iterdir()] == ["p.png"]

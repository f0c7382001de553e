"""Training curves from run reports: ``graphscale plot`` and ``graphscale train --tensorboard``.

Both read the per-epoch history of a run report (the JSON ``graphscale train --json`` writes: ``epochs[i]`` holds
``loss`` (the epoch's training loss), ``{split}_acc`` and ``{split}_loss`` (the evaluation after it; ``_acc`` is
the report's ``metric``, micro-F1 for multi-label labels), ``seconds`` (the slowest worker) and ``bytes`` (by
category, summed over workers)) and show the same scalars: loss, train / val / test metric, epoch time and bytes
moved per epoch (:func:`~graphscale.metrics.ledger.moved_bytes`).

Nothing heavy is imported at module level: matplotlib (Agg backend) and TensorBoard's writer are imported by the
functions that draw or log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from graphscale.metrics.ledger import moved_bytes
from graphscale.options.shared import SPLITS

#: the panels of a plot: (key of :func:`epoch_series`, title)
PANELS = (("loss", "loss (solid: training epoch, dashed: validation)"), ("train_acc", "train {metric}"),
          ("val_acc", "val {metric}"), ("test_acc", "test {metric}"), ("seconds", "epoch time (s)"),
          ("mib", "bytes moved per epoch (MiB)"))


def _not_a_report(path: Path, why: str) -> ValueError:
    return ValueError(f"{path} is not a graphscale run report ({why}); give the JSON file written by "
                      "`graphscale train --json PATH`")


def load_reports(path: str | Path) -> list[dict]:
    """The run reports in a JSON file: one run, or every run of a ``--repeat`` report (``{"runs": [...]}``).

    Raises:
        ValueError: the file is not JSON or holds no run report (names the file).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"report {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise _not_a_report(path, f"not JSON: {err}") from None
    runs = data.get("runs") if isinstance(data, dict) and isinstance(data.get("runs"), list) else [data]
    for run in runs:
        if not (isinstance(run, dict) and isinstance(run.get("epochs"), list) and isinstance(run.get("config"), dict)):
            raise _not_a_report(path, "no 'epochs' list and 'config' table")
        for epoch in run["epochs"]:
            if not (isinstance(epoch, dict) and "loss" in epoch and "seconds" in epoch):
                raise _not_a_report(path, "an epoch record without 'loss' and 'seconds'")
    if not runs:
        raise _not_a_report(path, "no runs")
    return runs


def _number(value) -> float:
    return float("nan") if value is None else float(value)


def epoch_series(report: dict) -> dict[str, list[float]]:
    """Per epoch: ``epoch``, ``loss``, ``val_loss``, ``{split}_acc``, ``seconds``, ``bytes`` (moved, summed over
    workers) and ``mib``; a missing value (e.g. no test split: JSON ``null``) is NaN."""
    epochs = report["epochs"]
    out: dict[str, list[float]] = {"epoch": [int(e.get("epoch", i)) for i, e in enumerate(epochs)]}
    for key in ("loss", "val_loss", *(f"{s}_acc" for s in SPLITS), "seconds"):
        out[key] = [_number(e.get(key)) for e in epochs]
    out["bytes"] = [float(moved_bytes(e.get("bytes") or {})) for e in epochs]
    out["mib"] = [b / 2**20 for b in out["bytes"]]
    return out


def run_label(report: dict) -> str:
    """``graph-parallel x2 / gcn`` (strategy, workers, model; ``(decoupled)`` for the decoupled form) for legends
    and TensorBoard run names."""
    config = report["config"]
    strategy = config.get("strategy", {})
    workers = int(strategy.get("workers", 1) or 1)
    form = " (decoupled)" if report.get("model_form") == "decoupled" else ""
    return (f"{strategy.get('name', '?')}{f' x{workers}' if workers > 1 else ''} / "
            f"{config.get('model', {}).get('name', '?')}{form}")


def _labels(runs: list[tuple[Path, dict]]) -> list[str]:
    """Legend names: the run label, told apart by seed and then by file where two runs share it."""
    labels = [run_label(r) for _, r in runs]
    for detail in (lambda p, r: f"seed {r['config'].get('seed')}", lambda p, r: p.name):
        if len(set(labels)) == len(labels):
            break
        labels = [label + (f" ({detail(p, r)})" if labels.count(label) > 1 else "")
                  for label, (p, r) in zip(labels, runs)]
    return labels


def plot_reports(paths: list[str | Path], out: str | Path | None = None) -> Path:
    """Draw the curves of every run in ``paths`` (overlaid, one legend entry per run) into a PNG, atomically.

    Args:
        paths: report files (:func:`load_reports`).
        out: the image (``.png``; another suffix matplotlib knows works too); default the first report with
            ``.png`` for its suffix. Its directory must exist.

    Returns:
        the written path.
    """
    runs = [(Path(p), r) for p in paths for r in load_reports(p)]
    out = Path(out) if out else Path(paths[0]).with_suffix(".png")
    for report in paths:
        if out.resolve() == Path(report).resolve():
            raise ValueError(f"--out {out} is the report {report} it reads; drawing would overwrite it: give another "
                             "path (default: the first report with .png)")
    return plot_runs(runs, out)


def plot_runs(runs: list[tuple[Path, dict]], out: str | Path, option: str = "--out") -> Path:
    """Draw the curves of ``runs`` (``(file, report)`` pairs: the file tells apart runs with the same label) into
    an image at ``out``, atomically; ``option`` names ``out`` in errors. :func:`plot_reports` and
    :meth:`graphscale.api.Report.plot` draw through it."""
    from graphscale.data.outputs import check_output_path

    out = Path(out)
    check_output_path(out, option)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({r.get("metric", "accuracy") for _, r in runs})
    metric = " / ".join(metrics)
    graphs = sorted({str(r.get("graph", {}).get("name", "?")) for _, r in runs})
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for i, (label, (_, report)) in enumerate(zip(_labels(runs), runs)):
        series = epoch_series(report)
        color = colors[i % len(colors)]
        for ax, (key, _) in zip(axes.flat, PANELS):
            ax.plot(series["epoch"], series[key], color=color, label=label, marker="." if len(series["epoch"]) < 30
                    else None)
            if key == "loss":
                ax.plot(series["epoch"], series["val_loss"], color=color, linestyle="--")
    for ax, (key, title) in zip(axes.flat, PANELS):
        ax.set_title(title.format(metric=metric))
        ax.set_xlabel("epoch")
        ax.grid(True, alpha=0.3)
        if key.endswith("_acc"):
            ax.set_ylim(-0.02, 1.02)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, max(1, len(names))), frameon=False)
    fig.suptitle(f"training curves: {', '.join(graphs)} (metric: {metric})")
    rows = math.ceil(len(names) / 4)
    fig.tight_layout(rect=(0, 0.04 * rows + 0.01, 1, 0.97))
    from graphscale.data.outputs import write_output

    try:  # the format from the suffix as savefig reads it from a name (a file object has none)
        write_output(out, lambda handle: fig.savefig(handle, dpi=100, format=out.suffix[1:] or "png"),
                     option=option)
    finally:
        plt.close(fig)
    return out


# ------------------------------------------------------------------ TensorBoard
TENSORBOARD_HINT = "pip install tensorboard (or pip install 'graphscale[tensorboard]')"


def check_tensorboard(log_dir: str | Path) -> None:
    """Check that ``--tensorboard DIR`` can be honoured: the ``tensorboard`` package is installed and DIR's parent
    exists (DIR itself is created, as TensorBoard does).

    Raises:
        ValueError: names the pip package, or the missing directory.
    """
    try:
        import tensorboard  # noqa: F401 - torch.utils.tensorboard needs it
    except ImportError:
        raise ValueError(f"--tensorboard needs the 'tensorboard' package, which is not installed: "
                         f"{TENSORBOARD_HINT}") from None
    path = Path(log_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--tensorboard {path} is a file; give a log directory")
    if not path.parent.is_dir():
        raise ValueError(f"--tensorboard {path}: directory {path.parent} does not exist (create it first)")


def tensorboard_scalars(report: dict) -> dict[str, list[float]]:
    """The scalars logged per epoch, by TensorBoard tag (the panels of :func:`plot_reports`)."""
    series = epoch_series(report)
    metric = report.get("metric", "accuracy")
    out = {"loss/train_epoch": series["loss"], "loss/val": series["val_loss"]}
    out.update({f"{metric}/{split}": series[f"{split}_acc"] for split in SPLITS})
    out["time/epoch_seconds"] = series["seconds"]
    out["bytes/moved_per_epoch"] = series["bytes"]
    return out


def write_tensorboard(report: dict, log_dir: str | Path) -> Path:
    """Log ``report``'s per-epoch scalars (:func:`tensorboard_scalars`) as one TensorBoard run under ``log_dir``
    (a sub-directory named by strategy, workers, model and seed, so several runs compare side by side).

    Returns:
        the run's directory.
    """
    check_tensorboard(log_dir)
    from torch.utils.tensorboard import SummaryWriter

    config = report["config"]
    name = run_label(report).replace(" / ", "-").replace(" ", "") + f"-seed{config.get('seed', 0)}"
    run_dir = Path(log_dir) / name
    writer = SummaryWriter(log_dir=str(run_dir))
    try:
        epochs = epoch_series(report)["epoch"]
        for tag, values in tensorboard_scalars(report).items():
            for epoch, value in zip(epochs, values):
                if not math.isnan(value):
                    writer.add_scalar(tag, value, epoch)
    finally:
        writer.close()
    return run_dir

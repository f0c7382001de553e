"""The run report as typed objects: what :func:`graphscale.train` returns.

A :class:`Report` holds the content of the JSON report ``graphscale train --json`` writes (``graphscale.run.run``'s
dictionary), typed: one :class:`EpochRecord` per epoch and the :class:`Final` summary, the run's configuration,
environment, graph counts, metric and warnings. :attr:`Report.raw` is the dictionary itself:
:meth:`Report.to_json` writes exactly it (the same file as ``--json``, atomically), :meth:`Report.plot` draws it
with :mod:`graphscale.plot`, and :meth:`Report.load` reads a written report back.

Scores that do not exist (the accuracy of an empty split) are ``nan`` here, ``null`` in the JSON file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphscale.strategies.base import SPLITS


def _float(value) -> float:
    """A score: ``None`` (JSON ``null``) and a missing value are ``nan``."""
    return math.nan if value is None else float(value)


@dataclass
class EpochRecord:
    """One epoch of a run (``report["epochs"][i]``).

    Attributes:
        epoch: the epoch's index (from 0).
        loss: the epoch's training loss (the global loss, the same on every worker).
        train_acc, val_acc, test_acc: the evaluation after the epoch (the report's :attr:`Report.metric`:
            accuracy, or micro-F1 for multi-label labels); ``nan`` for an empty split.
        train_loss, val_loss, test_loss: the mean loss of each split at that evaluation.
        seconds: the epoch's time (the slowest worker).
        bytes: bytes moved by category, summed over workers (:mod:`graphscale.metrics.ledger`).
        bytes_per_worker, peak_memory_per_worker, os_memory_per_worker, extra_per_worker: per worker, in rank
            order: bytes by category, the tracked peak memory, the OS's figures and strategy-specific numbers.
    """

    epoch: int
    loss: float
    train_acc: float = math.nan
    val_acc: float = math.nan
    test_acc: float = math.nan
    train_loss: float = math.nan
    val_loss: float = math.nan
    test_loss: float = math.nan
    seconds: float = 0.0
    bytes: dict[str, int] = field(default_factory=dict)
    bytes_per_worker: list[dict[str, int]] = field(default_factory=list)
    peak_memory_per_worker: list[int] = field(default_factory=list)
    os_memory_per_worker: list[dict | None] = field(default_factory=list)
    extra_per_worker: list[dict] = field(default_factory=list)

    @classmethod
    def from_dict(cls, record: dict) -> EpochRecord:
        scores = {f"{split}_{kind}": _float(record.get(f"{split}_{kind}")) for split in SPLITS for kind in ("acc", "loss")}
        return cls(epoch=int(record["epoch"]), loss=_float(record["loss"]), **scores,
                   seconds=float(record.get("seconds") or 0.0), bytes=dict(record.get("bytes") or {}),
                   bytes_per_worker=list(record.get("bytes_per_worker") or []),
                   peak_memory_per_worker=list(record.get("peak_memory_per_worker") or []),
                   os_memory_per_worker=list(record.get("os_memory_per_worker") or []),
                   extra_per_worker=list(record.get("extra_per_worker") or []))

    @property
    def moved_bytes(self) -> int:
        """Bytes that crossed a link this epoch (:func:`~graphscale.metrics.ledger.moved_bytes`: every category
        but in-place reuse)."""
        from graphscale.metrics.ledger import moved_bytes

        return moved_bytes(self.bytes)


@dataclass
class Final:
    """The run's summary (``report["final"]``).

    Attributes:
        best_epoch: the epoch whose model is reported (best validation score; lowest training loss without a
            validation split); ``None`` when no epoch ran.
        val_acc, test_acc: that epoch's scores.
        best_by: ``val_acc`` or ``train_loss``: how the best epoch was chosen.
        mean_epoch_seconds: the mean epoch time.
        bytes_per_epoch: the last epoch's bytes by category.
        peak_memory_per_worker: each worker's largest tracked peak over the epochs.
        os_memory_per_worker: each worker's largest OS figures over the epochs.
        wall_seconds: the whole run, data preparation included.
    """

    best_epoch: int | None
    val_acc: float
    test_acc: float
    best_by: str = "val_acc"
    mean_epoch_seconds: float = 0.0
    bytes_per_epoch: dict[str, int] = field(default_factory=dict)
    peak_memory_per_worker: list[int] = field(default_factory=list)
    os_memory_per_worker: list[dict | None] = field(default_factory=list)
    wall_seconds: float = 0.0

    @classmethod
    def from_dict(cls, final: dict) -> Final:
        best = final.get("best_epoch")
        return cls(best_epoch=None if best is None else int(best), val_acc=_float(final.get("val_acc")),
                   test_acc=_float(final.get("test_acc")), best_by=str(final.get("best_by", "val_acc")),
                   mean_epoch_seconds=float(final.get("mean_epoch_seconds") or 0.0),
                   bytes_per_epoch=dict(final.get("bytes_per_epoch") or {}),
                   peak_memory_per_worker=list(final.get("peak_memory_per_worker") or []),
                   os_memory_per_worker=list(final.get("os_memory_per_worker") or []),
                   wall_seconds=float(final.get("wall_seconds") or 0.0))


@dataclass
class Report:
    """A training run's report (module docstring).

    Attributes:
        final: the summary (:class:`Final`): ``report.final.test_acc``.
        epochs: one :class:`EpochRecord` per epoch: ``report.epochs[-1].bytes``.
        metric: what the ``*_acc`` scores hold: ``accuracy``, or ``micro-f1`` for multi-label labels.
        graph: the graph's counts (name, nodes, edges, features, classes, split sizes, ...).
        config: the run's whole configuration (the ``[data]``, ``[model]``, ``[optim]``, ``[strategy]`` tables and
            the run's fields, as in a TOML file).
        environment: versions, host and kernel backend.
        model_form: ``standard`` or ``decoupled``.
        warnings: what the numbers do not say by themselves (an empty split, a model that never improved).
        raw: the report as a dictionary, exactly what the JSON file holds (``NaN`` where the file has ``null``).
        model: the trained model, as the module you gave (your PyG module's class, a graphscale model), with the
            best epoch's parameters (:attr:`final`'s ``best_epoch``), in eval mode; ``None`` in a report read from
            a file or where no epoch ran.
        last_model: the same with the last epoch's parameters.
    """

    final: Final
    epochs: list[EpochRecord]
    metric: str
    graph: dict
    config: dict
    environment: dict
    model_form: str
    warnings: list[str]
    raw: dict = field(repr=False)
    model: Any = field(default=None, repr=False, compare=False)
    last_model: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, report: dict, models: dict | None = None) -> Report:
        """The typed view of a run report (``graphscale.run.run``'s result, or a loaded JSON report); ``models``:
        ``{"best": module, "last": module}`` (``run(config, keep_model=True)``'s ``models``)."""
        models = models or {}
        return cls(model=models.get("best"), last_model=models.get("last"), final=Final.from_dict(report["final"]),
                   epochs=[EpochRecord.from_dict(e) for e in report["epochs"]],
                   metric=str(report.get("metric", "accuracy")), graph=dict(report.get("graph") or {}),
                   config=dict(report.get("config") or {}), environment=dict(report.get("environment") or {}),
                   model_form=str(report.get("model_form", "standard")),
                   warnings=list(report.get("warnings") or []), raw=report)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """Read a report written by :meth:`to_json` or ``graphscale train --json``.

        Raises:
            ValueError: the file holds no single run's report (names the file).
            FileNotFoundError: no such file.
        """
        from graphscale.plot import load_reports

        runs = load_reports(path)
        if len(runs) != 1:
            raise ValueError(f"{path} holds {len(runs)} runs (a --repeat report); Report.load reads one run")
        return cls.from_dict(runs[0])

    def to_json(self, path: str | Path) -> Path:
        """Write the report to ``path`` as ``graphscale train --json`` does (strict JSON, atomically: a temporary
        sibling, then a rename); the directory must exist.

        Returns:
            the written path.
        """
        from graphscale.data.formats import write_json_atomic
        from graphscale.data.outputs import check_output_path

        check_output_path(path, "Report.to_json: path")
        return write_json_atomic(path, self.raw, option="Report.to_json: path")

    def plot(self, path: str | Path) -> Path:
        """Draw the training curves (:mod:`graphscale.plot`: loss, train / val / test metric, epoch time, bytes
        moved) into an image at ``path`` (``.png``), atomically; the directory must exist.

        Returns:
            the written path.
        """
        from graphscale.plot import plot_runs

        return plot_runs([(Path("report"), self.raw)], path, option="Report.plot: path")

    def to_dict(self) -> dict:
        """The report as a dictionary (:attr:`raw`, the JSON file's content)."""
        return self.raw

    def summary(self) -> str:
        """One line: the strategy, the graph, the best epoch and its scores."""
        strategy = self.config.get("strategy", {})
        best = "-" if self.final.best_epoch is None else self.final.best_epoch
        return (f"{strategy.get('name', '?')} x{strategy.get('workers', 1)} on {self.graph.get('name', '?')}: "
                f"best epoch {best}, val {self.metric} {self.final.val_acc:.4f}, test {self.metric} "
                f"{self.final.test_acc:.4f}, {self.final.mean_epoch_seconds:.3f} s/epoch")

    def __str__(self) -> str:
        return self.summary()


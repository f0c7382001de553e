"""The trainer: epochs, evaluation, best-validation selection, checkpoint/resume, progress.

It runs inside every worker and drives any :class:`~graphscale.strategies.base.Strategy`
the same way; it never branches on which strategy it runs. Worker 0 shows the
progress (:class:`~graphscale.progress.EpochProgress`) and writes checkpoints; every
worker returns its own history, which :mod:`graphscale.run` merges into the report. Every epoch record carries, next to the
strategy's tracked ``peak_memory``, the OS-measured ``os_memory`` of the epoch and its
evaluation (:class:`~graphscale.metrics.memory.EpochMemory`), so every strategy gets it.
"""

from __future__ import annotations

import copy
import math

import torch

from graphscale.checkpoint import GRAPH_COUNTS, check_resume, identity, read_checkpoint, write_checkpoint
from graphscale.config import RunConfig
from graphscale.distributed.env import DistEnv
from graphscale.errors import RunError
from graphscale.metrics.memory import EpochMemory, OSMemory
from graphscale.progress import EpochProgress
from graphscale.strategies.base import NonFiniteGradient, Strategy
from graphscale.strategies.optimizers import LRSchedule


class Trainer:
    """Runs ``config.optim.epochs`` epochs of a set-up strategy.

    Args:
        strategy: a strategy whose ``setup`` has run.
        env: this worker's DistEnv.
        config: the run configuration (epochs, checkpoint path, resume flag, progress).
        memory_baseline: this worker's :func:`~graphscale.metrics.memory.os_memory` read at worker start,
            before the data was loaded; without it the OS baseline is read here (after setup, data included)
            and the records say ``baseline_at: "trainer start"``.
    """

    def __init__(self, strategy: Strategy, env: DistEnv, config: RunConfig,
                 memory_baseline: OSMemory | None = None) -> None:
        self.strategy, self.env, self.config = strategy, env, config
        self.os_memory = EpochMemory(memory_baseline)
        self.history: list[dict] = []
        self.best = {"epoch": -1, "val_acc": float("nan"), "test_acc": float("nan"), "state": None}
        self.start_epoch = 0
        self.schedule = LRSchedule(config.optim)

    # --------------------------------------------------------------- checkpoint
    def save_checkpoint(self, epoch: int) -> None:
        """Write model, optimiser, the learning-rate schedule's state, best-so-far, history and the run's configuration
        (:func:`graphscale.checkpoint.identity`, the graph's counts) atomically (worker 0 writes; every worker
        calls :meth:`~graphscale.strategies.base.Strategy.state_dict` and
        :meth:`~graphscale.strategies.base.Strategy.full_model_state`, which may gather; the directory was checked
        writable before training, and is never created)."""
        if self.config.checkpoint is None:
            return
        # on every worker: a strategy whose state is spread over its workers gathers it to worker 0 here
        state = self.strategy.state_dict()
        best = {**self.best, "state": self.strategy.full_model_state(self.best["state"])}
        if not self.env.is_main:
            return
        graph = {k: self.strategy.data.summary.get(k) for k in GRAPH_COUNTS}
        write_checkpoint(self.config.checkpoint, {"epoch": epoch, "strategy": state, "best": best,
                                                  "history": self.history, "identity": identity(self.config),
                                                  "graph": graph, "schedule": self.schedule.state(epoch + 1)})

    def load_checkpoint(self) -> None:
        """Restore the state saved by :meth:`save_checkpoint`; training continues at the next epoch. The parent
        checked that the checkpoint's configuration is this run's (:func:`graphscale.checkpoint.check_resume`);
        a worker started otherwise (the Python API's ``launch``) checks it here."""
        state = read_checkpoint(self.config.checkpoint, map_location=self.env.device)
        check_resume(self.config, state, self.strategy.data.summary)
        self.strategy.load_state_dict(state["strategy"])
        self.best, self.history = state["best"], state["history"]
        self.start_epoch = state["epoch"] + 1

    # ------------------------------------------------------------------ health
    def check_finite(self, epoch: int, loss: float) -> None:
        """Stop the run when the epoch's loss (or a parameter) is not finite: one line naming the epoch and the likely
        causes; the checkpoint of the last good epoch (written after it) is kept, this epoch's is never written.

        A non-finite gradient is caught earlier, before the optimiser step (``single`` checks its gradients, every
        other strategy's :func:`~graphscale.strategies.base.allreduce_gradients` its reduced flat buffer, both
        raising :class:`~graphscale.strategies.base.NonFiniteGradient`, reported by :meth:`diverged`). The
        parameter check here is the net for steps taken without that all-reduce (model-averaging's local steps):
        Adam carries a NaN or infinite gradient into its moments and so into every parameter it updates, so a
        non-finite gradient always shows here, one step late.

        Raises:
            RunError: the loss or a parameter is NaN or infinite.
        """
        if not math.isfinite(loss):
            self.diverged(epoch, f"the training loss is {loss}")
        if not all(bool(torch.isfinite(p).all()) for p in self.strategy.model.parameters()):
            self.diverged(epoch, "a model parameter became non-finite (NaN or infinite)")

    def diverged(self, epoch: int, what: str) -> None:
        """Raise the one-line divergence error of epoch ``epoch`` (0-based) for cause ``what``."""
        kept = (f"; checkpoint {self.config.checkpoint} keeps epoch {epoch}"
                if self.config.checkpoint and epoch > 0 else "")
        raise RunError(f"training diverged at epoch {epoch + 1}: {what} (likely causes: too large a learning rate, "
                       f"--lr {self.config.optim.lr:g}, or extreme or non-finite feature values; try a smaller "
                       f"--lr or --feature-norm row){kept}")

    def improves(self, record: dict) -> bool:
        """Whether epoch ``record`` is the best so far: the highest validation score; with an empty validation
        split (its score NaN) the lowest training loss."""
        val = record["val_acc"]
        if not math.isnan(val):
            return math.isnan(self.best["val_acc"]) or val > self.best["val_acc"]
        best_epoch = self.best["epoch"]
        if best_epoch < 0:
            return True
        best_loss = next((r["loss"] for r in self.history if r["epoch"] == best_epoch), math.inf)
        return record["loss"] < best_loss

    # --------------------------------------------------------------------- fit
    def fit(self) -> dict:
        """Train, evaluating after every epoch; returns this worker's history and best result."""
        if self.config.resume:
            self.load_checkpoint()
        total = self.config.optim.epochs
        progress = EpochProgress(self.start_epoch, total, f"{self.config.strategy.name}/{self.config.model.name}",
                                 enabled=self.config.progress and self.env.is_main)
        for epoch in range(self.start_epoch, total):
            with self.os_memory.measure() as os_memory:
                self.strategy.set_lr(self.schedule.lr(epoch))  # --lr-schedule: the epoch's rate
                try:
                    stats = self.strategy.train_epoch(epoch)
                except NonFiniteGradient as err:  # raised before the optimiser step: the parameters are intact
                    self.diverged(epoch, str(err))
                self.check_finite(epoch, stats.loss)
                self.os_memory.end_training()
                metrics = self.strategy.evaluate()
            stats.os_memory = os_memory
            record = {"epoch": epoch, **stats.to_dict(), **metrics}
            self.history.append(record)
            if self.improves(record):
                self.best = {"epoch": epoch, "val_acc": metrics["val_acc"], "test_acc": metrics["test_acc"],
                             "by": "val_acc" if not math.isnan(metrics["val_acc"]) else "train_loss",
                             "state": copy.deepcopy(self.strategy.model.state_dict())}
            progress.update(epoch, stats.loss, metrics["val_acc"], metrics["test_acc"])
            self.save_checkpoint(epoch)
        progress.close()
        # the whole model's parameters (collective), on worker 0: the last epoch's and the best epoch's
        last = _cpu(self.strategy.full_model_state(self.strategy.model.state_dict()))  # copied: loading best
        best = _cpu(self.strategy.full_model_state(self.best["state"]))  # below writes the same tensors
        if self.best["state"] is not None:
            self.strategy.model.load_state_dict(self.best["state"])
        states = {"best": best, "last": last} if self.env.is_main else None
        return {"rank": self.env.rank, "history": self.history, "model_states": states,
                "best": {k: v for k, v in self.best.items() if k != "state"}}


def _cpu(state: dict | None) -> dict | None:
    """A state dict's tensors copied to host memory (what the parent receives)."""
    return None if state is None else {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

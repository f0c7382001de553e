"""The optimiser and the learning-rate schedule of every strategy (``[optim]``: ``--optimizer``, ``--lr``,
``--weight-decay``, ``--momentum``, ``--lr-schedule``, ``--lr-step-size``, ``--lr-gamma``).

:func:`make_optimizer` builds the one optimiser every strategy steps: ``adam`` (``torch.optim.Adam``, weight decay
as an L2 term of the gradient), ``adamw`` (``torch.optim.AdamW``, weight decay decoupled from the gradient) or
``sgd`` (``torch.optim.SGD`` with ``--momentum``, 0.9 unless given; weight decay as an L2 term). Every exact
strategy steps the same parameters with the same gradients, so each optimiser is exact across them.

:class:`LRSchedule` gives the learning rate of every epoch: ``none`` keeps ``--lr``; ``cosine`` is torch's
``CosineAnnealingLR`` with ``T_max = --epochs`` (to 0 at the end); ``step`` is torch's ``StepLR`` (times
``--lr-gamma`` every ``--lr-step-size`` epochs). The rates are those torch's scheduler computes (it is replayed on a
one-element optimiser, so the floats are bit for bit torch's), and the rate of an epoch depends on nothing but the
epoch: a resumed run continues the schedule exactly. The trainer sets each epoch's rate on the strategy
(:meth:`~graphscale.strategies.base.Strategy.set_lr`) before the epoch trains.

:func:`state_layout` names the per-parameter state each optimiser keeps (what a strategy that gathers or averages
optimiser state moves): Adam's and AdamW's ``exp_avg`` and ``exp_avg_sq`` with a ``step``, SGD's
``momentum_buffer`` (nothing without momentum).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from graphscale.config import DEFAULT_LR_GAMMA, DEFAULT_MOMENTUM, OptimConfig


def momentum_of(optim: OptimConfig) -> float:
    """SGD's momentum: ``--momentum``, else :data:`~graphscale.config.DEFAULT_MOMENTUM`."""
    return DEFAULT_MOMENTUM if optim.momentum is None else float(optim.momentum)


def lr_gamma_of(optim: OptimConfig) -> float:
    """The step schedule's decay factor: ``--lr-gamma``, else :data:`~graphscale.config.DEFAULT_LR_GAMMA`."""
    return DEFAULT_LR_GAMMA if optim.lr_gamma is None else float(optim.lr_gamma)


def make_optimizer(model: torch.nn.Module | Iterable[torch.nn.Parameter], optim: OptimConfig) -> torch.optim.Optimizer:
    """The configured optimiser over ``model``'s parameters (or the given parameters), at ``--lr``.

    Raises:
        ValueError: an unknown ``optim.optimizer`` (the parent checks it first, :func:`graphscale.validation.validate`).
    """
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    if optim.optimizer == "adam":
        return torch.optim.Adam(params, lr=optim.lr, weight_decay=optim.weight_decay)
    if optim.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay)
    if optim.optimizer == "sgd":
        return torch.optim.SGD(params, lr=optim.lr, momentum=momentum_of(optim), weight_decay=optim.weight_decay)
    raise ValueError(f"--optimizer must be one of adam, adamw, sgd, got {optim.optimizer!r}")


def describe(optim: OptimConfig) -> str:
    """The optimiser and its schedule in words, as a run's summary prints them: ``optimizer adam, lr 0.01``,
    ``optimizer sgd (momentum 0.9), lr 0.1, cosine schedule over 200 epochs``, ``optimizer adamw, lr 0.01, step
    schedule (x0.1 every 30 epochs)``."""
    kind = f"sgd (momentum {momentum_of(optim):g})" if optim.optimizer == "sgd" else optim.optimizer
    words = f"optimizer {kind}, lr {optim.lr:g}"
    if optim.lr_schedule == "cosine":
        return f"{words}, cosine schedule over {optim.epochs} epochs"
    if optim.lr_schedule == "step":
        return f"{words}, step schedule (x{lr_gamma_of(optim):g} every {optim.lr_step_size} epochs)"
    return words


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group of ``optimizer`` to learning rate ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


@dataclass(frozen=True)
class StateLayout:
    """The per-parameter state an optimiser keeps: ``tensors`` (each the parameter's shape, in this order) and
    whether a ``step`` count comes with them."""

    tensors: tuple[str, ...]
    step: bool


def state_layout(optimizer: torch.optim.Optimizer) -> StateLayout:
    """What ``optimizer`` (one of :func:`make_optimizer`'s) keeps per parameter (module docstring)."""
    group = optimizer.param_groups[0]
    if "betas" in group:  # Adam, AdamW
        return StateLayout(("exp_avg", "exp_avg_sq"), True)
    return StateLayout(("momentum_buffer",) if group.get("momentum", 0) else (), False)


def moment_count(optim: OptimConfig) -> int:
    """How many parameter-sized tensors the configured optimiser keeps per parameter (:func:`state_layout` of the
    optimiser :func:`make_optimizer` builds): 2 for adam and adamw, 1 for sgd with momentum, 0 without."""
    if optim.optimizer in ("adam", "adamw"):
        return 2
    return 1 if momentum_of(optim) else 0


class LRSchedule:
    """The learning rate of every epoch (module docstring).

    Args:
        optim: the run's ``[optim]``; ``T_max`` of ``cosine`` is ``optim.epochs``.
    """

    def __init__(self, optim: OptimConfig) -> None:
        self.kind, self.base = optim.lr_schedule, float(optim.lr)
        self.t_max, self.step_size, self.gamma = int(optim.epochs), optim.lr_step_size, lr_gamma_of(optim)
        self._rates: list[float] = []
        self._clock = None

    def _scheduler(self):
        param = torch.zeros(1, requires_grad=True)
        clock = torch.optim.SGD([param], lr=self.base)
        if self.kind == "cosine":
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(clock, T_max=self.t_max)
        elif self.kind == "step":
            scheduler = torch.optim.lr_scheduler.StepLR(clock, step_size=int(self.step_size), gamma=self.gamma)
        else:
            raise ValueError(f"--lr-schedule must be one of none, cosine, step, got {self.kind!r}")
        return clock, scheduler

    def lr(self, epoch: int) -> float:
        """The learning rate of epoch ``epoch`` (0-based): the rate torch's scheduler gives after ``epoch``
        steps."""
        if self.kind == "none":
            return self.base
        if self._clock is None:
            self._clock = self._scheduler()
            self._rates.append(self._clock[0].param_groups[0]["lr"])
        clock, scheduler = self._clock
        while len(self._rates) <= epoch:
            clock.step()  # no gradient: nothing changes; torch expects the optimiser step before the scheduler's
            scheduler.step()
            self._rates.append(clock.param_groups[0]["lr"])
        return self._rates[epoch]

    def state(self, next_epoch: int) -> dict:
        """The schedule's state a checkpoint records: its kind and settings, the epoch it continues at and that
        epoch's rate."""
        settings = {"t_max": self.t_max} if self.kind == "cosine" else \
            {"step_size": self.step_size, "gamma": self.gamma} if self.kind == "step" else {}
        return {"kind": self.kind, "base_lr": self.base, **settings, "next_epoch": next_epoch,
                "lr": self.lr(next_epoch)}

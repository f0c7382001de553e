"""Multi-worker test runs and parity asserts.

Tests run their worker bodies through :func:`run_distributed` (CPU and gloo by
default, so the same test passes on machines with and without GPUs) and compare
against the single-process reference with :func:`assert_close_rel`, the
tolerances of the correctness standard: ``1e-10`` absolute in float64, ``1e-5``
relative (to the largest magnitude of the expected tensor) in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from graphscale.distributed.launch import launch

#: Absolute tolerance for float64 parity.
FLOAT64_ATOL = 1e-10
#: Relative tolerance for float32 parity.
FLOAT32_RTOL = 1e-5


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any, device: str = "cpu",
                    timeout_s: float = 60) -> list[Any]:
    """Run ``fn(env, *args)`` on ``world_size`` workers; results by rank.

    Args:
        fn: a *module-level* function (spawned workers import it by name).
        world_size: 1 runs in-process; more spawns workers.
        *args: picklable arguments.
        device: ``"cpu"`` (default, gloo), ``"cuda"`` or ``"auto"``.
        timeout_s: collective timeout, so a broken test fails instead of hanging.

    Raises:
        graphscale.distributed.launch.WorkerError: a worker failed (its traceback is in the message).
    """
    return launch(fn, world_size, *args, device=device, timeout_s=timeout_s)


def train_epochs(env, config, data, last_epoch: int,
                 before_epoch: Callable[[int], None] = lambda epoch: None) -> torch.nn.Module:
    """A worker's training as a run's does it, without the trainer: build the model from ``config``, set the
    strategy up on ``data`` (a prepared :class:`~graphscale.data.handle.DataHandle`), train epochs
    ``0..last_epoch`` calling ``before_epoch(epoch)`` before each (to reset what a test counts), each at its
    ``--lr-schedule`` rate as the trainer sets it, tear it down; returns the trained model."""
    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model, is_decoupled
    from graphscale.registry import STRATEGIES
    from graphscale.strategies.optimizers import LRSchedule
    from graphscale.tasks.link import attach_decoder, output_width

    model = build_model(config.model, input_width(config.data.features, data.num_features),
                        output_width(config, data.num_classes), seed=config.seed, dtype=getattr(torch, config.dtype),
                        decoupled=is_decoupled(config))
    model = attach_decoder(model, config)  # --task link: the decoder, as a run adds it
    strategy = STRATEGIES.get(config.strategy.name)()
    strategy.setup(data, model.to(env.device), env, config)
    schedule = LRSchedule(config.optim)
    try:
        for epoch in range(last_epoch + 1):
            before_epoch(epoch)
            strategy.set_lr(schedule.lr(epoch))
            strategy.train_epoch(epoch)
    finally:
        strategy.teardown()
    return model


def assert_close_rel(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None,
                     what: str = "tensor") -> None:
    """Assert parity within the tolerance of ``dtype`` (default: ``expected.dtype``).

    float64: ``max |actual - expected| <= 1e-10``. Other dtypes:
    ``max |actual - expected| <= 1e-5 * max |expected|`` (an all-zero
    ``expected`` needs an all-zero ``actual``).

    Args:
        actual: a tensor (or number).
        expected: a tensor of ``actual``'s shape (or a number).
        dtype: the precision the computation ran in.
        what: a name for the error message.
    """
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    dtype = expected.dtype if dtype is None else dtype
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    if actual.numel() == 0:
        return
    a, e = actual.detach().cpu().double(), expected.detach().cpu().double()
    if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(e).all()):
        if torch.equal(a.nan_to_num(), e.nan_to_num()) and torch.equal(a.isnan(), e.isnan()):
            return
        raise AssertionError(f"{what}: non-finite values differ")
    err = float((a - e).abs().max())
    if dtype == torch.float64:
        tol = FLOAT64_ATOL
        kind = "absolute"
    else:
        tol = FLOAT32_RTOL * float(e.abs().max())
        kind = f"relative to max |expected| = {float(e.abs().max()):.3g}"
    if err > tol:
        raise AssertionError(f"{what}: max abs error {err:.3g} exceeds {tol:.3g} ({kind}, {dtype})")

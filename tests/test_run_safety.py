"""Run safety beyond the CLI's input checks (issue 29): non-finite gradients stop a run before the optimiser step,
setup shows a bar on a terminal, killed offload runs leave no shared-memory file behind."""

from __future__ import annotations

import re

import pytest
import torch

import graphscale.strategies.data_parallel
import graphscale.strategies.single
import graphscale.trainer
from graphscale.cli import main


class _Poison(torch.autograd.Function):
    """The identity forward; a NaN gradient backward (the loss stays finite)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


@pytest.mark.parametrize("strategy", ["single", "data-parallel"])
def test_a_non_finite_gradient_stops_the_run_before_the_optimiser_step(strategy, tmp_path, capsys, monkeypatch):
    """From epoch 3 on the loss is finite but its gradient NaN: the run stops at epoch 3 naming the gradient, the
    model's parameters are still finite (the step was skipped; the after-epoch parameter check alone would have found
    them NaN, one Adam step too late) and the checkpoint keeps epoch 2."""
    module = getattr(graphscale.strategies, strategy.replace("-", "_"))
    loss_sum, state = module.masked_loss_sum, {"poison": False, "finite": None}

    def poisoned(logits, labels, mask):
        return loss_sum(_Poison.apply(logits) if state["poison"] else logits, labels, mask)

    save, diverged = graphscale.trainer.Trainer.save_checkpoint, graphscale.trainer.Trainer.diverged

    def save_then_poison(self, epoch):
        save(self, epoch)
        state["poison"] = epoch >= 1

    def record(self, epoch, what):
        state["finite"] = all(bool(torch.isfinite(p).all()) for p in self.strategy.model.parameters())
        diverged(self, epoch, what)

    monkeypatch.setattr(module, "masked_loss_sum", poisoned)
    monkeypatch.setattr(graphscale.trainer.Trainer, "save_checkpoint", save_then_poison)
    monkeypatch.setattr(graphscale.trainer.Trainer, "diverged", record)
    ckpt = tmp_path / "c.pt"
    extra = ["--workers", "1", "--cache-dir", str(tmp_path / "cache")] if strategy != "single" else []
    assert main(["train", "--strategy", strategy, *extra, "--epochs", "5", "--no-progress",
                 "--checkpoint", str(ckpt)]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"graphscale: error: training diverged at epoch 3: a gradient is non-finite \(NaN or "
                        r"infinite\) \(likely causes: .*\); checkpoint \S+ keeps epoch 2\n", err), err
    assert state["finite"] is True
    saved = torch.load(ckpt, weights_only=False)
    assert saved["epoch"] == 1

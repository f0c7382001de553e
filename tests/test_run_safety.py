"""Run safety beyond the CLI's input checks (issue 29): non-finite gradients stop a run before the optimiser step,
setup shows a bar on a terminal, killed offload runs leave no shared-memory file behind."""

from __future__ import annotations

import io
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


@pytest.mark.slow
def test_killed_offload_runs_leave_no_shared_memory_file_behind(tmp_path):
    """offload keeps its host arrays in files under --shm-dir, which its rank 0 removes once both workers mapped them.
    SIGKILL of the launcher and of rank 0 inside that window (the moment the directory appears), then of the
    launcher at a seeded moment of training or checkpoint writing: afterwards no process of the run survives, the
    shared-memory directory, the temporary directory and the outputs hold nothing left over or half-written, and the
    next run removes a dead run's shared-memory directory (owner PID gone) but keeps a live one's."""
    import contextlib
    import json
    import os
    import random
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from test_cli import _marked_processes

    from graphscale.data.formats import _HOST

    rng = random.Random(2029)
    marker = uuid.uuid4().hex
    out, cache, tmp, shm = (tmp_path / name for name in ("out", "cache", "tmp", "shm"))
    for folder in (out, tmp, shm):
        folder.mkdir()
    argv = [sys.executable, "-m", "graphscale.cli", "train", "--strategy", "offload", "--workers", "2", "--epochs",
            "30", "--no-progress", "--checkpoint", str(out / "c.pt"), "--json", str(out / "r.json"), "--cache-dir",
            str(cache), "--shm-dir", str(shm)]
    env = {**os.environ, "GRAPHSCALE_FAULT_MARK": marker, "TMPDIR": str(tmp)}

    def check_nothing_left():
        deadline = time.monotonic() + 15
        while (_marked_processes(marker) or any(shm.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked_processes(marker) == []
        assert list(shm.iterdir()) == []
        assert [p.name for p in tmp.iterdir() if p.name.startswith("graphscale-launch-")] == []
        if (out / "r.json").exists():
            json.loads((out / "r.json").read_text())
        if (out / "c.pt").exists():
            assert "identity" in torch.load(out / "c.pt", weights_only=False)

    def rank0():
        """The first spawned worker (workers start in rank order)."""
        spawned = []
        for pid in _marked_processes(marker):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"import worker_main" in f.read():  # the launcher's worker entry point
                    spawned.append(pid)
        return min(spawned)

    for target in ("launcher", "rank 0"):  # inside the window where the shared-memory files exist
        for _attempt in range(3):  # until a kill lands in it (rank 0 may close it before it is stopped)
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while proc.poll() is None and not any(shm.iterdir()):
                time.sleep(0.001)
            landed = False
            if proc.poll() is None:
                owner = rank0()
                os.kill(owner, signal.SIGSTOP)  # frozen: the files are there or not, for sure
                landed = any(shm.iterdir())
                os.kill(proc.pid if target == "launcher" else owner, signal.SIGKILL)
                os.kill(owner, signal.SIGCONT)
            proc.wait(timeout=120)
            check_nothing_left()
            if landed:
                break
        assert landed, f"no kill of the {target} landed while the shared-memory files existed"
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(2.0, 5.0))  # seeded: setup, training or checkpoint writing
    proc.kill()
    proc.wait(timeout=120)
    check_nothing_left()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    left = shm / f".graphscale-offload.run-{_HOST}-{int(dead.stdout)}-0123abcd"
    live = shm / f".graphscale-offload.run-{_HOST}-{os.getpid()}-0123abcd"
    for folder in (left, live):
        folder.mkdir()
        (folder / "H0").write_bytes(b"\0" * 64)
    done = subprocess.run([*argv[:9], "3", *argv[10:]], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert list(shm.iterdir()) == [live]
    live.joinpath("H0").unlink()
    live.rmdir()
    check_nothing_left()
    assert [p for p in tmp_path.rglob("*") if ".tmp-" in p.name] == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_setup_steps_show_a_bar_on_a_terminal_and_lines_otherwise(terminal):
    """A setup step (here 1.2 s long) on a terminal: a tqdm bar whose elapsed time moves while the step runs and that
    ends full; redirected: a line at the start and one with the time at the end, no carriage returns."""
    import time

    from graphscale.config import build_config
    from graphscale.prepare import setup_step

    stream = _Terminal() if terminal else io.StringIO()
    with setup_step(build_config({}), "partitioning 2,708 vertices into 2 parts (metis)", stream=stream):
        time.sleep(1.2)
    text = stream.getvalue()
    label = "graphscale: setup: partitioning 2,708 vertices into 2 parts (metis)"
    if terminal:
        frames = [frame for frame in text.split("\r") if frame.strip()]
        assert all(frame.startswith(f"{label}: ") for frame in frames), frames
        # time moves (at least the 1.2 s slept; more on a loaded machine), then the bar is full
        assert any(re.search(r"  0%\|\s+\| \[00:0[1-9]\]$", frame) for frame in frames), frames
        assert re.search(r"100%\|[█#]+\| \[00:0[1-9]\]\n$", text), frames
        assert "done in" not in text
    else:
        assert "\r" not in text
        done = re.fullmatch(rf"{re.escape(label)} \.\.\.\n{re.escape(label)}: done in (\d+\.\d) s\n", text)
        assert done and float(done[1]) >= 1.2, text  # at least the time slept (more on a loaded machine)
    with setup_step(build_config({"progress": False}), "loading cora", stream=stream):
        pass
    assert stream.getvalue() == text  # --no-progress: nothing

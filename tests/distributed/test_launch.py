"""launch(): in-process, spawned and torchrun modes; failures end the run with the failing rank."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
import torch
import torch.distributed as dist

from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.exit_status import describe_exit
from graphscale.distributed.launch import WorkerError, launch, resolve_device
from graphscale.testing import run_distributed


def _report(env, offset):
    """Who am I, and does a collective work?"""
    t = torch.tensor([float(env.rank + offset)])
    if env.world_size > 1:
        dist.all_reduce(t)
    return {"rank": env.rank, "world_size": env.world_size, "backend": env.backend, "device": str(env.device),
            "threads": torch.get_num_threads(), "sum": float(t), "ledger_empty": env.ledger.total() == 0,
            "initialized": dist.is_initialized(), "tensor": torch.arange(3) * env.rank}


def _raise_on_rank1(env):
    if env.rank == 1:
        raise ValueError("boom from the test")
    dist.barrier()  # blocks until the parent stops this worker
    return env.rank


def _exit_on_rank0(env):
    if env.rank == 0:
        os._exit(3)
    dist.barrier()
    return env.rank


def _slow_rank0(env, seconds):
    if env.rank == 0:
        time.sleep(seconds)  # before the first collective
    return float(Comm(env).all_reduce(torch.ones(1), CONTROL))


def _rank1_never_joins(env):
    if env.rank == 1:
        time.sleep(60)  # stands for a hang outside any collective
    return float(Comm(env).all_reduce(torch.ones(1), CONTROL))


def test_worker_slower_than_a_short_timeout_finishes_under_a_longer_one():
    assert run_distributed(_slow_rank0, 2, 3.0, timeout_s=10) == [2.0, 2.0]


def _hung_run(timeout_s: float = 3) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        run_distributed(_rank1_never_joins, 2, timeout_s=timeout_s)
    return info.value


def _raising_run() -> WorkerError:
    with pytest.raises(WorkerError) as info:
        run_distributed(_raise_on_rank1, 2, timeout_s=30)
    return info.value


@pytest.mark.perf  # wall time: the serial perf tier
def test_failed_runs_end_without_waiting_for_the_hang_or_the_timeout(record_property):
    """A hung worker ends the run after its peer's 3 s collective timeout, not after its own 60 s hang (bound: 20 s,
    worker start-up included); a raising worker ends it at once, the parent stopping the worker blocked in a
    barrier rather than waiting for its 30 s timeout (bound: 25 s). The defect each bound guards takes at least 60 s
    (waiting for the hang) or 30 s (waiting for the timeout), worker start-up not counted.

    Measured over 10 perf-tier runs on the idle 2-core CI machine (`python -m graphscale.testing.perf_spread --runs 10`, `d291b51`): the hung run 4.30-4.37 s, the raising run 1.25-1.38 s; within the bounds in each of 4 CI
    runs on an idle 2-core machine (when these were unit assertions);
    39.8 s and 16.8 s on a 2-core machine under a load average of about 30 (1 run, the first over its bound: why
    this is a serial-tier test)."""
    start = time.monotonic()
    _hung_run()
    hung = time.monotonic() - start
    start = time.monotonic()
    _raising_run()
    raising = time.monotonic() - start
    record_property("hung_s", hung)
    record_property("raising_s", raising)
    assert hung < 20  # worker start-up and 3 s, not the 60 s hang
    assert raising < 25  # the parent stopped the blocked worker, it did not wait for the timeout


@pytest.mark.slow
@pytest.mark.spawn
def test_hung_worker_ends_the_run_within_the_timeout_naming_rank_and_collective():
    # 10 s, not the perf tier's 3 s: the two workers also join their process group within the timeout, and this
    # test shares the machine with the rest of the unit tier (the hang is 60 s, so the timeout still ends the run)
    error = _hung_run(timeout_s=10)
    assert error.rank == 0 and error.still_running == [1]
    message = str(error)
    assert "rank 0: collective all_reduce (category 'control') timed out after" in message
    assert "(timeout 10 s)" in message
    assert message.endswith("workers still running when its collective timed out: 1")


def test_single_worker_runs_in_process():
    out = launch(_report, 1, 10, device="cpu")
    assert len(out) == 1
    assert out[0]["rank"] == 0 and out[0]["world_size"] == 1 and out[0]["backend"] == "none"
    assert out[0]["sum"] == 10.0 and not out[0]["initialized"]


def test_two_workers_return_results_by_rank():
    out = run_distributed(_report, 2, 1)
    assert [r["rank"] for r in out] == [0, 1]
    cpus = len(os.sched_getaffinity(0))
    for r in out:
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["device"] == "cpu"
        assert r["sum"] == 3.0  # (0 + 1) + (1 + 1)
        assert r["threads"] == max(1, cpus // 2)
        assert r["ledger_empty"] and r["initialized"]
    assert torch.equal(out[1]["tensor"], torch.tensor([0, 1, 2]))


@pytest.mark.spawn
def test_raising_worker_ends_the_run_with_its_traceback():
    error = _raising_run()
    assert error.rank == 1
    assert "ValueError: boom from the test" in str(error)
    assert "_raise_on_rank1" in error.worker_traceback


@pytest.mark.spawn
def test_dead_worker_without_traceback_is_reported():
    with pytest.raises(WorkerError) as info:
        run_distributed(_exit_on_rank0, 2, timeout_s=30)
    assert info.value.rank == 0 and info.value.exitcode == 3
    assert "worker 0 exited with code 3 and left no traceback" in str(info.value)


def _kill_self_on_rank1(env, signum):
    if env.rank == 1:
        os.kill(os.getpid(), signum)
    dist.barrier()
    return env.rank


@pytest.mark.spawn
def test_worker_killed_by_a_signal_is_reported_with_the_signal():
    with pytest.raises(WorkerError) as info:
        run_distributed(_kill_self_on_rank1, 2, signal.SIGKILL, timeout_s=30)
    assert info.value.rank == 1 and info.value.exitcode == -signal.SIGKILL
    assert info.value.one_line() == ("worker 1 was killed by signal 9 (SIGKILL; the kernel's out-of-memory killer "
                                     "sends it when memory runs out; also `kill -9`)")


def test_exit_statuses_are_described():
    assert describe_exit(-11).startswith("was killed by signal 11 (SIGSEGV; a segmentation fault")
    assert describe_exit(-7).startswith("was killed by signal 7 (SIGBUS; a bus error")
    assert describe_exit(-signal.SIGUSR1) == f"was killed by signal {int(signal.SIGUSR1)} (SIGUSR1)"
    assert describe_exit(-200) == "was killed by signal 200 (signal 200)"
    assert describe_exit(3) == "exited with code 3 and left no traceback (os._exit or a crash)"
    error = WorkerError(2, "", -6)
    assert str(error) == error.one_line() == ("worker 2 was killed by signal 6 (SIGABRT; aborted: a failed check in "
                                              "native code)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_mode_joins_the_env_group(monkeypatch):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(name, value)
    out = launch(_report, 1, 5, device="cpu")
    assert out[0]["initialized"] and out[0]["backend"] == "gloo" and out[0]["sum"] == 5.0
    assert not dist.is_initialized()  # launch destroyed the group it created
    with pytest.raises(ValueError, match="WORLD_SIZE=1"):
        launch(_report, 2, 0, device="cpu")


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="world_size"):
        launch(_report, 0, 0)
    with pytest.raises(ValueError, match="device"):
        launch(_report, 2, 0, device="tpu")
    with pytest.raises(ValueError, match="module-level function"):
        launch(lambda env: env.rank, 2, device="cpu")
    with pytest.raises(ValueError, match="nccl"):
        launch(_report, 2, 0, device="cpu", backend="nccl")
    if not torch.cuda.is_available():
        for backend in (None, "gloo"):
            with pytest.raises(ValueError, match="torch sees no CUDA device"):
                resolve_device("cuda", 2, backend)
    elif torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="one GPU per worker.*--backend gloo"):
            resolve_device("cuda", 64)
        assert resolve_device("cuda", 64, "gloo") == "cuda"  # shared GPUs

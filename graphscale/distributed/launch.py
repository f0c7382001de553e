"""Start workers: spawn N local processes, or join a ``torchrun`` group.

:func:`launch` is the one entry point the CLI and the tests use::

    results = launch(fn, world_size, *args)      # fn(env: DistEnv, *args) -> picklable

* ``world_size == 1`` runs ``fn`` in this process with :meth:`DistEnv.local`
  (no process group, the collectives in :mod:`graphscale.distributed.comm`
  short-circuit).
* Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
  set) ``fn`` runs once in the current process inside that group
  (:func:`join_torchrun`); the returned list holds only this process's result.
* Otherwise ``world_size`` workers are spawned (``torch.multiprocessing`` spawn
  context). They rendezvous through a ``FileStore`` in a fresh temporary
  directory (no TCP port to race for), use gloo on CPU and NCCL when CUDA has at
  least ``world_size`` devices (rank ``r`` on ``cuda:r``), and write their
  pickled result (or their traceback) to a file in that directory. Results come
  back ordered by rank.

Failures never hang the parent: the first worker that raises or dies (also by
segfault or ``os._exit``) ends the run; the parent terminates the others and
raises :class:`WorkerError` naming the rank with its full traceback. Collectives
carry ``timeout_s`` so a worker blocked on a dead peer fails too.
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graphscale.distributed.env import DistEnv
from graphscale.metrics.ledger import Ledger

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_POLL_S = 0.02
_KILL_GRACE_S = 2.0


class WorkerError(RuntimeError):
    """A worker raised or died; the run was stopped.

    Attributes:
        rank: the failing worker's rank.
        exitcode: its process exit code (negative = killed by that signal), or ``None`` in-process.
        worker_traceback: the worker's formatted traceback (empty when it died without one).
    """

    def __init__(self, rank: int, worker_traceback: str, exitcode: int | None = None) -> None:
        self.rank = rank
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback
        if worker_traceback:
            detail = f"worker {rank} failed:\n{worker_traceback.rstrip()}"
        else:
            detail = f"worker {rank} died with exit code {exitcode} and left no traceback (crash or os._exit)"
        super().__init__(detail)


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def resolve_device(device: str | torch.device, world_size: int) -> str:
    """The device *kind* workers use: ``"cpu"`` or ``"cuda"``.

    ``"auto"`` picks CUDA when it has at least ``world_size`` devices, else CPU.

    Raises:
        ValueError: ``device`` is unknown, or ``cuda`` is asked for without enough GPUs.
    """
    if isinstance(device, torch.device):
        kind = device.type
    else:
        kind = str(device).split(":")[0]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if kind == "auto":
        return "cuda" if gpus >= world_size else "cpu"
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        if gpus < world_size:
            raise ValueError(f"device='cuda' needs one GPU per worker: world_size={world_size}, found {gpus} GPU(s)")
        return "cuda"
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")


def resolve_backend(backend: str | None, device_kind: str) -> str:
    """``backend`` or the default for ``device_kind`` (NCCL on CUDA, gloo on CPU)."""
    if backend is None:
        return "nccl" if device_kind == "cuda" else "gloo"
    if backend not in ("gloo", "nccl", "mpi"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or 'mpi', got {backend!r}")
    if backend == "nccl" and device_kind != "cuda":
        raise ValueError("backend='nccl' needs device='cuda'")
    return backend


def torchrun_detected() -> bool:
    """True when the torchrun / ``env://`` variables are all set."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def join_torchrun(backend: str | None = None, device: str | torch.device = "auto", timeout_s: float = 120) -> DistEnv:
    """Join the process group described by torchrun's environment variables.

    Initialises the default group via ``env://`` (or reuses one that is already
    initialised) and pins CUDA device ``LOCAL_RANK`` when running on GPUs.

    Args:
        backend: ``None`` picks NCCL on CUDA, gloo on CPU.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        timeout_s: collective timeout.

    Returns:
        This process's DistEnv with a fresh Ledger.

    Raises:
        RuntimeError: the torchrun variables are missing.
    """
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise RuntimeError(f"join_torchrun: environment variables {', '.join(missing)} are not set; "
                           "start the program with torchrun or use launch(fn, world_size)")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    timeout = timedelta(seconds=timeout_s)
    if device == "auto":
        kind = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() > local_rank else "cpu"
    else:
        kind = torch.device(device).type
    backend = resolve_backend(backend, kind)
    dev = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout)
    return DistEnv(rank=rank, world_size=world_size, device=dev, backend=backend, timeout=timeout, ledger=Ledger())


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None,
           device: str | torch.device = "auto", timeout_s: float = 120) -> list[Any]:
    """Run ``fn(env, *args)`` on ``world_size`` workers and return their results by rank.

    Args:
        fn: a module-level function (spawn pickles it by reference) taking a DistEnv first.
        world_size: number of workers (>= 1).
        *args: picklable arguments passed to every worker.
        backend: ``None`` (gloo on CPU, NCCL on CUDA), ``"gloo"`` or ``"nccl"``.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        timeout_s: collective timeout in seconds.

    Returns:
        ``[fn's result on rank 0, ..., rank world_size-1]``; under torchrun, ``[this rank's result]``.

    Raises:
        WorkerError: a worker raised or died; the others were stopped.
        ValueError: bad ``world_size``, ``device`` or ``backend``.
    """
    if torchrun_detected():
        env_world = int(os.environ["WORLD_SIZE"])
        if world_size != env_world:
            raise ValueError(f"launch: world_size={world_size} but torchrun started WORLD_SIZE={env_world} processes")
        owns_group = not dist.is_initialized()
        env = join_torchrun(backend, device, timeout_s)
        try:
            return [fn(env, *args)]
        finally:
            if owns_group and dist.is_initialized():
                dist.destroy_process_group()
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"launch: world_size must be a positive integer, got {world_size!r}")
    kind = resolve_device(device, world_size)
    if world_size == 1:
        dev = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
        return [fn(DistEnv.local(dev), *args)]
    backend = resolve_backend(backend, kind)
    return _spawn(fn, world_size, args, backend, kind, timeout_s)


# ---------------------------------------------------------------- spawning
def _worker(rank: int, world_size: int, fn: Callable, args: tuple, workdir: str, backend: str, kind: str,
            timeout_s: float) -> None:
    """Body of one spawned worker: join the group, run ``fn``, write the outcome file."""
    out = Path(workdir) / f"rank{rank}.pkl"
    try:
        torch.set_num_threads(max(1, cpu_count() // world_size))
        dev = torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")
        if kind == "cuda":
            torch.cuda.set_device(dev)
        timeout = timedelta(seconds=timeout_s)
        dist.init_process_group(backend, init_method=f"file://{workdir}/store", rank=rank, world_size=world_size,
                                timeout=timeout)
        env = DistEnv(rank=rank, world_size=world_size, device=dev, backend=backend, timeout=timeout, ledger=Ledger())
        result = fn(env, *args)
        payload = pickle.dumps(("ok", result))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        payload = pickle.dumps(("error", traceback.format_exc(), time.time()))
        _write_atomic(out, payload)
        os._exit(1)  # skip interpreter teardown: peers may be blocked on us and the parent is stopping them
    _write_atomic(out, payload)
    try:
        dist.destroy_process_group()
    finally:
        # Skip interpreter teardown: C++ static destructors of the communication libraries occasionally
        # abort ("terminate called without an active exception") after all Python code has finished.
        # Python-level exit handlers still run (multiprocessing releases its semaphores there).
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _write_atomic(path: Path, payload: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(payload)
    tmp.replace(path)


def _read_outcome(path: Path) -> tuple | None:
    if not path.exists():
        return None
    return pickle.loads(path.read_bytes())


def _stop(procs: list) -> None:
    """Terminate the still-running workers we spawned, then kill any that ignore it."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _KILL_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _spawn(fn: Callable, world_size: int, args: tuple, backend: str, kind: str, timeout_s: float) -> list[Any]:
    try:
        pickle.dumps(fn)
    except Exception as err:  # noqa: BLE001 - pickling raises several types
        raise ValueError(f"launch: fn={fn!r} cannot be sent to spawned workers ({err}); "
                         "pass a module-level function") from None
    ctx = mp.get_context("spawn")
    workdir = tempfile.mkdtemp(prefix="graphscale-launch-")
    procs = []
    try:
        for rank in range(world_size):
            p = ctx.Process(target=_worker, args=(rank, world_size, fn, args, workdir, backend, kind, timeout_s),
                            name=f"graphscale-worker-{rank}", daemon=False)
            p.start()
            procs.append(p)
        outcomes: dict[int, tuple] = {}
        while len(outcomes) < world_size:
            failed: list[tuple[float, WorkerError]] = []
            for rank, p in enumerate(procs):
                if rank in outcomes or p.is_alive():
                    continue
                p.join()
                outcome = _read_outcome(Path(workdir) / f"rank{rank}.pkl")
                if outcome is not None and outcome[0] == "ok" and p.exitcode == 0:
                    outcomes[rank] = outcome
                else:
                    raised = outcome is not None and outcome[0] == "error"
                    when = outcome[2] if raised else float("-inf")
                    failed.append((when, WorkerError(rank, outcome[1] if raised else "", p.exitcode)))
            if failed:
                _stop(procs)
                # A worker that died without a traceback (crash, os._exit) is the cause: its peers' errors
                # ("connection closed") follow from it. Otherwise the earliest traceback is the cause, since
                # peers blocked on a failed worker fail after it. Ties go to the lowest rank.
                failed.sort(key=lambda item: (item[0], item[1].rank))
                raise failed[0][1]
            time.sleep(_POLL_S)
        return [outcomes[rank][1] for rank in range(world_size)]
    finally:
        _stop(procs)
        shutil.rmtree(workdir, ignore_errors=True)

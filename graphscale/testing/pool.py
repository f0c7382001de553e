"""A persistent pool of spawned workers for the test suite's many small multi-worker runs.

Every multi-worker run of :func:`graphscale.distributed.launch.launch` spawns ``world_size`` fresh interpreters,
each importing torch and graphscale and joining a gloo group: on 2 cores that costs more than most of the suite's
small runs themselves. The suite installs a :class:`WorkerPool` in place of the launcher's spawning step
(``tests/conftest.py``), so that a run's function executes in workers spawned once and kept, each run still
getting what a spawned worker gets: a fresh :class:`~graphscale.distributed.env.DistEnv` and Ledger, the
parent's environment variables as they are at the call, the launcher's thread count, torch's start-up random
state and default dtype, and a launch directory whose registered paths are removed after the run
(:func:`~graphscale.distributed.launch.remove_with_run`).

Only what the pool reproduces goes through it: CPU runs on gloo with the allocator configuration and malloc
environment the pool's workers started with. Everything else is handed to the launcher's own spawning, and so is a
run that fails in the pool: the pool is stopped and the run is repeated in freshly spawned workers, so that a
failing run raises exactly the launcher's :class:`~graphscale.distributed.launch.WorkerError` (rank, exit code,
workers still running, consequences). A passing run's results are the same objects a spawned run returns.

Product runs never use it: nothing in ``graphscale`` installs it. ``GRAPHSCALE_TEST_POOL=0`` turns it off in the
suite, and the perf tier (marker ``perf``: resident memory and wall time of fresh workers) runs without it.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

#: environment variables read once, when a process starts (malloc, preloads): a run whose values differ from the
#: pool's start is spawned afresh
_START_ONLY = ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_")
#: the pools kept alive at once (each holds ``world_size`` interpreters): the suite's world sizes 2, 3 and 4 and the
#: retained allocator's 2 (with 3, the suite's order evicted and restarted a pool 4-5 times per run)
MAX_POOLS = 4
#: the collective timeout of joining a pool's group; each job then sets its own on the group
_JOIN_TIMEOUT_S = 120


def _start_only_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(_START_ONLY)}


def _pool_worker(rank: int, world_size: int, allocator_mode: str, workdir: str, conn, parent_pid: int) -> None:
    """Body of one pool process: join the group once, then run jobs until told to stop, each with its own
    collective timeout (set on the group before the job runs)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _set_pg_timeout

    from graphscale import allocator
    from graphscale.distributed.env import DistEnv
    from graphscale.distributed.launch import LAUNCH_DIR_ENV, _die_with_launcher, _join_group, cpu_count
    from graphscale.metrics.ledger import Ledger
    from graphscale.nn import buffers

    _die_with_launcher(parent_pid)
    allocator.configure(allocator_mode)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _join_group("gloo", rank, world_size, timedelta(seconds=_JOIN_TIMEOUT_S), f"file://{workdir}/store")
    except BaseException:  # noqa: BLE001 - the parent falls back to spawning
        conn.send(("error", traceback.format_exc()))
        os._exit(1)
    seed, dtype = torch.initial_seed(), torch.get_default_dtype()
    conn.send(("ready", os.getpid()))
    while True:
        job = conn.recv()
        if job is None:
            break
        fn, args, timeout_s, environ, cwd, jobdir = job
        timeout = timedelta(seconds=timeout_s)
        _set_pg_timeout(timeout)  # what the launcher's group would have been created with
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environ)
        os.environ[LAUNCH_DIR_ENV] = jobdir
        buffers.clear()  # the previous run's warm buffers
        torch.manual_seed(seed)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(True)
        torch.set_num_threads(max(1, cpu_count() // world_size))
        try:
            env = DistEnv(rank=rank, world_size=world_size, device=torch.device("cpu"), backend="gloo",
                          timeout=timeout, ledger=Ledger())
            payload = pickle.dumps(fn(env, *args))
            _destroy_subgroups()  # a spawned worker's groups end with its process
            conn.send(("ok", payload))
        except BaseException:  # noqa: BLE001 - the parent repeats the run in spawned workers
            conn.send(("error", traceback.format_exc()))
            os._exit(1)
    dist.destroy_process_group()
    os._exit(0)


def _destroy_subgroups() -> None:
    """Destroy the process groups a run created besides the pool's own (``new_group``: a pipeline stage's, a
    task-parallel T or P group), with their connections."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    for group in [g for g in list(c10d._world.pg_map) if g is not c10d.GroupMember.WORLD]:
        dist.destroy_process_group(group)


class _Pool:
    """``world_size`` spawned processes in one gloo group."""

    def __init__(self, world_size: int, allocator_mode: str) -> None:
        self.world_size = world_size
        self.start_env = _start_only_env(dict(os.environ))
        self.workdir = tempfile.mkdtemp(prefix="graphscale-test-pool-")
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_pool_worker, name=f"graphscale-pool-worker-{rank}", daemon=False,
                            args=(rank, world_size, allocator_mode, self.workdir, child, os.getpid()))
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        self.ok = all(self._receive(rank)[0] == "ready" for rank in range(world_size))

    def _receive(self, rank: int) -> tuple:
        try:
            return self.conns[rank].recv()
        except (EOFError, OSError):
            return ("error", f"pool worker {rank} died")

    def run(self, fn: Callable, args: tuple, timeout_s: float) -> list[Any] | None:
        """The results by rank, or ``None`` when any worker failed (the pool is then unusable)."""
        from graphscale.distributed.launch import _remove_registered

        jobdir = tempfile.mkdtemp(prefix="graphscale-launch-")
        try:
            for conn in self.conns:
                conn.send((fn, args, float(timeout_s), dict(os.environ), os.getcwd(), jobdir))
            results: list[Any] = [None] * self.world_size
            pending = set(range(self.world_size))
            while pending:
                ready = multiprocessing.connection.wait([self.conns[r] for r in pending])
                for rank in [r for r in pending if self.conns[r] in ready]:
                    kind, payload = self._receive(rank)
                    if kind != "ok":
                        self.ok = False
                        return None  # a peer may be blocked in a collective: the caller stops the pool
                    results[rank] = pickle.loads(payload)
                    pending.discard(rank)
            return results
        finally:
            _remove_registered(Path(jobdir))
            shutil.rmtree(jobdir, ignore_errors=True)

    def close(self) -> None:
        from graphscale.distributed.launch import _stop

        if self.ok:
            for conn in self.conns:
                try:
                    conn.send(None)
                except OSError:
                    pass
            for p in self.procs:
                p.join(10)
        _stop(self.procs)
        shutil.rmtree(self.workdir, ignore_errors=True)


class WorkerPool:
    """A drop-in for the launcher's spawning step (``graphscale.distributed.launch._spawn``).

    Args:
        spawn: the launcher's own spawning function, used for what the pool does not reproduce and to repeat a
            failed run.
    """

    def __init__(self, spawn: Callable[..., list[Any]]) -> None:
        self._spawn = spawn
        self._pools: dict[tuple, _Pool] = {}
        #: runs served by the pool and runs handed to the launcher's spawning
        self.pooled = self.spawned = 0
        #: pools started (each spawns ``world_size`` interpreters; a world size not kept starts a new one)
        self.started = 0

    def __call__(self, fn: Callable, world_size: int, args: tuple, backend: str, kind: str, timeout_s: float,
                 allocator_mode: str) -> list[Any]:
        key = (world_size, allocator_mode)
        if kind != "cpu" or backend != "gloo":
            return self._spawned(fn, world_size, args, backend, kind, timeout_s, allocator_mode)
        try:
            pickle.dumps((fn, args))
        except Exception:  # noqa: BLE001 - the launcher raises its own clear error
            return self._spawned(fn, world_size, args, backend, kind, timeout_s, allocator_mode)
        pool = self._pools.get(key)
        if pool is not None and pool.start_env != _start_only_env(dict(os.environ)):
            return self._spawned(fn, world_size, args, backend, kind, timeout_s, allocator_mode)
        if pool is None:
            while len(self._pools) >= MAX_POOLS:
                self._pools.pop(next(iter(self._pools))).close()
            pool = _Pool(world_size, allocator_mode)
            self.started += 1
            if not pool.ok:
                pool.close()
                return self._spawned(fn, world_size, args, backend, kind, timeout_s, allocator_mode)
            self._pools[key] = pool
        try:
            results = pool.run(fn, args, timeout_s)
        except BaseException:  # (unpickling, Ctrl-C): other ranks' results may be unread; never reuse this pool
            pool.ok = False
            self._pools.pop(key).close()
            raise
        if results is None:  # repeat it where the launcher reports the failure as it always does
            self._pools.pop(key).close()
            return self._spawned(fn, world_size, args, backend, kind, timeout_s, allocator_mode)
        self.pooled += 1
        return results

    def _spawned(self, *args: Any) -> list[Any]:
        self.spawned += 1
        return self._spawn(*args)

    def close(self) -> None:
        """Stop every pool's workers."""
        while self._pools:
            self._pools.popitem()[1].close()

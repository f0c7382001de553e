"""The test suite's persistent worker pool: runs reuse spawned workers, each run sees what a spawned worker sees,
and whatever the pool does not reproduce, a failing run included, goes to the launcher's own spawning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from graphscale.distributed import launch
from graphscale.distributed.launch import WorkerError, remove_with_run
from graphscale.testing.pool import WorkerPool


def _real_spawn():
    spawn = launch._spawn
    return spawn._spawn if isinstance(spawn, WorkerPool) else spawn


def _probe(env, folder):
    mine = Path(folder) / f"rank{env.rank}"
    mine.mkdir()
    remove_with_run(mine)  # the pool removes it after the run, as the launcher does
    ledger_empty = env.ledger.total() == 0
    env.ledger.add("p2p", 8, peer=1 - env.rank)  # the next run's ledger must not see it
    return {"pid": os.getpid(), "rank": env.rank, "mark": os.environ.get("GRAPHSCALE_TEST_MARK"),
            "cwd": os.getcwd(), "ledger_empty": ledger_empty, "draw": torch.rand(3),
            "threads": torch.get_num_threads(), "registered_exists": mine.exists()}


def _raise_on_rank1(env):
    if env.rank == 1:
        raise ValueError("boom from the pool test")
    torch.distributed.barrier()
    return env.rank


def test_runs_reuse_the_workers_and_each_sees_a_fresh_worker_state(tmp_path, monkeypatch):
    pool = WorkerPool(_real_spawn())
    try:
        monkeypatch.setenv("GRAPHSCALE_TEST_MARK", "first")
        (tmp_path / "a").mkdir()
        first = pool(_probe, 2, (str(tmp_path / "a"),), "gloo", "cpu", 60, "default")
        monkeypatch.setenv("GRAPHSCALE_TEST_MARK", "second")
        monkeypatch.chdir(tmp_path)
        (tmp_path / "b").mkdir()
        second = pool(_probe, 2, (str(tmp_path / "b"),), "gloo", "cpu", 60, "default")
    finally:
        pool.close()
    assert pool.pooled == 2 and pool.spawned == 0
    assert [r["rank"] for r in first] == [r["rank"] for r in second] == [0, 1]
    assert [r["pid"] for r in first] == [r["pid"] for r in second]  # the same workers ...
    assert os.getpid() not in {r["pid"] for r in first} and len({r["pid"] for r in first}) == 2
    assert [r["mark"] for r in first + second] == ["first"] * 2 + ["second"] * 2  # ... with the caller's environment
    assert {r["cwd"] for r in second} == {str(tmp_path)}
    cpus = launch.cpu_count()
    for r in first + second:
        assert r["ledger_empty"] and r["registered_exists"] and r["threads"] == max(1, cpus // 2)
    for a, b in zip(first, second):
        assert torch.equal(a["draw"], b["draw"])  # torch's start-up random state, every run
    assert not any((tmp_path / d / f"rank{r}").exists() for d in "ab" for r in (0, 1))  # registered paths removed


def test_a_failing_run_is_repeated_by_the_launcher_and_raises_its_error():
    calls = []

    def spawn(*args):
        calls.append(args[1])
        return _real_spawn()(*args)

    pool = WorkerPool(spawn)
    try:
        with pytest.raises(WorkerError) as info:
            pool(_raise_on_rank1, 2, (), "gloo", "cpu", 30, "default")
        assert pool._pools == {}  # the failed pool was stopped
    finally:
        pool.close()
    assert info.value.rank == 1 and "ValueError: boom from the pool test" in str(info.value)
    assert calls == [2] and pool.spawned == 1 and pool.pooled == 0


def test_what_the_pool_does_not_reproduce_is_spawned(monkeypatch):
    calls = []
    pool = WorkerPool(lambda *args: calls.append(args[4:]) or ["spawned"])
    try:
        assert pool(_probe, 2, ("x",), "nccl", "cuda", 60, "default") == ["spawned"]  # no pool started for it
        assert pool(lambda env: 0, 2, (), "gloo", "cpu", 60, "default") == ["spawned"]  # not picklable
    finally:
        pool.close()
    assert calls == [("cuda", 60, "default"), ("cpu", 60, "default")]
    assert pool._pools == {} and pool.spawned == 2


def _timeouts(env):
    gloo = torch.distributed.group.WORLD._get_backend(torch.device("cpu"))
    return env.timeout.total_seconds(), gloo.options._timeout.total_seconds(), os.getpid()


def test_runs_with_different_timeouts_share_a_pool_and_each_gets_its_own():
    """The pool is keyed by world size and allocator only: a run's collective timeout is set on the pool's group
    before it runs (``_set_pg_timeout``), as the launcher creates its group with it."""
    pool = WorkerPool(_real_spawn())
    try:
        short = pool(_timeouts, 2, (), "gloo", "cpu", 7, "default")
        long = pool(_timeouts, 2, (), "gloo", "cpu", 600, "default")
    finally:
        pool.close()
    assert pool.started == 1 and pool.pooled == 2
    assert [r[:2] for r in short] == [(7.0, 7.0)] * 2 and [r[:2] for r in long] == [(600.0, 600.0)] * 2
    assert [r[2] for r in short] == [r[2] for r in long]


def _open_groups(env, make):
    from torch.distributed import distributed_c10d as c10d

    if make:
        torch.distributed.new_group([0, 1])
    return len(c10d._world.pg_map)


def test_a_runs_groups_are_destroyed_after_it():
    pool = WorkerPool(_real_spawn())
    try:
        during = pool(_open_groups, 2, (True,), "gloo", "cpu", 60, "default")
        after = pool(_open_groups, 2, (False,), "gloo", "cpu", 60, "default")
    finally:
        pool.close()
    assert during == [2, 2] and after == [1, 1]
    if pool.spawned:  # the pool's fallback: a pooled run that failed is repeated in spawned workers
        pytest.skip(f"a pooled run failed on this machine and was repeated in spawned workers ({pool.started} pools "
                    "started): the groups of a pool's earlier run were not observed")
    assert pool.started == 1 and pool.pooled == 2


@pytest.mark.spawn
def test_a_test_marked_spawn_spawns_its_runs():
    """The suite's fixture (tests/conftest.py) hands a ``spawn``-marked test the launcher's own spawning step."""
    assert not isinstance(launch._spawn, WorkerPool)


def test_an_unmarked_test_runs_in_the_pool():
    if os.environ.get("GRAPHSCALE_TEST_POOL", "1") == "0":
        pytest.skip("GRAPHSCALE_TEST_POOL=0: no pool")
    assert isinstance(launch._spawn, WorkerPool)

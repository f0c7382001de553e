"""Test-suite wide settings."""

from __future__ import annotations

import inspect
import os

import pytest

#: ``0`` runs every multi-worker run in freshly spawned workers (the launcher's own way); ``1``, the default, runs
#: the CPU ones in a persistent pool (graphscale/testing/pool.py)
POOL_ENV = "GRAPHSCALE_TEST_POOL"
_POOL_KEY = pytest.StashKey()
#: under pytest-xdist, the controller's sum of its worker processes' pool counts
_XDIST_COUNTS_KEY = pytest.StashKey()


def pytest_configure(config):
    """Under pytest-xdist, each test process runs its in-process runs on its share of the cores
    (``torch.set_num_threads``) instead of sizing its thread pool to the whole machine: two processes with two
    threads each oversubscribe a 2-core machine. (Spawned and pooled workers size theirs as the launcher does, the
    cores over the workers.)"""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    import torch

    from graphscale.distributed.launch import cpu_count

    torch.set_num_threads(max(1, cpu_count() // int(worker["workercount"])))


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Runs write their partition stores and graph directories into a cache directory: keep the suite's apart
    from the user's (``~/.cache/graphscale``)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path_factory.mktemp("graphscale-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def _worker_pool(request):
    """The launcher's spawning step, replaced for the session by a persistent worker pool (unless
    ``GRAPHSCALE_TEST_POOL=0``): the suite's many small multi-worker runs share spawned interpreters."""
    setting = os.environ.get(POOL_ENV, "1")
    if setting not in ("0", "1"):
        raise pytest.UsageError(f"{POOL_ENV}={setting!r}: expected 0 (spawn every run) or 1 (a persistent pool)")
    if setting == "0":
        yield None
        return
    from graphscale.distributed import launch
    from graphscale.testing.pool import WorkerPool

    pool = WorkerPool(launch._spawn)
    request.config.stash[_POOL_KEY] = pool
    mp = pytest.MonkeyPatch()
    mp.setattr(launch, "_spawn", pool)
    yield pool
    mp.undo()
    pool.close()
    if hasattr(request.config, "workeroutput"):  # a pytest-xdist worker: its counts go to the controller's summary
        request.config.workeroutput["worker_pool"] = (pool.pooled, pool.started, pool.spawned)


@pytest.fixture(autouse=True)
def _fresh_workers(request, _worker_pool):
    """Runs in freshly spawned workers, not the pool, for the tests that need them: the perf tier measures fresh
    workers (resident memory from their start, wall time with start-up), and a test marked ``spawn`` makes runs
    fail on purpose (a failed run stops its pool and is repeated in spawned workers: spawning it at once spares the
    failed attempt, a hung one's whole timeout, and the pool's restart by the next test)."""
    if _worker_pool is None or not any(request.node.get_closest_marker(m) for m in ("perf", "spawn")):
        yield
        return
    from graphscale.distributed import launch

    mp = pytest.MonkeyPatch()
    mp.setattr(launch, "_spawn", _worker_pool._spawn)
    yield
    mp.undo()


@pytest.fixture
def train_in_process():
    """:func:`graphscale.bench.tools.memory.train_once` without the fresh interpreter: the same ``graphscale train``
    arguments (``train_argv``) through ``cli.main`` in the test's process, its multi-worker runs in the suite's pool.
    For the tests of benches that check their grid and tables (``bench averaging``, ``bench advise``), not a fresh
    process's OS figures (``bench memory``'s tests keep the subprocess); each spared run is an interpreter, torch
    and its optimiser's compiler stack started (about 4 s of CPU). ``timeout`` is the subprocess's limit and has no
    in-process equivalent: the run's own collective timeout bounds a hang instead."""
    import contextlib
    import io
    import json
    import tempfile
    from pathlib import Path

    from graphscale.bench.tools.memory import train_argv
    from graphscale.cli import main

    def train_once(dataset, strategy, workers, epochs, model="gcn", hidden=None, device=None, extra=None,
                   timeout=900):
        with tempfile.TemporaryDirectory(prefix="graphscale-test-train-") as tmp:
            out = Path(tmp) / "report.json"
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(train_argv(dataset, strategy, workers, epochs, model, hidden, device, extra, out))
            if code != 0 or not out.exists():
                lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
                return {"error": f"exit {code}: {lines[-1] if lines else ''}"}
            return json.loads(out.read_text())

    return train_once


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: add up the pool counts of its worker processes (each has its own pool)."""
    mine = getattr(node, "workeroutput", {}).get("worker_pool", (0, 0, 0))
    counts = node.config.stash.setdefault(_XDIST_COUNTS_KEY, [0, 0, 0])
    for i, count in enumerate(mine):
        counts[i] += count


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """How many multi-worker runs the pool served and how many were spawned (over every xdist process)."""
    pool = config.stash.get(_POOL_KEY, None)
    counts = (pool.pooled, pool.started, pool.spawned) if pool is not None else config.stash.get(_XDIST_COUNTS_KEY, None)
    pooled, started, spawned = counts or (0, 0, 0)
    if pooled + spawned:
        terminalreporter.write_line(f"worker pool: {pooled} runs in pooled workers ({started} pools started), "
                                    f"{spawned} spawned")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped, with the reason, where torch sees no CUDA device. Under pytest-xdist
    (``scripts/test.sh`` runs ``pytest -n 2``) the tests marked ``slow`` come first, the rest in their usual order: the
    scheduler hands tests out in collection order, so the long ones start early and the short ones fill the two
    processes' ends evenly instead of one long test finishing alone."""
    import torch

    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts its (identical) collection the same way
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu: torch sees no CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _pyg_sequential_forward_restored():
    """PyG's ``Sequential`` compiles a forward per instance and also sets it as the class's ``forward``; an
    instance whose compilation fails (a layer defined in a module its template cannot import) then runs the last
    compiled one, another model's layer list. Each test starts with PyG's own generic forward."""
    sequential = _pyg_sequential_class()
    if sequential is None:
        yield
        return
    yield
    sequential.forward = _PYG_SEQUENTIAL_FORWARD


def _pyg_sequential_class():
    global _PYG_SEQUENTIAL_FORWARD
    try:
        from torch_geometric.nn.sequential import Sequential
    except ImportError:
        return None
    if _PYG_SEQUENTIAL_FORWARD is None:
        forward = Sequential.__dict__["forward"]
        if forward.__code__.co_filename != inspect.getsourcefile(Sequential):
            raise RuntimeError("torch_geometric's Sequential.forward was replaced before the first test")
        _PYG_SEQUENTIAL_FORWARD = forward
    return Sequential


_PYG_SEQUENTIAL_FORWARD = None

"""Memory that the OS confirms: the data path holds what the design says, per worker.

Each test runs real `graphscale train` runs (``graphscale.run.run``) and reads the workers' OS-measured
peaks from the report (anonymous resident memory, sampled by the trainer; ``baseline_anon`` is each
worker's anonymous memory at worker start, before it touched any data). The design figure is the
strategy's tracked peak (``peak_memory``: the tensors it keeps plus autograd's saved tensors, counting
every buffer of its inner + halo rows). No test compares the tracker with itself.

Margins (measured on a 2-core machine; 2M-vertex figures are in the issue's closing note):

* graph-parallel, per worker: ``anon <= 1.2 * (baseline + tracked)`` (measured 0.94-0.98 at this size,
  0.76-0.92 at 2M vertices) and ``anon - baseline >= 0.5 * tracked`` (the design is not a fiction); the
  largest worker's anonymous peak is at most 0.9x ``single``'s on the same graph (a worker that loaded the
  whole graph would hold at least as much as ``single``). Measured 0.77-0.79x here on an idle machine, up to
  0.80x under load, and 0.59x at 2M vertices with 4 workers, since keyed dropout is fused into the first dense
  product and ``single`` no longer holds a dropped copy of the features (before: 0.65x here, 0.47x at 2M);
* host-shared (data-parallel), the node data live once in the page cache: the workers' anonymous memory
  above their baselines, summed over both workers, stays below one copy of the node data (a copy per
  worker would be two; ``single``, which loads the graph, holds more than one). Each worker's fixed
  runtime (numba's compiled kernels, gloo, autograd) is about 110 MB above its baseline here. split-parallel
  stays below 1.5 copies, issue 9's bound (at this size the bound catches a per-worker copy of the node data;
  the per-worker evaluation buffers the 2M-vertex measurement found are too small here to matter).
* task-parallel against graph-parallel on the same graph and 4 workers (NeutronTask: no replicas, the graph streamed
  through every worker in subgraphs; paper: 49-67% less memory): the workers' anonymous memory above their
  baselines, summed, is at most 0.75x graph-parallel's (0.59-0.60x measured in 3 runs at this size, 0.55x at 200k
  vertices with hidden 16; both sums include the four workers' fixed runtime).

Over 10 perf-tier runs on the idle 2-core CI machine (``python -m graphscale.testing.perf_spread --runs 10``,
``d291b51``), min-max: graph-parallel anon / (base + tracked) 1.115-1.152 (bound 1.2), growth / tracked 1.16-1.21
(bound 0.5), largest worker / single 0.75-0.81 (bound 0.9); data-parallel 0.59-0.66 copies (bound 1), single
1.003; split-parallel 0.64-0.70 copies (bound 1.5); task-parallel / graph-parallel 0.60-0.63 (bound 0.75);
model-averaging p = 2 - p = 1 = -56 to -45 MiB, p = 8 - p = 2 = -132 to -127 MiB, OS drop 0.98-1.04 of the designed
drop (bound 0.5).

These bounds run in the serial perf tier (marker ``perf``). One perf-tier run on a 2-core machine under a load
average of about 30 measured: graph-parallel anon / (base + tracked) 1.13 (bound 1.2), growth / tracked 1.20
(bound 0.5), largest worker / single 0.81 (bound 0.9); data-parallel 0.62 copies (bound 1), single 1.00;
split-parallel 0.69 copies (bound 1.5); task-parallel / graph-parallel 0.63 (bound 0.75);
model-averaging below.
"""

from __future__ import annotations

import ctypes
import gc

import pytest

from graphscale.config import build_config
from graphscale.run import run

pytestmark = [pytest.mark.slow, pytest.mark.perf]  # OS-measured memory: the serial perf tier


def _run(dataset: str, strategy: str, workers: int, oversubscribe: bool = False, **strategy_options) -> dict:
    return run(build_config({"data": {"dataset": dataset}, "optim": {"epochs": 2}, "progress": False,
                             "oversubscribe": oversubscribe,
                             "strategy": {"name": strategy, "workers": workers, **strategy_options}}))


def _fresh_heap() -> None:
    """Give back to the OS the heap that earlier in-process runs of this (serial) tier freed (glibc's
    ``malloc_trim``), so that an in-process ``single`` run's growth above its baseline is its own: freed but
    resident heap counts in the baseline and is reused by the run without growing it."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _per_worker(report: dict) -> list[tuple[int, int, int]]:
    """``(peak anon, baseline anon, tracked peak)`` per worker, maxima over the epochs."""
    final = report["final"]
    return [(m["peak_anon"], m["baseline_anon"], t)
            for m, t in zip(final["os_memory_per_worker"], final["peak_memory_per_worker"])]


def test_graph_parallel_workers_hold_their_part_as_designed(record_property):
    dataset = "sbm:nodes=300000,degree=10,features=128,seed=0"
    single_anon = _per_worker(_run(dataset, "single", 1))[0][0]
    workers = _per_worker(_run(dataset, "graph-parallel", 2))
    record_property("anon_over_base_plus_tracked", max(a / (b + t) for a, b, t in workers))
    record_property("growth_over_tracked", min((a - b) / t for a, b, t in workers))
    record_property("worker_over_single", max(a for a, _, _ in workers) / single_anon)
    for anon, base, tracked in workers:
        assert anon <= 1.2 * (base + tracked), (anon, base, tracked)
        assert anon - base >= 0.5 * tracked, (anon, base, tracked)
    assert max(anon for anon, _, _ in workers) <= 0.9 * single_anon, (workers, single_anon)


def test_host_shared_workers_share_one_copy_of_the_node_data(record_property):
    dataset = "sbm:nodes=40000,degree=8,features=4096,seed=0"  # node data (655 MB) dominate the runtime
    node_bytes = 40000 * 4096 * 4
    _fresh_heap()
    single = _per_worker(_run(dataset, "single", 1))[0]
    assert single[0] - single[1] > node_bytes
    workers = _per_worker(_run(dataset, "data-parallel", 2, batch_size=64, fanouts=[5, 5]))
    record_property("single_growth_over_node_bytes", (single[0] - single[1]) / node_bytes)
    record_property("workers_growth_over_node_bytes", sum(anon - base for anon, base, _ in workers) / node_bytes)
    assert sum(anon - base for anon, base, _ in workers) < node_bytes, workers


def test_split_parallel_workers_share_one_copy_of_the_node_data(record_property):
    """Issue 9's bound at a size where the node data dominate: split-parallel's workers' anonymous memory above
    their baselines, summed over training and evaluation, stays below 1.5 copies of the node data (a copy per
    worker would be two; measured 0.6x here, on a loaded 2-core machine)."""
    dataset = "sbm:nodes=40000,degree=8,features=4096,seed=0"
    node_bytes = 40000 * 4096 * 4
    workers = _per_worker(_run(dataset, "split-parallel", 2, batch_size=64, fanouts=[5, 5]))
    record_property("workers_growth_over_node_bytes", sum(anon - base for anon, base, _ in workers) / node_bytes)
    assert sum(anon - base for anon, base, _ in workers) < 1.5 * node_bytes, workers


def test_model_averaging_memory_follows_one_partition_not_p_over_q(tmp_path, monkeypatch, record_property):
    """SDT-GNN's promise, measured by the OS: a worker holds one partition at a time, so its resident peak above
    its start falls as p grows at fixed q (8 partitions on one worker need no more than 2) and the drop from
    p = 1 accounts for at least half of the designed drop (the tracked peaks). Resident memory of both kinds: a
    partition's features are memory-mapped from the store (file-backed pages), and no layer makes an anonymous
    copy of them (dropout is fused into the first product), so the partition shows in the file-backed part.

    Evaluation is the default, exact one: layer by layer, the first layer on each partition's own store in turn,
    so it holds one partition's rows plus one hop of hidden rows (before it was layer-wise it held every home
    vertex's L-hop input rows, and this test ran with ``--evaluation truncated``)."""
    from graphscale.bench.tools.memory import train_once

    monkeypatch.setenv("GRAPHSCALE_CACHE_DIR", str(tmp_path))
    # 246 MB of features: the partitions' data must dominate the worker's fixed runtime (numba's compiled
    # kernels, autograd), whose memory varies by about 50 MB from run to run.
    dataset = "sbm:nodes=60000,degree=8,features=1024,seed=0"

    def above(parts: int, workers: int) -> tuple[list[int], list[int]]:
        report = train_once(dataset, "model-averaging", workers, 2,
                            extra=["--parts", str(parts)])
        final = report["final"]
        return ([m["peak_rss"] - m["baseline_rss"] for m in final["os_memory_per_worker"]],
                final["peak_memory_per_worker"])

    noise = 50 * 2**20  # the run-to-run spread of a worker's fixed runtime (numba's kernels, autograd)
    (one,), (tracked_one,) = above(1, 1)
    (two,), _ = above(2, 1)
    (eight,), (tracked_eight,) = above(8, 1)
    record_property("p8_minus_p2_mib", (eight - two) / 2**20)
    record_property("p2_minus_p1_mib", (two - one) / 2**20)
    record_property("drop_over_tracked_drop", (one - eight) / (tracked_one - tracked_eight))
    # p = 8 needs no more than p = 2, which needs no more than p = 1, within the noise of the fixed runtime; a worker
    # holding every partition (the defect) would need at least p = 1's memory at p = 8, 210 MiB above p = 2's.
    assert eight <= two + noise and two <= one + noise, (one, two, eight)
    assert eight < one - noise, (one, eight)
    # Measured: resident above start 435 MiB at p = 1, 348 at p = 2, 225 at p = 8; tracked 245, 177, 67 MiB:
    # the OS drop is 117% of the designed drop. Perf tier on a loaded 2-core machine (2 runs): p = 2 - p = 1 = -66
    # and -69 MiB, p = 8 - p = 2 = -126 and -120 MiB, OS drop 108% and 106% of the designed drop; over 10 runs on the
    # idle CI machine: -56 to -45 MiB, -132 to -127 MiB, 98% to 104% (module docstring). (Before dropout was fused into the first dense product, the
    # anonymous dropped copy of the features carried the drop: 371-382 / 300-302 / 171-174 MB anonymous.)
    assert one - eight >= 0.5 * (tracked_one - tracked_eight), (one, eight, tracked_one, tracked_eight)


def test_task_parallel_workers_hold_no_more_than_graph_parallel_workers(record_property):
    """NeutronTask's memory promise, measured by the OS: task-parallel's T worker reads one subgraph's rows at a
    time from the host-shared (memory-mapped, not anonymous) features, its P workers keep vertex rows at the output
    width. Graph-parallel workers exchange projected rows (16 wide, not the 1,024 features), so they no longer hold
    the replicated halo's feature rows either; the two hold about the same."""
    dataset = "sbm:nodes=20000,degree=16,features=1024,seed=0"  # 82 MB of features, highly replicated halos

    def above(strategy: str) -> list[int]:
        return [anon - base for anon, base, _ in _per_worker(_run(dataset, strategy, 4, oversubscribe=True))]

    gp, tp = above("graph-parallel"), above("task-parallel")
    record_property("task_over_graph_parallel", sum(tp) / sum(gp))
    # Measured (perf tier on a loaded 2-core machine, 2 runs): task-parallel 1.08x graph-parallel's (480 against
    # 446 MB over 4 workers); 0.75x or less while graph-parallel exchanged its 1,024-wide input rows. A task-parallel
    # worker holding every feature row would add 82 MB per worker (about 1.8x).
    assert sum(tp) <= 1.25 * sum(gp), (tp, gp)

"""Accuracy of every approximate strategy against ``single`` on Cora (test accuracy at the best validation epoch,
the mean over seeds; the same seeds for both sides). The spreads in the docstrings were measured on the 2-core
development machine; the bounds are the issue's.

Marked ``accuracy``, which the default run deselects (``pyproject.toml``): the three took 28 minutes on the 2-core
machine (430 s, 216 s, 1,019 s), more than the rest of the suite. Run them with ``pytest -m accuracy``."""

from __future__ import annotations

import statistics

import pytest
import torch

from graphscale.config import build_config
from graphscale.run import run

pytestmark = [pytest.mark.slow, pytest.mark.accuracy]


@pytest.fixture
def one_thread():
    """Cora is too small to gain from threads; one thread per process keeps these steady on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def cora(seed: int, epochs: int, model: dict, strategy: dict, cache_dir) -> dict:
    config = build_config({"model": model, "optim": {"epochs": epochs}, "seed": seed, "strategy": strategy,
                           "progress": False, "cache_dir": str(cache_dir), "oversubscribe": True})
    return run(config)["final"]


def mean_test(seeds, epochs, model, strategy, cache_dir) -> tuple[float, list[float]]:
    accs = [cora(s, epochs, model, strategy, cache_dir)["test_acc"] for s in seeds]
    print(f"{strategy['name']}: {accs}")  # shown with -s: the numbers the docstrings quote
    return statistics.mean(accs), accs


def test_model_averaging_defaults_are_within_one_point_of_single(tmp_path, one_thread):
    """`graphscale train --strategy model-averaging --partitions DIR --workers 2` (DIR: 4 SPRING parts of Cora, the
    partition command's defaults, so edge-balanced), no other flags (200 epochs, Adam's moments averaged, exact
    evaluation), against `single`, seeds 0-2 (7 minutes on the 2 shared cores under load).

    Measured (single / model-averaging): seed 0 0.818 / 0.809, seed 1 0.813 / 0.822, seed 2 0.831 / 0.821; means
    0.821 / 0.817 (-0.3 points; per seed -1.0 to +0.9). Seeds 3-4: 0.820 / 0.820, 0.813 / 0.814 (5-seed mean
    -0.2). With the second moments averaged as they are (before ``moments_of_mean_gradient``) seeds 0-2 gave 0.820 /
    0.795 / 0.810 (-1.2 points: this test failed), with `--optimizer-state local` 0.619 / 0.560 / 0.634 (-21.6
    points)."""
    from graphscale.cli import main

    store = tmp_path / "cora4"
    assert main(["partition", "--dataset", "cora", "--method", "spring", "--parts", "4", "--out", str(store),
                 "--no-progress"]) == 0
    seeds, model = range(3), {"name": "gcn"}
    single, singles = mean_test(seeds, 200, model, {"name": "single"}, tmp_path)
    strategy = {"name": "model-averaging", "partitions": str(store), "workers": 2}
    averaged, averageds = mean_test(seeds, 200, model, strategy, tmp_path)
    assert abs(averaged - single) <= 0.01, (singles, averageds)


def test_task_parallel_decoupled_gcn_is_within_one_point_of_single_decoupled(tmp_path, one_thread):
    """`graphscale train --strategy task-parallel --workers 4 --oversubscribe` (decoupled GCN, 2 T + 2 P, causal,
    METIS chunks) against `single --decoupled on`, 100 epochs, seeds 0-2 (3.6 minutes measured on the 2 shared
    cores).

    Measured (single decoupled / task-parallel test accuracy at the best validation epoch of the first 100):
    seed 0 0.827 / 0.829, seed 1 0.815 / 0.818, seed 2 0.828 / 0.828; means 0.823 / 0.825 (+0.2 points; per-seed
    gaps 0 to +0.3). At 200 epochs: 0.826 / 0.824 (-0.2; per seed -0.7 to +0.2)."""
    seeds, model = range(3), {"name": "gcn", "decoupled": "on"}
    single, singles = mean_test(seeds, 100, model, {"name": "single"}, tmp_path)
    parallel, parallels = mean_test(seeds, 100, model, {"name": "task-parallel", "workers": 4}, tmp_path)
    assert abs(parallel - single) <= 0.01, (singles, parallels)


def test_pipeline_gcnii_16_on_4_stages_is_within_two_points_of_single(tmp_path, one_thread):
    """`graphscale train --strategy pipeline --workers 4 --model gcnii --layers 16 --oversubscribe` (GNNPipe: 4
    stages, 16 chunks, historical embeddings refreshed every 10 epochs) against `single`, 200 epochs, seeds 0-2
    (17 minutes measured on the 2 shared cores under load).

    Measured (single / pipeline test accuracy at the best validation epoch): seed 0 0.781 / 0.785, seed 1 0.804 /
    0.810, seed 2 0.770 / 0.800; means 0.785 / 0.798 (+1.3 points; per seed +0.4 to +3.0). At 100 epochs the
    per-seed gaps were -2.4 to +4.0 (GCNII-16 is still climbing), hence 200."""
    seeds, model = range(3), {"name": "gcnii", "layers": 16}
    single, singles = mean_test(seeds, 200, model, {"name": "single"}, tmp_path)
    pipeline, pipelines = mean_test(seeds, 200, model, {"name": "pipeline", "workers": 4}, tmp_path)
    assert abs(pipeline - single) <= 0.02, (singles, pipelines)

"""Where offload's host arrays live: shared memory within the host budget, disk files beyond it, the graph's own
mapped features as the input array; the run is the same wherever they are."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.offload import OffloadStrategy, host
from graphscale.testing import random_graph, run_distributed


def test_arrays_stay_in_shared_memory_within_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "free_bytes", lambda path: 10**12)
    shm = host.DEFAULT_SHM_DIR
    assert host.array_directory(shm, 1000, 2, budget=1000, spill_dir=str(tmp_path)) == (shm, True)
    assert host.array_directory(shm, 1000, 2, budget=None, spill_dir=str(tmp_path)) == (shm, True)
    # each of 2 workers' share (2,000 bytes) exceeds half its 1,000-byte budget: disk
    assert host.array_directory(shm, 4000, 2, budget=1000, spill_dir=str(tmp_path / "o")) == (str(tmp_path / "o"),
                                                                                              False)
    assert (tmp_path / "o").is_dir()
    monkeypatch.setattr(host, "free_bytes", lambda path: 10)  # a full /dev/shm: disk too
    assert host.array_directory(shm, 1000, 2, budget=None, spill_dir=str(tmp_path)) == (str(tmp_path), False)
    # a --shm-dir the user chose is used as given
    assert host.array_directory(str(tmp_path), 4000, 2, budget=1, spill_dir="/nowhere") == (str(tmp_path), True)


def test_arrays_the_kernel_cannot_keep_are_advised_random(tmp_path, monkeypatch):
    """Spilled arrays, and an external input above a worker's share of the budget, are advised MADV_RANDOM (a
    missed row reads its own page); arrays in shared memory and a small input are not."""
    monkeypatch.setattr(host, "free_bytes", lambda path: 10**12)
    advised = []
    monkeypatch.setattr(host, "advise_random", lambda t: advised.append(tuple(t.shape)) or True)
    comm = Comm(DistEnv.local())
    specs = {"H0": (64, 8), "H1": (64, 4), "G1": (64, 4)}
    x = torch.zeros(64, 8)  # 2,048 bytes
    arrays = host.HostArrays(comm, specs, torch.float32, torch.device("cpu"), host.DEFAULT_SHM_DIR,
                             external={"H0": x}, budget=10**6, spill_dir=str(tmp_path))
    assert arrays.in_memory and arrays.advised == () and advised == []
    arrays.close()
    arrays = host.HostArrays(comm, specs, torch.float32, torch.device("cpu"), host.DEFAULT_SHM_DIR,
                             external={"H0": x}, budget=3000, spill_dir=str(tmp_path))  # 2,048 > 1,500: disk
    assert not arrays.in_memory and sorted(arrays.advised) == ["G1", "H0", "H1"]
    assert sorted(advised) == [(64, 4), (64, 4), (64, 8)]
    arrays.close()
    advised.clear()
    arrays = host.HostArrays(comm, {"H0": (64, 8), "H1": (2, 2)}, torch.float32, torch.device("cpu"),
                             host.DEFAULT_SHM_DIR, external={"H0": x}, budget=4000, spill_dir=str(tmp_path))
    assert arrays.in_memory and arrays.advised == ("H0",)  # the input exceeds half the budget, H1 fits
    arrays.close()


def _run(env: DistEnv, host_memory: str, cache: str, model_dtype: torch.dtype) -> dict:
    torch.set_num_threads(1)
    graph = random_graph(90, avg_degree=4.0, num_features=5, num_classes=3, seed=1, dtype=torch.float32)
    config = RunConfig(model=ModelConfig(name="gcn", hidden=4, layers=2, dropout=0.5),
                       optim=OptimConfig(lr=0.01), strategy=StrategyConfig(name="offload", workers=env.world_size,
                                                                           partitioner="random", chunks=2),
                       seed=0, host_memory=host_memory, cache_dir=cache)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=model_dtype)
    strategy = OffloadStrategy()
    strategy.setup(prepare_graph(graph, config, cache), model, env, config)
    losses = [strategy.train_epoch(e).loss for e in range(2)]
    out = {"losses": losses, "params": [p.detach().clone() for p in model.parameters()],
           "in_memory": strategy.host.in_memory, "external": sorted(strategy.host.external),
           "advised": sorted(strategy.host.advised), "names": sorted(strategy.host.arrays),
           "nbytes": strategy.host.nbytes()}
    strategy.teardown()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("model_dtype", [torch.float32, torch.float64])
def test_arrays_spilled_to_disk_train_equal_to_shared_memory(tmp_path, model_dtype):
    """A 1 KiB budget puts the arrays in the cache directory on disk; the run's losses and parameters equal the
    shared-memory run's bit for bit. float32: the graph's mapped features are the input array (not counted);
    float64: the input rows are copied in the model's dtype."""
    ref = run_distributed(_run, 2, "", str(tmp_path / "a"), model_dtype)
    spilled = run_distributed(_run, 2, "1KiB", str(tmp_path / "b"), model_dtype)
    for r, s in zip(ref, spilled):
        assert r["in_memory"] and not s["in_memory"]
        assert s["losses"] == r["losses"]
        for p, q in zip(s["params"], r["params"]):
            assert torch.equal(p, q)
        expected = ["H0"] if model_dtype == torch.float32 else []
        assert r["external"] == s["external"] == expected
        assert r["advised"] == [] and s["advised"] == s["names"]  # disk files (and the 1.8 KB input) read at random
        assert s["nbytes"] == r["nbytes"]
    assert list((tmp_path / "b" / "offload").iterdir()) == []  # the files were unlinked once mapped

"""The CUDA path of every strategy and of the kernels, against the same run on CPU (marker ``gpu``: skipped where
torch sees no CUDA device; ``pytest -m gpu`` on a GPU machine runs them).

Every multi-worker case runs twice on CUDA: with gloo, the workers sharing the GPUs (``--backend gloo``: every
transfer staged through host memory; runs on one GPU), and with NCCL where the machine has a GPU per worker
(``--backend nccl``: only device tensors can be sent or reduced, so a buffer, a loss or a count left on the host
fails there; skipped with fewer GPUs than workers). float64 on both devices: the losses, accuracies and bytes of
every epoch agree within the float64 tolerance (summation order differs between the numba kernels on CPU and
torch's sparse kernels on CUDA).
"""

from __future__ import annotations

import pytest
import torch

from graphscale.config import build_config
from graphscale.data.block import Block
from graphscale.data.datasets import load_dataset
from graphscale.nn.models import build_model
from graphscale.registry import MODELS, STRATEGIES
from graphscale.run import run
from graphscale.testing import assert_close_rel

#: (strategy, workers, strategy options): every registered strategy, one or more ways
CASES = [("single", 1, {}), ("graph-parallel", 2, {}), ("offload", 1, {}), ("offload", 2, {}),
         ("data-parallel", 2, {"batch_size": 256}), ("split-parallel", 2, {"batch_size": 256}),
         ("model-averaging", 2, {}), ("model-averaging", 2, {"optimizer_state": "local"}), ("pipeline", 2, {}),
         ("task-parallel", 2, {})]
#: (case, backend) of the CUDA runs: single-worker cases with the default, multi-worker ones with gloo and NCCL
RUNS = [(case, backend) for case in CASES for backend in (("auto",) if case[1] == 1 else ("gloo", "nccl"))]


def _run_id(case: tuple, backend: str) -> str:
    name, workers, options = case
    named = [k if options[k] is True else f"{k}-{options[k]}" for k in sorted(options)
             if options[k] is True or isinstance(options[k], str)]
    return "-".join([name, str(workers), *(k.replace("_", "-") for k in named),
                     *([] if backend == "auto" else [backend])])


def test_every_strategy_has_a_cuda_case():
    """A new strategy gets a CUDA case here (runs on every machine)."""
    assert {name for name, _, _ in CASES} == set(STRATEGIES.names())


def _report(device: str, name: str, workers: int, options: dict, backend: str = "auto") -> dict:
    config = build_config({"strategy": {"name": name, "workers": workers, **options}, "optim": {"epochs": 3},
                           "dtype": "float64", "device": device, "backend": backend, "progress": False,
                           "oversubscribe": True})
    return run(config)


@pytest.mark.gpu
@pytest.mark.parametrize("case, backend", RUNS, ids=[_run_id(c, b) for c, b in RUNS])
def test_strategy_on_cuda_equals_cpu(case, backend):
    name, workers, options = case
    if backend == "nccl" and torch.cuda.device_count() < workers:
        pytest.skip(f"NCCL needs a GPU per worker: {workers} workers, {torch.cuda.device_count()} GPU(s)")
    cpu = _report("cpu", name, workers, options)  # gloo on the host
    cuda = _report("cuda", name, workers, options, backend)
    for got, want in zip(cuda["epochs"], cpu["epochs"], strict=True):
        for key in ("loss", "train_acc", "val_acc", "test_acc"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-10), key
        assert got["bytes"] == want["bytes"]


@pytest.mark.gpu
@pytest.mark.parametrize("model_name", sorted(MODELS.names()))
def test_model_forward_and_gradients_on_cuda_equal_cpu(model_name):
    """The kernels' CUDA path (torch sparse / index ops) against the numba CPU path on the whole of Cora."""
    graph = load_dataset("cora")
    x = graph.x.double()
    results = {}
    for device in ("cpu", "cuda"):
        config = build_config({"model": {"name": model_name}, "dtype": "float64"}).model
        model = build_model(config, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64).to(device)
        model.train()
        model.set_epoch(0)
        block = Block.full(graph).to(device)
        logits = model.forward(block, x.to(device))
        logits.square().sum().backward()
        results[device] = (logits.detach().cpu(), [p.grad.cpu() for p in model.parameters()])
    assert_close_rel(results["cuda"][0], results["cpu"][0], torch.float64, what=f"{model_name} logits")
    for g, g_ref in zip(results["cuda"][1], results["cpu"][1], strict=True):
        assert_close_rel(g, g_ref, torch.float64, what=f"{model_name} gradient")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_keyed_dropout_on_cuda_gives_the_cpu_kernels_bits(dtype):
    """The CUDA implementation of ``graphscale::keyed_dropout`` (one ``torch.compile``d kernel) keeps, drops and
    scales exactly as the numba kernel on CPU; so does its in-place form and the attention dropout's keep op."""
    from graphscale.data.hashing import site_state
    from graphscale.nn import fused

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5001, 130, dtype=dtype, generator=gen)
    ids = torch.randperm(20000, generator=gen)[:5001]
    h = site_state(3, 2, 1)
    want = fused.keyed_dropout(x, ids, 0.4, h)
    got = fused.keyed_dropout(x.cuda(), ids.cuda(), 0.4, h).cpu()
    as_int = torch.int64 if dtype == torch.float64 else torch.int32
    assert torch.equal(got.view(as_int), want.view(as_int))
    inplace = x.cuda()
    fused.keyed_dropout_(inplace, ids.cuda(), 0.4, h)
    assert torch.equal(inplace.cpu().view(as_int), want.view(as_int))
    dst, src = ids[:3000], ids[1:3001]
    assert torch.equal(fused.edge_keep(dst.cuda(), src.cuda(), 4, 0.3, h).cpu(), fused.edge_keep(dst, src, 4, 0.3, h))


@pytest.mark.gpu
def test_bench_device_on_cuda_issues_the_cpu_traces_ops():
    """The device path issues the same ops per epoch on CUDA as on CPU tensors (what the CPU tests count), and
    its peak device memory stays below PyG-CSR's."""
    from graphscale.bench.peers.device import bench_data, run_system

    data = bench_data(load_dataset("sbm:nodes=20000,degree=10,features=128"))
    cpu = run_system("graphscale", data, "cpu", 128, 0.5, warmup=1, repeats=1)
    cuda = run_system("graphscale", data, "cuda", 128, 0.5, warmup=2, repeats=3)
    pyg = run_system("pyg-csr", data, "cuda", 128, 0.5, warmup=2, repeats=3)
    assert cuda["ops"] == cpu["ops"]
    assert cuda["launches"] is not None and cuda["launches"] > 0
    assert cuda["peak"] < pyg["peak"]

"""The device kernel backend (``GRAPHSCALE_KERNELS=torch``) checked on CPU tensors: operator calls per training
epoch, the traced peak of live tensor bytes against PyG-CSR's, and its keyed-dropout kernels bit for bit against
the CPU backend's. The counts and bytes depend on the program and the shapes only, so they are those of a CUDA
run (``tests/gpu`` compares the values on a GPU)."""

from __future__ import annotations

import pytest
import torch

from graphscale.bench.peers.device import bench_data, run_system
from graphscale.config import ModelConfig
from graphscale.data.block import Block
from graphscale.data.datasets import load_dataset
from graphscale.data.hashing import _threshold, site_state
from graphscale.metrics.trace import OpTrace
from graphscale.nn import backend, fused
from graphscale.nn.dropout import block_edge_keep_mask, edge_keep_mask
from graphscale.nn.models import build_model
from graphscale.testing.graphs import random_graph

#: The issue's budget for a 2-layer GCN training epoch (forward, loss, backward, Adam step): PyG-CSR's is 79 ops
#: here (96 on a GPU with its default optimiser); graphscale's measured 94 (20 of them the four row chunks of the
#: fused hidden product's backward).
GCN_EPOCH_OPS = 120


def _sbm(n: int) -> dict:
    return bench_data(load_dataset(f"sbm:nodes={n},degree=10,features=128"))


@pytest.fixture(scope="module")
def gcn_runs():
    """The bench's measurement of graphscale and PyG-CSR on two graph sizes (one warm-up epoch, one traced)."""
    pytest.importorskip("torch_geometric")
    runs = {}
    for n in (1500, 6000):
        data = _sbm(n)
        for system in ("graphscale", "pyg-csr"):
            runs[system, n] = run_system(system, data, "cpu", 128, 0.5, warmup=1, repeats=1)
    return runs


def test_a_gcn_epoch_issues_a_fixed_small_number_of_ops(gcn_runs):
    """At most :data:`GCN_EPOCH_OPS` operator calls per epoch, the same on 1,500 and 6,000 vertices: no loop over
    row blocks on the device path."""
    small, large = gcn_runs["graphscale", 1500]["ops"], gcn_runs["graphscale", 6000]["ops"]
    assert small == large <= GCN_EPOCH_OPS


def test_a_gcn_epoch_keeps_at_most_half_pyg_csrs_live_bytes(gcn_runs):
    """The traced peak of live tensor bytes above the inputs: graphscale 2.34-2.47 ``[N, 128]`` float32 tensors
    (the aggregation and the dropped hidden rows its weight gradients need, plus a quarter of the hidden gradient),
    PyG-CSR 5.07-5.13. Deterministic (shapes and program only); the issue's bound is 0.7x, this one 0.5x, which
    fails without the chunked backward of ``linear_relu_linear`` (0.61x)."""
    for n in (1500, 6000):
        ratio = gcn_runs["graphscale", n]["traced peak"] / gcn_runs["pyg-csr", n]["traced peak"]
        assert ratio <= 0.5, (n, ratio)


def test_the_device_path_trains_the_same_model(gcn_runs):
    """Both systems train the same 2-layer GCN: their losses after two epochs agree to a few percent (different
    dropout masks and initialisations, same model)."""
    for n in (1500, 6000):
        assert gcn_runs["graphscale", n]["loss"] == pytest.approx(gcn_runs["pyg-csr", n]["loss"], rel=0.1)


#: Operator calls per additional layer of each model on the device path (measured: gcn 27, sage 42, gcnii 28,
#: resgcn 36, gat with 8 heads 331: its attention products take one sparse product and one sampled product per
#: head); a budget a little above each.
OPS_PER_LAYER = {"gcn": 32, "sage": 48, "gcnii": 32, "resgcn": 40, "gat": 360}


def _model_epoch_ops(name: str, n: int, layers: int) -> int:
    g = random_graph(n, 6.0, num_features=12, num_classes=4, seed=1)
    block = Block.full(g)
    model = build_model(ModelConfig(name=name, hidden=16, layers=layers, dropout=0.5), 12, 4, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=True)

    def epoch(i: int) -> None:
        model.train()
        model.set_epoch(i)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(block, g.x)[g.train_mask], g.y[g.train_mask])
        loss.backward()
        opt.step()

    epoch(0)  # builds the cached operators
    with OpTrace() as trace:
        epoch(1)
    return trace.total


@pytest.mark.parametrize("name", sorted(OPS_PER_LAYER))
def test_every_model_issues_ops_independent_of_the_graph_size(name, monkeypatch):
    monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    ops = {(n, layers): _model_epoch_ops(name, n, layers) for n in (200, 2000) for layers in (2, 3)}
    assert ops[200, 2] == ops[2000, 2] and ops[200, 3] == ops[2000, 3], ops
    assert 0 < ops[200, 3] - ops[200, 2] <= OPS_PER_LAYER[name], ops


def test_the_device_backend_is_picked_by_the_environment(monkeypatch):
    x = torch.zeros(2, 2)
    monkeypatch.delenv("GRAPHSCALE_KERNELS", raising=False)
    assert backend.uses_numba(x)
    assert not backend.uses_numba(x.bfloat16())  # a dtype numba does not handle
    monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    assert not backend.uses_numba(x)
    monkeypatch.setenv("GRAPHSCALE_KERNELS", "numbaa")
    with pytest.raises(ValueError, match=r"GRAPHSCALE_KERNELS='numbaa' is not a kernel backend: expected one of auto"):
        backend.uses_numba(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_device_dropout_chain_gives_the_cpu_kernels_bits(dtype):
    """:func:`fused.dropout_chain` (what ``torch.compile`` fuses into one kernel on a GPU) keeps, drops and scales
    exactly as the numba kernel, sign of zero included. (The compiled chain was checked bit for bit on CPU by
    hand: float32 and float64, 1000 x 70 and 333 x 129; compiling on CPU took minutes on the 2-core machine, too
    long for the suite; ``tests/gpu`` checks the CUDA kernel.)"""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(301, 70, dtype=dtype, generator=gen)
    ids = torch.randperm(5000, generator=gen)[:301]
    h_site, p = site_state(3, 2, 1), 0.4
    want = fused.node_dropout_into(x, ids, p, h_site)
    got = fused.dropout_chain(x, ids, h_site, _threshold(p), 1 / (1 - p), torch.empty_like(x))
    assert torch.equal(got.view(torch.int64 if dtype == torch.float64 else torch.int32),
                       want.view(torch.int64 if dtype == torch.float64 else torch.int32))


def test_the_dropout_op_is_one_op_with_its_backward():
    x = torch.randn(40, 9, dtype=torch.float64, requires_grad=True)
    ids = torch.arange(40) * 3
    with OpTrace() as trace:
        y = fused.keyed_dropout(x, ids, 0.3, site_state(1, 2, 3))
        (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert trace.ops["graphscale.keyed_dropout.default"] == 2  # forward, and the same op on the gradient
    torch.testing.assert_close(g, (y != 0).double() / 0.7)
    torch.library.opcheck(torch.ops.graphscale.keyed_dropout.default, (x, ids, 0.3, site_state(1, 2, 3)))


def test_edge_keep_op_equals_the_cpu_block_kernel(monkeypatch):
    g = random_graph(80, 5.0, num_features=4, num_classes=2, seed=2)
    block = Block.full(g)
    want = block_edge_keep_mask(block, block.src_ids, 3, 0.3, 5, 1, 2, num_self=80)
    monkeypatch.setenv("GRAPHSCALE_KERNELS", "torch")
    got = block_edge_keep_mask(Block(block.indptr, block.indices, block.src_ids, block.src_deg), block.src_ids, 3,
                               0.3, 5, 1, 2, num_self=80)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    dst = torch.repeat_interleave(torch.arange(80), block.indptr[1:] - block.indptr[:-1])
    assert torch.equal(edge_keep_mask(dst, block.indices, 3, 0.3, 5, 1, 2), want[0])


def test_an_unknown_kernel_backend_is_refused_before_training(monkeypatch):
    from graphscale.config import build_config
    from graphscale.validation import validate

    monkeypatch.setenv("GRAPHSCALE_KERNELS", "cuda")
    with pytest.raises(ValueError, match=r"GRAPHSCALE_KERNELS='cuda' is not a kernel backend"):
        validate(build_config({"optim": {"epochs": 1}}))


def test_a_run_that_does_not_fit_the_device_names_the_fixes():
    from graphscale.config import build_config
    from graphscale.run import device_memory_message

    line = device_memory_message(torch.device("cuda", 0), build_config({}),
                                 torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB\nmore"))
    assert "\n" not in line and "does not fit in the memory of cuda:0" in line and "--strategy offload" in line

"""Device placement of task-parallel and model-averaging, checked without a GPU (issue 24, item 5).

On a CPU-only machine every tensor lands on the CPU whether or not the code names a device, so a run cannot show
that a buffer would be created on the host under ``--device cuda``. What can be checked is the code's own calls:
every tensor *factory* (``torch.zeros``, ``empty``, ``tensor`` ...) the strategies' modules call while a worker
sets up, trains, evaluates and checkpoints must say where the tensor lives (``device=``: the run's device, or the
host for the routing tables that index the host-shared graph). A factory without a device is a CPU tensor under
CUDA: a receive buffer, a view or a reduced loss that NCCL refuses or that mixes devices.

And the memory claim of task-parallel's hybrid P groups: a member holds its own rows and the rows its blocks read
(its mirrors), not ``N`` rows per layer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

import graphscale
from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.task_parallel.chain import num_chunks, resolve_plan
from graphscale.strategies.task_parallel.chunks import assign_chunks, layout
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy
from graphscale.testing import random_graph, run_distributed

ROOT = Path(graphscale.__file__).resolve().parent
#: the modules whose factory calls must name a device (what runs in a worker's setup, epochs and checkpoints)
GUARDED = {ROOT / "strategies" / "task_parallel" / name for name in ("strategy.py", "exchange.py", "checkpoint.py",
                                                                      "chain.py")}
GUARDED |= {ROOT / "strategies" / "model_averaging" / name for name in ("strategy.py", "averaging.py",
                                                                         "correction.py", "evaluation.py")}
FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.arange, torch.tensor, torch.as_tensor,
             torch.rand, torch.randn, torch.randint, torch.eye, torch.linspace, torch.empty_strided}
TORCH = Path(torch.__file__).resolve().parent


class DevicelessFactories(TorchFunctionMode):
    """Records ``(file, line, factory)`` of every factory call made without a ``device`` from a guarded module
    (the first frame outside torch is the caller)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, int, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(TORCH):
                frame = frame.f_back
            if frame is not None and Path(frame.f_code.co_filename).resolve() in GUARDED:
                path = Path(frame.f_code.co_filename).resolve().relative_to(ROOT.parent)
                self.found.append((str(path), frame.f_lineno, func.__name__))
        return func(*args, **kwargs)


def test_the_guard_sees_a_factory_without_a_device():
    """The mode itself: a call from a guarded module is caught, a call with a device or from elsewhere is not."""
    guarded = str(ROOT / "strategies" / "task_parallel" / "exchange.py")
    with DevicelessFactories() as mode:
        exec(compile("torch.zeros(2, device=torch.device('cpu'))", guarded, "exec"), {"torch": torch})  # noqa: S102
        torch.zeros(3)  # this test file is not guarded
    assert mode.found == []
    with DevicelessFactories() as mode:
        exec(compile("torch.zeros(2)", guarded, "exec"), {"torch": torch})  # noqa: S102 - a guarded module's call
    assert mode.found == [("graphscale/strategies/task_parallel/exchange.py", 1, "zeros")]


# ------------------------------------------------------------------ task-parallel
def ring_graph(n: int = 96) -> Graph:
    """A ring (every vertex reads its two neighbours) with the features, labels and splits of a random graph:
    contiguous chunks have two boundary rows each, so a P member's own + mirror rows are far fewer than ``N``."""
    g = random_graph(n, num_features=6, num_classes=3, seed=5, dtype=torch.float64)
    i = torch.arange(n)
    ring = Graph.from_edges(torch.cat([i, (i + 1) % n]), torch.cat([(i + 1) % n, i]), n).coalesce()
    ring.x, ring.y = g.x, g.y
    ring.train_mask, ring.val_mask, ring.test_mask = g.train_mask, g.val_mask, g.test_mask
    ring.meta["num_classes"] = 3
    return ring


def tp_config(workers: int, t_workers: int, layers: int, dependency: str, subgraphs: int = 4) -> RunConfig:
    return RunConfig(model=ModelConfig(name="gcn", hidden=5, layers=layers, dropout=0.3, decoupled="on"),
                     optim=OptimConfig(lr=0.01),
                     strategy=StrategyConfig(name="task-parallel", workers=workers, t_workers=t_workers,
                                             dependency=dependency, subgraphs=subgraphs, chunking="contiguous"),
                     seed=0, dtype="float64")


#: (t_workers, layers, dependency, checkpoint) on 3 workers: 1 T + a hybrid P group of 2 (mirror exchange);
#: 2 T stages + 1 P with a checkpoint (rank 0 gathers the other stage's state)
TP_CASES = [(1, 1, "causal", False), (1, 1, "full", False), (2, 2, "full", True)]


def _tp_worker(env: DistEnv, g: Graph, cases, guard: bool) -> list[dict]:
    out = []
    for t_workers, layers, dependency, checkpoint in cases:
        config = tp_config(env.world_size, t_workers, layers, dependency)
        if checkpoint:
            config.checkpoint = "unused.pt"  # only makes the T stages gather to rank 0 after every epoch
        model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64, decoupled=True)
        handle = prepare_graph(g, config)
        mode = DevicelessFactories()
        with mode if guard else _Nothing():
            strategy = TaskParallelStrategy()
            strategy.setup(handle, model, env, config)
            stats = [strategy.train_epoch(e) for e in range(2)]
            strategy.evaluate()
            if env.rank == 0:
                strategy.state_dict()
        out.append({"found": mode.found, "role": stats[0].extra["role"],
                    "p_rows": [s.extra.get("p_rows") for s in stats],
                    "caches": [s.extra["memory"].get("caches", 0) for s in stats]})
    return out


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_task_parallel_names_the_device_of_every_tensor_it_creates():
    """Setup, two epochs (a hybrid P group: mirrors; two T stages: the checkpoint gather), evaluation and
    ``state_dict`` on 3 workers: no factory call of the strategy's modules leaves the device to chance."""
    results = run_distributed(_tp_worker, 3, ring_graph(), TP_CASES, True, timeout_s=120)
    found = sorted({f for rank in results for case in rank for f in case["found"]})
    assert found == [], f"factories without a device: {found}"


def _own_and_read_rows(g: Graph, config: RunConfig, epoch: int, member: int, size: int) -> int:
    """|own rows ∪ rows read| of P member ``member`` (of ``size``) in ``epoch``, counted from the graph's edges
    (independently of the strategy's lists): own = its chunks' vertices; read = their in-neighbours along the
    edges the dependency mode keeps."""
    from graphscale.strategies.task_parallel.chunks import block_keep

    sc = config.strategy
    chunk_of = assign_chunks(g, num_chunks(config), sc.chunking)
    lay = layout(num_chunks(config), sc.subgraphs, config.seed, epoch, sc.shuffle)
    owner = ((lay.pos % lay.k) % size)[chunk_of]
    full = Block.full(g)
    keep = block_keep(full, chunk_of, lay.sub, sc.dependency)
    dst, src = full.dst_of_edges()[keep], full.indices[keep]
    own = owner == member
    held = own.clone()
    held[src[own[dst]]] = True
    return int(held.sum())


def test_a_hybrid_p_member_holds_only_its_own_and_mirror_rows():
    """1 T + a P group of 2 on a ring of 96 vertices: each P member's per-layer views and gradients have exactly
    |own ∪ read| rows (about half the ring plus the chunk boundaries), and its tracked caches stay below one
    N-row layer (the views of the old code alone were N x d)."""
    g = ring_graph()
    cases = TP_CASES[:2]
    results = run_distributed(_tp_worker, 3, g, cases, False, timeout_s=120)
    n, width, b = g.num_nodes, 3, 8  # decoupled GCN: P rows are the classes wide, float64
    for i, (t_workers, layers, dependency, _) in enumerate(cases):
        config = tp_config(3, t_workers, layers, dependency)
        plan = resolve_plan(config)
        assert [len(group) for group in plan.p_groups] == [2]
        for rank in plan.p_groups[0]:
            r = results[rank][i]
            member = r["role"][2]
            for epoch, rows in enumerate(r["p_rows"]):
                expected = _own_and_read_rows(g, config, epoch, member, 2)
                assert expected < n * 3 // 4
                assert rows == {1: expected}, f"{dependency} rank {rank} epoch {epoch}: {rows} != {expected}"
            assert all(0 < c < n * width * b for c in r["caches"]), (dependency, r["caches"])


# ------------------------------------------------------------------ model-averaging
def test_model_averaging_names_the_device_of_every_tensor_it_creates(tmp_path):
    """Setup, two epochs with the Adam moments averaged with the weights (the default) and ``--correction-steps``
    (the rows fetched across partitions), the exact evaluation (rows fetched: a 1-hop store, 2 layers) and
    ``state_dict``: every buffer the averaging all-reduces and every reduced loss or count is created with a
    device."""
    from graphscale.config import build_config
    from graphscale.prepare import prepare_data
    from graphscale.strategies.model_averaging import ModelAveraging

    config = build_config({"data": {"dataset": "sbm:nodes=240,degree=6,classes=3,features=8,seed=2"},
                           "model": {"name": "gcn", "hidden": 8},
                           "strategy": {"name": "model-averaging", "workers": 1, "parts": 3,
                                        "correction_steps": 1, "batch_size": 30,
                                        "fanouts": [3, 2]},
                           "optim": {"epochs": 2}, "dtype": "float64", "progress": False,
                           "cache_dir": str(tmp_path / "cache")})
    handle = prepare_data(config)
    model = build_model(config.model, handle.summary["features"], handle.summary["classes"], seed=0,
                        dtype=torch.float64)
    with DevicelessFactories() as mode:
        strategy = ModelAveraging()
        strategy.setup(handle, model, DistEnv.local(), config)
        for epoch in range(2):
            strategy.train_epoch(epoch)
        strategy.evaluate()
        strategy.state_dict()
    assert strategy.eval_mode == "fetch"
    found = sorted(set(mode.found))
    assert found == [], f"factories without a device: {found}"
    assert strategy.global_opt is not None and strategy.global_opt.device == strategy.env.device

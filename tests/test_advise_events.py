"""The host-side events the epoch-time predictions price (``Prediction.events``: task-parallel's P blocks and their
edges, split-parallel's and data-parallel's sampled mini-batches and their edges) are counted from the strategies' plans; a run of the
strategy does exactly that work (the calls counted in each worker, with the edges of what they return)."""

import copy

import pytest

from graphscale.advise.configs import predict_config
from graphscale.config import build_config
from graphscale.cost.machine import synthetic

SBM = "sbm:nodes=400,degree=6,features=16,seed=1"


def _counting_worker(env, config, data, epoch: int, target: str) -> tuple[int, int]:
    """One worker: set the strategy up as a run does, train epochs ``0..epoch``; the calls of ``target``
    (``"blocks"``: ``Block.from_nodes``; ``"samples"``: ``NeighborSampler.sample``) in the last one and the edges of
    the blocks they returned."""
    from graphscale.data.block import Block
    from graphscale.data.sampler import NeighborSampler
    from graphscale.testing.distributed import train_epochs

    counts = [0, 0]
    saved = (Block.__dict__["from_nodes"], NeighborSampler.sample)  # restored below: pooled workers are reused
    if target == "blocks":
        original = Block.from_nodes.__func__

        def counted(cls, *args, **kwargs):
            block = original(cls, *args, **kwargs)
            counts[0], counts[1] = counts[0] + 1, counts[1] + block.num_edges
            return block
        Block.from_nodes = classmethod(counted)
    else:
        original = NeighborSampler.sample

        def counted(self, *args, **kwargs):
            blocks = original(self, *args, **kwargs)
            counts[0], counts[1] = counts[0] + 1, counts[1] + sum(b.num_edges for b in blocks)
            return blocks
        NeighborSampler.sample = counted
    def reset(_epoch):
        counts[0] = counts[1] = 0

    try:
        train_epochs(env, config, data, epoch, reset)
        return tuple(counts)
    finally:
        Block.from_nodes, NeighborSampler.sample = saved


def _run_counts(config, epoch: int, target: str) -> list[tuple[int, int]]:
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    return [tuple(c) for c in launch(_counting_worker, config.strategy.workers, config, prepare_data(config), epoch,
                                     target, device="cpu", timeout_s=180)]


@pytest.mark.parametrize("strategy", [{"workers": 2}, {"workers": 3, "p_split": "subgraphs"}],
                         ids=["chain", "p-group"])
def test_task_parallel_blocks_per_worker_equal_the_runs(strategy, tmp_path):
    """Every worker's P blocks and their edges in an epoch (:func:`block_builds` over the epoch's layout) are the
    run's, with a P group of 2 members splitting the subgraphs too; the prediction prices the busiest worker's (a
    P group of several ranks has no byte prediction, so no prediction)."""
    from graphscale.prepare import prepare_data
    from graphscale.strategies.task_parallel.chain import resolve_plan
    from graphscale.strategies.task_parallel.predict import block_builds, chunk_edges

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "task-parallel", "subgraphs": 2, "t_workers": 1, **strategy},
                           "optim": {"epochs": 2}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    data = prepare_data(config)
    from graphscale.nn.models import build_model, is_decoupled

    model = build_model(config.model, data.num_features, data.num_classes, seed=config.seed,
                        decoupled=is_decoupled(config))
    plan = resolve_plan(config)
    rows, edges = chunk_edges(data.open_graph(), config, plan, data)
    predicted = [block_builds(model, config, plan, rows, edges, r, epoch=1) for r in range(config.strategy.workers)]
    measured = _run_counts(config, 1, "blocks")
    assert measured == predicted
    assert sum(b for b, _ in measured) == 2 * len(plan.p_groups)  # every subgraph once per P stage
    if len(plan.p_groups[0]) == 1:
        prediction = predict_config(copy.deepcopy(config), synthetic())
        assert (prediction.events["blocks"], prediction.events["block_edges"]) == max(measured)


def test_split_parallel_samples_equal_the_runs(tmp_path):
    """Every worker samples every mini-batch of the epoch whole: the prediction's ``samples`` and ``sampled_edges``
    are each worker's in a run."""
    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "split-parallel", "workers": 2, "batch_size": 16},
                           "optim": {"epochs": 1}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    prediction = predict_config(copy.deepcopy(config), synthetic())
    measured = _run_counts(config, prediction.bytes_epoch, "samples")
    assert measured == [(prediction.events["samples"], prediction.events["sampled_edges"])] * 2
    assert prediction.events["samples"] > 1


def test_data_parallel_samples_equal_the_runs(tmp_path):
    """Each worker samples its own micro-batches: the prediction's ``samples`` and ``sampled_edges`` are the
    busiest worker's in a run."""
    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "data-parallel", "workers": 2, "batch_size": 16},
                           "optim": {"epochs": 1}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    prediction = predict_config(copy.deepcopy(config), synthetic())
    measured = _run_counts(config, prediction.bytes_epoch, "samples")
    assert (prediction.events["samples"], prediction.events["sampled_edges"]) in measured
    assert prediction.events["samples"] > 1 and all(count > 1 for count, _ in measured)


def _sampled_edges_worker(env, config, data, epoch: int) -> list[int]:
    """One worker: the edges of every ``NeighborSampler.sample`` call of epoch ``epoch``, in order."""
    from graphscale.data.sampler import NeighborSampler
    from graphscale.testing.distributed import train_epochs

    edges, original = [], NeighborSampler.sample

    def counted(self, *args, **kwargs):
        blocks = original(self, *args, **kwargs)
        edges.append(sum(b.num_edges for b in blocks))
        return blocks
    NeighborSampler.sample = counted
    try:
        train_epochs(env, config, data, epoch, lambda _epoch: edges.clear())
        return edges
    finally:
        NeighborSampler.sample = original


def _only(cost: str):
    """The synthetic profile with every time cost free but ``cost`` (a per-event seconds figure)."""
    machine = synthetic()
    for name in ("spmm_edge_s", "spmm_edge_col_s", "layer_call_s", "step_s", "elementwise_s", "sync_s",
                 "collective_latency_s", "sample_call_s", "sample_edge_s"):
        if name != cost:
            setattr(machine, name, 0.0)
    for name in ("gemm_flops", "collective_bandwidth", "memory_bandwidth", "host_transfer_bandwidth"):
        setattr(machine, name, 1e30)
    return machine


def test_data_parallel_prices_each_iteration_at_its_slowest_worker(tmp_path):
    """The workers step in lock-step, so an iteration costs its slowest worker's micro-batch: on a profile where
    only sampled edges cost anything, the prediction is the sum over iterations of the most edges a worker sampled
    in it (the run's per-call counts), more than any one worker's own total."""
    from graphscale.distributed.launch import launch
    from graphscale.prepare import prepare_data

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "data-parallel", "workers": 2, "batch_size": 16},
                           "optim": {"epochs": 1}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    only_sampling = _only("sample_edge_s")
    prediction = predict_config(copy.deepcopy(config), only_sampling)
    per_call = launch(_sampled_edges_worker, 2, config, prepare_data(config), prediction.bytes_epoch,
                      device="cpu", timeout_s=180)
    assert len(per_call[0]) == len(per_call[1]) > 1  # every worker samples one micro-batch per iteration here
    lockstep = sum(max(edges) for edges in zip(*per_call))
    assert prediction.seconds == pytest.approx(lockstep * only_sampling.sample_edge_s, rel=1e-9)
    assert lockstep > max(sum(edges) for edges in per_call)


def test_host_event_costs_raise_the_predicted_time(tmp_path):
    """The blocks and the samples are priced: a profile whose per-edge costs are higher predicts a longer epoch by
    exactly the counted edges times the difference (one worker's threads and no load: worker_scale 1)."""
    base = synthetic()
    dearer = copy.deepcopy(base)
    dearer.block_edge_s += 1e-6
    dearer.sample_edge_s += 1e-6
    for name, key in (("task-parallel", "block_edges"), ("split-parallel", "sampled_edges")):
        strategy = {"name": name, "workers": 2, **({"batch_size": 64} if name == "split-parallel" else {})}
        config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8}, "strategy": strategy,
                               "cache_dir": str(tmp_path / "cache"), "progress": False})
        cheap, dear = (predict_config(copy.deepcopy(config), m) for m in (base, dearer))
        assert dear.seconds - cheap.seconds == pytest.approx(cheap.events[key] * 1e-6, rel=1e-9)


def test_offload_host_bytes_are_priced_at_the_host_transfer_rate_on_cpu(tmp_path):
    """On CPU offload's host categories cost their bytes (per worker) at ``host_transfer_bandwidth``: halving the
    rate adds exactly those bytes' time once more (worker_scale 1 on the synthetic profile)."""
    from graphscale.strategies.offload.cost import HOST_CATEGORIES

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "offload", "workers": 2}, "cache_dir": str(tmp_path / "cache"),
                           "progress": False})
    base = synthetic()
    slower = copy.deepcopy(base)
    slower.host_transfer_bandwidth /= 2
    fast, slow = (predict_config(copy.deepcopy(config), m) for m in (base, slower))
    host = sum(fast.bytes.get(c, 0) for c in HOST_CATEGORIES)
    assert host > 0
    assert slow.seconds - fast.seconds == pytest.approx(host / 2 / base.host_transfer_bandwidth, rel=1e-9)


def test_lockstep_seconds_sums_each_steps_slowest_worker():
    from graphscale.cost.pricing import lockstep_seconds

    steps = [[(1.0,), (3.0,)], [(2.0,), None], [None, None], [(4.0,), (0.5,)]]
    assert lockstep_seconds(steps, lambda t: t) == 3.0 + 2.0 + 0.0 + 4.0
    assert lockstep_seconds([], lambda t: t) == 0.0


def test_split_parallel_prices_each_mini_batch_at_its_slowest_split(tmp_path):
    """On a profile where only the sparse products cost anything, the prediction is the sum over the epoch's
    mini-batches of the slowest worker's sparse products: per layer the edges it computes in the strategy's own
    split (and its rows' self-loops), times the layer's forward and backward passes: more than the evenly split
    total."""
    import torch

    from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
    from graphscale.nn.models import build_model
    from graphscale.prepare import prepare_data
    from graphscale.strategies.split_parallel.plan import SplitPlan
    from graphscale.strategies.split_parallel.split import split_minibatch
    from graphscale.strategies.split_parallel.strategy import layer_kinds, split_modes

    config = build_config({"data": {"dataset": SBM}, "model": {"hidden": 8},
                           "strategy": {"name": "split-parallel", "workers": 2, "batch_size": 16},
                           "optim": {"epochs": 1}, "cache_dir": str(tmp_path / "cache"), "progress": False})
    only_spmm = _only("spmm_edge_s")
    prediction = predict_config(copy.deepcopy(config), only_spmm)
    data = prepare_data(config)
    graph = data.open_graph()
    model = build_model(config.model, data.num_features, data.num_classes, seed=config.seed)
    plan, modes = SplitPlan.load(data.require_shared("split-parallel")), split_modes(layer_kinds(model))
    loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), 16, seed=config.seed)
    sampler = NeighborSampler(graph, config.strategy.fanouts, seed=config.seed)
    epoch = prediction.bytes_epoch
    passes = (2, 3)  # the first layer's forward and weight gradient, the second's forward and two gradients
    slowest, total = 0, 0
    for i, targets in enumerate(loader.batches(epoch)):
        split = split_minibatch(sampler.sample(targets, loader.batch_key(epoch, i)), plan, modes)
        per_worker = []
        for r in range(2):
            own = split.local(r).own_counts  # each layer's sparse product: its computed edges and self-loops
            per_worker.append(sum(p * (int(layer.computed[r]) + own[l + 1])
                                  for l, (p, layer) in enumerate(zip(passes, split.layers))))
        slowest, total = slowest + max(per_worker), total + sum(per_worker)
    assert prediction.seconds == pytest.approx(slowest * only_spmm.spmm_edge_s, rel=1e-9)
    assert slowest > total / 2


def test_block_seconds_prices_each_layer_over_its_own_block():
    """A sampled mini-batch's layers: the first over the input rows without its input's gradient, the next over the
    (fewer) rows of its own block with it; less than pricing every layer over the input rows."""
    from graphscale.cost.pricing import block_seconds, layer_seconds

    machine = synthetic()
    layers, widths, outs = [(500, 5000, 5500), (50, 500, 550)], [64, 16], [16, 7]
    expected = (layer_seconds(machine, 500, 5500, [64], [16], sources=5000)
                + layer_seconds(machine, 50, 550, [16], [7], input_grad=True, sources=500))
    assert block_seconds(machine, layers, widths, outs) == pytest.approx(expected, rel=1e-12)
    assert block_seconds(machine, layers, widths, outs) < layer_seconds(machine, 5000, 6050, widths, outs)

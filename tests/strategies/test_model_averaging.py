"""SDT-GNN model averaging (spec §3, T1-T5) and its bad-input errors.

* T5: the alphas sum to 1; a partition without training vertices contributes nothing.
* T2: with one partition, training equals ``single`` step for step (float64).
* T1: after an epoch the model equals ``sum_j alpha_j w_j`` computed offline, partition by partition.
* T3: with more partitions than workers the run is the same for q = 1 and q = 2 (per-partition seeds).
* A run resumed from its checkpoint (with the partition states on disk) continues identically.
"""

from __future__ import annotations

import copy

import pytest
import torch

from graphscale.config import ModelConfig, build_config
from graphscale.data.block import Block
from graphscale.data.datasets import load_dataset
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.partition.store import load_partition, read_store_meta
from graphscale.partition.store_writer import write_partition_store
from graphscale.prepare import prepare_data
from graphscale.run import run
from graphscale.strategies.base import make_optimizer, masked_loss_sum
from graphscale.strategies.model_averaging import ModelAveraging, partitions_of
from graphscale.strategies.model_averaging.averaging import (
    alphas,
    flatten,
    float_tensors,
    optimizer_moments,
    unflatten_into,
)
from graphscale.validation import validate

SPEC = "sbm:nodes=240,degree=6,classes=3,features=8,seed=2"


def config_for(tmp_path, strategy="model-averaging", workers=1, parts=0, epochs=3, **extra):
    top = {k: extra.pop(k) for k in ("checkpoint", "resume") if k in extra}
    return build_config({"data": {"dataset": SPEC}, "model": {"name": "gcn", "hidden": 8},
                         "strategy": {"name": strategy, "workers": workers, **({"parts": parts} if parts else {}),
                                      **extra},
                         "optim": {"epochs": epochs}, "dtype": "float64", "progress": False,
                         "cache_dir": str(tmp_path / "cache"), **top})


def losses(report):
    return [e["loss"] for e in report["epochs"]]


def test_alphas_sum_to_one_and_empty_partitions_weigh_nothing():
    a = alphas([3, 0, 1])
    assert float(a.sum()) == pytest.approx(1.0, abs=1e-15) and float(a[1]) == 0.0 and float(a[0]) == 0.75
    with pytest.raises(ValueError, match="no partition holds a training vertex"):
        alphas([0, 0])
    assert partitions_of(1, 5, 2) == [1, 3] and partitions_of(0, 2, 2) == [0]


def test_one_partition_equals_single(tmp_path):
    single = run(config_for(tmp_path, strategy="single"))
    averaged = run(config_for(tmp_path, parts=1))
    for mine, ref in zip(losses(averaged), losses(single)):
        assert mine == pytest.approx(ref, rel=1e-10)
    assert [e["val_acc"] for e in averaged["epochs"]] == [e["val_acc"] for e in single["epochs"]]


def offline_averaging(config, handle, epochs: int):
    """Reference: every partition takes one Adam step per epoch from the averaged model, with its own Adam
    state carried across epochs (with --optimizer-state averaged, the default, the moments Adam would keep stepping
    on the weighted average of the partitions' gradients, computed here from the gradients themselves); weighted
    average."""
    meta, dtype, parts = handle.summary, torch.float64, int(handle.summary["parts"])
    model = build_model(config.model, meta["features"], meta["classes"], seed=0, dtype=dtype)
    global_w, global_m, opt_states = flatten(float_tensors(model), dtype), None, [None] * parts
    locals_ = []
    for part in range(parts):
        local = load_partition(handle.path, part)
        g = local.graph
        mask = g.train_mask.clone()
        mask[local.num_inner:] = False
        locals_.append((Block(g.indptr, g.indices, local.orig_ids, local.degree), g.x.to(dtype), g.y, mask))
    counts = [int(mask.sum()) for *_, mask in locals_]
    assert min(counts) > 0
    for epoch in range(epochs):
        total, grad = 0, 0
        for part, (block, x, y, mask) in enumerate(locals_):
            ref = build_model(config.model, meta["features"], meta["classes"], seed=0, dtype=dtype)
            unflatten_into(global_w, float_tensors(ref))
            ref.train()
            ref.set_epoch(epoch)
            opt = make_optimizer(ref, config.optim)
            if opt_states[part] is not None:
                opt.load_state_dict(opt_states[part])
                if global_m is not None:
                    unflatten_into(global_m, optimizer_moments(opt, list(ref.parameters())))
            (masked_loss_sum(ref(block, x), y, mask) / counts[part]).backward()
            # the gradient Adam steps on (weight decay added), before the step changes the weights
            wd = config.optim.weight_decay
            grad = grad + flatten([p.grad + wd * p for p in ref.parameters()], dtype) * counts[part]
            opt.step()
            opt_states[part] = copy.deepcopy(opt.state_dict())
            total = total + flatten(float_tensors(ref), dtype) * counts[part]
        global_w = total / sum(counts)
        if config.strategy.optimizer_state == "averaged":  # Adam's moments of the averaged gradient
            grad = grad / sum(counts)
            before = global_m if global_m is not None else torch.zeros(2 * grad.numel(), dtype=dtype)
            global_m, offset = torch.empty_like(before), 0
            for p in ref.parameters():
                n, g = p.numel(), grad[offset // 2: offset // 2 + p.numel()]
                global_m[offset: offset + n] = 0.9 * before[offset: offset + n] + 0.1 * g
                global_m[offset + n: offset + 2 * n] = 0.999 * before[offset + n: offset + 2 * n] + 0.001 * g * g
                offset += 2 * n
    return global_w, global_m


@pytest.mark.parametrize("state", ["local", "averaged"])
def test_averaged_model_equals_the_offline_weighted_average(tmp_path, state):
    config = config_for(tmp_path, parts=3, optimizer_state=state)
    average_optimizer = state == "averaged"
    handle = prepare_data(config)
    dtype = torch.float64
    model = build_model(config.model, handle.summary["features"], handle.summary["classes"], seed=0, dtype=dtype)
    strategy = ModelAveraging()
    strategy.setup(handle, model, DistEnv.local(), config)
    for epoch in range(3):  # local Adam states carried across epochs, restored per partition
        strategy.train_epoch(epoch)
        expected, moments = offline_averaging(config, handle, epoch + 1)
        torch.testing.assert_close(flatten(float_tensors(model), dtype), expected, rtol=1e-10, atol=1e-12)
        if average_optimizer:  # Adam's moments averaged the same way, in the same all-reduce
            torch.testing.assert_close(strategy.global_opt, moments, rtol=1e-10, atol=1e-15)
        else:
            assert strategy.global_opt is None


def test_more_partitions_than_workers_is_independent_of_the_worker_count(tmp_path):
    one = run(config_for(tmp_path, parts=4, workers=1, state_dir=str(tmp_path / "s1")))
    two = run(config_for(tmp_path, parts=4, workers=2, state_dir=str(tmp_path / "s2")))
    for a, b in zip(losses(one), losses(two)):
        assert a == pytest.approx(b, rel=1e-10)
    assert [e["test_acc"] for e in one["epochs"]] == [e["test_acc"] for e in two["epochs"]]
    assert sorted(p.name for p in (tmp_path / "s1").iterdir()) == sorted(["run.json"] + [
        f"part-{j:05d}.e{e}.pt" for j in range(4) for e in (0, 1)])
    # one model and its Adam moments per averaging round (the default), nothing else
    params = sum(t.numel() for t in float_tensors(build_model(config_for(tmp_path).model, 8, 3, dtype=torch.float64)))
    assert two["epochs"][0]["bytes"]["allreduce"] == 2 * (2 - 1) * 3 * params * 8


def test_resume_continues_identically(tmp_path):
    straight = run(config_for(tmp_path, parts=2, epochs=4, average_every=2, checkpoint=str(tmp_path / "a.pt")))
    run(config_for(tmp_path, parts=2, epochs=2, average_every=2, checkpoint=str(tmp_path / "b.pt"),
                   state_dir=str(tmp_path / "sb")))
    resumed = run(config_for(tmp_path, parts=2, epochs=4, average_every=2, checkpoint=str(tmp_path / "b.pt"),
                             state_dir=str(tmp_path / "sb"), resume=True))
    assert losses(resumed) == pytest.approx(losses(straight), rel=1e-12)  # history: 2 restored + 2 trained


@pytest.mark.spawn
def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="--average-every must be >= 1"):
        validate(config_for(tmp_path, average_every=0))
    with pytest.raises(ValueError, match="--parts must be >= 1"):
        validate(config_for(tmp_path, parts=-2))
    with pytest.raises(ValueError, match="has 2 parts for --workers 3"):
        prepare_data(config_for(tmp_path, parts=2, workers=3))
    run(config_for(tmp_path, parts=2, epochs=1, workers=2, state_dir=str(tmp_path / "st")))  # p = q: still kept
    before = sorted((tmp_path / "st").iterdir())
    assert [p.name for p in before] == ["part-00000.e0.pt", "part-00001.e0.pt", "run.json"]
    other = config_for(tmp_path, parts=2, epochs=1, workers=2, state_dir=str(tmp_path / "st"))
    other.optim.lr = 0.5
    with pytest.raises(Exception, match="holds the partition states of another run .differing: optim"):
        run(other)
    assert sorted((tmp_path / "st").iterdir()) == before


@pytest.mark.parametrize("name", ["sage", "gat", "gcn"])
def test_k_hop_halo_makes_the_partition_forward_exact_for_home_vertices(tmp_path, name):
    """T4: with a K = L hop halo, an L-layer full-neighbour forward on a part equals the global forward on its
    home vertices; the 1-hop store is exact for one layer and not for two."""
    graph = load_dataset("sbm:nodes=300,degree=5,classes=3,features=6,seed=4")
    graph.x = graph.x.double()
    owner = torch.arange(graph.num_nodes) % 3  # scattered: most in-neighbourhoods cross parts
    for hops, layers, exact in [(1, 1, True), (1, 2, False), (2, 2, True), (3, 3, True)]:
        path = tmp_path / f"k{hops}-l{layers}"
        write_partition_store(path, graph, owner.numpy(), 3, node_data={"x": graph.x}, halo_hops=hops)
        assert read_store_meta(path)["halo_hops"] == hops
        model = build_model(ModelConfig(name=name, hidden=4, layers=layers, dropout=0.0, heads=2), 6, 3,
                            seed=1, dtype=torch.float64).eval()
        with torch.no_grad():
            want = model(Block.full(graph), graph.x)
            gaps = []
            for part in range(3):
                local = load_partition(path, part)
                g = local.graph
                got = model(Block(g.indptr, g.indices, local.orig_ids, local.degree), g.x)[: local.num_inner]
                gaps.append(float((got - want[local.orig_ids[: local.num_inner]]).abs().max()))
        assert (max(gaps) < 1e-12) == exact, (hops, layers, gaps)


def test_device_memory_chooses_the_partition_count_and_k_hop_stores_are_for_averaging_only(tmp_path, capsys):
    from graphscale.partition.allocation import data_bytes

    config = config_for(tmp_path, epochs=1, device_memory="30KiB", halo_hops=2)
    config.progress = True
    handle = prepare_data(config)
    size = data_bytes(240, handle.summary["edges"], 8, 8)  # float64 features
    assert handle.summary["parts"] == -(-size // (10 * 1024)) > 1 and handle.summary["halo_hops"] == 2
    assert f"{handle.summary['parts']} partitions: the data" in capsys.readouterr().err
    assert prepare_data(config).path == handle.path  # the same allocation: the cached store is reused
    with pytest.raises(ValueError, match="--device-memory is not used by strategy 'model-averaging' with --parts"):
        validate(build_config({"strategy": {"name": "model-averaging", "parts": 2, "device_memory": "1GiB"}}))
    gp = config_for(tmp_path, strategy="graph-parallel", workers=1, partitions=handle.path)
    gp.data.dataset = ""
    with pytest.raises(ValueError, match="holds a 2-hop halo .--halo-hops., which only strategy 'model-averaging'"):
        prepare_data(gp)


def test_correction_steps_equal_the_single_process_reference_and_do_not_depend_on_q(tmp_path):
    from graphscale.strategies.model_averaging.correction import batch_sizes, partition_picks, reference_step

    extra = {"correction_steps": 2, "batch_size": 30, "fanouts": [3, 2]}
    config = config_for(tmp_path, parts=3, epochs=1, **extra)
    handle = prepare_data(config)
    dtype = torch.float64
    model = build_model(config.model, 8, 3, seed=0, dtype=dtype)
    strategy = ModelAveraging()
    strategy.setup(handle, model, DistEnv.local(), config)
    stats = strategy.train_epoch(0)
    assert stats.extra["correction_loss"] > 0 and stats.bytes.get("correction", 0) == 0  # one worker: no traffic
    # reference: the averaged model, then two steps of the whole-graph sampler on the same targets
    averaged, _ = offline_averaging(config, handle, 1)
    ref = build_model(config.model, 8, 3, seed=0, dtype=dtype)
    unflatten_into(averaged, float_tensors(ref))
    ref.train()
    ref.set_epoch(0)
    graph = load_dataset(SPEC)
    graph.x = graph.x.to(dtype)
    assert handle.feature_norm == "none"
    opt = make_optimizer(ref, config.optim)
    sizes = batch_sizes(handle.summary["part_train"], 30)
    for step in range(2):
        targets = []
        for part in range(3):
            local = load_partition(handle.path, part)
            train = local.orig_ids[torch.nonzero(local.graph.train_mask[: local.num_inner]).flatten()]
            targets.append(train[partition_picks(train.numel(), sizes[part], 0, 0, step, part)])
        reference_step(graph, ref, opt, torch.cat(targets), [3, 2], 0, step)
    torch.testing.assert_close(flatten(float_tensors(model), dtype), flatten(float_tensors(ref), dtype),
                               rtol=1e-10, atol=1e-12)
    # two workers: remote rows fetched through comm, the same model
    one = run(config_for(tmp_path, parts=4, workers=1, epochs=2, **extra))
    two = run(config_for(tmp_path, parts=4, workers=2, epochs=2, **extra))
    assert losses(one) == pytest.approx(losses(two), rel=1e-10)
    assert [e["test_acc"] for e in one["epochs"]] == [e["test_acc"] for e in two["epochs"]]
    assert two["epochs"][0]["bytes"]["correction"] > 0 and "correction" not in one["epochs"][0]["bytes"]

"""Split parallelism (GSplit) reproduces single-process mini-batch training; the split and its Ledger are exact.

* The split of a sample (numba) against a brute-force split in Python, for 1-4 workers and both modes.
* One spawned run per world size checks every (model, dtype): logits, loss and every parameter gradient of a
  step against ``single`` on the same mini-batch (dropout on); a step where every worker but one owns no
  vertex at all (liveness); the Ledger of an epoch against the closed forms; parameters after 21 Adam steps
  identical across workers and equal to ``single`` mini-batch training.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.partition.metis import MetisPartitioner
from graphscale.partition.random import RandomPartitioner
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import make_optimizer, masked_loss_sum
from graphscale.strategies.single import SingleStrategy
from graphscale.strategies.split_parallel import (
    SplitParallel,
    layer_kinds,
    shipped_widths,
    shuffle_backward,
    split_modes,
)
from graphscale.strategies.split_parallel.plan import SplitPlan
from graphscale.strategies.split_parallel.split import HALO, PREAGG, split_minibatch
from graphscale.testing import assert_close_rel, random_graph, run_distributed

DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: (model, dtype, hidden, epochs): every combination checks one step, the liveness step and an epoch's Ledger;
#: those with EPOCHS also train 21 Adam steps against ``single``.
COMBOS = [("sage", "float64", 4, 1), ("gat", "float64", 4, 1), ("gcnii", "float64", 4, 1),
          ("sage", "float32", 8, 7), ("gat", "float32", 4, 7)]
ISOLATED = 6
BATCH = 16
EPOCHS = 7  # 46 training vertices / 16 = 3 steps per epoch: 21 Adam steps


def make_graph(dtype: torch.dtype):
    graph = random_graph(80, avg_degree=5.0, num_features=6, num_classes=3, seed=0, dtype=dtype, isolated=ISOLATED)
    graph.train_mask[-ISOLATED:] = True  # isolated training vertices: a mini-batch of them touches one worker only
    graph.val_mask[-ISOLATED:] = False
    graph.test_mask[-ISOLATED:] = False
    return graph


def make_config(model: str, workers: int, cache_fraction: float = 0.1, hidden: int = 4) -> RunConfig:
    """SAGE with ``hidden`` < 6 features ships ``lin_l(x)`` partial sums at layer 0 (backward too); with
    ``hidden >= 6`` it ships raw feature sums (forward only)."""
    return RunConfig(model=ModelConfig(name=model, hidden=hidden, layers=3, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4, epochs=EPOCHS),
                     strategy=StrategyConfig(name="split-parallel", workers=workers, fanouts=[3, 3, 3],
                                             batch_size=BATCH, cache_fraction=cache_fraction, minibatch=True),
                     seed=0)


def lonely_targets(graph, owner: torch.Tensor) -> torch.Tensor:
    """The isolated training vertices of the part that holds most of them (every other part owns no row)."""
    iso = torch.arange(graph.num_nodes - ISOLATED, graph.num_nodes)
    parts = owner[iso]
    return iso[parts == torch.bincount(parts).argmax()]


def _worker(env: DistEnv, combos: list[tuple[str, str, int, int]]) -> list[dict]:
    out = []
    for model_name, dtype_name, hidden, epochs in combos:
        dtype = DTYPES[dtype_name]
        graph = make_graph(dtype)
        config = make_config(model_name, env.world_size, hidden=hidden)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        strategy = SplitParallel()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        model.train()
        model.set_epoch(0)
        loss, logits, local = strategy.step(strategy.loader.batches(0)[0], strategy.loader.batch_key(0, 0))
        grads = [p.grad.clone() for p in model.parameters()]
        lonely = lonely_targets(graph, strategy.owner)
        loss2, logits2, local2 = strategy.step(lonely, 999)
        grads2 = [p.grad.clone() for p in model.parameters()]
        # a fresh run: epochs of training, its Ledger, the parameters it ends with
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        strategy = SplitParallel()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        stats = [strategy.train_epoch(e) for e in range(epochs)]
        out.append({"loss": loss, "logits": logits, "targets": local.ids(3), "grads": grads,
                    "loss2": loss2, "logits2": logits2, "targets2": local2.ids(3), "grads2": grads2,
                    "rows2": local2.own_counts[0], "owner": strategy.owner, "bytes": stats[0].bytes,
                    "extra": stats[0].extra, "losses": [s.loss for s in stats],
                    "params": [p.detach().clone() for p in model.parameters()], "metrics": strategy.evaluate()})
    return out


def reference_step(model, graph, targets, key, fanouts):
    blocks = NeighborSampler(graph, fanouts, seed=0).sample(targets, key)
    logits = model(blocks, graph.x[blocks[0].src_ids])
    loss = masked_loss_sum(logits, graph.y[targets], torch.ones(targets.numel(), dtype=torch.bool))
    (loss / targets.numel()).backward()
    return loss.detach(), logits.detach()


def expected_epoch_bytes(graph, config, model, owner, world: int, elem: int) -> dict[str, int]:
    """The module docstring's closed forms, from a brute-force count over the epoch's samples."""
    plan = SplitPlan.build(owner, graph.out_degrees(), world, config.strategy.cache_fraction)
    cached = set(np.flatnonzero(plan.cached_mask()).tolist())
    loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), BATCH, seed=0)
    sampler = NeighborSampler(graph, config.strategy.fanouts, seed=0)
    kinds = layer_kinds(model)
    widths = shipped_widths(model)
    learned_input = model_learns_input(model)
    back = [l > 0 or kinds[0] == "gat" or (kinds[0] == "sage" and model.layers[0].in_dim > model.layers[0].out_dim)
            or learned_input for l in range(len(kinds))]
    assert back == shuffle_backward(model)
    h2d = shuffle = 0
    for i, targets in enumerate(loader.batches(0)):
        blocks = sampler.sample(targets, loader.batch_key(0, i))
        h2d += sum(1 for v in blocks[0].src_ids.tolist() if v not in cached) * graph.num_features * elem
        for l, (block, kind) in enumerate(zip(blocks, kinds)):
            rows = brute_force_rows(block, plan, PREAGG if kind == "sage" else HALO)
            shuffle += rows * widths[l] * elem * (2 if back[l] else 1)
    params = sum(p.numel() for p in model.parameters())
    return {"h2d": h2d, "shuffle": shuffle, "allreduce": len(loader) * 2 * (world - 1) * params * elem,
            "control": 2 * (world - 1) * 8}


def model_learns_input(model) -> bool:
    return any(True for _ in getattr(model, "lin_in", torch.nn.Identity()).parameters())


def brute_force_rows(block, plan: SplitPlan, mode: str) -> int:
    """``sum_{i != j} |ref[i->j]|`` (preagg) or ``|halo[i->j]|`` (halo) of one block, with Python sets."""
    owner = plan.owner_of(block.src_ids)
    pairs = set()
    for v in range(block.num_dst):
        for u in block.indices[block.indptr[v]:block.indptr[v + 1]].tolist():
            if owner[u] != owner[v]:
                pairs.add((int(v), int(owner[u])) if mode == PREAGG else (int(u), int(owner[v])))
    return len(pairs)


# --------------------------------------------------------------------------- the split itself
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_split_matches_brute_force(world):
    graph = make_graph(torch.float64)
    owner = (MetisPartitioner() if world % 2 == 0 else RandomPartitioner()).partition(graph, world, seed=0)
    plan = SplitPlan.build(owner, graph.out_degrees(), world, cache_fraction=0.1)
    # offline: contiguous, degree-sorted parts; disjoint caches inside their parts
    assert np.array_equal(plan.owner_of(torch.arange(graph.num_nodes)), owner.numpy())
    deg = graph.out_degrees().numpy()
    for p in range(world):
        part = plan.perm[plan.poff[p]:plan.poff[p + 1]]
        assert np.all(np.diff(deg[part]) <= 0)
        assert np.array_equal(plan.cached_ids(p).numpy(), part[:plan.cap])
    assert plan.cached_mask().sum() == sum(plan.cache_size(p) for p in range(world))
    sampler = NeighborSampler(graph, [3, 3, 3], seed=0)
    blocks = sampler.sample(torch.nonzero(graph.train_mask).flatten()[:20], batch_key=5)
    for mode in (PREAGG, HALO):
        split = split_minibatch(blocks, plan, mode)
        gids = blocks[0].src_ids
        owner_rows = plan.owner_of(gids)
        cached = plan.cached_mask()[gids.numpy()]
        assert np.array_equal(split.loads(), np.bincount(owner_rows[~cached], minlength=world))
        assert split.loads().sum() == (~cached).sum()
        assert split.edges_per_split().sum() == split.num_edges() == sum(b.num_edges for b in blocks)
        locals_ = [split.local(r) for r in range(world)]
        # own rows partition every level; levels are prefixes
        for l, n in enumerate(split.level_sizes):
            ids = torch.cat([loc.ids(l) for loc in locals_])
            assert torch.equal(torch.sort(ids).values, torch.sort(gids[:n]).values)
        for r, loc in enumerate(locals_):
            assert np.all(plan.owner_of(loc.miss_ids) == r) and np.all(plan.owner_of(loc.gids) == r)
            assert torch.equal(loc.gids[loc.hit_pos], plan.cached_ids(r)[loc.hit_slot])
        local_edges = 0
        for l, block in enumerate(blocks):
            assert split.layers[l].shuffle_rows() == brute_force_rows(block, plan, mode)
            want = set()  # every sampled edge as (dst gid, src gid)
            for v in range(block.num_dst):
                for u in block.indices[block.indptr[v]:block.indptr[v + 1]].tolist():
                    want.add((int(block.src_ids[v]), int(block.src_ids[u])))
                    local_edges += int(owner_rows[u] == owner_rows[v])
            got = []
            for r, loc in enumerate(locals_):
                lay = loc.layers[l]
                src_ids, dst_ids = loc.ids(l), loc.ids(l + 1)
                assert lay.deg.tolist() == [int(block.indptr[v + 1] - block.indptr[v])
                                            for v in range(block.num_dst) if owner_rows[v] == r]
                assert lay.send_counts[r] == lay.recv_counts[r] == 0
                assert [locals_[j].layers[l].recv_counts[r] for j in range(world)] == lay.send_counts
                ids = torch.cat([src_ids, lay.halo_ids]) if mode == HALO else src_ids
                for v in range(lay.num_dst):
                    got += [(int(dst_ids[v]), int(ids[u])) for u in lay.indices[lay.indptr[v]:lay.indptr[v + 1]]]
                if mode == HALO:  # what r ships to j is what j lists as halo from r, in the same order
                    sent = torch.split(src_ids[lay.send_index], lay.send_counts)
                    for j in range(world):
                        halo = torch.split(locals_[j].layers[l].halo_ids, locals_[j].layers[l].recv_counts)[r]
                        assert torch.equal(sent[j], halo)
                else:  # partial sums: reference rows of r for j, each listing r's sources of that vertex
                    recv = [torch.split(locals_[j].layers[l].recv_pos, locals_[j].layers[l].recv_counts)[r]
                            for j in range(world)]
                    xrow = 0
                    for j in range(world):
                        for pos in recv[j].tolist():
                            v = int(locals_[j].ids(l + 1)[pos])
                            entries = lay.xidx[lay.xptr[xrow]:lay.xptr[xrow + 1]]
                            got += [(v, int(src_ids[u])) for u in entries]
                            xrow += 1
                    assert xrow == sum(lay.send_counts)
            assert len(got) == len(want) == block.num_edges and set(got) == want
        assert split.local_edges() == local_edges
        if world == 1:
            assert split.local_edges() == split.num_edges() and all(lay.shuffle_rows() == 0 for lay in split.layers)
    # a cache covering every vertex: nothing is loaded
    full = SplitPlan.build(owner, graph.out_degrees(), world, cache_fraction=1.0)
    assert split_minibatch(blocks, full, PREAGG).loads().sum() == 0


def test_bad_options_are_named():
    """Options are checked in the parent (graphscale.validation), before any worker sets up."""
    from graphscale.config import build_config
    from graphscale.validation import validate

    graph = make_graph(torch.float64)
    model = build_model(make_config("sage", 1).model, graph.num_features, graph.num_classes, seed=0)
    with pytest.raises(ValueError, match=r"--cache-fraction must lie in \[0, 1\], got 1.5"):
        validate(make_config("sage", 1, cache_fraction=1.5))
    config = make_config("sage", 1)
    config.strategy.fanouts = [3, 3]
    with pytest.raises(ValueError, match="--fanouts gives 2 value"):
        validate(config)
    with pytest.raises(ValueError, match="--cache is not used by strategy 'split-parallel'"):
        build_config({"strategy": {"name": "split-parallel", "cache": "quiver"}})
    with pytest.raises(ValueError, match="mode"):
        split_minibatch(NeighborSampler(graph, [2], seed=0).sample(torch.arange(3), 0),
                        SplitPlan.build(torch.zeros(graph.num_nodes, dtype=torch.int64), graph.out_degrees(), 1),
                        "scatter")
    assert STRATEGIES.get("split-parallel") is SplitParallel
    assert split_modes(layer_kinds(model)) == [PREAGG] * 3


# --------------------------------------------------------------------------- training
@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_split_parallel_matches_single(world_size):
    results = run_distributed(_worker, world_size, COMBOS)
    for c, (model_name, dtype_name, hidden, epochs) in enumerate(COMBOS):
        dtype = DTYPES[dtype_name]
        tag = f"{model_name}/{dtype_name}/W={world_size}"
        runs = [r[c] for r in results]
        graph = make_graph(dtype)
        config = make_config(model_name, 1, hidden=hidden)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        model.train()
        model.set_epoch(0)
        optimizer = make_optimizer(model, config.optim)
        loader = MiniBatchLoader(torch.nonzero(graph.train_mask).flatten(), BATCH, seed=0)
        checks = []
        targets = loader.batches(0)[0]
        checks.append(("", targets, *reference_step(model, graph, targets, loader.batch_key(0, 0), [3, 3, 3]),
                       [p.grad.clone() for p in model.parameters()]))
        optimizer.step()
        optimizer.zero_grad()
        lonely = lonely_targets(graph, runs[0]["owner"])
        checks.append(("2", lonely, *reference_step(model, graph, lonely, 999, [3, 3, 3]),
                       [p.grad.clone() for p in model.parameters()]))
        for suffix, targets, loss, logits, grads in checks:
            position = {int(v): i for i, v in enumerate(targets)}
            got = torch.cat([r["targets" + suffix] for r in runs])
            assert sorted(got.tolist()) == sorted(targets.tolist()), tag
            assert_close_rel(sum(r["loss" + suffix] for r in runs), loss, dtype, what=f"{tag} loss{suffix}")
            for rank, r in enumerate(runs):
                rows = torch.tensor([position[int(v)] for v in r["targets" + suffix]], dtype=torch.int64)
                assert_close_rel(r["logits" + suffix], logits[rows], dtype, what=f"{tag} rank {rank} logits{suffix}")
                for (name, _), g, g_ref in zip(model.named_parameters(), r["grads" + suffix], grads):
                    assert_close_rel(g, g_ref, dtype, what=f"{tag} rank {rank} grad{suffix} {name}")
        if world_size > 1:  # the lonely batch: every worker but one owned no row of any level
            assert sorted(r["rows2"] == 0 for r in runs).count(True) == world_size - 1, tag

        # Ledger of epoch 0 against the closed forms (summed over workers)
        elem = torch.empty(0, dtype=dtype).element_size()
        expected = expected_epoch_bytes(graph, config, model, runs[0]["owner"], world_size, elem)
        total = {k: sum(r["bytes"].get(k, 0) for r in runs) for k in expected}
        if world_size == 1:
            expected.update(shuffle=0, allreduce=0, control=0)
        assert total == expected, tag
        assert set().union(*(r["bytes"] for r in runs)) <= {"h2d", "h2d_struct", "shuffle", "allreduce", "control"}
        tally = sum(sum(r["extra"]["shuffle_fwd"]) + sum(r["extra"]["shuffle_bwd"]) for r in runs)
        assert tally == total["shuffle"], tag

        # 21 Adam steps: identical across workers, equal to single mini-batch training
        reference = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=dtype)
        single = SingleStrategy()
        single.setup(graph, reference, DistEnv.local(), config)
        losses = [single.train_epoch(e).loss for e in range(epochs)]
        metrics = single.evaluate()
        for rank, r in enumerate(runs):
            for p, p0 in zip(r["params"], runs[0]["params"]):
                assert torch.equal(p, p0), f"{tag}: parameters diverged across workers"
            for (name, p_ref), p in zip(reference.named_parameters(), r["params"]):
                tol = 1e-10 if dtype == torch.float64 else 1e-4
                err = float((p.double() - p_ref.detach().double()).abs().max())
                assert err <= tol, f"{tag} rank {rank} param {name} after {epochs * 3} steps: {err:.3g}"
            assert r["losses"] == pytest.approx(losses, rel=1e-9 if dtype == torch.float64 else 1e-4), tag
            for key in ("train_acc", "val_acc", "test_acc"):
                assert r["metrics"][key] == pytest.approx(metrics[key], abs=1e-9 if dtype == torch.float64
                                                          else 0.06), f"{tag} {key}"

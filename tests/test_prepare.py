"""The run's data preparation: cache entries written once in the parent, stores checked before any worker starts.

Bad input (a store whose parts do not match ``--workers``, a truncated or corrupted part, a missing array, a
wrong format version, a store of another dataset, an unwritable cache directory) is a clear error naming the
file or option, raised by :func:`graphscale.prepare.prepare_data` in the parent, and nothing half-written is
left behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.data.handle import HOST_SHARED, MEMORY, PARTITION_LOCAL
from graphscale.prepare import canonical_spec, prepare_data
from graphscale.run import run
from graphscale.strategies.split_parallel.plan import SplitPlan
from graphscale.testing import random_graph
from graphscale.training_store import write_training_store

SPEC = "sbm:nodes=300,degree=6,classes=3,features=8,seed=1"


def config_for(strategy: str, workers: int, tmp_path, **strategy_options):
    return build_config({"data": {"dataset": SPEC}, "strategy": {"name": strategy, "workers": workers,
                                                                 **strategy_options},
                         "optim": {"epochs": 2}, "progress": False, "cache_dir": str(tmp_path / "cache")})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A 2-part METIS store of SPEC, as `graphscale partition` writes it."""
    out = tmp_path_factory.mktemp("stores") / "sbm-2"
    assert main(["partition", "--dataset", SPEC, "--method", "metis", "--parts", "2", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def test_views_and_cache_reuse(tmp_path):
    assert prepare_data(config_for("single", 1, tmp_path)).view == MEMORY
    config = config_for("graph-parallel", 2, tmp_path)
    handle = prepare_data(config)
    assert handle.view == PARTITION_LOCAL and handle.summary["nodes"] == 300 and handle.num_train > 0
    stores = list((tmp_path / "cache" / "stores").iterdir())
    assert len(stores) == 1
    mtime = (stores[0] / "meta.json").stat().st_mtime_ns
    assert prepare_data(config_for("graph-parallel", 2, tmp_path)).path == handle.path  # reused, not rewritten
    assert (stores[0] / "meta.json").stat().st_mtime_ns == mtime
    assert prepare_data(config_for("graph-parallel", 2, tmp_path, balance="vertices")).path != handle.path
    shared = prepare_data(config_for("split-parallel", 2, tmp_path, cache_fraction=0.1))
    assert shared.view == HOST_SHARED and shared.owner_parts == 2 and os.path.isfile(shared.owner_path)
    assert prepare_data(config_for("data-parallel", 2, tmp_path)).owner_path == shared.owner_path  # evaluation
    # split-parallel's plan is built once by the parent and memory-mapped by the workers
    plan = SplitPlan.load(shared.shared)
    graph = shared.open_graph()
    built = SplitPlan.build(torch.from_numpy(np.load(shared.owner_path)), graph.out_degrees(), 2,
                            0.1)
    assert plan.num_parts == 2 and plan.cap == built.cap and plan.cap > 0
    for name in ("perm", "split_id", "poff", "part_code"):
        assert isinstance(getattr(plan, name), np.memmap) and np.array_equal(getattr(plan, name), getattr(built, name))
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if p.name.startswith(".") and p.name != ".complete"]
    assert leftovers == []


def test_train_from_a_store_equals_training_from_the_cache(store, tmp_path):
    config = config_for("graph-parallel", 2, tmp_path, partitions=str(store))
    config.data.dataset = ""  # the store's dataset
    from_store = run(config)
    assert config.data.dataset == canonical_spec(SPEC)
    from_cache = run(config_for("graph-parallel", 2, tmp_path, balance="vertices"))
    single = run(config_for("single", 1, tmp_path))
    assert from_store["config"]["strategy"]["partitions"] == str(store)
    for report in (from_store, from_cache):
        for mine, ref in zip(report["epochs"], single["epochs"]):
            assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
            assert mine["test_acc"] == ref["test_acc"]


def _broken_copy(store, tmp_path, name):
    target = tmp_path / name
    shutil.copytree(store, target)
    return target


@pytest.mark.parametrize("damage, message", [
    ("parts", "has 2 parts but --workers is 3"),
    ("dataset", "holds a partition of dataset"),
    ("truncate", "x.npy is not a readable .npy file"),
    ("missing", "indices.npy is missing"),
    ("length", "degree.npy has shape"),
    ("version", "unsupported version"),
    ("part_meta", "part-00001/meta.json is missing"),
    ("no_store", "does not exist"),
])
def test_bad_stores_fail_in_the_parent_naming_the_file(store, tmp_path, damage, message):
    path = _broken_copy(store, tmp_path, damage)
    part = path / "part-00001"
    workers, dataset = 2, ""
    if damage == "parts":
        workers = 3
    elif damage == "dataset":
        dataset = "cora"
    elif damage == "truncate":
        data = (part / "x.npy").read_bytes()
        (part / "x.npy").write_bytes(data[: len(data) // 2])
    elif damage == "missing":
        (part / "indices.npy").unlink()
    elif damage == "length":
        np.save(part / "degree.npy", np.zeros(3, np.int64))
    elif damage == "version":
        meta = json.loads((path / "meta.json").read_text())
        (path / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    elif damage == "part_meta":
        (part / "meta.json").unlink()
    elif damage == "no_store":
        shutil.rmtree(path)
    config = config_for("graph-parallel", workers, tmp_path, partitions=str(path))
    config.data.dataset, config.oversubscribe = dataset, True  # 3 workers on a 2-core machine: the store decides
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        run(config)


def test_cli_errors_are_one_line_before_workers_start(store, tmp_path, capsys):
    code = main(["train", "--strategy", "graph-parallel", "--workers", "4", "--oversubscribe", "--partitions",
                 str(store), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--workers is 4" in err
    code = main(["train", "--strategy", "offload", "--workers", "2", "--partitions", str(store), "--no-progress"])
    assert code == 2 and "--partitions is not used by strategy 'offload'" in capsys.readouterr().err


def _damaged_graph(kind: str):
    graph = random_graph(40, avg_degree=3.0, num_features=4, num_classes=3, seed=0)
    if kind == "nan":
        graph.x[17, 2] = float("nan")
    elif kind == "inf":
        graph.x[5, 0] = float("inf")
    elif kind == "label":
        graph.y[9] = 7
        graph.meta["num_classes"] = 3
    elif kind == "unlabelled":
        graph.y[int(torch.nonzero(graph.train_mask)[0])] = -1
    return graph


DAMAGE = {"nan": "features of node 17 are not finite", "inf": "features of node 5 are not finite",
          "label": r"node 9 has label 7, outside \[0, 3\) and not -1", "unlabelled": "training node .* has no label"}


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize("strategy", ["single", "graph-parallel", "data-parallel"])
def test_node_data_is_checked_when_the_dataset_is_loaded(tmp_path, kind, strategy):
    from graphscale.data.formats import save_graph_dir

    save_graph_dir(_damaged_graph(kind), tmp_path / "g")
    config = build_config({"data": {"dataset": f"graphdir:{tmp_path / 'g'}"}, "progress": False,
                           "strategy": {"name": strategy, "workers": 1 if strategy == "single" else 2},
                           "cache_dir": str(tmp_path / "cache")})
    with pytest.raises(ValueError, match=f"dataset 'graphdir:.*': {DAMAGE[kind]}"):
        prepare_data(config)


def test_node_data_problem_names_the_first_bad_row():
    from graphscale.data.datasets import node_data_problem

    x, y = np.zeros((5, 2), np.float32), np.array([0, 1, -1, 2, 0])
    assert node_data_problem(x, y, 3, np.array([1, 1, 0, 0, 0], bool)) is None
    x[3, 1] = np.nan
    x[4, 0] = np.inf
    assert node_data_problem(x, y, 3, ids=np.array([10, 11, 12, 13, 14])) == \
        "features of node 13 are not finite (NaN or infinity)"
    assert node_data_problem(np.zeros((5, 2)), y.astype(float), 3) == "labels must be integers, got dtype float64"
    assert "training node 2 has no label" in node_data_problem(np.zeros((5, 2)), y, 3, np.ones(5, bool))


def test_node_data_of_a_given_store_is_checked(tmp_path, capsys):
    graph = _damaged_graph("nan")
    write_training_store(graph, tmp_path / "store", 2, "random")  # written without the training checks
    code = main(["train", "--strategy", "graph-parallel", "--workers", "2", "--partitions", str(tmp_path / "store"),
                 "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "store" in err and "features of node 17 are not finite" in err


def test_balance_needs_a_partitioner_that_balances():
    from graphscale.prepare import build_vertex_partitioner

    assert build_vertex_partitioner("metis", "edges").balance == "edges"
    assert build_vertex_partitioner("metis:ufactor=10").ufactor == 10
    with pytest.raises(ValueError, match="--partitioner 'random': random has no option balance"):
        build_vertex_partitioner("random", "edges")


def test_canonical_spec_of_reader_options(tmp_path, monkeypatch):
    from graphscale.prepare import _fingerprint

    (tmp_path / "g.mat").write_bytes(b"MATLAB")
    (tmp_path / "fb").mkdir()
    (tmp_path / "fb" / "fb_edges.csv").write_text("0,1\n")
    monkeypatch.chdir(tmp_path)
    mat = f"mat:{tmp_path.resolve() / 'g.mat'}:adj=network,labels=group"
    assert canonical_spec("mat:g.mat:labels=group,adj=network") == canonical_spec(f"{mat}") == mat
    assert canonical_spec("mat:g.mat: labels=group , adj=network") == mat
    folder = tmp_path.resolve() / "fb"
    assert canonical_spec("musae:fb:seed=2,label=page_type") == f"musae:{folder}:label=page_type,seed=2"
    assert canonical_spec("musae:fb:3") == f"musae:{folder}:3"
    assert canonical_spec(SPEC) == SPEC  # synthetic options keep their order
    assert [Path(f[0]).name for f in _fingerprint(canonical_spec("mat:g.mat:labels=group,adj=network"))] == ["g.mat"]
    assert [Path(f[0]).name for f in _fingerprint(canonical_spec("musae:fb:label=x"))] == ["fb_edges.csv"]


def test_unwritable_cache_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    config = config_for("graph-parallel", 2, tmp_path)
    config.cache_dir = str(blocker / "cache")
    with pytest.raises(ValueError, match="--cache-dir .* is not a writable directory"):
        prepare_data(config)


def test_failed_store_write_leaves_nothing(tmp_path):
    graph = random_graph(10, avg_degree=2.0, num_features=3, num_classes=2, seed=0)
    with pytest.raises(ValueError):
        write_training_store(graph, tmp_path / "store", 12, "random")
    assert list(tmp_path.iterdir()) == []


def test_offload_layout_is_planned_once_in_the_parent(tmp_path):
    from graphscale.cost.dims import probe_dims
    from graphscale.nn.models import build_model
    from graphscale.strategies.offload.cost import Bandwidths
    from graphscale.strategies.offload.plan import ChunkSets, WorkerPlan, build_worker_plan, plan_folder
    from graphscale.strategies.offload.strategy import plan_layout

    config = config_for("offload", 2, tmp_path, chunks=2)
    handle = prepare_data(config)
    stored = ChunkSets.load(handle.shared)
    graph = handle.open_graph()
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
    owner, batch, chunks = plan_layout(graph, handle.vertex_owner(2), 2, config, model,
                                       probe_dims(model, graph.num_features, torch.float32), Bandwidths())
    fresh = ChunkSets.build(graph, owner, batch, 2, chunks)
    assert stored.num_chunks == 2 and torch.equal(stored.owner, fresh.owner) and torch.equal(stored.batch, fresh.batch)
    for kind in ("dst", "nbr", "trans"):
        for row_a, row_b in zip(getattr(stored, kind), getattr(fresh, kind)):
            assert all(torch.equal(a, b) for a, b in zip(row_a, row_b)), kind
    for rank in range(2):  # and every worker's plan, which the worker maps instead of building it
        got = WorkerPlan.load(plan_folder(handle.shared, rank))
        want = build_worker_plan(graph, fresh, rank, config.strategy.dedup)
        assert (got.capacity, got.recv_capacity, len(got.batches)) == (want.capacity, want.recv_capacity, 2)
        for x, y in zip(got.batches, want.batches):
            assert torch.equal(x.block.indices, y.block.indices) and torch.equal(x.src_index, y.src_index)
            assert x.send_counts == y.send_counts and torch.equal(x.flush_slots, y.flush_slots)
    offload = run(config_for("offload", 2, tmp_path, chunks=2))  # workers map the parent's layout
    single = run(config_for("single", 1, tmp_path))
    for mine, ref in zip(offload["epochs"], single["epochs"]):
        assert mine["loss"] == pytest.approx(ref["loss"], rel=1e-5)
        assert mine["test_acc"] == ref["test_acc"]

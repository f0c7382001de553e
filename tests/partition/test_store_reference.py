"""Partition stores that reference their base graph directory's node rows: the same rows as a copying store, a
fraction of its bytes on disk, the same training, and a refusal once the base directory is moved or changed."""

from __future__ import annotations

import json
import mmap
import os
import shutil

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.data.synthetic import generate_to_dir
from graphscale.partition.build import partition_graph_dir, write_graph_dir_store
from graphscale.partition.store import NODE_ARRAYS, check_partition_store, load_partition, part_dir
from graphscale.partition.store_base import BASE_KEY
from graphscale.run import run
from graphscale.training_store import check_store_node_data, store_handle
from tests.partition.test_store_rows_file import mapping_of

SPEC = "sbm:nodes=400,degree=6,features=16,classes=3,seed=2"


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return generate_to_dir(SPEC, tmp_path_factory.mktemp("g") / "g", chunk_nodes=89)


@pytest.fixture(scope="module")
def stores(graph_dir, tmp_path_factory):
    """A copying and a referencing 2-part store of the same partition, as `graphscale partition` writes them."""
    root = tmp_path_factory.mktemp("stores")
    for mode in ("copy", "reference"):
        assert main(["partition", "--dataset", f"graphdir:{graph_dir}", "--method", "metis", "--parts", "2",
                     "--out", str(root / mode), "--node-data", mode, "--no-progress"]) == 0
    return root / "copy", root / "reference"


def _disk_bytes(path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.mark.parametrize("halo_hops", [1, 2])
def test_a_referencing_store_reads_the_copying_stores_rows_in_tiny_blocks(graph_dir, tmp_path, monkeypatch,
                                                                          halo_hops):
    from graphscale.partition import store_base

    owner = partition_graph_dir(graph_dir, "random", 3, seed=0)
    for mode in ("copy", "reference"):
        write_graph_dir_store(graph_dir, tmp_path / mode, owner, 3, node_data=mode, halo_hops=halo_hops)
    meta = check_partition_store(tmp_path / "reference")
    assert meta[BASE_KEY]["path"] == str(graph_dir.resolve()) and set(meta[BASE_KEY]["arrays"]) == set(NODE_ARRAYS)
    assert BASE_KEY not in check_partition_store(tmp_path / "copy")
    # blocks of 7 rows: every gather crosses block boundaries
    monkeypatch.setattr(store_base.part_rows, "__defaults__", (0, None, 7 * mmap.PAGESIZE, None))
    for s in range(3):
        assert not any((part_dir(tmp_path / "reference", s) / f"{name}.npy").exists() for name in NODE_ARRAYS)
        copy, ref = load_partition(tmp_path / "copy", s), load_partition(tmp_path / "reference", s)
        lazy = load_partition(tmp_path / "reference", s, gather=False)
        assert ref.referenced == NODE_ARRAYS and lazy.graph.x is None
        for name in NODE_ARRAYS:
            mine, theirs = getattr(ref.graph, name), getattr(copy.graph, name)
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs), name
            assert torch.equal(lazy.inner_rows(name), copy.inner_rows(name)), name
        assert not bool(ref.graph.train_mask[ref.num_inner:].any())  # masks on inner rows only, as copied
    copied = sum(f.stat().st_size for name in NODE_ARRAYS for f in (tmp_path / "copy").glob(f"part-*/{name}.npy"))
    assert copied > 0 and _disk_bytes(tmp_path / "reference") < _disk_bytes(tmp_path / "copy") - copied + 1024


def test_the_partition_command_copies_by_default_and_a_reference_saves_the_rows_on_disk(graph_dir, stores, tmp_path):
    copy, reference = stores
    for mode in (None, "reference"):
        name = mode or "default"
        assert main(["partition", "--dataset", f"graphdir:{graph_dir}", "--method", "metis", "--parts", "2",
                     "--out", str(tmp_path / name), "--no-progress", "--json", str(tmp_path / f"{name}.json")]
                    + (["--node-data", mode] if mode else [])) == 0
        assert (BASE_KEY in check_partition_store(tmp_path / name)) == (mode == "reference")
        assert json.loads((tmp_path / f"{name}.json").read_text())["node_data"] == (mode or "copy")
    x_bytes = 400 * 16 * np.load(graph_dir / "x.npy", mmap_mode="r").dtype.itemsize
    # the copy holds every inner and halo row of x; the reference none of them
    assert _disk_bytes(copy) - _disk_bytes(reference) > x_bytes
    check_store_node_data(reference, check_partition_store(reference))
    a, b = store_handle(copy, "auto"), store_handle(reference, "auto")
    assert a.summary == {**b.summary, "name": a.summary["name"]} and a.feature_norm == b.feature_norm


def test_reference_needs_a_graph_directory(tmp_path, capsys):
    code = main(["partition", "--dataset", SPEC, "--method", "random", "--parts", "2", "--out", str(tmp_path / "s"),
                 "--node-data", "reference", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--node-data reference needs a graph directory" in err
    assert not (tmp_path / "s").exists()


def _config(store, strategy="graph-parallel", **options):
    return build_config({"data": {"dataset": ""}, "model": {"name": "gcn", "hidden": 8, "layers": 2},
                         "strategy": {"name": strategy, "workers": 2, "partitions": str(store), **options},
                         "optim": {"epochs": 3}, "dtype": "float64", "progress": False,
                         "cache_dir": str(store.parent / "cache")})


def _same_runs(a: dict, b: dict) -> None:
    for mine, theirs in zip(a["epochs"], b["epochs"], strict=True):
        assert mine["loss"] == theirs["loss"]
        assert (mine["val_acc"], mine["test_acc"]) == (theirs["val_acc"], theirs["test_acc"])


def _no_rows_left(store) -> None:
    """The workers' gathered rows files (store_rows_file) are gone once the run ends."""
    tmp = store.parent / "cache" / "tmp"
    assert not tmp.is_dir() or not list(tmp.iterdir())


@pytest.mark.parametrize("kernels", ["auto", "torch"])
def test_graph_parallel_from_a_referencing_store_equals_the_copying_store(stores, monkeypatch, kernels):
    monkeypatch.setenv("GRAPHSCALE_KERNELS", kernels)
    copy, reference = stores
    _same_runs(run(_config(copy)), run(_config(reference)))
    _no_rows_left(reference)


def test_model_averaging_from_a_referencing_store_equals_the_copying_store(stores):
    copy, reference = stores
    _same_runs(run(_config(copy, "model-averaging", correction_steps=1)),
               run(_config(reference, "model-averaging", correction_steps=1)))
    _no_rows_left(reference)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps (Linux)")
@pytest.mark.parametrize("strategy", ["graph-parallel", "model-averaging"])
def test_a_worker_maps_a_referencing_stores_feature_rows_from_a_file_as_from_a_copying_store(graph_dir, tmp_path,
                                                                                             monkeypatch, strategy):
    """A worker's feature rows are pages of a file, never anonymous memory: the store's x.npy for a copying store,
    a private file gathered from the base directory for a referencing one (one worker: in this process)."""
    from graphscale.strategies.graph_parallel import GraphParallel
    from graphscale.strategies.model_averaging.strategy import ModelAveraging

    owner = partition_graph_dir(graph_dir, "random", 1)
    cls = GraphParallel if strategy == "graph-parallel" else ModelAveraging
    seen, setup = {}, cls.setup

    def spy(self, *args):
        setup(self, *args)
        x = self.x if strategy == "graph-parallel" else self.resident.x
        seen[mode] = mapping_of(x.data_ptr())

    monkeypatch.setattr(cls, "setup", spy)
    reports = {}
    for mode in ("copy", "reference"):
        write_graph_dir_store(graph_dir, tmp_path / mode, owner, 1, node_data=mode)
        config = build_config({"data": {"dataset": "", "feature_norm": "none"},
                               "model": {"name": "gcn", "hidden": 8, "layers": 2},
                               "strategy": {"name": strategy, "workers": 1, "partitions": str(tmp_path / mode)},
                               "optim": {"epochs": 2}, "progress": False, "cache_dir": str(tmp_path / "cache")})
        reports[mode] = run(config)
    _same_runs(reports["copy"], reports["reference"])
    assert seen["copy"] == str(part_dir(tmp_path / "copy", 0) / "x.npy")
    rows_dir = str(tmp_path / "cache" / "tmp" / ".rows.mapped-")
    assert seen["reference"].startswith(rows_dir) and seen["reference"].endswith("(deleted)"), seen
    assert not list((tmp_path / "cache" / "tmp").iterdir())


def test_the_runs_cached_store_of_a_graph_directory_copies_its_rows(tmp_path):
    config = build_config({"data": {"dataset": SPEC}, "strategy": {"name": "graph-parallel", "workers": 2},
                           "optim": {"epochs": 1}, "progress": False, "cache_dir": str(tmp_path / "cache")})
    from graphscale.prepare import prepare_data

    meta = check_partition_store(prepare_data(config).path)
    assert BASE_KEY not in meta  # a worker maps its rows from the store (a reference would gather them)


def _refused(store, tmp_path, capsys, match: str) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        load_partition(store, 0)
    code = main(["train", "--strategy", "graph-parallel", "--workers", "2", "--partitions", str(store),
                 "--no-progress", "--epochs", "1", "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and match in err and "--node-data copy" in err, err


def test_a_store_whose_base_directory_moved_is_refused_naming_it(graph_dir, tmp_path, capsys):
    base = tmp_path / "base"
    shutil.copytree(graph_dir, base)
    owner = partition_graph_dir(base, "random", 2)
    write_graph_dir_store(base, tmp_path / "store", owner, 2, node_data="reference")
    base.rename(tmp_path / "moved")
    _refused(tmp_path / "store", tmp_path, capsys, f"graph directory {base.resolve()}, which is missing")


@pytest.mark.parametrize("change", ["x", "mask", "removed"])
def test_a_store_whose_base_directory_changed_is_refused_naming_it(graph_dir, tmp_path, capsys, change):
    base = tmp_path / "base"
    shutil.copytree(graph_dir, base)
    write_graph_dir_store(base, tmp_path / "store", partition_graph_dir(base, "random", 2), 2, node_data="reference")
    if change == "x":  # the same shape, other values: only the fingerprint tells
        x = np.load(base / "x.npy")
        np.save(base / "x.npy", x[::-1].copy())
        match = "whose x.npy changed since the store was written"
    elif change == "mask":
        mask = np.load(base / "train_mask.npy")
        np.save(base / "train_mask.npy", ~mask)
        match = "whose train_mask.npy changed since the store was written"
    else:
        (base / "y.npy").unlink()
        match = "which no longer holds y.npy"
    _refused(tmp_path / "store", tmp_path, capsys, match)
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert meta[BASE_KEY]["path"] == str(base.resolve())

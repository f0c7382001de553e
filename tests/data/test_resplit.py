"""convert --split: a graph directory with a new seeded split, its other arrays the source's files (hard links)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.data.formats import MASKS, load_graph_dir, save_graph_dir
from graphscale.data.ingest import ingest
from graphscale.data.resplit import parse_split, split_masks
from graphscale.testing import random_graph

N = 200


@pytest.fixture
def source(tmp_path):
    graph = random_graph(N, avg_degree=4.0, num_features=5, num_classes=3, seed=1)
    return save_graph_dir(graph, tmp_path / "src"), graph


def test_split_shares_the_arrays_and_writes_the_masks(source, tmp_path):
    src, graph = source
    split = parse_split("train=0.1,val=0.05,test=0.2,seed=3")
    out = ingest(f"graphdir:{src}", tmp_path / "out", split=split)
    for name in ("indptr", "indices", "x", "y"):  # the same file, not a copy
        assert (out / f"{name}.npy").stat().st_ino == (src / f"{name}.npy").stat().st_ino, name
    loaded = load_graph_dir(out, verify=True)  # its meta.json records every file, linked or written
    assert torch.equal(loaded.indices, graph.indices) and torch.equal(loaded.x, graph.x)
    assert [int(getattr(loaded, m).sum()) for m in MASKS] == [20, 10, 40]
    union = loaded.train_mask.int() + loaded.val_mask.int() + loaded.test_mask.int()
    assert int(union.max()) == 1 and int(union.sum()) == 70  # disjoint; 130 vertices in no split
    perm = np.random.default_rng(3).permutation(N)  # the documented order: train, then val, then test
    assert set(np.flatnonzero(loaded.train_mask.numpy())) == set(perm[:20])
    assert set(np.flatnonzero(loaded.test_mask.numpy())) == set(perm[30:70])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["meta"]["split"] == {"from": str(src.resolve()), "train": 0.1, "val": 0.05, "test": 0.2, "seed": 3}
    assert meta["num_classes"] == graph.num_classes
    assert load_graph_dir(src).train_mask.equal(graph.train_mask)  # the source is unchanged


def test_test_defaults_to_the_rest():
    masks = split_masks(N, parse_split("train=0.25,val=0.25"))
    assert [int(m.sum()) for m in masks.values()] == [50, 50, 100]
    assert (masks["train_mask"] | masks["val_mask"] | masks["test_mask"]).all()


@pytest.mark.parametrize(("text", "message"), [
    ("train=0.1", "give train= and val="),
    ("train=0.5,val=0.4,test=0.2", "sum to 1.1, more than 1"),
    ("train=x,val=0.1", "train must be a fraction, got 'x'"),
    ("train=0.1,val=0.1,seed=1.5", "seed must be an integer"),
    ("train=0.1,val=0.1,extra=1", "bad item 'extra=1'"),
    ("train=0,val=0.1", "train must be above 0"),
    ("train=1.5,val=0", r"train must be a fraction in \[0, 1\]"),
])
def test_bad_split_is_one_line_naming_the_option(text, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_split(text)
    assert str(err.value).startswith("--split:") and "\n" not in str(err.value)


def test_split_needs_a_graph_directory(tmp_path):
    with pytest.raises(ValueError, match=r"--split: applies to a graph directory \(graphdir:DIR\)"):
        ingest("sbm:nodes=50,features=4", tmp_path / "out", split=parse_split("train=0.1,val=0.1"))
    assert not (tmp_path / "out").exists()


def test_convert_command_reports_written_and_linked_bytes(source, tmp_path, capsys):
    src, _ = source
    assert main(["convert", "--dataset", f"graphdir:{src}", "--out", str(tmp_path / "out"), "--split",
                 "train=0.01,val=0.01", "--no-progress"]) == 0
    line = capsys.readouterr().out
    masks = sum((tmp_path / "out" / f"{m}.npy").stat().st_size for m in MASKS)
    meta = (tmp_path / "out" / "meta.json").stat().st_size
    linked = sum((src / f"{k}.npy").stat().st_size for k in ("indptr", "indices", "x", "y"))
    assert f"({masks + meta} bytes)" in line and "linked" in line, line
    assert linked > masks + meta
    assert load_graph_dir(tmp_path / "out").train_mask.sum() == 2

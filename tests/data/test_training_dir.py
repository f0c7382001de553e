"""The training graph directory written in row chunks equals the in-memory training graph, array for array."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from graphscale.data.datasets import load_dataset
from graphscale.data.formats import load_graph_dir, save_graph_dir
from graphscale.data.graph import Graph
from graphscale.data.training_dir import write_training_dir
from graphscale.prepare import load_training_graph

ARRAYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def _assert_same(written: Graph, expected: Graph) -> None:
    for name in ARRAYS:
        a, b = getattr(written, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype, name
            assert torch.equal(a, b), name
    assert written.meta["feature_norm"] == expected.meta["feature_norm"]
    assert written.num_classes == expected.num_classes


@pytest.mark.parametrize("spec,features,norm,dtype", [
    ("cora", "", "auto", "float32"),                     # non-negative: row-normalised
    ("cora", "", "none", "float64"),
    ("sbm:nodes=300,degree=6,features=5", "", "auto", "float32"),  # signed: kept, x hard-linked
    ("sbm:nodes=300,degree=6,features=5", "", "row", "float64"),
    ("sbm:nodes=300,degree=6,features=5", "degree", "auto", "float32"),
    ("sbm:nodes=300,degree=6,features=5", "random:4", "row", "float32"),
    ("sbm:nodes=300,degree=6,features=5", "onehot", "none", "float32"),
    ("sbm:nodes=300,degree=6,features=5", "learnable:8", "auto", "float32"),
])
def test_chunked_training_dir_equals_the_in_memory_training_graph(tmp_path, spec, features, norm, dtype):
    source = save_graph_dir(load_dataset(spec), tmp_path / "source")
    out = write_training_dir(source, tmp_path / "train", features=features, seed=3, feature_norm=norm,
                             dtype=dtype, chunk_rows=7)
    _assert_same(load_graph_dir(out), load_training_graph(spec, norm, dtype, features, seed=3))


def test_features_kept_as_stored_are_shared_with_the_dataset_directory(tmp_path):
    source = save_graph_dir(load_dataset("sbm:nodes=200,degree=4,features=3"), tmp_path / "source")
    out = write_training_dir(source, tmp_path / "train", feature_norm="auto", dtype="float32")
    for name in ("indptr", "indices", "x"):
        assert os.stat(out / f"{name}.npy").st_ino == os.stat(source / f"{name}.npy").st_ino
    assert os.stat(out / "y.npy").st_ino != os.stat(source / "y.npy").st_ino


def test_multilabel_graph_gets_the_seeded_split(tmp_path):
    rng = np.random.default_rng(0)
    n, c = 60, 4
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    graph = Graph.from_edges(torch.from_numpy(src), torch.from_numpy(dst), n,
                             x=torch.rand(n, 3), y=torch.from_numpy((rng.random((n, c)) < 0.3).astype(np.uint8)),
                             name="ml", meta={"num_classes": c})
    source = save_graph_dir(graph, tmp_path / "source")
    out = load_graph_dir(write_training_dir(source, tmp_path / "train", feature_norm="auto", dtype="float32",
                                            chunk_rows=5))
    _assert_same(out, load_training_graph(f"graphdir:{source}", "auto", "float32"))


def test_untrainable_rows_are_named(tmp_path):
    graph = load_dataset("sbm:nodes=100,degree=4,features=3")
    graph.x = graph.x.clone()
    graph.x[42, 1] = float("nan")
    source = save_graph_dir(graph, tmp_path / "source")
    with pytest.raises(ValueError, match="features of node 42 are not finite"):
        write_training_dir(source, tmp_path / "train", chunk_rows=8)
    assert not (tmp_path / "train").exists()
    featureless = save_graph_dir(load_dataset("sbm:nodes=100,degree=4,features=0"), tmp_path / "bare")
    with pytest.raises(ValueError, match="no node features.*--features fastrp:D, spectral:D, degree"):
        write_training_dir(featureless, tmp_path / "train2")

"""FastRP structural features (``--features fastrp:D``) and the default for a featureless dataset."""

import json

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.data.datasets import load_dataset
from graphscale.data.fastrp import BETA, SPARSITY, WEIGHTS, fastrp_features, projection_rows
from graphscale.data.features import DEFAULT_FEATURELESS, compute_features, default_features, parse_features
from graphscale.data.formats import load_graph_dir, save_graph_dir
from graphscale.data.training_dir import write_training_dir
from graphscale.prepare import load_training_graph


def _graph():
    """A small graph with an isolated vertex (its features are a zero row)."""
    graph = load_dataset("sbm:nodes=60,degree=4,features=0")
    assert int(np.diff(graph.indptr.numpy()).min()) >= 0
    return graph


def _reference(graph, dim, seed):
    """The module docstring's formula with dense float64 matrices."""
    n = graph.num_nodes
    a = np.zeros((n, n))
    indptr, indices = graph.indptr.numpy(), graph.indices.numpy()
    for v in range(n):
        np.add.at(a[v], indices[indptr[v]: indptr[v + 1]], 1.0)
    degrees = a.sum(1)
    transition = a / np.maximum(degrees, 1)[:, None]
    x = projection_rows(torch.arange(n), dim, seed).astype(np.float64) * np.maximum(degrees, 1)[:, None] ** BETA
    total = np.zeros((n, dim))
    for weight in WEIGHTS:
        x = transition @ x
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        total += weight * np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)
    norm = np.linalg.norm(total, axis=1, keepdims=True)
    return np.divide(total, norm, out=np.zeros_like(total), where=norm > 0) * np.sqrt(dim)


def test_fastrp_is_the_formula_the_same_for_every_chunk_size_and_seeded():
    graph = _graph()
    x = fastrp_features(graph.indptr, graph.indices, graph.num_nodes, 16, seed=3)
    assert x.dtype == torch.float32 and x.shape == (60, 16)
    np.testing.assert_allclose(x.numpy(), _reference(graph, 16, 3), rtol=1e-4, atol=1e-5)
    for chunk_rows in (1, 3, 7, 59):
        assert torch.equal(fastrp_features(graph.indptr, graph.indices, 60, 16, seed=3, chunk_rows=chunk_rows), x)
    assert torch.equal(compute_features(graph, "fastrp:16", seed=3), x)
    assert not torch.equal(compute_features(graph, "fastrp:16", seed=4), x)
    rows = x.norm(dim=1)
    connected = torch.from_numpy(np.diff(graph.indptr.numpy()) > 0)
    assert torch.allclose(rows[connected], torch.full_like(rows[connected], 4.0))  # sqrt(16)
    assert bool((rows[~connected] == 0).all())


def test_projection_is_very_sparse_and_keyed_by_vertex():
    r = projection_rows(torch.arange(2000), 32, seed=0)
    values, counts = np.unique(r, return_counts=True)
    np.testing.assert_allclose(values, [-np.sqrt(SPARSITY), 0, np.sqrt(SPARSITY)], rtol=1e-6)
    assert abs(counts[1] / r.size - (1 - 1 / SPARSITY)) < 0.01 and abs(r.mean()) < 0.02
    ids = torch.tensor([1999, 5, 17])
    assert np.array_equal(projection_rows(ids, 32, seed=0), r[ids.numpy()])


def test_training_dir_fastrp_equals_in_memory(tmp_path):
    source = save_graph_dir(_graph(), tmp_path / "source")
    out = write_training_dir(source, tmp_path / "train", features="fastrp:8", seed=2, chunk_rows=7)
    memory = load_training_graph(f"graphdir:{source}", "auto", "float32", "fastrp:8", seed=2)
    assert torch.equal(torch.from_numpy(np.asarray(load_graph_dir(out).x)), memory.x)


def test_fastrp_forms_and_the_default():
    assert parse_features("fastrp:64") == ("fastrp", 64)
    for bad in ("fastrp", "fastrp:0", "fastrp:-2", "fastrp:8:2"):
        with pytest.raises(ValueError, match=r"^--features fastrp needs a width: fastrp:D") as err:
            parse_features(bad)
        assert "\n" not in str(err.value)
    assert default_features("edgelist:x.txt", "") == DEFAULT_FEATURELESS == "fastrp:128"
    assert default_features("mat:x.mat", "") == DEFAULT_FEATURELESS
    assert default_features("mat:x.mat:features=feats", "") == ""
    assert default_features("edgelist:x.txt", "degree") == "degree"
    assert default_features("cora", "") == ""


@pytest.mark.parametrize("strategy", [["--strategy", "single"], ["--strategy", "graph-parallel", "--workers", "2"]])
def test_featureless_dataset_trains_on_the_default_and_says_so(tmp_path, capsys, strategy):
    from tests.test_train_features import two_communities

    edges, labels = two_communities(tmp_path)
    spec = f"edgelist:{edges}:{labels}"
    report_path = tmp_path / "r.json"
    assert main(["train", "--dataset", spec, *strategy, "--epochs", "2", "--no-progress", "--cache-dir",
                 str(tmp_path / "cache"), "--json", str(report_path)]) == 0
    err = capsys.readouterr().err
    notice = [line for line in err.splitlines() if "has no node features" in line]
    expected = (f"graphscale: dataset {spec!r} has no node features: training on --features fastrp:128 (FastRP "
                "structural features computed from the graph); choose others with --features fastrp:D, spectral:D, "
                "degree, onehot, random:D or learnable:D")
    assert notice == [expected], err
    report = json.loads(report_path.read_text())
    assert report["config"]["data"]["features"] == "fastrp:128", report["config"]["data"]

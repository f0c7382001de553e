"""Training without features (--features) and on multi-label labels (BCE loss, micro-F1), end to end."""

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.run import run
from graphscale.strategies.base import counts_to_metrics, masked_loss_sum, split_counts


def two_communities(folder, n=120, seed=0):
    """A SNAP-style edge list of two dense communities and its 'node label' file (60 nodes per class: a
    20 / 30 / 10 per-class split)."""
    rng = np.random.default_rng(seed)
    lines = ["# two communities"]
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < (0.15 if (i < n // 2) == (j < n // 2) else 0.01):
                lines.append(f"{i}\t{j}")
    edges, labels = folder / "edges.txt", folder / "labels.txt"
    edges.write_text("\n".join(lines) + "\n")
    labels.write_text("".join(f"{i} {int(i >= n // 2)}\n" for i in range(n)))
    return edges, labels


def multilabel_mat(path, n=80, classes=4, seed=0):
    """A BlogCatalog-like .mat: sparse symmetric ``network``, sparse multi-label ``group`` (each node its
    community plus random extra labels), dense ``feats`` correlated with the community."""
    rng = np.random.default_rng(seed)
    community = rng.integers(0, classes, n)
    src, dst = [], []
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < (0.25 if community[i] == community[j] else 0.02):
                src.append(i)
                dst.append(j)
    network = sp.csc_matrix((np.ones(2 * len(src)), (src + dst, dst + src)), shape=(n, n))
    group = np.zeros((n, classes))
    group[np.arange(n), community] = 1
    group[rng.random((n, classes)) < 0.15] = 1
    feats = rng.normal(size=(n, 6)) + np.eye(classes)[community] @ rng.normal(size=(classes, 6))
    scipy.io.savemat(path, {"network": network, "group": sp.csc_matrix(group), "feats": feats})
    return path


def config(dataset, strategy="single", workers=1, epochs=4, **data):
    return build_config({"data": {"dataset": dataset, **data}, "optim": {"epochs": epochs}, "dtype": "float64",
                         "strategy": {"name": strategy, "workers": workers}, "progress": False})


def assert_same_history(a, b, tol=1e-10):
    assert len(a["epochs"]) == len(b["epochs"])
    for ea, eb in zip(a["epochs"], b["epochs"]):
        for key in ("loss", "train_loss", "val_loss", "test_loss", "train_acc", "val_acc", "test_acc"):
            assert ea[key] == pytest.approx(eb[key], abs=tol, rel=0), (key, ea["epoch"])


# ------------------------------------------------------------------ metric and loss
def test_micro_f1_against_a_hand_computed_value():
    logits = torch.tensor([[2.0, -1.0, 0.5], [-0.3, 0.2, -2.0], [1.0, 1.0, -1.0], [0.1, -0.1, 3.0]],
                          dtype=torch.float64)
    labels = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1], [0, 0, 1]], dtype=torch.uint8)
    masks = {"train": torch.tensor([True, True, True, False]), "val": torch.tensor([False, False, False, True]),
             "test": torch.zeros(4, dtype=torch.bool)}
    # train rows: predicted {0, 2}, {1}, {0, 1}; true {0}, {0, 1}, {1, 2}: tp = 3 (0; 1; 1), fp = 2 (2; 0),
    # fn = 2 (0; 2): micro-F1 = 2*3 / (2*3 + 2 + 2) = 0.6. val: predicted {0, 2}, true {2}: 2 / (2 + 1) = 2/3.
    metrics = counts_to_metrics(split_counts(logits, labels, masks))
    assert metrics["train_acc"] == pytest.approx(0.6, abs=1e-15)
    assert metrics["val_acc"] == pytest.approx(2 / 3, abs=1e-15)
    assert np.isnan(metrics["test_acc"]) and np.isnan(metrics["test_loss"])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[:3], labels[:3].double())  # mean over 3 x 3
    # the multi-label loss sums over a vertex's 3 labels: per vertex 3 * bce, over the 3 training vertices 9 * bce
    assert metrics["train_loss"] == pytest.approx(3 * float(bce), abs=1e-14)
    assert float(masked_loss_sum(logits, labels, masks["train"])) == pytest.approx(9 * float(bce), abs=1e-14)


def test_single_label_metric_is_accuracy_exactly():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(37, 5, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 5, (37,), generator=gen)
    masks = {s: torch.rand(37, generator=gen) < 0.6 for s in ("train", "val", "test")}
    metrics = counts_to_metrics(split_counts(logits, labels, masks))
    for split, mask in masks.items():
        correct = int((logits.argmax(1)[mask] == labels[mask]).sum())
        assert metrics[f"{split}_acc"] == correct / int(mask.sum())  # bit for bit


# ------------------------------------------------------------------ featureless
def test_cli_trains_an_edge_list_with_learnable_features(tmp_path, capsys):
    edges, labels = two_communities(tmp_path)
    out = tmp_path / "report.json"
    assert main(["train", "--dataset", f"edgelist:{edges}:{labels}", "--features", "learnable:64", "--epochs", "15",
                 "--no-progress", "--json", str(out)]) == 0
    assert "metric: accuracy" in capsys.readouterr().out
    report = json.loads(out.read_text())
    losses = [e["loss"] for e in report["epochs"]]
    assert report["metric"] == "accuracy" and report["config"]["data"]["features"] == "learnable:64"
    assert losses[-1] < losses[0] and report["final"]["test_acc"] >= 0.5


@pytest.mark.parametrize("features", ["degree", "onehot", "random:8", "spectral:4"])
def test_computed_features_train_and_are_deterministic(tmp_path, features):
    edges, labels = two_communities(tmp_path)
    first = run(config(f"edgelist:{edges}:{labels}", features=features, epochs=3))
    again = run(config(f"edgelist:{edges}:{labels}", features=features, epochs=3))
    assert [e["loss"] for e in first["epochs"]] == [e["loss"] for e in again["epochs"]]
    assert first["graph"]["features"] == {"degree": 1, "onehot": 120, "random:8": 8, "spectral:4": 4}[features]


def test_spectral_features_are_the_leading_eigenvectors_scaled_and_signed(tmp_path):
    """spectral:D: A_hat u = lambda u for D^-1/2 (A + I) D^-1/2, eigenvalues decreasing (the first 1), columns of
    root mean square 1 whose largest-magnitude entry is positive; the same every time."""
    from graphscale.data.datasets import load_dataset
    from graphscale.data.features import compute_features

    edges, labels = two_communities(tmp_path)
    graph = load_dataset(f"edgelist:{edges}:{labels}")
    x = compute_features(graph, "spectral:5").double()
    assert x.shape == (120, 5) and torch.equal(x, compute_features(graph, "spectral:5").double())
    a = torch.zeros(120, 120, dtype=torch.float64)
    a[graph.edge_index()[1], graph.edge_index()[0]] = 1
    a = ((a + a.T + torch.eye(120)) > 0).double()
    scale = a.sum(1).rsqrt()
    a_hat = scale[:, None] * a * scale[None, :]
    values = (x * (a_hat @ x)).sum(0) / (x * x).sum(0)
    assert torch.allclose(a_hat @ x, x * values, atol=1e-4)
    assert bool((values[:-1] >= values[1:] - 1e-9).all()) and abs(float(values[0]) - 1) < 1e-6
    assert torch.allclose(x.pow(2).mean(0), torch.ones(5, dtype=torch.float64), atol=1e-5)
    assert bool((x.gather(0, x.abs().argmax(0, keepdim=True)) > 0).all())
    assert bool((x[:60, 1] > 0).all() != (x[60:, 1] > 0).all())  # the second splits the two communities


def test_featureless_errors(tmp_path, capsys):
    edges, labels = two_communities(tmp_path)
    spec = f"edgelist:{edges}:{labels}"
    for argv, message in ((["--dataset", spec, "--features", "fastrp"], "--features fastrp needs a width"),
                          (["--dataset", spec, "--features", "fastrp:0"], "--features fastrp needs a width"),
                          (["--dataset", spec, "--features", "fastrp:x8"], "--features fastrp needs a width"),
                          (["--dataset", spec, "--features", "fastrp:8:2"], "--features fastrp needs a width"),
                          (["--dataset", spec, "--features", "fast:8"], "--features must be one of fastrp:D, "),
                          (["--dataset", spec, "--features", "spectral:119"],
                           "--features spectral:119: D must be below the vertex count minus one (119)"),
                          (["--dataset", spec, "--features", "learnable:8", "--strategy", "data-parallel"],
                           ("--features learnable:8 (a learnable input table) is supported by strategies "
                            "graph-parallel, single, not by 'data-parallel'")),
                          (["--dataset", spec, "--features", "random"], "--features random needs a width")):
        assert main(["train", "--epochs", "1", "--no-progress", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_learnable_input_resumes_exactly(tmp_path):
    """The table and its Adam moments travel in the checkpoint."""
    edges, labels = two_communities(tmp_path)
    spec, ckpt = f"edgelist:{edges}:{labels}", str(tmp_path / "ckpt.pt")
    straight = run(config(spec, features="learnable:8", epochs=4))
    first = config(spec, features="learnable:8", epochs=2)
    first.checkpoint = ckpt
    run(first)
    second = config(spec, features="learnable:8", epochs=4)
    second.checkpoint, second.resume = ckpt, True
    assert [e["loss"] for e in run(second)["epochs"]] == [e["loss"] for e in straight["epochs"]]


def test_features_in_a_toml_file(tmp_path):
    (tmp_path / "run.toml").write_text('[data]\nfeatures = "learnable:8"\n')
    assert build_config({}, tmp_path / "run.toml").data.features == "learnable:8"


def test_learnable_input_graph_parallel_equals_single(tmp_path):
    """The row-sharded table (owned rows + halo exchange) follows the single-process table exactly."""
    edges, labels = two_communities(tmp_path)
    spec = f"edgelist:{edges}:{labels}"
    single = run(config(spec, features="learnable:16"))
    parallel = run(config(spec, "graph-parallel", 2, features="learnable:16"))
    assert_same_history(single, parallel)
    assert parallel["final"]["bytes_per_epoch"]["halo"] > 0


# ------------------------------------------------------------------ multi-label
def test_multilabel_mat_trains_single_and_graph_parallel_alike(tmp_path, capsys):
    spec = f"mat:{multilabel_mat(tmp_path / 'ml.mat')}:features=feats"
    out = tmp_path / "single.json"
    assert main(["train", "--dataset", spec, "--epochs", "4", "--dtype", "float64", "--no-progress",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "metric: micro-f1" in printed and "test micro-f1 at best validation" in printed
    single = json.loads(out.read_text())
    assert single["metric"] == "micro-f1" and single["graph"]["multilabel"]
    assert single["graph"]["train"] > 0 and single["graph"]["val"] > 0 and single["graph"]["test"] > 0
    parallel = run(config(spec, "graph-parallel", 2))
    assert parallel["metric"] == "micro-f1"
    assert_same_history(single, parallel)
    assert_same_history(single, run(config(spec, "offload", 2)))  # host-shared: the graph directory's [N, C] labels
    assert 0 < single["final"]["test_acc"] <= 1

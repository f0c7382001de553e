"""Dataset specs: bundled Cora (vs PyG), Planetoid / npz / OGB / .mat fixtures, graph dirs, PyG adapter."""

from __future__ import annotations

import collections
import datetime
import gzip
import pickle
import shutil
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch

from graphscale.data.convert import to_graph
from graphscale.data.datasets import (
    DATASET_HELP,
    describe_dataset,
    load_dataset,
    untrainable_reason,
)
from graphscale.data.formats import save_graph_dir
from graphscale.data.graph import Graph
from graphscale.data.readers.ogb import read_csv_gz
from graphscale.data.readers.planetoid import cora_dir, read_planetoid
from graphscale.data.readers.pyg import to_pyg
from graphscale.testing import random_graph

DATA = ("x", "y", "train_mask", "val_mask", "test_mask")


def assert_normalised(g: Graph) -> None:
    """The contract of every reader: symmetric, coalesced, no self-loops, standard dtypes (multi-label
    graphs: a uint8 0/1 label matrix and no split)."""
    assert not g.has_self_loops()
    canonical = g.coalesce().symmetrize()
    assert torch.equal(canonical.indptr, g.indptr) and torch.equal(canonical.indices, g.indices)
    assert g.x is None or g.x.dtype == torch.float32
    if g.multilabel:
        assert g.y.dtype == torch.uint8 and int(g.y.max()) <= 1
        assert all(getattr(g, m) is None for m in ("train_mask", "val_mask", "test_mask"))
    else:
        assert g.y.dtype == torch.int64
        assert all(getattr(g, m).dtype == torch.bool for m in ("train_mask", "val_mask", "test_mask"))
    assert "num_classes" in g.meta and "source" in g.meta


def edge_set(edge_index: torch.Tensor, n: int) -> set[int]:
    return set((edge_index[0] * n + edge_index[1]).tolist())


def pyg_read_planetoid(folder, name):
    pytest.importorskip("torch_geometric")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch_geometric.io import read_planetoid_data
        return read_planetoid_data(str(folder), name)


# ------------------------------------------------------------------ Cora
def test_cora_counts():
    g = load_dataset("cora")
    assert_normalised(g)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert [int(getattr(g, m).sum()) for m in ("train_mask", "val_mask", "test_mask")] == [140, 500, 1000]
    assert g.name == "cora" and "bundled" in g.meta["source"]


def test_cora_matches_pyg():
    g = load_dataset("cora")
    ref = pyg_read_planetoid(cora_dir(), "cora")
    for key in DATA:
        assert torch.equal(getattr(g, key), getattr(ref, key)), key
    assert edge_set(g.edge_index(), g.num_nodes) == edge_set(ref.edge_index, g.num_nodes)
    assert ref.edge_index.shape[1] == g.num_edges == 10556


def test_planetoid_dir_spec(tmp_path):
    shutil.copytree(cora_dir(), tmp_path / "raw")
    g = load_dataset(f"planetoid:{tmp_path / 'raw'}")
    assert g.name == "cora" and g.num_nodes == 2708 and g.meta["source"].endswith(":cora")
    assert load_dataset(f"planetoid:{tmp_path / 'raw'}:cora").num_edges == 10556
    shutil.copy(tmp_path / "raw" / "ind.cora.graph", tmp_path / "raw" / "ind.other.graph")
    with pytest.raises(ValueError, match=r"holds Planetoid datasets \['cora', 'other'\]"):
        load_dataset(f"planetoid:{tmp_path / 'raw'}")
    with pytest.raises(FileNotFoundError, match=r"ind\.other\.x does not exist"):
        load_dataset(f"planetoid:{tmp_path / 'raw'}:other")
    with pytest.raises(FileNotFoundError, match=r"ind\.citeseer\.x does not exist"):
        load_dataset(f"planetoid:{tmp_path / 'raw'}:citeseer")
    with pytest.raises(FileNotFoundError, match="Planetoid directory .*nope does not exist"):
        load_dataset(f"planetoid:{tmp_path / 'nope'}")


# ------------------------------------------------ CiteSeer-style fixture
def write_planetoid(folder, name, *, n_feat=5, classes=3, n_train=6, n_allx=520, test_index=None, seed=0):
    """A Planetoid dataset in the original pickle format, with a gap in the test indices."""
    rng = np.random.default_rng(seed)
    test_index = np.array(test_index if test_index is not None else
                          rng.permutation([i for i in range(n_allx, n_allx + 20) if i not in (524, 533)]))
    n = int(test_index.max()) + 1
    onehot = np.eye(classes)[rng.integers(0, classes, n)]
    feats = (rng.random((n, n_feat)) < 0.4).astype(np.float32)
    parts = {"x": sp.csr_matrix(feats[:n_train]), "allx": sp.csr_matrix(feats[:n_allx]),
             "tx": sp.csr_matrix(feats[n_allx: n_allx + len(test_index)]),
             "y": onehot[:n_train], "ally": onehot[:n_allx], "ty": onehot[n_allx: n_allx + len(test_index)]}
    graph = collections.defaultdict(list)
    src, dst = rng.integers(0, n, 800), rng.integers(0, n, 800)
    for u, v in zip(src.tolist(), dst.tolist()):
        graph[u].append(v)
        graph[v].append(u)
    graph[3].append(3)  # a self-loop
    graph[0].extend([1, 1])  # a duplicate
    graph[1].append(0)
    parts["graph"] = graph
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in parts.items():
        (folder / f"ind.{name}.{key}").write_bytes(pickle.dumps(value, protocol=2))
    (folder / f"ind.{name}.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return test_index


def test_citeseer_style_isolated_test_nodes_match_pyg(tmp_path):
    test_index = write_planetoid(tmp_path, "citeseer")
    g = read_planetoid(tmp_path)
    assert_normalised(g)
    ref = pyg_read_planetoid(tmp_path, "citeseer")
    assert g.num_nodes == ref.num_nodes == 540
    for key in ("x", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(g, key), getattr(ref, key)), key
    missing = torch.tensor([524, 533])
    assert g.y[missing].tolist() == [-1, -1] and ref.y[missing].tolist() == [0, 0]
    labelled = g.y >= 0
    assert int(labelled.sum()) == 538 and torch.equal(g.y[labelled], ref.y[labelled])
    assert bool((g.x[missing] == 0).all()) and not bool(g.test_mask[missing].any())
    assert edge_set(g.edge_index(), 540) == edge_set(ref.edge_index, 540)
    assert int(g.test_mask.sum()) == len(test_index) and g.num_classes == 3


def test_planetoid_bad_files(tmp_path):
    write_planetoid(tmp_path, "bad")
    (tmp_path / "ind.bad.graph").write_bytes(pickle.dumps(datetime.date(2020, 1, 1)))
    with pytest.raises(ValueError, match=r"ind\.bad\.graph is not a valid Planetoid pickle.*refusing to load "
                                         r"datetime\.date"):
        read_planetoid(tmp_path, "bad")
    (tmp_path / "ind.bad.graph").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="expected a dict of adjacency lists"):
        read_planetoid(tmp_path, "bad")
    write_planetoid(tmp_path / "short", "short")
    (tmp_path / "short" / "ind.short.test.index").write_text("520\n521\n")
    with pytest.raises(ValueError, match=r"ind\.short\.tx / \.ty have 18 / 18 rows but ind\.short\.test\.index "
                                         r"lists 2 test nodes"):
        read_planetoid(tmp_path / "short")
    write_planetoid(tmp_path / "small", "small", n_allx=100, test_index=range(100, 120))
    with pytest.raises(ValueError, match="6 training \\+ 500 validation nodes exceed the 120 nodes"):
        read_planetoid(tmp_path / "small")


# --------------------------------------------------------------------- npz
def csr_arrays(prefix: str, matrix) -> dict:
    """A CSR matrix as the four arrays PREFIXdata, PREFIXindices, PREFIXindptr, PREFIXshape."""
    matrix = sp.csr_matrix(matrix)
    return {f"{prefix}data": matrix.data, f"{prefix}indices": matrix.indices, f"{prefix}indptr": matrix.indptr,
            f"{prefix}shape": np.array(matrix.shape)}


def write_npz(path, *, dense_attr=False, dotted=False, seed=0, labels=None):
    """The gnn-benchmark layout (adj_data, ..., attr_data, ..., labels) or, with ``dotted``, the PPNP spelling
    (adj_matrix.data, ..., attr_matrix.data, ..., labels, plus the idx_to_node / class_names extras)."""
    rng = np.random.default_rng(seed)
    n = 130
    if labels is None:
        labels = np.r_[np.zeros(40), np.ones(40), np.full(40, 2), np.full(10, 3)].astype(np.int64)[rng.permutation(n)]
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    src[0] = dst[0] = 5
    adj = sp.csr_matrix((np.ones(500), (src, dst)), shape=(n, n))
    attr = sp.random(n, 6, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    adj_prefix, attr_prefix = ("adj_matrix.", "attr_matrix.") if dotted else ("adj_", "attr_")
    arrays = {**csr_arrays(adj_prefix, adj), **(labels if isinstance(labels, dict) else {"labels": labels})}
    if dense_attr:
        arrays["attr_matrix"] = attr.toarray()
    else:
        arrays.update(csr_arrays(attr_prefix, attr))
    if dotted:
        arrays["idx_to_node"] = np.array({i: f"paper{i}" for i in range(n)}, dtype=object)  # pickled: not read
        arrays["class_names"] = np.array(["a", "b", "c", "d"])
    np.savez(path, **arrays)
    return src, dst, attr.toarray(), labels


def test_npz_reader(tmp_path):
    src, dst, attr, labels = write_npz(tmp_path / "toy.npz")
    g = load_dataset(f"npz:{tmp_path / 'toy.npz'}")
    assert_normalised(g)
    assert g.name == "toy" and g.num_classes == 4 and g.meta["source"].endswith("toy.npz:0")
    np.testing.assert_allclose(g.x.numpy(), attr.astype(np.float32))
    assert torch.equal(g.y, torch.from_numpy(labels))
    keep = src != dst
    n = g.num_nodes
    expected = set((src[keep] * n + dst[keep]).tolist()) | set((dst[keep] * n + src[keep]).tolist())
    assert edge_set(g.edge_index(), n) == expected
    for cls, size in ((0, 40), (1, 40), (2, 40), (3, 10)):
        in_cls = g.y == cls
        assert int((g.train_mask & in_cls).sum()) == min(20, size)
        assert int((g.val_mask & in_cls).sum()) == min(30, size - min(20, size))
        assert int((g.test_mask & in_cls).sum()) == max(0, size - 50)
    assert int((g.train_mask.int() + g.val_mask.int() + g.test_mask.int()).max()) == 1
    again, other = load_dataset(f"npz:{tmp_path / 'toy.npz'}:0"), load_dataset(f"npz:{tmp_path / 'toy.npz'}:5")
    assert torch.equal(again.train_mask, g.train_mask) and not torch.equal(other.train_mask, g.train_mask)
    write_npz(tmp_path / "dense.npz", dense_attr=True)
    dense = load_dataset(f"npz:{tmp_path / 'dense.npz'}")
    assert torch.equal(dense.x, g.x) and torch.equal(dense.indices, g.indices)


@pytest.mark.parametrize("dense_attr", [False, True])
def test_npz_dotted_spelling(tmp_path, dense_attr):
    write_npz(tmp_path / "plain.npz", dense_attr=dense_attr)
    write_npz(tmp_path / "cora_ml.npz", dense_attr=dense_attr, dotted=True)
    plain, dotted = load_dataset(f"npz:{tmp_path / 'plain.npz'}"), load_dataset(f"npz:{tmp_path / 'cora_ml.npz'}")
    assert_normalised(dotted)
    assert (dotted.num_nodes, dotted.num_edges, dotted.num_features, dotted.num_classes) == \
        (plain.num_nodes, plain.num_edges, 6, 4) == (130, plain.num_edges, 6, 4)
    for key in ("indptr", "indices", *DATA):
        assert torch.equal(getattr(dotted, key), getattr(plain, key)), key
    assert dotted.name == "cora_ml"


def test_npz_label_matrices(tmp_path):
    rng = np.random.default_rng(3)
    classes = rng.integers(0, 3, 130)
    onehot = np.eye(3)[classes]
    onehot[7] = 0  # unlabelled
    write_npz(tmp_path / "onehot.npz", dotted=True, labels=onehot)
    g = load_dataset(f"npz:{tmp_path / 'onehot.npz'}")
    assert (g.num_nodes, g.num_features, g.num_classes, g.multilabel) == (130, 6, 3, False)
    assert g.y[7] == -1 and torch.equal(g.y[g.y >= 0], torch.from_numpy(np.delete(classes, 7)))
    multi = (rng.random((130, 5)) < 0.3).astype(np.float32)
    multi[0] = [1, 1, 0, 0, 1]
    write_npz(tmp_path / "multi.npz", dotted=True, labels=csr_arrays("labels.", multi))
    g = load_dataset(f"npz:{tmp_path / 'multi.npz'}")
    assert_normalised(g)
    assert (g.num_nodes, g.num_features, g.num_classes, g.multilabel) == (130, 6, 5, True)
    assert g.y.dtype == torch.uint8 and torch.equal(g.y, torch.from_numpy(multi.astype(np.uint8)))
    assert g.train_mask is None and "multi-label" in describe_dataset(f"npz:{tmp_path / 'multi.npz'}")["labels"]
    assert "no training nodes" in untrainable_reason(f"npz:{tmp_path / 'multi.npz'}", g)  # training adds a split
    from graphscale.prepare import training_graph

    trained = training_graph(f"npz:{tmp_path / 'multi.npz'}")
    labelled = int(trained.y.any(dim=1).sum())
    sizes = [int(getattr(trained, f"{s}_mask").sum()) for s in ("train", "val", "test")]
    assert sum(sizes) == labelled and sizes[0] == round(0.6 * labelled) and sizes[1] == round(0.2 * labelled)
    assert untrainable_reason(f"npz:{tmp_path / 'multi.npz'}", trained) is None


def one_line_error(error, spec, match):
    """Load ``spec`` and check it fails with ``error``: one line that names the file and matches ``match``."""
    with pytest.raises(error, match=match) as info:
        load_dataset(spec)
    file = spec.split(":")[1]
    assert "\n" not in str(info.value) and file in str(info.value), str(info.value)
    return str(info.value)


def test_npz_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz does not exist"):
        load_dataset(f"npz:{tmp_path / 'missing.npz'}")
    np.savez(tmp_path / "partial.npz", adj_data=np.ones(1), labels=np.zeros(2))
    with pytest.raises(ValueError, match=r"partial\.npz lacks \['adj_indices', 'adj_indptr', 'adj_shape'\]"):
        load_dataset(f"npz:{tmp_path / 'partial.npz'}")
    np.savez(tmp_path / "dotted.npz", **{"adj_matrix.data": np.ones(1), "labels": np.zeros(2)})
    one_line_error(ValueError, f"npz:{tmp_path / 'dotted.npz'}",
                   r"lacks \['adj_matrix\.indices', 'adj_matrix\.indptr', 'adj_matrix\.shape'\]")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    one_line_error(ValueError, f"npz:{tmp_path / 'junk.npz'}", r"junk\.npz is not a readable \.npz file")
    write_npz(tmp_path / "good.npz")
    data = (tmp_path / "good.npz").read_bytes()
    (tmp_path / "half.npz").write_bytes(data[: len(data) // 2])
    one_line_error(ValueError, f"npz:{tmp_path / 'half.npz'}", r"half\.npz is not a readable \.npz file \(truncated")
    scipy.io.savemat(tmp_path / "graph.mat", {"network": sp.eye(3, format="csc")})
    message = one_line_error(ValueError, f"npz:{tmp_path / 'graph.mat'}",
                             r"graph\.mat is a MATLAB \.mat file, not a \.npz archive; read it with mat:")
    assert "pickle" not in message
    np.save(tmp_path / "one.npy", np.ones(3))
    one_line_error(ValueError, f"npz:{tmp_path / 'one.npy'}", r"one\.npy is a single \.npy array, not a \.npz")


# --------------------------------------------------------------------- mat
def blogcatalog_like(n=40, classes=5, seed=0):
    """A symmetric sparse ``network`` and a sparse multi-label ``group`` (as BlogCatalog.mat / Flickr.mat)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    network = sp.csc_matrix((np.ones(240), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    network.data[:] = 1
    group = (rng.random((n, classes)) < 0.3).astype(np.float64)
    group[0] = 0  # a node without a label
    group[1, :2] = 1  # one with two
    return network, sp.csc_matrix(group)


def undirected_count(matrix) -> int:
    """Directed records of the symmetrised, loop-free, deduplicated graph of ``matrix``."""
    m = sp.coo_matrix(matrix)
    keep = m.row != m.col
    return len(set(zip(m.row[keep].tolist(), m.col[keep].tolist())) | set(zip(m.col[keep].tolist(),
                                                                               m.row[keep].tolist())))


def test_mat_multilabel(tmp_path):
    network, group = blogcatalog_like()
    scipy.io.savemat(tmp_path / "blogcatalog.mat", {"network": network, "group": group})
    g = load_dataset(f"mat:{tmp_path / 'blogcatalog.mat'}")
    assert_normalised(g)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (40, undirected_count(network), 0, 5)
    assert g.multilabel and torch.equal(g.y, torch.from_numpy(group.toarray()).to(torch.uint8))
    assert g.meta["variables"] == {"adj": "network", "labels": "group", "features": None}
    reason = untrainable_reason(f"mat:{tmp_path / 'blogcatalog.mat'}", g)
    assert "has no node features" in reason and "--features fastrp:D, spectral:D, degree" in reason
    assert "features=NAME" in untrainable_reason(f"mat:{tmp_path / 'blogcatalog.mat'}")  # from the spec alone
    summary = describe_dataset(f"mat:{tmp_path / 'blogcatalog.mat'}")
    labelled, labels = int((group.sum(axis=1) > 0).sum()), int(group.sum())
    assert summary["classes"] == 5 and summary["labels"] == f"multi-label: {labelled} labelled nodes, {labels} labels"


def test_multilabel_graph_partitions_with_its_label_matrix(tmp_path):
    from graphscale.cli import main
    from graphscale.partition.store import check_partition_store

    network, group = blogcatalog_like()
    scipy.io.savemat(tmp_path / "blogcatalog.mat", {"network": network, "group": group})
    assert main(["partition", "--dataset", f"mat:{tmp_path / 'blogcatalog.mat'}", "--method", "metis", "--parts", "2",
                 "--out", str(tmp_path / "store"), "--no-progress"]) == 0
    meta = check_partition_store(tmp_path / "store")
    assert meta["num_nodes"] == 40 and "y" in meta["node_arrays"] and meta["num_classes"] == 5 and meta["multilabel"]
    assert "train_mask" in meta["node_arrays"]  # training's split, so the store can be trained from
    from graphscale.partition.store import load_partition

    g = load_dataset(f"mat:{tmp_path / 'blogcatalog.mat'}")
    for s in range(2):
        part = load_partition(tmp_path / "store", s)
        assert part.graph.multilabel and torch.equal(part.graph.y, g.y[part.orig_ids])


def test_mat_single_label_forms(tmp_path):
    network, _ = blogcatalog_like()
    rng = np.random.default_rng(1)
    classes = rng.integers(0, 3, 40)
    feats = rng.random((40, 7))
    onehot = np.eye(3)[classes]
    scipy.io.savemat(tmp_path / "onehot.mat", {"A": network.toarray(), "gnd": onehot, "feats": feats})
    g = load_dataset(f"mat:{tmp_path / 'onehot.mat'}:features=feats,seed=2")
    assert_normalised(g)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (40, undirected_count(network), 7, 3)
    assert torch.equal(g.y, torch.from_numpy(classes)) and not g.multilabel
    np.testing.assert_allclose(g.x.numpy(), feats.astype(np.float32))
    assert int(g.train_mask.sum()) == 40 and untrainable_reason(f"mat:{tmp_path / 'onehot.mat'}:features=feats", g) \
        is None
    assert g.meta["source"].endswith("onehot.mat:adj=A,labels=gnd,features=feats,seed=2")
    scipy.io.savemat(tmp_path / "vector.mat", {"network": network, "label": (classes + 1)[None, :].astype(float)})
    g = load_dataset(f"mat:{tmp_path / 'vector.mat'}")  # MATLAB's 1 x N row of 1-based class ids
    assert (g.num_nodes, g.num_features, g.num_classes) == (40, 0, 3) and g.meta["class_names"] == ["1", "2", "3"]
    assert torch.equal(g.y, torch.from_numpy(classes))


def test_mat_facebook100_local_info(tmp_path):
    network, _ = blogcatalog_like(n=30)
    rng = np.random.default_rng(2)
    local_info = np.c_[rng.integers(1, 3, 30), rng.integers(0, 3, 30), 2005 + rng.integers(0, 4, 30)].astype(float)
    scipy.io.savemat(tmp_path / "Caltech36.mat", {"A": network, "local_info": local_info})
    spec = f"mat:{tmp_path / 'Caltech36.mat'}"
    one_line_error(ValueError, spec, r"labels 'local_info' is an \[30, 3\] matrix that is neither one-hot nor 0/1 "
                                     r"multi-label; choose one column of class ids with column=K")
    g = load_dataset(f"{spec}:column=2")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (30, undirected_count(network), 0, 4)
    assert g.meta["class_names"] == ["2005", "2006", "2007", "2008"]
    assert torch.equal(g.y, torch.from_numpy(local_info[:, 2].astype(np.int64) - 2005))
    one_line_error(ValueError, f"{spec}:column=3", r"has 3 columns; column=3 is not one of 0\.\.2")


def test_mat_errors(tmp_path):
    network, group = blogcatalog_like()
    scipy.io.savemat(tmp_path / "two.mat", {"homo": network, "net_rur": network, "label": group[:, 0].T.toarray()})
    message = one_line_error(ValueError, f"mat:{tmp_path / 'two.mat'}",
                             r"cannot tell which variable is the adjacency \(a square matrix\), 2 fit; it holds "
                             r"homo \(sparse 40x40\), net_rur \(sparse 40x40\), label \(float64 1x40\)")
    assert "adj=NAME,labels=NAME" in message
    g = load_dataset(f"mat:{tmp_path / 'two.mat'}:adj=homo")
    assert g.meta["variables"]["labels"] == "label" and g.num_classes == 2
    assert load_dataset(f"mat:{tmp_path / 'two.mat'}:adj=homo,labels=net_rur").multilabel
    one_line_error(ValueError, f"mat:{tmp_path / 'two.mat'}:adj=nope", r"has no variable 'nope' \(for adj=\)")
    one_line_error(ValueError, f"mat:{tmp_path / 'two.mat'}:adj=label", r"variable 'label' .* cannot be the adjacency")
    with pytest.raises(ValueError, match=r"bad option 'adjacency=homo'; mat: takes adj=\.\.\.,labels="):
        load_dataset(f"mat:{tmp_path / 'two.mat'}:adjacency=homo")
    scipy.io.savemat(tmp_path / "nolabels.mat", {"network": network})
    g = load_dataset(f"mat:{tmp_path / 'nolabels.mat'}")
    assert g.y is None and g.num_classes == 0 and g.num_edges == undirected_count(network)
    write_npz(tmp_path / "graph.npz")
    one_line_error(ValueError, f"mat:{tmp_path / 'graph.npz'}",
                   r"graph\.npz is a zip archive \(a \.npz\?\), not a MATLAB \.mat file; read it with npz:")
    (tmp_path / "v73.mat").write_bytes(b"MATLAB 7.3 MAT-file, Platform: GLNXA64" + bytes(600))
    one_line_error(ValueError, f"mat:{tmp_path / 'v73.mat'}", r"is a MATLAB v7\.3 \(HDF5\) \.mat file.*'-v7'")
    (tmp_path / "text.mat").write_text("0 1\n1 2\n")
    one_line_error(ValueError, f"mat:{tmp_path / 'text.mat'}", r"text\.mat is not a readable MATLAB \.mat file")
    data = (tmp_path / "nolabels.mat").read_bytes()
    (tmp_path / "half.mat").write_bytes(data[: len(data) // 2])
    one_line_error(ValueError, f"mat:{tmp_path / 'half.mat'}", r"half\.mat is not a readable MATLAB \.mat file")
    with pytest.raises(FileNotFoundError, match=r"nope\.mat does not exist"):
        load_dataset(f"mat:{tmp_path / 'nope.mat'}")


def test_multilabel_graph():
    g = Graph.from_edges(torch.tensor([0]), torch.tensor([1]), 2, y=torch.tensor([[1, 0, 1], [0, 0, 0]]))
    assert g.multilabel and g.num_classes == 3
    assert not random_graph(5).multilabel
    with pytest.raises(ValueError, match=r"Graph\.y must be \[N\] class ids or an \[N, C\] multi-label matrix"):
        Graph.from_edges(torch.tensor([0]), torch.tensor([1]), 2, y=torch.zeros(2, 1, 1))


# --------------------------------------------------------------------- ogb
def write_csv_gz(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(",".join(map(str, row)) + "\n" for row in rows))


def write_ogb(root, *, splits=("time",), num_node_list=True, seed=0):
    rng = np.random.default_rng(seed)
    n = 60
    edges = np.stack([rng.integers(0, n, 200), rng.integers(0, n, 200)], 1)
    feats = rng.standard_normal((n, 4)).round(4)
    labels = rng.integers(0, 5, n).astype(float)
    labels[7] = np.nan
    write_csv_gz(root / "raw" / "edge.csv.gz", edges)
    write_csv_gz(root / "raw" / "node-feat.csv.gz", feats)
    write_csv_gz(root / "raw" / "node-label.csv.gz", [["nan" if np.isnan(v) else int(v)] for v in labels])
    write_csv_gz(root / "raw" / "num-edge-list.csv.gz", [[len(edges)]])
    if num_node_list:
        write_csv_gz(root / "raw" / "num-node-list.csv.gz", [[n]])
    perm = rng.permutation(n)
    for split in splits:
        for part, index in zip(("train", "valid", "test"), (perm[:30], perm[30:40], perm[40:])):
            write_csv_gz(root / "split" / split / f"{part}.csv.gz", [[i] for i in index])
    return edges, feats, labels, perm


@pytest.mark.parametrize("num_node_list", [True, False])
def test_ogb_reader(tmp_path, num_node_list):
    root = tmp_path / "ogbn_tiny"
    edges, feats, labels, perm = write_ogb(root, num_node_list=num_node_list)
    for spec in (f"ogb:{root}", f"ogb:{tmp_path}", f"ogb:{root}:time"):
        g = load_dataset(spec)
        assert_normalised(g)
        assert g.name == "ogbn-tiny" and g.num_nodes == 60 and g.meta["source"].endswith(":time")
        np.testing.assert_allclose(g.x.numpy(), feats.astype(np.float32))
        assert g.y[7] == -1 and torch.equal(g.y[g.y >= 0], torch.from_numpy(labels[~np.isnan(labels)].astype(int)))
        assert g.num_classes == int(np.nanmax(labels)) + 1
        assert sorted(torch.nonzero(g.train_mask).view(-1).tolist()) == sorted(perm[:30].tolist())
        assert int(g.val_mask.sum()) == 10 and int(g.test_mask.sum()) == 20
    keep = edges[:, 0] != edges[:, 1]
    e = edges[keep]
    assert edge_set(g.edge_index(), 60) == set((e[:, 0] * 60 + e[:, 1]).tolist()) | set((e[:, 1] * 60 + e[:, 0]).tolist())


def test_ogb_matches_ogb_reader(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "outdated", None)  # else importing ogb starts a network version check
    pytest.importorskip("ogb")
    from ogb.io.read_graph_raw import read_csv_graph_raw
    write_ogb(tmp_path / "ogbn_tiny")
    ref = read_csv_graph_raw(str(tmp_path / "ogbn_tiny" / "raw"), add_inverse_edge=True)[0]
    g = load_dataset(f"ogb:{tmp_path / 'ogbn_tiny'}")
    assert ref["num_nodes"] == g.num_nodes
    np.testing.assert_array_equal(ref["node_feat"], g.x.numpy())
    ei = torch.from_numpy(ref["edge_index"])
    ei = ei[:, ei[0] != ei[1]]
    assert edge_set(ei, g.num_nodes) == edge_set(g.edge_index(), g.num_nodes)


def test_csv_readers_agree(tmp_path):
    write_csv_gz(tmp_path / "a.csv.gz", [[1.5, 2], [3, -4.25]])
    a = read_csv_gz(tmp_path / "a.csv.gz", np.float32, use_pandas=True)
    b = read_csv_gz(tmp_path / "a.csv.gz", np.float32, use_pandas=False)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 2) and a.dtype == np.float32
    write_csv_gz(tmp_path / "one.csv.gz", [[5]])
    assert read_csv_gz(tmp_path / "one.csv.gz", np.int64, use_pandas=False).shape == (1, 1)
    write_csv_gz(tmp_path / "bad.csv.gz", [["x", "y"]])
    for use_pandas in (True, False):
        with pytest.raises(ValueError, match=r"bad\.csv\.gz: cannot read"):
            read_csv_gz(tmp_path / "bad.csv.gz", np.float32, use_pandas=use_pandas)


def test_ogb_errors(tmp_path):
    root = tmp_path / "ogbn_tiny"
    write_ogb(root, splits=("a", "b"))
    with pytest.raises(FileNotFoundError, match=r"holds splits \['a', 'b'\]"):
        load_dataset(f"ogb:{root}")
    assert load_dataset(f"ogb:{root}:b").num_nodes == 60
    with pytest.raises(FileNotFoundError, match=r"split/c/train\.csv\.gz does not exist"):
        load_dataset(f"ogb:{root}:c")
    write_csv_gz(root / "raw" / "node-feat.csv.gz", [[0.0]] * 59)
    with pytest.raises(ValueError, match=r"node-feat\.csv\.gz has 59 rows but the graph has 60 nodes"):
        load_dataset(f"ogb:{root}:a")
    (root / "raw" / "edge.csv.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"edge\.csv\.gz does not exist; expected OGB edges"):
        load_dataset(f"ogb:{root}:a")
    with pytest.raises(FileNotFoundError, match="OGB directory .*nowhere does not exist"):
        load_dataset(f"ogb:{tmp_path / 'nowhere'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no raw/ directory"):
        load_dataset(f"ogb:{tmp_path / 'empty'}")


# ------------------------------------------------------- other spec forms
def test_graphdir_and_synthetic_specs(tmp_path):
    g = random_graph(30, seed=2)
    save_graph_dir(g, tmp_path / "g")
    back = load_dataset(f"graphdir:{tmp_path / 'g'}")
    assert torch.equal(back.indices, g.indices) and torch.equal(back.x, g.x) and back.num_classes == 3
    s = load_dataset("sbm:nodes=200,degree=6,features=8")
    assert_normalised(s)
    assert s.num_nodes == 200 and s.meta["source"].startswith("sbm:")
    assert_normalised(load_dataset("rmat:scale=7,features=4"))
    assert describe_dataset("sbm:nodes=200,degree=6,features=8")["nodes"] == 200


@pytest.mark.parametrize("spec, error, message", [
    ("citeseer", ValueError, r"unknown dataset spec 'citeseer'; accepted forms: cora, planetoid:DIR\[:NAME\]"),
    ("npz:", ValueError, "needs a path"),
    ("graphdir:/no/such/dir", FileNotFoundError, "graph directory /no/such/dir does not exist"),
    ("sbm:nodes=x", ValueError, "must be an integer"),
])
def test_bad_specs(spec, error, message):
    with pytest.raises(error, match=message):
        load_dataset(spec)


def test_dataset_help_forms_are_all_accepted():
    kinds = {pattern.partition(":")[0] for pattern, _ in DATASET_HELP}
    assert kinds == {"cora", "planetoid", "npz", "ogb", "ogbl", "edgelist", "metis", "mat", "musae", "graphdir", "sbm", "rmat"}
    for kind in kinds - {"cora", "sbm", "rmat"}:
        with pytest.raises(FileNotFoundError):  # a known form: fails on the path, not the spec
            load_dataset(f"{kind}:/no/such/path")


# -------------------------------------------------------------- PyG adapter
def test_pyg_round_trip():
    pytest.importorskip("torch_geometric")
    g = random_graph(40, seed=6)
    g.name = "rt"
    data = to_pyg(g)
    assert data.num_nodes == 40 and torch.equal(data.edge_index, g.edge_index()) and data.num_classes == 3
    back = to_graph(data)
    assert back.name == "rt" and back.num_classes == 3
    assert torch.equal(back.indptr, g.indptr) and torch.equal(back.indices, g.indices)
    for key in DATA:
        assert torch.equal(getattr(back, key), getattr(g, key)), key


def test_pyg_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(ImportError, match=r"pip install graphscale\[pyg\]"):
        to_pyg(random_graph(5))


def test_feature_normalisation_modes():
    from graphscale.data.datasets import normalize_features
    from graphscale.testing import random_graph

    g = random_graph(20, seed=4)
    raw = g.x.clone()
    assert torch.equal(normalize_features(g, "auto").x, raw)  # signed features: untouched
    assert g.meta["feature_norm"] == "none"
    g.x = raw.abs()
    g.x[3] = 0
    normalize_features(g, "auto")
    assert torch.allclose(g.x[torch.arange(20) != 3].sum(1), torch.ones(19)) and not g.x[3].any()
    assert g.meta["feature_norm"] == "row"
    with pytest.raises(ValueError, match="--feature-norm"):
        normalize_features(g, "l2")


@pytest.mark.parametrize("block_rows", [1, 7, 1 << 14])
def test_row_normalize_by_row_blocks_equals_the_whole_formula(monkeypatch, block_rows):
    """The norms summed one row block at a time give the rows of the one-shot formula bit for bit."""
    from graphscale.data import datasets

    monkeypatch.setattr(datasets, "NORM_BLOCK_ROWS", block_rows)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(30, 9, generator=torch.Generator().manual_seed(0), dtype=dtype)
        x[4] = 0
        whole = x / x.abs().sum(dim=1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)
        assert torch.equal(datasets.row_normalize(x), whole)
        assert torch.equal(datasets.row_normalize(x[:, :5]), whole.new_tensor(x[:, :5] / x[:, :5].abs().sum(
            dim=1, keepdim=True).clamp(min=torch.finfo(dtype).tiny)))

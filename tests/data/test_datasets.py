"""Dataset specs: bundled Cora (vs PyG), Planetoid / npz / OGB fixtures, graph dirs, PyG adapter."""

from __future__ import annotations

import collections
import datetime
import gzip
import pickle
import shutil
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from graphscale.data import datasets
from graphscale.data.datasets import (
    DATASET_HELP,
    cora_dir,
    describe_dataset,
    from_pyg,
    load_dataset,
    read_planetoid,
    to_pyg,
)
from graphscale.data.formats import save_graph_dir
from graphscale.data.graph import Graph
from graphscale.testing import random_graph

DATA = ("x", "y", "train_mask", "val_mask", "test_mask")


def assert_normalised(g: Graph) -> None:
    """The contract of every reader: symmetric, coalesced, no self-loops, standard dtypes."""
    assert not g.has_self_loops()
    canonical = g.coalesce().symmetrize()
    assert torch.equal(canonical.indptr, g.indptr) and torch.equal(canonical.indices, g.indices)
    assert g.x is None or g.x.dtype == torch.float32
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
def write_npz(path, *, dense_attr=False, seed=0):
    rng = np.random.default_rng(seed)
    n = 130
    labels = np.r_[np.zeros(40), np.ones(40), np.full(40, 2), np.full(10, 3)].astype(np.int64)[rng.permutation(n)]
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    src[0] = dst[0] = 5
    adj = sp.csr_matrix((np.ones(500), (src, dst)), shape=(n, n))
    attr = sp.random(n, 6, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    arrays = {"adj_data": adj.data, "adj_indices": adj.indices, "adj_indptr": adj.indptr, "adj_shape": adj.shape,
              "labels": labels}
    if dense_attr:
        arrays["attr_matrix"] = attr.toarray()
    else:
        arrays.update(attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr, attr_shape=attr.shape)
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


def test_npz_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz does not exist"):
        load_dataset(f"npz:{tmp_path / 'missing.npz'}")
    np.savez(tmp_path / "partial.npz", adj_data=np.ones(1), labels=np.zeros(2))
    with pytest.raises(ValueError, match=r"partial\.npz lacks \['adj_indices', 'adj_indptr', 'adj_shape'\]"):
        load_dataset(f"npz:{tmp_path / 'partial.npz'}")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk\.npz is not a readable \.npz file"):
        load_dataset(f"npz:{tmp_path / 'junk.npz'}")


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
    a = datasets._read_csv_gz(tmp_path / "a.csv.gz", np.float32, use_pandas=True)
    b = datasets._read_csv_gz(tmp_path / "a.csv.gz", np.float32, use_pandas=False)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 2) and a.dtype == np.float32
    write_csv_gz(tmp_path / "one.csv.gz", [[5]])
    assert datasets._read_csv_gz(tmp_path / "one.csv.gz", np.int64, use_pandas=False).shape == (1, 1)
    write_csv_gz(tmp_path / "bad.csv.gz", [["x", "y"]])
    for use_pandas in (True, False):
        with pytest.raises(ValueError, match=r"bad\.csv\.gz: cannot read"):
            datasets._read_csv_gz(tmp_path / "bad.csv.gz", np.float32, use_pandas=use_pandas)


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
    assert kinds == {"cora", "planetoid", "npz", "ogb", "edgelist", "musae", "graphdir", "sbm", "rmat"}
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
    back = from_pyg(data)
    assert back.name == "rt" and back.num_classes == 3
    assert torch.equal(back.indptr, g.indptr) and torch.equal(back.indices, g.indices)
    for key in DATA:
        assert torch.equal(getattr(back, key), getattr(g, key)), key
    from torch_geometric.data import Data
    bare = from_pyg(Data(edge_index=torch.tensor([[0, 2], [1, 1]]), num_nodes=3))
    assert bare.x is None and bare.num_edges == 2 and bare.name == "pyg"
    with pytest.raises(ValueError, match="data.num_nodes is unknown"):
        from_pyg(types.SimpleNamespace(edge_index=torch.tensor([[0], [1]]), num_nodes=None))
    with pytest.raises(ValueError, match="data.y must be 1-D"):
        from_pyg(Data(edge_index=torch.tensor([[0], [1]]), y=torch.zeros(2, 3), num_nodes=2))


def test_pyg_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(ImportError, match=r"pip install graphscale\[pyg\]"):
        to_pyg(random_graph(5))
    with pytest.raises(ImportError, match=r"pip install graphscale\[pyg\]"):
        from_pyg(object())


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

"""ingest: every bounded path writes the graph directory save_graph_dir(load_dataset(spec)) writes, byte for byte,
with tiny chunks so that every chunked step (text blocks, buckets, bucket splits, feature blocks) runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from graphscale.data.datasets import load_dataset
from graphscale.data.formats import save_graph_dir
from graphscale.data.ingest import ingest, streams
from graphscale.testing import traced_peak


def assert_same_dir(a: Path, b: Path) -> None:
    """Two graph directories with the same files, byte for byte, and the same meta.json (as JSON)."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    meta_a, meta_b = (json.loads((d / "meta.json").read_text()) for d in (a, b))
    assert meta_a == meta_b
    assert list(meta_a) == list(meta_b)
    for name in names:
        if name.endswith(".npy"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


def check(spec: str, tmp_path: Path, chunk_edges: int = 7) -> Path:
    ref = save_graph_dir(load_dataset(spec), tmp_path / "ref")
    out = ingest(spec, tmp_path / "out", chunk_edges=chunk_edges)
    assert_same_dir(ref, out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch or temp left
    return out


# ------------------------------------------------------------------ edge lists
EDGES = """# a comment
src,dst
3 4
4 3
3 4
7 7
0,1 99
% another comment
1 2
2 0
5 6
6 5 extra columns
"""


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_edgelist_dense_ids(tmp_path, chunk):
    """ids 0..7 all present: duplicates, reverse duplicates, a self-loop only vertex (7), header, comments."""
    (tmp_path / "g.txt").write_text(EDGES)
    out = check(f"edgelist:{tmp_path / 'g.txt'}", tmp_path, chunk)
    assert json.loads((out / "meta.json").read_text())["num_nodes"] == 8


def test_edgelist_relabelled_with_labels(tmp_path):
    rng = np.random.default_rng(0)
    ids = np.array([10, 20, 35, 1_000_000_000_000, 7, 99, 5000])
    pairs = ids[rng.integers(0, ids.size, (60, 2))]
    lines = [f"{a}\t{b}" for a, b in pairs] + ["35 35", "10 20", "20 10"]
    (tmp_path / "g.txt").write_text("\n".join(lines))  # no final newline
    (tmp_path / "labels.txt").write_text("10 3\n20 5\n35 3\n7 9\n")
    check(f"edgelist:{tmp_path / 'g.txt'}:{tmp_path / 'labels.txt'}", tmp_path)


def test_edgelist_many_edges_split_buckets(tmp_path):
    rng = np.random.default_rng(1)
    pairs = rng.integers(0, 120, (800, 2))
    pairs[:40, 1] = 0  # a heavy row: buckets are split further, the row alone
    (tmp_path / "g.txt").write_text("\n".join(f"{a} {b}" for a, b in pairs) + "\n")
    check(f"edgelist:{tmp_path / 'g.txt'}", tmp_path, 5)


def test_edgelist_errors_match_the_reader(tmp_path):
    """A malformed line far into the file (in a later text block), a METIS file, a file without edges: the reader's
    error, word for word, and nothing left behind."""
    bad, metis, empty, header = (tmp_path / name for name in ("bad.txt", "m.graph", "empty.txt", "header.txt"))
    bad.write_text("0 1\n" * 20 + "2 x\n")
    metis.write_text("3 2\n2\n1 3\n2\n")
    empty.write_text("# nothing\n")
    header.write_text("# c\n" * 10 + "a b\n" + "0 1\n" * 10 + "c d\n")
    for file in (bad, metis, empty, header):
        with pytest.raises(ValueError) as expected:
            load_dataset(f"edgelist:{file}")
        with pytest.raises(ValueError) as got:
            ingest(f"edgelist:{file}", tmp_path / "out", chunk_edges=2)
        assert str(got.value) == str(expected.value)
    assert "line 21: node ids must be integers" in str(pytest.raises(ValueError, ingest, f"edgelist:{bad}",
                                                                      tmp_path / "out", chunk_edges=2).value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------ OGB
def write_ogb(root: Path, n: int = 50, edges: int = 300, features: int = 3, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    (root / "raw").mkdir(parents=True)
    (root / "split" / "time").mkdir(parents=True)

    def put(path, rows, fmt):
        with gzip.open(path, "wt") as f:
            f.writelines(",".join(fmt.format(v) for v in np.atleast_1d(row)) + "\n" for row in rows)

    e = rng.integers(0, n, (edges, 2))
    e[:5] = [[1, 1], [2, 3], [3, 2], [2, 3], [4, 4]]
    put(root / "raw" / "edge.csv.gz", e, "{}")
    put(root / "raw" / "node-feat.csv.gz", rng.standard_normal((n, features)), "{}")
    labels = rng.integers(0, 4, n).astype(float)
    labels[::7] = np.nan
    put(root / "raw" / "node-label.csv.gz", labels, "{}")
    put(root / "raw" / "num-node-list.csv.gz", [n], "{}")
    put(root / "raw" / "num-edge-list.csv.gz", [edges], "{}")
    perm = rng.permutation(n)
    for name, part in zip(("train", "valid", "test"), np.split(perm, [20, 35])):
        put(root / "split" / "time" / f"{name}.csv.gz", part, "{}")


def test_ogb(tmp_path):
    write_ogb(tmp_path / "ogbn_tiny")
    check(f"ogb:{tmp_path / 'ogbn_tiny'}", tmp_path)


def test_ogb_without_pandas(tmp_path, monkeypatch):
    import sys

    write_ogb(tmp_path / "ogbn_tiny", seed=2)
    monkeypatch.setitem(sys.modules, "pandas", None)
    check(f"ogb:{tmp_path / 'ogbn_tiny'}:time", tmp_path, 11)


def test_ogb_feature_rows_must_match(tmp_path):
    root = tmp_path / "ogbn_tiny"
    write_ogb(root)
    with gzip.open(root / "raw" / "node-feat.csv.gz", "wt") as f:
        f.write("0.5,1.5,2.5\n" * 49)
    with pytest.raises(ValueError, match=r"node-feat\.csv\.gz has 49 rows but the graph has 50 nodes"):
        ingest(f"ogb:{root}", tmp_path / "out", chunk_edges=7)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ npz
def write_npz(path: Path, *, dense_attr=False, dotted=False, compressed=False, labels=None, seed=0, fortran=False):
    rng = np.random.default_rng(seed)
    n = 90
    src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
    src[:3], dst[:3] = [5, 6, 6], [5, 7, 7]
    adj = sp.csr_matrix((np.ones(400), (src, dst)), shape=(n, n))
    adj.sum_duplicates()
    adj = sp.csr_matrix((np.r_[adj.data, 1.0], np.r_[adj.indices, 3], np.r_[adj.indptr[:-1], adj.indptr[-1] + 1]),
                        shape=(n, n))  # a repeated entry in the last row
    attr = sp.random(n, 6, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    if labels is None:
        labels = rng.choice([0, 1, 2, 5], n)
    pa, pf = ("adj_matrix.", "attr_matrix.") if dotted else ("adj_", "attr_")
    arrays = {f"{pa}data": adj.data, f"{pa}indices": adj.indices, f"{pa}indptr": adj.indptr,
              f"{pa}shape": np.array(adj.shape), "labels": labels}
    if dense_attr:
        arrays["attr_matrix"] = np.asfortranarray(attr.toarray()) if fortran else attr.toarray()
    else:
        arrays.update({f"{pf}data": attr.data, f"{pf}indices": attr.indices, f"{pf}indptr": attr.indptr,
                       f"{pf}shape": np.array(attr.shape)})
    (np.savez_compressed if compressed else np.savez)(path, **arrays)


@pytest.mark.parametrize("dense_attr, dotted, compressed", [(False, False, False), (True, True, True),
                                                            (False, True, True), (True, False, False)])
def test_npz(tmp_path, dense_attr, dotted, compressed):
    write_npz(tmp_path / "g.npz", dense_attr=dense_attr, dotted=dotted, compressed=compressed)
    check(f"npz:{tmp_path / 'g.npz'}:3", tmp_path)


def test_npz_fortran_order_features(tmp_path):
    write_npz(tmp_path / "g.npz", dense_attr=True, fortran=True)
    check(f"npz:{tmp_path / 'g.npz'}", tmp_path)


def test_npz_multilabel(tmp_path):
    labels = (np.random.default_rng(3).random((90, 4)) < 0.4).astype(np.int64)
    write_npz(tmp_path / "g.npz", labels=labels)
    check(f"npz:{tmp_path / 'g.npz'}", tmp_path)


# ------------------------------------------------------------------ synthetic and graph directories
@pytest.mark.parametrize("spec", ["sbm:nodes=300,degree=6,features=5,seed=2", "rmat:scale=7,features=0"])
def test_synthetic(tmp_path, spec):
    check(spec, tmp_path, 13)


def test_graphdir_and_fallback(tmp_path):
    src = save_graph_dir(load_dataset("sbm:nodes=120,features=3"), tmp_path / "src")
    ref = save_graph_dir(load_dataset(f"graphdir:{src}"), tmp_path / "ref")
    assert_same_dir(ref, ingest(f"graphdir:{src}", tmp_path / "out", chunk_edges=7))
    assert streams(f"graphdir:{src}") and streams("edgelist:x") and not streams("cora")
    assert_same_dir(save_graph_dir(load_dataset("cora"), tmp_path / "cora-ref"),
                    ingest("cora", tmp_path / "cora", chunk_edges=7))


def test_output_dir_rules(tmp_path):
    (tmp_path / "g.txt").write_text("0 1\n")
    ingest(f"edgelist:{tmp_path / 'g.txt'}", tmp_path / "out")
    assert ingest(f"edgelist:{tmp_path / 'g.txt'}", tmp_path / "new" / "dirs" / "out").is_dir()
    with pytest.raises(FileExistsError, match="--overwrite"):
        ingest(f"edgelist:{tmp_path / 'g.txt'}", tmp_path / "out", overwrite=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "f").write_text("x")
    with pytest.raises(FileExistsError, match="not a graph directory"):
        ingest(f"edgelist:{tmp_path / 'g.txt'}", tmp_path / "other")
    with pytest.raises(ValueError, match="chunk_edges"):
        ingest(f"edgelist:{tmp_path / 'g.txt'}", tmp_path / "x", chunk_edges=0)


# ------------------------------------------------------------------ memory
def _traced_peak(tmp_path: Path, edges: int) -> int:
    rng = np.random.default_rng(edges)
    pairs = rng.integers(0, 1000, (edges, 2))
    file = tmp_path / f"g{edges}.txt"
    file.write_text("\n".join(f"{a} {b}" for a, b in pairs) + "\n")
    return traced_peak(lambda: ingest(f"edgelist:{file}", tmp_path / f"out{edges}", chunk_edges=1000))


def test_memory_does_not_grow_with_the_edges(tmp_path):
    """At a fixed vertex count, 8x the edges (many more than one chunk) leaves the traced peak (numpy's buffers
    are traced) within 1.5x: the edge list is never held whole."""
    _traced_peak(tmp_path, 100)  # imports and compiled code loaded before measuring
    small, large = _traced_peak(tmp_path, 4_000), _traced_peak(tmp_path, 32_000)
    assert large < 1.5 * small, (small, large)
    assert large < 32_000 * 16  # less than the pairs themselves

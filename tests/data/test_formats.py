"""Graph directories: round trips, chunked writing, validation, atomic writes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from graphscale.data.formats import GraphDirWriter, is_graph_dir, load_graph_dir, save_graph_dir
from graphscale.data.graph import Graph
from graphscale.testing import random_graph

DATA = ("x", "y", "train_mask", "val_mask", "test_mask")


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
    for key in DATA:
        va, vb = getattr(a, key), getattr(b, key)
        assert (va is None) == (vb is None), key
        if va is not None:
            assert va.dtype == vb.dtype and torch.equal(va, vb), key


def leftovers(parent) -> list[str]:
    """Temporary siblings a failed or finished write must not leave behind."""
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name or ".edges-" in p.name]


# ------------------------------------------------------------ graph dirs
@pytest.mark.parametrize("mmap", [True, False])
def test_graph_dir_round_trip(tmp_path, mmap):
    g = random_graph(50, seed=3)
    g.meta["note"] = "kept"
    g.meta["tensor"] = torch.arange(3)  # not JSON: dropped
    save_graph_dir(g, tmp_path / "g")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load_graph_dir(tmp_path / "g", mmap=mmap)
    assert_same_graph(g, back)
    assert back.name == g.name and back.num_classes == 3
    assert back.meta["note"] == "kept" and "tensor" not in back.meta
    assert back.meta["source"] == f"graphdir:{tmp_path / 'g'}"
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert meta["num_nodes"] == 50 and meta["num_edges"] == g.num_edges and meta["x_dtype"] == "float32"
    assert meta["arrays"] == ["indptr", "indices", *DATA]
    assert leftovers(tmp_path) == []


def test_mmap_tensors_are_copy_on_write(tmp_path):
    g = random_graph(30, seed=1)
    save_graph_dir(g, tmp_path / "g")
    loaded = load_graph_dir(tmp_path / "g")
    loaded.x.mul_(0)  # must neither crash nor change the file
    assert torch.equal(load_graph_dir(tmp_path / "g").x, g.x)


def test_graph_dir_topology_only_and_float64(tmp_path):
    g = random_graph(20, seed=2, dtype=torch.float64)
    save_graph_dir(g, tmp_path / "f64")
    assert load_graph_dir(tmp_path / "f64").x.dtype == torch.float64
    bare = Graph(g.indptr, g.indices, name="bare")
    save_graph_dir(bare, tmp_path / "bare")
    back = load_graph_dir(tmp_path / "bare")
    assert_same_graph(bare, back)
    assert "num_classes" not in back.meta


def test_graph_dir_overwrite_rules(tmp_path):
    g1, g2 = random_graph(20, seed=1), random_graph(25, seed=2)
    save_graph_dir(g1, tmp_path / "g")
    save_graph_dir(g2, tmp_path / "g")
    assert load_graph_dir(tmp_path / "g").num_nodes == 25
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_graph_dir(g1, tmp_path / "g", overwrite=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not a graph directory"):
        save_graph_dir(g1, other)
    assert (other / "keep.txt").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        save_graph_dir(g1, tmp_path / "file")
    (tmp_path / "empty").mkdir()
    save_graph_dir(g1, tmp_path / "empty")
    assert is_graph_dir(tmp_path / "empty") and not is_graph_dir(other)
    assert leftovers(tmp_path) == []


def test_partial_masks_refused(tmp_path):
    g = random_graph(10)
    g.val_mask = None
    with pytest.raises(ValueError, match="only some split masks"):
        save_graph_dir(g, tmp_path / "g")
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("rows_per_chunk", [1, 7, 1000])
def test_chunked_writer_matches_save(tmp_path, rows_per_chunk):
    g = random_graph(40, seed=5)
    deg = g.in_degrees()
    with GraphDirWriter(tmp_path / "g", 40, num_features=g.num_features, num_classes=3, name=g.name) as w:
        for lo in range(0, 40, rows_per_chunk):
            hi = min(40, lo + rows_per_chunk)
            w.append_rows(deg[lo:hi], g.indices[g.indptr[lo]:g.indptr[hi]])
            w.append_nodes(x=g.x[lo:hi], y=g.y[lo:hi])
        w.append_nodes(train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    assert_same_graph(g, load_graph_dir(tmp_path / "g", verify=True))


def test_writer_failure_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), GraphDirWriter(tmp_path / "g", 4) as w:
        w.append_rows([1, 0], [1])
        raise RuntimeError("boom")
    assert not (tmp_path / "g").exists() and leftovers(tmp_path) == []
    w = GraphDirWriter(tmp_path / "g", 4, labels=False, masks=False)
    w.append_rows([1, 1], [1, 0])
    with pytest.raises(ValueError, match=r"incomplete graph, missing CSR \(2 of 4 rows\)"):
        w.close()
    assert not (tmp_path / "g").exists() and leftovers(tmp_path) == []


def test_writer_rejects_bad_chunks(tmp_path):
    with GraphDirWriter(tmp_path / "g", 3, num_features=2) as w:
        with pytest.raises(ValueError, match=r"source ids must lie in \[0, 3\)"):
            w.append_rows([1], [3])
        with pytest.raises(ValueError, match="source ids must be integers, got dtype float64"):
            w.append_rows([1], [0.5])
        with pytest.raises(ValueError, match="counts sum to 2 but 1 indices"):
            w.append_rows([2], [0])
        with pytest.raises(ValueError, match="4 rows appended"):
            w.append_rows([0, 0, 0, 0], [])
        with pytest.raises(ValueError, match="do not fit"):
            w.append_nodes(x=np.zeros((3, 5)))
        with pytest.raises(ValueError, match="unknown or disabled node array 'z'"):
            w.append_nodes(z=np.zeros(3))
        w.abort()
    assert not (tmp_path / "g").exists()
    with pytest.raises(ValueError, match="x_dtype"):
        GraphDirWriter(tmp_path / "g", 3, x_dtype="int8")


def _saved(tmp_path):
    g = random_graph(20, seed=4)
    save_graph_dir(g, tmp_path / "g")
    return tmp_path / "g"


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_graph_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="meta.json is missing"):
        load_graph_dir(tmp_path / "empty")
    path = _saved(tmp_path)
    np.save(path / "y.npy", np.zeros(19, dtype=np.int64))
    with pytest.raises(ValueError, match=r"y\.npy has shape \(19,\).*expects shape \(20,\)"):
        load_graph_dir(path)
    (path / "y.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"y\.npy is missing"):
        load_graph_dir(path)
    (path / "y.npy").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"y\.npy is not a readable \.npy file"):
        load_graph_dir(path)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(version=99), "unsupported version 99"),
    (lambda m: m.pop("num_edges"), "required field 'num_edges'"),
    (lambda m: m.update(arrays=["indptr", "indices", "z"]), "'arrays' must include"),
    (lambda m: m.update(num_edges=m["num_edges"] + 1), r"indices\.npy has shape"),
])
def test_bad_meta(tmp_path, edit, message):
    path = _saved(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    edit(meta)
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=message):
        load_graph_dir(path)
    (path / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="meta.json is not valid JSON"):
        load_graph_dir(path)


def test_verify_catches_bad_contents(tmp_path):
    path = _saved(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    del meta["files"]  # a directory without the file record (written before it existed): only verify= reads values
    (path / "meta.json").write_text(json.dumps(meta))
    indices = np.load(path / "indices.npy")
    indices[0] = 20
    np.save(path / "indices.npy", indices)
    load_graph_dir(path)  # cheap checks pass
    with pytest.raises(ValueError, match=r"indices\.npy has ids outside \[0, 20\)"):
        load_graph_dir(path, verify=True)

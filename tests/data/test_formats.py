"""Graph directories and binary edge streams: round trips, chunking, validation, atomic writes."""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest
import torch

from graphscale.data.formats import (
    EdgeStream,
    EdgeStreamWriter,
    GraphDirWriter,
    edge_stream_to_graph,
    graph_to_edge_stream,
    is_graph_dir,
    load_graph_dir,
    save_graph_dir,
    sidecar_path,
    write_edge_stream,
)
from graphscale.data.graph import Graph, csr_from_edges
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
    indices = np.load(path / "indices.npy")
    indices[0] = 20
    np.save(path / "indices.npy", indices)
    load_graph_dir(path)  # cheap checks pass
    with pytest.raises(ValueError, match=r"indices\.npy has ids outside \[0, 20\)"):
        load_graph_dir(path, verify=True)


# ----------------------------------------------------------- edge streams
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_edge_stream_round_trip(tmp_path, dtype, chunk):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 100, 57), rng.integers(0, 100, 57)
    s = write_edge_stream(tmp_path / "e.bin", src, dst, dtype=dtype, num_vertices=120)
    assert (s.num_edges, s.num_vertices, s.dtype) == (57, 120, dtype)
    assert json.loads(sidecar_path(tmp_path / "e.bin").read_text()) == {"num_vertices": 120, "num_edges": 57,
                                                                        "dtype": dtype}
    parts = list(EdgeStream(tmp_path / "e.bin").chunks(chunk))
    assert len(parts) == -(-57 // chunk)
    assert all(p[0].dtype == np.dtype(dtype) and p[0].flags.c_contiguous for p in parts)
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), src)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), dst)
    part = list(s.chunks(10, start=5, stop=18))
    np.testing.assert_array_equal(np.concatenate([p[0] for p in part]), src[5:18])
    np.testing.assert_array_equal(s.degrees("dst"), np.bincount(dst, minlength=120))
    np.testing.assert_array_equal(s.degrees("both"), np.bincount(np.r_[src, dst], minlength=120))


def test_edge_stream_layout_is_little_endian_pairs(tmp_path):
    write_edge_stream(tmp_path / "e", [1, 2], [3, 70000], dtype="int32")
    assert (tmp_path / "e").read_bytes() == struct.pack("<4i", 1, 3, 2, 70000)
    write_edge_stream(tmp_path / "f", [1], [2**40], dtype="int64")
    assert (tmp_path / "f").read_bytes() == struct.pack("<2q", 1, 2**40)


def test_edge_stream_without_sidecar(tmp_path):
    pairs = np.array([[0, 5], [3, 1], [9, 2]], dtype="<i8")
    pairs.tofile(tmp_path / "g.e64")
    s = EdgeStream(tmp_path / "g.e64")
    assert (s.dtype, s.num_edges, s.num_vertices) == ("int64", 3, 10)
    pairs.astype("<i4").tofile(tmp_path / "g.raw")
    with pytest.raises(ValueError, match="cannot tell its dtype"):
        EdgeStream(tmp_path / "g.raw")
    s = EdgeStream(tmp_path / "g.raw", dtype="int32", num_vertices=12)
    assert s.num_vertices == 12 and next(s.chunks())[1].tolist() == [5, 1, 2]
    with pytest.raises(ValueError, match="dtype must be one of"):
        EdgeStream(tmp_path / "g.raw", dtype="int16")


def test_edge_stream_validation_names_file_and_edge(tmp_path):
    pairs = np.zeros((20, 2), dtype="<i4")
    pairs[13] = (4, 50)
    pairs.tofile(tmp_path / "e.e32")
    s = EdgeStream(tmp_path / "e.e32", num_vertices=10)
    with pytest.raises(ValueError, match=r"e\.e32: edge 13 \(in chunk 2 starting at edge 10\) is \(4, 50\)"):
        list(s.chunks(5))
    pairs[13] = (-1, 0)
    pairs.tofile(tmp_path / "e.e32")
    with pytest.raises(ValueError, match="edge 13"):
        _ = EdgeStream(tmp_path / "e.e32").num_vertices
    with open(tmp_path / "e.e32", "ab") as f:
        f.write(b"\x00\x01\x02")
    with pytest.raises(ValueError, match=r"e\.e32: size 163 bytes is not a multiple of the 8-byte"):
        EdgeStream(tmp_path / "e.e32")
    with pytest.raises(FileNotFoundError, match="missing.e32 does not exist"):
        EdgeStream(tmp_path / "missing.e32")


def test_edge_stream_sidecar_conflicts(tmp_path):
    write_edge_stream(tmp_path / "e", [0, 1], [1, 0], dtype="int32", num_vertices=2)
    with pytest.raises(ValueError, match="dtype='int64' disagrees"):
        EdgeStream(tmp_path / "e", dtype="int64")
    with pytest.raises(ValueError, match="num_vertices=5 disagrees"):
        EdgeStream(tmp_path / "e", num_vertices=5)
    side = sidecar_path(tmp_path / "e")
    side.write_text(json.dumps({"num_vertices": 2, "num_edges": 3, "dtype": "int32"}))
    with pytest.raises(ValueError, match="holds 2 edges but .* says 3"):
        EdgeStream(tmp_path / "e")
    side.write_text(json.dumps({"num_vertices": 2}))
    with pytest.raises(ValueError, match="must be an object with num_vertices, num_edges and dtype"):
        EdgeStream(tmp_path / "e")


def test_edge_stream_writer_errors_leave_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"vertex ids must lie in \[0, 4\)"):
        write_edge_stream(tmp_path / "e", [0, 5], [1, 1], num_vertices=4)
    with pytest.raises(ValueError, match="differ in length"):
        write_edge_stream(tmp_path / "e", [0, 1], [1])
    with pytest.raises(ValueError, match="dst must be integers"):
        write_edge_stream(tmp_path / "e", [0, 1], [1.0, 2.0])
    with pytest.raises(ValueError, match="does not fit dtype int32"):
        EdgeStreamWriter(tmp_path / "e", "int32", num_vertices=2**32)
    with pytest.raises(ValueError, match="vertex ids must lie in"):
        write_edge_stream(tmp_path / "e", [2**31], [0], dtype="int32")
    assert list(tmp_path.iterdir()) == []
    with EdgeStreamWriter(tmp_path / "e", "int64") as w:
        w.append([0, 1], [1, 2])
        w.append(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
        w.append(torch.tensor([7]), torch.tensor([0]))
    s = EdgeStream(tmp_path / "e")
    assert (s.num_edges, s.num_vertices) == (3, 8)
    write_edge_stream(tmp_path / "e", [0], [1])
    with pytest.raises(FileExistsError):
        EdgeStreamWriter(tmp_path / "e", overwrite=False)
    assert EdgeStream(tmp_path / "e").num_edges == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e", "e.json"]


@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_graph_edge_stream_round_trip(tmp_path, chunk):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 30, 200), rng.integers(0, 30, 200)  # duplicates and self-loops included
    src[:3] = dst[:3]
    g = Graph.from_edges(torch.from_numpy(src), torch.from_numpy(dst), 33)  # 3 isolated vertices at the end
    s = graph_to_edge_stream(g, tmp_path / "g.e32", chunk_edges=chunk)
    assert (s.dtype, s.num_edges, s.num_vertices) == ("int32", 200, 33)
    back = edge_stream_to_graph(s, chunk_edges=chunk)
    assert torch.equal(back.indptr, g.indptr) and torch.equal(back.indices, g.indices)
    assert back.name == "g" and back.meta["source"].startswith("edgestream:")
    expected = csr_from_edges(torch.from_numpy(src), torch.from_numpy(dst), 33)
    assert torch.equal(back.indices, expected[1])


def test_edge_stream_to_graph_from_memmapped_graph(tmp_path):
    g = random_graph(60, seed=9)
    save_graph_dir(g, tmp_path / "g")
    s = graph_to_edge_stream(load_graph_dir(tmp_path / "g"), tmp_path / "g.e64", dtype="int64", chunk_edges=16)
    back = edge_stream_to_graph(tmp_path / "g.e64")
    assert torch.equal(back.indptr, g.indptr) and torch.equal(back.indices, g.indices)
    assert s.dtype == "int64"

"""Binary edge streams: round trips, chunking, validation, atomic writes, conversion to and from graphs."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from graphscale.data.edge_stream import (
    EdgeStream,
    EdgeStreamWriter,
    edge_stream_to_graph,
    graph_to_edge_stream,
    sidecar_path,
    write_edge_stream,
)
from graphscale.data.formats import load_graph_dir, save_graph_dir
from graphscale.data.graph import Graph, csr_from_edges
from graphscale.testing import random_graph


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

"""The partition store: P1-P4 on what is written, node data, the book, partial reads, atomic writes."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from stream_helpers import community_records, graph_of

from graphscale.data.edge_stream import write_edge_stream
from graphscale.partition.base import replication_factor
from graphscale.partition.edge_stream import HDRFPartitioner
from graphscale.partition.metis import MetisPartitioner
from graphscale.partition.spring import SpringPartitioner
from graphscale.partition.store import is_partition_store, load_book, load_partition, read_store_meta
from graphscale.partition.store_writer import write_partition_store
from graphscale.partition.streaming import GraphEdges
from graphscale.partition.vertex_stream import LDGPartitioner


@pytest.fixture(scope="module")
def graph():
    src, dst, n = community_records(n=220, seed=11)
    return graph_of(src, dst, n, features=5)


def node_data(g):
    return {k: getattr(g, k) for k in ("x", "y", "train_mask", "val_mask", "test_mask")}


def neighbours(g) -> list[set[int]]:
    return [set(g.indices[g.indptr[v]:g.indptr[v + 1]].tolist()) for v in range(g.num_nodes)]


def local_edges(part) -> set[tuple[int, int]]:
    g, orig = part.graph, part.orig_ids.numpy()
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr.numpy()))
    return set(zip(orig[g.indices.numpy()].tolist(), orig[dst].tolist()))


def owners(graph, method: str, p: int) -> np.ndarray:
    if method == "spring":
        return SpringPartitioner().run(GraphEdges(graph), p).owner
    part = MetisPartitioner() if method == "metis" else LDGPartitioner()
    return part.partition(graph, p).numpy()


@pytest.mark.parametrize("method", ["spring", "metis", "ldg"])
@pytest.mark.parametrize("p", [2, 5])
def test_p1_p2_p3_p4_on_the_store(graph, tmp_path, method, p):
    owner = owners(graph, method, p)
    summary = write_partition_store(tmp_path / "s", graph, owner, p, node_data=node_data(graph), method=method,
                                    chunk_edges=37, feature_chunk_bytes=40)
    nbrs, n = neighbours(graph), graph.num_nodes
    seen, total_local = np.zeros(n, int), 0
    for s in range(p):
        part = load_partition(tmp_path / "s", s)
        orig, k = part.orig_ids.numpy(), part.num_inner
        assert np.array_equal(orig[:k], np.flatnonzero(owner == s))  # inner = home vertices, ascending
        seen[orig[:k]] += 1
        total_local += part.graph.num_nodes
        assert np.all(owner[orig[k:]] != s) and np.array_equal(part.halo_owner.numpy(), owner[orig[k:]])
        g = part.graph
        rows = [set(orig[g.indices[g.indptr[i]:g.indptr[i + 1]].numpy()].tolist()) for i in range(g.num_nodes)]
        for i in range(k):  # P2: full in-neighbourhood of every inner vertex
            assert rows[i] == nbrs[orig[i]]
        for i in range(k, g.num_nodes):  # halo rows: exactly its neighbours inside the partition
            assert rows[i] == {u for u in nbrs[orig[i]] if owner[u] == s}
        for u, v in local_edges(part):  # P3: no halo-halo edge
            assert owner[u] == s or owner[v] == s
        assert torch.equal(part.graph.x, graph.x[orig])
        assert torch.equal(part.graph.y, graph.y[orig])
        for mask in ("train_mask", "val_mask", "test_mask"):
            expected = getattr(graph, mask)[orig].clone()
            expected[k:] = False
            assert torch.equal(getattr(part.graph, mask), expected)
        assert torch.equal(part.degree, graph.in_degrees()[orig])
    assert seen.tolist() == [1] * n  # P1
    rf = total_local / n  # P4: RF of the stored partitions = RF of the streaming bitmask
    assert summary.metrics.replication_factor == pytest.approx(rf, abs=1e-12)
    assert rf == pytest.approx(1 + replication_factor(graph, torch.from_numpy(owner.astype(np.int64)), p))
    meta = read_store_meta(tmp_path / "s")
    assert meta["num_parts"] == p and meta["method"] == method and meta["num_features"] == 5
    assert [m["num_inner"] for m in meta["parts"]] == np.bincount(owner, minlength=p).tolist()


def test_p3_intra_edges_in_one_partition_cross_edges_in_two(graph, tmp_path):
    owner = owners(graph, "spring", 4)
    write_partition_store(tmp_path / "s", graph, owner, 4)
    where: dict[frozenset, set[int]] = {}
    for s in range(4):
        for u, v in local_edges(load_partition(tmp_path / "s", s)):
            where.setdefault(frozenset((u, v)), set()).add(s)
    for key, parts in where.items():
        u, v = tuple(key)
        assert parts == {owner[u], owner[v]}


def test_vertex_cut_store_keeps_cut_records_and_full_neighbourhoods(graph, tmp_path):
    res = HDRFPartitioner().run(GraphEdges(graph), 3)
    summary = write_partition_store(tmp_path / "s", graph, res.owner, 3, edge_part=res.edge_part)
    assert summary.metrics.replication_factor == pytest.approx(res.replication_factor, abs=1e-12)
    nbrs = neighbours(graph)
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    for s in range(3):
        part = load_partition(tmp_path / "s", s)
        orig, k, g = part.orig_ids.numpy(), part.num_inner, part.graph
        for i in range(k):
            assert set(orig[g.indices[g.indptr[i]:g.indptr[i + 1]].numpy()].tolist()) == nbrs[orig[i]]
        edges = local_edges(part)
        assert all((u, v) in edges for u, v in zip(src[res.edge_part == s], dst[res.edge_part == s]))


def test_reading_needs_only_that_partition_and_the_book(graph, tmp_path):
    owner = owners(graph, "ldg", 3)
    write_partition_store(tmp_path / "s", graph, owner, 3, node_data=node_data(graph))
    book = load_book(tmp_path / "s")
    assert torch.equal(book.owner(), torch.from_numpy(owner.astype(np.int64)))
    full = load_partition(tmp_path / "s", 1)
    assert torch.equal(full.global_ids, book.to_global(full.orig_ids))
    assert torch.equal(full.global_to_local(full.global_ids), torch.arange(full.graph.num_nodes))
    assert full.global_to_local(torch.tensor([book.num_nodes + 5]))[0] == -1
    shutil.copytree(tmp_path / "s", tmp_path / "t")
    for name in ("owner.npy", "perm.npy", "boundaries.npy"):
        (tmp_path / "t" / name).unlink()
    for s in (0, 2):
        shutil.rmtree(tmp_path / "t" / f"part-{s:05d}")
    alone = load_partition(tmp_path / "t", 1, mmap=False)
    assert torch.equal(alone.graph.indices, full.graph.indices) and torch.equal(alone.graph.x, full.graph.x)
    with pytest.raises(FileNotFoundError, match="part-00000/meta.json is missing"):
        load_partition(tmp_path / "t", 0)
    with pytest.raises(ValueError, match="part 3 is out of range"):
        load_partition(tmp_path / "t", 3)


def test_store_overwrite_rules_and_failures_leave_nothing(graph, tmp_path):
    owner = owners(graph, "ldg", 2)
    write_partition_store(tmp_path / "s", graph, owner, 2)
    with pytest.raises(FileExistsError, match="already exists"):
        write_partition_store(tmp_path / "s", graph, owner, 2)
    write_partition_store(tmp_path / "s", graph, owner[::-1].copy(), 2, overwrite=True)
    assert np.array_equal(np.load(tmp_path / "s" / "owner.npy"), owner[::-1])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a partition store"):
        write_partition_store(tmp_path / "other", graph, owner, 2, overwrite=True)
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    with pytest.raises(ValueError, match=r"owner values must lie in \[0, 2\)"):
        write_partition_store(tmp_path / "bad", graph, np.full(graph.num_nodes, 2), 2)
    with pytest.raises(ValueError, match="owner must have shape"):
        write_partition_store(tmp_path / "bad", graph, owner[:-1], 2)
    with pytest.raises(ValueError, match="node_data\\['x'\\] must have 220 rows"):
        write_partition_store(tmp_path / "bad", graph, owner, 2, node_data={"x": graph.x[:5]})
    # an id beyond the declared count is found mid-stream, after the store was started
    src, dst = graph.indices.numpy().copy(), graph.dst_of_edges().numpy().copy()
    dst[len(dst) // 2] = graph.num_nodes + 3
    stream = write_edge_stream(tmp_path / "bad.e32", src, dst)
    with pytest.raises(ValueError, match="vertex ids must lie in"):
        write_partition_store(tmp_path / "bad", stream, owner, 2, num_vertices=graph.num_nodes, chunk_edges=16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.e32", "bad.e32.json", "other", "s"]
    assert is_partition_store(tmp_path / "s") and not is_partition_store(tmp_path / "other")

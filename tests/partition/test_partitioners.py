"""Vertex partitioners (random, METIS), their shared helpers, and the PartitionBook."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.data.synthetic import generate
from graphscale.partition.base import edge_cut, halo_sizes, partition_sizes, replication_factor
from graphscale.partition.book import PartitionBook
from graphscale.partition.metis import BALANCE_CHOICES, DEFAULT_BALANCE, MetisPartitioner, vertex_weights
from graphscale.partition.metrics import balance
from graphscale.partition.random import RandomPartitioner
from graphscale.registry import PARTITIONERS
from graphscale.testing import random_graph


def two_cliques(k: int = 6) -> Graph:
    """Two k-cliques joined by the single edge (k-1, k), both directions stored."""
    src, dst = [], []
    for base in (0, k):
        for u in range(base, base + k):
            for v in range(base, base + k):
                if u != v:
                    src.append(u)
                    dst.append(v)
    src += [k - 1, k]
    dst += [k, k - 1]
    return Graph.from_edges(torch.tensor(src), torch.tensor(dst), 2 * k)


def brute_force_halo_sizes(graph: Graph, owner: torch.Tensor, num_parts: int) -> list[int]:
    halos = [set() for _ in range(num_parts)]
    for v in range(graph.num_nodes):
        for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist():
            if owner[u] != owner[v]:
                halos[int(owner[v])].add(u)
    return [len(h) for h in halos]


def test_registry_names():
    assert PARTITIONERS.get("random") is RandomPartitioner
    assert PARTITIONERS.get("metis") is MetisPartitioner
    with pytest.raises(KeyError, match="metis"):
        PARTITIONERS.get("nope")


@pytest.mark.parametrize("num_nodes,num_parts", [(10, 3), (41, 4), (8, 8), (5, 1)])
def test_random_is_balanced_and_seeded(num_nodes, num_parts):
    g = random_graph(num_nodes, seed=1)
    part = RandomPartitioner()
    owner = part.partition(g, num_parts, seed=3)
    assert owner.dtype == torch.int64 and owner.shape == (num_nodes,)
    sizes = partition_sizes(owner, num_parts)
    assert int(sizes.sum()) == num_nodes and int(sizes.max() - sizes.min()) <= 1
    assert torch.equal(owner, part.partition(g, num_parts, seed=3))
    if num_parts > 1 and num_nodes > 8:
        assert not torch.equal(owner, part.partition(g, num_parts, seed=4))


def test_metis_finds_the_obvious_cut_and_is_deterministic():
    g = two_cliques()
    owner = MetisPartitioner().partition(g, 2, seed=0)
    assert edge_cut(g, owner) == 2  # one undirected edge, stored twice
    assert partition_sizes(owner, 2).tolist() == [6, 6]
    g2 = random_graph(200, avg_degree=6.0, seed=5)
    a, b = MetisPartitioner().partition(g2, 4, seed=7), MetisPartitioner().partition(g2, 4, seed=7)
    assert torch.equal(a, b)
    sizes = partition_sizes(a, 4)
    assert int(sizes.min()) > 0 and int(sizes.max()) <= 1.1 * 200 / 4
    assert edge_cut(g2, a) < edge_cut(g2, RandomPartitioner().partition(g2, 4, seed=7))
    assert torch.equal(MetisPartitioner().partition(g2, 1), torch.zeros(200, dtype=torch.int64))


def test_metis_accepts_directed_graphs_with_self_loops():
    src = torch.tensor([0, 1, 2, 3, 4, 5, 0, 3])
    dst = torch.tensor([1, 2, 0, 4, 5, 3, 0, 3])  # two directed triangles plus self-loops
    g = Graph.from_edges(src, dst, 6)
    owner = MetisPartitioner().partition(g, 2, seed=0)
    assert edge_cut(g, owner) == 0 and partition_sizes(owner, 2).tolist() == [3, 3]


@pytest.fixture(scope="module")
def rmat():
    """The issue's skewed graph: 20k-vertex R-MAT (max in-degree ~2.7k), 10% training vertices."""
    return generate("rmat:nodes=20000,features=0,seed=0")


def per_part(graph: Graph, owner: torch.Tensor, p: int) -> tuple[float, float]:
    """``(edge balance, training-vertex balance)``: max / mean in-edges and training vertices per part."""
    owner = owner.numpy()
    edges = np.bincount(owner, weights=graph.in_degrees().numpy(), minlength=p)
    return balance(edges), balance(np.bincount(owner[graph.train_mask.numpy()], minlength=p))


@pytest.mark.parametrize("p", [2, 4, 16])
def test_metis_balances_edges_and_training_vertices(rmat, p):
    assert per_part(rmat, MetisPartitioner("vertices").partition(rmat, 4, seed=0), 4)[0] > 3.0  # the 3.15x
    edges_only = MetisPartitioner("edges").partition(rmat, p, seed=0)
    assert per_part(rmat, edges_only, p)[0] <= 1.10
    edge_bal, train_bal = per_part(rmat, MetisPartitioner("edges+train").partition(rmat, p, seed=0), p)
    assert edge_bal <= 1.10 and train_bal <= 1.10
    assert train_bal < per_part(rmat, edges_only, p)[1]  # the second constraint is what balances training vertices


def test_metis_balance_option(rmat):
    assert BALANCE_CHOICES == ("vertices", "edges", "edges+train") and DEFAULT_BALANCE == "edges+train"
    assert MetisPartitioner().balance == DEFAULT_BALANCE
    with pytest.raises(ValueError, match=r"balance must be one of vertices, edges, edges\+train, got 'edge'"):
        MetisPartitioner(balance="edge")
    g = random_graph(40, avg_degree=3.0, seed=2, isolated=2)
    assert vertex_weights(g, "vertices") is None
    assert vertex_weights(g, "edges").tolist() == (g.in_degrees() + 1).tolist()  # isolated vertices weigh 1
    g.train_mask = torch.arange(40) % 3 == 0
    assert vertex_weights(g, "edges+train").tolist() == [[d + 1, int(v % 3 == 0)] for v, d in
                                                         enumerate(g.in_degrees().tolist())]
    for mask in (None, torch.zeros(40, dtype=torch.bool)):  # no training vertices: edges+train is edges
        g.train_mask = mask
        assert vertex_weights(g, "edges+train").tolist() == vertex_weights(g, "edges").tolist()
        assert torch.equal(MetisPartitioner("edges+train").partition(g, 3, seed=1),
                           MetisPartitioner("edges").partition(g, 3, seed=1))


@pytest.mark.parametrize("p,ufactor", [(4, None), (16, None), (3, 100)])
def test_metis_vertices_is_the_unweighted_call(rmat, p, ufactor):
    """``balance="vertices"`` is the partitioner as it was: pymetis without weights, bit for bit."""
    import pymetis

    g = rmat.remove_self_loops().symmetrize()
    options = pymetis.Options(seed=3)
    if ufactor is not None:
        options.ufactor = ufactor
    xadj = g.indptr.numpy().astype(np.int32)
    expected = pymetis.part_graph(p, pymetis.CSRAdjacency(xadj, g.indices.numpy().astype(np.int32)),
                                  options=options).vertex_part
    owner = MetisPartitioner("vertices", ufactor=ufactor).partition(rmat, p, seed=3)
    assert owner.tolist() == list(np.asarray(expected))


def test_metis_edges_train_without_the_c_api_falls_back_to_edges(rmat, monkeypatch):
    from graphscale.partition import metis

    monkeypatch.setattr(metis, "_metis_library", lambda pymetis: None)
    with pytest.warns(RuntimeWarning, match="becomes 'edges'"):
        owner = MetisPartitioner("edges+train").partition(rmat, 4, seed=0)
    assert torch.equal(owner, MetisPartitioner("edges").partition(rmat, 4, seed=0))


def test_metis_partition_weighted(rmat):
    weights = rmat.in_degrees().numpy() + 1
    assert torch.equal(MetisPartitioner("vertices").partition_weighted(rmat, 4, weights, seed=0),
                       MetisPartitioner("edges").partition(rmat, 4, seed=0))
    assert torch.equal(MetisPartitioner().partition_weighted(rmat, 1, weights), torch.zeros(20000, dtype=torch.int64))
    for bad in (weights[:-1], weights.astype(np.float64), -weights):
        with pytest.raises(ValueError, match="weights must be non-negative integers"):
            MetisPartitioner().partition_weighted(rmat, 4, bad)


@pytest.mark.parametrize("partitioner", [RandomPartitioner(), MetisPartitioner()])
def test_bad_part_counts_are_rejected(partitioner):
    g = random_graph(6)
    with pytest.raises(ValueError, match="num_parts must be >= 1"):
        partitioner.partition(g, 0)
    with pytest.raises(ValueError, match="exceeds the number of vertices"):
        partitioner.partition(g, 7)
    with pytest.raises(TypeError, match="integer"):
        partitioner.partition(g, 2.0)


def test_scoring_helpers_match_brute_force():
    g = random_graph(60, avg_degree=4.0, seed=3, symmetric=False)
    owner = RandomPartitioner().partition(g, 3, seed=0)
    assert halo_sizes(g, owner, 3).tolist() == brute_force_halo_sizes(g, owner, 3)
    cut = sum(int(owner[u] != owner[v]) for v in range(60) for u in g.indices[g.indptr[v]:g.indptr[v + 1]].tolist())
    assert edge_cut(g, owner) == cut
    assert replication_factor(g, owner, 3) == pytest.approx(sum(brute_force_halo_sizes(g, owner, 3)) / 60)
    assert halo_sizes(g, torch.zeros(60, dtype=torch.int64), 1).tolist() == [0]


def test_partition_book_relabels_contiguously():
    owner = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0])
    book = PartitionBook.from_owner(owner)
    assert book.num_parts == 3
    assert book.perm.tolist() == [1, 3, 7, 2, 6, 0, 4, 5]  # part 0 first, stable within a part
    assert book.boundaries.tolist() == [0, 3, 5, 8]
    assert book.sizes().tolist() == [3, 2, 3]
    assert torch.equal(book.owner_of(torch.arange(8)), owner[book.perm])
    assert torch.equal(book.owner(), owner)
    assert torch.equal(book.to_original(book.to_global(torch.arange(8))), torch.arange(8))
    assert book.inner_original(2).tolist() == [0, 4, 5]
    assert book.inner_global(1).tolist() == [3, 4]
    assert book.to_local(torch.tensor([0, 4, 7])).tolist() == [0, 1, 2]
    assert book.to_local(torch.tensor([5, 7]), part=2).tolist() == [0, 2]
    assert book.local_to_global(torch.tensor([0, 2]), 2).tolist() == [5, 7]
    with pytest.raises(ValueError, match="not owned by part 1"):
        book.to_local(torch.tensor([0]), part=1)
    with pytest.raises(ValueError, match="out of range"):
        book.inner_original(3)
    with pytest.raises(ValueError, match="global ids"):
        book.owner_of(torch.tensor([8]))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        PartitionBook.from_owner(torch.tensor([0, 2]), num_parts=2)
    empty = PartitionBook.from_owner(torch.tensor([0, 0, 2]), num_parts=4)  # parts 1 and 3 are empty
    assert empty.sizes().tolist() == [2, 0, 1, 0] and empty.owner_of(torch.tensor([0, 1, 2])).tolist() == [0, 0, 2]


def test_partition_book_halo_matches_block():
    g = random_graph(50, avg_degree=3.0, seed=4)
    owner = MetisPartitioner().partition(g, 3, seed=0)
    book = PartitionBook.from_owner(owner, 3)
    for p in range(3):
        block = Block.from_nodes(g, book.inner_original(p))
        assert torch.equal(book.halo_original(g, p), block.halo_ids)
    relabelled = g.relabel(book.perm)
    for p in range(3):  # in the relabelled graph, part p's rows are one contiguous range
        assert torch.equal(book.to_global(book.inner_original(p)), book.inner_global(p))
    assert edge_cut(relabelled, book.owner_of(torch.arange(50))) == edge_cut(g, owner)

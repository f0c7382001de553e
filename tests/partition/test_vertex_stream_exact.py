"""LDG, Fennel and restream place each vertex by scoring only the parts its neighbours hold plus the best empty-handed
part; the owner array and every pass's move count equal those of scoring all ``p`` parts (the reference below)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch
from stream_helpers import community_records, graph_of

from graphscale.data.graph import Graph
from graphscale.data.synthetic import generate
from graphscale.partition.csr_source import GraphEdges
from graphscale.partition.vertex_stream import (
    FennelPartitioner,
    LDGPartitioner,
    RestreamPartitioner,
    _empty_parts,
    _place,
)
from graphscale.testing import random_graph


@numba.njit(cache=True)
def _reference_place(indptr, indices, verts, owner, load, weight, weighted, fennel, cap, alpha, gamma, counts):
    """Place ``verts`` in turn, scoring every one of the ``p`` parts; returns how many vertices changed part."""
    p = load.size
    moved = 0
    for k in range(verts.size):
        v = verts[k]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u != v and owner[u] >= 0:
                counts[owner[u]] += 1
        best, best_score = -1, 0.0
        for s in range(p):
            if load[s] >= cap:
                continue
            if fennel:
                score = counts[s] - alpha * gamma * load[s] ** (gamma - 1.0)
            else:
                score = counts[s] * (1.0 - load[s] / cap)
            if best < 0 or score > best_score or (score == best_score and load[s] < load[best]):
                best, best_score = s, score
        if owner[v] != best:
            moved += 1
        owner[v] = best
        load[best] += weight[v] if weighted else 1.0
        counts[:] = 0
    return moved


def _passes(part, graph: Graph, p: int, seed: int, reference: bool) -> list[tuple[list[int], int]]:
    """Every pass's owner array and move count, placing all vertices at once (no early stop)."""
    csr = GraphEdges(graph)
    n = graph.num_nodes
    indptr, indices = (np.asarray(a, dtype=np.int64) for a in csr.arrays())
    weight = part._weights(csr)
    score = (part._fennel, part._capacity(n, p), part._alpha(n, csr.num_edges, p), part.gamma)
    order = np.random.default_rng(seed).permutation(n) if part.order == "random" else np.arange(n)
    owner, load, counts = np.full(n, -1, np.int64), np.zeros(p), np.zeros(p, np.int64)
    tree, key = np.empty(2 * (1 << max(p - 1, 0).bit_length()), np.int64), np.empty(p)
    out = []
    for _ in range(part.passes):
        if reference:
            load[:] = 0
            moved = _reference_place(indptr, indices, order, owner, load, np.empty(0) if weight is None else weight,
                                     weight is not None, *score, counts)
        else:
            _empty_parts(load, tree, key, *score)
            moved = _place(indptr, indices, 0, order, owner, load, np.empty(0) if weight is None else weight,
                           weight is not None, *score, counts, np.empty(p, np.int64), tree, key)
            assert not counts.any()
        out.append((owner.tolist(), moved))
    return out


def _expected(part, graph: Graph, p: int, seed: int) -> np.ndarray:
    """The reference owner array with the partitioner's early stop (after a pass that moves no vertex)."""
    owner = None
    for owner, moved in _passes(part, graph, p, seed, reference=True):
        if moved == 0:
            break
    return np.asarray(owner)


def _with_self_loops(graph: Graph, every: int = 3) -> Graph:
    loops = torch.arange(0, graph.num_nodes, every)
    src, dst = graph.edge_index()
    return Graph.from_edges(torch.cat([src, loops]), torch.cat([dst, loops]), graph.num_nodes)


GRAPHS = {
    "random": lambda: random_graph(400, avg_degree=6, seed=1),
    "random-isolated": lambda: random_graph(300, avg_degree=4, seed=2, isolated=60),
    "directed": lambda: random_graph(300, avg_degree=5, seed=3, symmetric=False),
    "self-loops": lambda: _with_self_loops(random_graph(250, avg_degree=5, seed=4)),
    "sbm": lambda: generate("sbm:nodes=600,degree=8,features=0,seed=5"),
    "communities-hubs": lambda: graph_of(*community_records(n=500, seed=6, isolated=30)),
    "edgeless": lambda: Graph.from_edges(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 90),
}
PARTITIONERS = {
    "ldg": LDGPartitioner,
    "ldg-random": lambda: LDGPartitioner(order="random"),
    "fennel": FennelPartitioner,
    "fennel-random-gamma2": lambda: FennelPartitioner(order="random", gamma=2.0, nu=1.0),
    "restream": RestreamPartitioner,
    "restream-edges": lambda: RestreamPartitioner(balance="edges"),
    "restream-fennel-edges-random": lambda: RestreamPartitioner(score="fennel", balance="edges", order="random"),
    "restream-fennel": lambda: RestreamPartitioner(score="fennel", passes=4, nu=1.0),
}


@pytest.fixture(scope="module")
def graphs():
    return {name: make() for name, make in GRAPHS.items()}


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@pytest.mark.parametrize("part_name", list(PARTITIONERS))
def test_every_pass_equals_scoring_all_parts(graphs, graph_name, part_name):
    """Owner and move count of every pass, for p from 1 (every vertex in one part) to the number of vertices."""
    graph = graphs[graph_name]
    part = PARTITIONERS[part_name]()
    n = graph.num_nodes
    for p in sorted({1, 2, 3, 5, 16, 64, 300, n // 2, n - 7, n} & set(range(1, n + 1))):
        assert _passes(part, graph, p, 11, reference=False) == _passes(part, graph, p, 11, reference=True), p


@pytest.mark.parametrize("graph_name", ["random-isolated", "sbm", "communities-hubs", "self-loops"])
@pytest.mark.parametrize("part_name", list(PARTITIONERS))
def test_partition_and_chunked_csr_equal_the_reference(graphs, graph_name, part_name):
    """The partitioner's owner (early stop included), in memory and read in blocks of a few rows."""
    graph = graphs[graph_name]
    part = PARTITIONERS[part_name]()
    for p in (2, 7, min(300, graph.num_nodes)):
        expected = _expected(part, graph, p, 5)
        assert np.array_equal(part.partition(graph, p, seed=5).numpy(), expected), p
        chunked = part.partition_csr(GraphEdges(graph), p, seed=5, chunk_edges=17).numpy()
        assert np.array_equal(chunked, expected), p


def test_parts_filling_to_capacity_and_ties():
    """p close to N: capacity 1 or 2 fills parts one by one; a ring and an edgeless graph tie every score."""
    ring = torch.arange(40)
    graphs = [Graph.from_edges(torch.cat([ring, (ring + 1) % 40]), torch.cat([(ring + 1) % 40, ring]), 40),
              random_graph(40, avg_degree=3, seed=8, isolated=10)]
    for graph in graphs:
        for p in (13, 20, 21, 39, 40):
            for part in (LDGPartitioner(), FennelPartitioner(nu=1.0), RestreamPartitioner(balance="edges"),
                         RestreamPartitioner(score="fennel", order="random")):
                owner = part.partition(graph, p, seed=2).numpy()
                assert np.array_equal(owner, _expected(part, graph, p, 2)), (p, part.name)
                if part.balance == "vertices":
                    assert np.bincount(owner, minlength=p).max() <= part._capacity(40, p)


def test_a_vertex_without_placed_neighbours_goes_to_the_smallest_part_first_by_index():
    graph = Graph.from_edges(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 10)
    assert LDGPartitioner().partition(graph, 4).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert FennelPartitioner().partition(graph, 3).tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]

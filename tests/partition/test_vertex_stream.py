"""LDG and Fennel: a pure-Python oracle, capacity, determinism, and a better cut than random."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stream_helpers import community_records, graph_of

from graphscale.partition.base import edge_cut, partition_sizes
from graphscale.partition.random import RandomPartitioner
from graphscale.partition.vertex_stream import FennelPartitioner, LDGPartitioner


def reference(graph, p: int, fennel: bool, order=None, gamma: float = 1.5, nu: float = 1.1) -> list[int]:
    n = graph.num_nodes
    indptr, indices = graph.indptr.tolist(), graph.indices.tolist()
    cap = max(math.ceil(nu * n / p), math.ceil(n / p)) if fennel else math.ceil(n / p)
    alpha = math.sqrt(p) * (graph.num_edges / 2) / n ** gamma
    owner, load = [-1] * n, [0] * p
    for v in (range(n) if order is None else order):
        counts = [0] * p
        for u in indices[indptr[v]:indptr[v + 1]]:
            if owner[u] >= 0:
                counts[owner[u]] += 1
        best, best_score = -1, 0.0
        for s in range(p):
            if load[s] >= cap:
                continue
            score = counts[s] - alpha * gamma * load[s] ** (gamma - 1.0) if fennel else \
                counts[s] * (1.0 - load[s] / cap)
            if best < 0 or score > best_score or (score == best_score and load[s] < load[best]):
                best, best_score = s, score
        owner[v] = best
        load[best] += 1
    return owner


@pytest.fixture(scope="module")
def graph():
    src, dst, n = community_records(n=300, seed=2, communities=4)
    return graph_of(src, dst, n)


@pytest.mark.parametrize("fennel", [False, True])
@pytest.mark.parametrize("p", [2, 4, 7])
def test_matches_reference_and_respects_capacity(graph, fennel, p):
    cls = FennelPartitioner if fennel else LDGPartitioner
    owner = cls().partition(graph, p)
    assert owner.tolist() == reference(graph, p, fennel)
    cap = math.ceil((1.1 if fennel else 1.0) * graph.num_nodes / p)
    assert int(partition_sizes(owner, p).max()) <= cap
    order = np.random.default_rng(3).permutation(graph.num_nodes)
    assert cls(order="random").partition(graph, p, seed=3).tolist() == reference(graph, p, fennel, order.tolist())


@pytest.mark.parametrize("cls", [LDGPartitioner, FennelPartitioner])
def test_beats_random_and_is_deterministic(graph, cls):
    owner = cls().partition(graph, 4)
    assert torch.equal(owner, cls().partition(graph, 4))
    assert edge_cut(graph, owner) < 0.8 * edge_cut(graph, RandomPartitioner().partition(graph, 4, seed=0))


def test_bad_options():
    with pytest.raises(ValueError, match="order must be one of natural, random"):
        LDGPartitioner(order="bfs")
    with pytest.raises(ValueError, match="gamma > 1"):
        FennelPartitioner(gamma=1.0)

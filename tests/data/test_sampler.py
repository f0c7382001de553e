"""Tests for the uniform neighbour sampler (graphscale.data.sampler)."""

from __future__ import annotations

import pytest
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler, relabel, sample_neighbors
from graphscale.testing.graphs import random_graph

# --------------------------------------------------------------- reference
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def ref_mix(x: int) -> int:
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def ref_sample_row(graph: Graph, v: int, fanout: int, seed: int, batch_key: int, layer: int) -> list[int]:
    """Pure-Python oracle of the documented stream + Floyd's algorithm."""
    start, end = int(graph.indptr[v]), int(graph.indptr[v + 1])
    row = graph.indices[start:end].tolist()
    d = end - start
    if fanout == -1 or d <= fanout:
        return row
    base = ref_mix(ref_mix(ref_mix(seed & M64) ^ (batch_key & M64)) ^ (layer & M64))
    h = ref_mix(base ^ v)
    picked: set[int] = set()
    for i, j in enumerate(range(d - fanout, d)):
        t = ref_mix((h + i * GOLDEN) & M64) % (j + 1)
        picked.add(j if t in picked else t)
    return [row[p] for p in sorted(picked)]


def rows_of(indptr: torch.Tensor, values: torch.Tensor) -> list[list[int]]:
    return [values[indptr[r]:indptr[r + 1]].tolist() for r in range(indptr.numel() - 1)]


def star_graph(num_leaves: int) -> Graph:
    """Vertex 0 with in-edges from 1..num_leaves (and the reverse edges)."""
    leaves = torch.arange(1, num_leaves + 1)
    hub = torch.zeros_like(leaves)
    return Graph.from_edges(torch.cat([leaves, hub]), torch.cat([hub, leaves]), num_leaves + 1)


def hub_graph() -> Graph:
    """A random graph plus two hubs of in-degree 150 and 300 (exercises the large-k path)."""
    g = random_graph(400, 6, seed=7)
    src, dst = g.indices, g.dst_of_edges()
    extra_src = torch.cat([torch.arange(1, 151), torch.arange(2, 302)])
    extra_dst = torch.cat([torch.zeros(150, dtype=torch.int64), torch.ones(300, dtype=torch.int64)])
    keep = dst > 1
    return Graph.from_edges(torch.cat([src[keep], extra_src]), torch.cat([dst[keep], extra_dst]), 400)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return random_graph(300, 12, seed=3, isolated=5)


# --------------------------------------------------------------- sample_neighbors
@pytest.mark.parametrize("fanout", [1, 3, 7, 60, 100, -1])
def test_sample_neighbors_matches_reference(fanout):
    g = hub_graph()
    nodes = torch.tensor([0, 1, 5, 17, 399, 42, 3])
    indptr, src = sample_neighbors(g, nodes, fanout, seed=11, batch_key=5, layer=2)
    expected = [ref_sample_row(g, int(v), fanout, 11, 5, 2) for v in nodes]
    assert rows_of(indptr, src) == expected


@pytest.mark.parametrize("fanout", [1, 4, 10, -1])
def test_rows_are_valid_samples(graph, fanout):
    nodes = torch.arange(graph.num_nodes)
    indptr, src = sample_neighbors(graph, nodes, fanout, seed=0, batch_key=1, layer=0)
    deg = graph.in_degrees()
    expected_sizes = deg if fanout == -1 else torch.clamp(deg, max=fanout)
    assert torch.equal(indptr[1:] - indptr[:-1], expected_sizes)
    for v, row in enumerate(rows_of(indptr, src)):
        neighbours = set(graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist())
        assert len(row) == len(set(row)), "sampled with replacement"
        assert set(row) <= neighbours, "sampled an edge that is not in the graph"
        assert row == sorted(row), "rows keep CSR order"


def test_sample_neighbors_accepts_csr_pair_and_repeats(graph):
    nodes = torch.tensor([4, 9, 4])
    a = sample_neighbors(graph, nodes, 3, seed=2, batch_key=3, layer=1)
    b = sample_neighbors((graph.indptr, graph.indices), nodes.numpy(), 3, seed=2, batch_key=3, layer=1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    rows = rows_of(*a)
    assert rows[0] == rows[2]


def test_empty_nodes(graph):
    indptr, src = sample_neighbors(graph, torch.empty(0, dtype=torch.int64), 5, 0, 0, 0)
    assert indptr.tolist() == [0] and src.numel() == 0


def test_draw_depends_on_every_key(graph):
    nodes = torch.arange(graph.num_nodes - 5)
    base = sample_neighbors(graph, nodes, 2, seed=0, batch_key=0, layer=0)
    for kwargs in ({"seed": 1, "batch_key": 0, "layer": 0}, {"seed": 0, "batch_key": 1, "layer": 0},
                   {"seed": 0, "batch_key": 0, "layer": 1}):
        other = sample_neighbors(graph, nodes, 2, **kwargs)
        assert not torch.equal(base[1], other[1]), kwargs
    again = sample_neighbors(graph, nodes, 2, seed=0, batch_key=0, layer=0)
    assert torch.equal(base[1], again[1])


def test_order_and_superset_independence(graph):
    gen = torch.Generator().manual_seed(0)
    targets = torch.tensor([10, 3, 250, 77, 120])
    superset = torch.cat([targets, torch.tensor([1, 2, 200, 201])])
    superset = superset[torch.randperm(superset.numel(), generator=gen)]
    small = dict(zip(targets.tolist(), rows_of(*sample_neighbors(graph, targets, 4, 9, 2, 1))))
    big = dict(zip(superset.tolist(), rows_of(*sample_neighbors(graph, superset, 4, 9, 2, 1))))
    assert all(big[v] == row for v, row in small.items())


# --------------------------------------------------------------- uniformity
def _chi_square(counts: torch.Tensor) -> float:
    expected = counts.double().mean()
    return float(((counts.double() - expected) ** 2 / expected).sum())


@pytest.mark.parametrize(("leaves", "fanout", "keys", "bound"), [(20, 5, 3000, 55.0), (200, 60, 400, 320.0)])
def test_uniform_inclusion_on_star(leaves, fanout, keys, bound):
    # chi-square with leaves-1 dof: mean 19 / 199, the bounds sit at p < 1e-4.
    g = star_graph(leaves)
    counts = torch.zeros(leaves + 1, dtype=torch.int64)
    hub = torch.tensor([0])
    for key in range(keys):
        _, src = sample_neighbors(g, hub, fanout, seed=123, batch_key=key, layer=0)
        counts += torch.bincount(src, minlength=leaves + 1)
    assert counts[0] == 0 and int(counts.sum()) == keys * fanout
    assert _chi_square(counts[1:]) < bound


def test_pairs_are_uniform_on_small_star():
    # all C(6, 2) = 15 subsets of size 2 should be equally likely
    g = star_graph(6)
    counts: dict[tuple[int, ...], int] = {}
    for key in range(3000):
        _, src = sample_neighbors(g, torch.tensor([0]), 2, seed=5, batch_key=key, layer=3)
        counts[tuple(src.tolist())] = counts.get(tuple(src.tolist()), 0) + 1
    assert len(counts) == 15
    assert _chi_square(torch.tensor(list(counts.values()))) < 45.0  # 14 dof


# --------------------------------------------------------------- blocks
@pytest.mark.parametrize("fanouts", [[3], [5, 2], [4, -1, 3], [-1, -1]])
def test_block_chaining_invariants(graph, fanouts):
    sampler = NeighborSampler(graph, fanouts, seed=4)
    targets = torch.tensor([31, 7, 260, 2, 99, 298])
    blocks = sampler.sample(targets, batch_key=12)
    assert len(blocks) == len(fanouts)
    assert torch.equal(blocks[-1].dst_ids, targets)
    deg = graph.in_degrees()
    for layer, block in enumerate(blocks):
        assert block.src_ids.unique().numel() == block.num_src
        assert torch.equal(block.src_deg, deg[block.src_ids])
        assert block.num_edges == 0 or (0 <= int(block.indices.min()) and int(block.indices.max()) < block.num_src)
        if layer < len(blocks) - 1:
            assert block.num_dst == blocks[layer + 1].num_src
            assert torch.equal(block.dst_ids, blocks[layer + 1].src_ids)
        # the rows are exactly the lower-level sample for this layer
        indptr, src = sample_neighbors(graph, block.dst_ids, fanouts[layer], 4, 12, layer)
        assert torch.equal(block.indptr, indptr)
        assert torch.equal(block.src_ids[block.indices], src)
        # halo rows in first-appearance order
        halo, seen = [], set(block.dst_ids.tolist())
        for u in src.tolist():
            if u not in seen:
                seen.add(u)
                halo.append(u)
        assert block.halo_ids.tolist() == halo


def test_full_fanout_equals_from_nodes(graph):
    targets = torch.tensor([5, 80, 13, 290, 296])  # 296 is isolated
    block = NeighborSampler(graph, [-1]).sample(targets, batch_key=0)[0]
    ref = Block.from_nodes(graph, targets)
    assert torch.equal(block.indptr, ref.indptr)
    assert torch.equal(block.dst_ids, ref.dst_ids)

    def edges(b: Block) -> set[tuple[int, int]]:
        dst = b.src_ids[b.dst_of_edges()].tolist()
        return set(zip(dst, b.src_ids[b.indices].tolist()))

    assert edges(block) == edges(ref)
    assert set(block.halo_ids.tolist()) == set(ref.halo_ids.tolist())


def test_sample_is_deterministic_and_process_agnostic(graph):
    targets = torch.tensor([1, 50, 100, 150])
    a = NeighborSampler(graph, [3, 3], seed=8).sample(targets, 4)
    b = NeighborSampler(graph, [3, 3], seed=8).sample(targets, 4)
    for x, y in zip(a, b):
        assert torch.equal(x.indptr, y.indptr) and torch.equal(x.indices, y.indices)
        assert torch.equal(x.src_ids, y.src_ids)
    c = NeighborSampler(graph, [3, 3], seed=8).sample(targets, 5)
    assert not torch.equal(a[0].src_ids, c[0].src_ids)


def test_block_neighbour_sets_independent_of_batch(graph):
    """A vertex's sampled in-neighbours at layer l are the same in any batch that reaches it."""
    sampler = NeighborSampler(graph, [3, 2, 2], seed=1)
    targets = torch.tensor([40, 9, 181])
    extra = torch.tensor([0, 222, 150, 61])
    gen = torch.Generator().manual_seed(1)
    superset = torch.cat([targets, extra])[torch.randperm(7, generator=gen)]

    def neighbour_sets(blocks):
        out = []
        for b in blocks:
            rows = rows_of(b.indptr, b.src_ids[b.indices])
            out.append(dict(zip(b.dst_ids.tolist(), rows)))
        return out

    small, big = neighbour_sets(sampler.sample(targets, 3)), neighbour_sets(sampler.sample(superset, 3))
    for layer, (s, b) in enumerate(zip(small, big)):
        assert set(s) <= set(b), layer
        assert all(b[v] == row for v, row in s.items()), layer


def test_custom_degrees_and_empty_targets(graph):
    degrees = torch.arange(graph.num_nodes) * 2
    blocks = NeighborSampler(graph, [2, 2], degrees=degrees).sample(torch.tensor([3, 8]), 0)
    assert all(torch.equal(b.src_deg, degrees[b.src_ids]) for b in blocks)
    empty = NeighborSampler(graph, [2, 2]).sample(torch.empty(0, dtype=torch.int64), 0)
    assert [b.num_src for b in empty] == [0, 0]


def test_relabel_matches_dict_reference():
    gen = torch.Generator().manual_seed(0)
    num_nodes = 10**12
    dst = torch.unique(torch.randint(0, num_nodes, (300,), generator=gen))
    dst = dst[torch.randperm(dst.numel(), generator=gen)]
    pool = torch.cat([dst[:50], torch.randint(0, num_nodes, (500,), generator=gen)])
    global_src = pool[torch.randint(0, pool.numel(), (5000,), generator=gen)]
    src_ids, local = relabel(dst, global_src, num_nodes)
    ids: dict[int, int] = {int(v): i for i, v in enumerate(dst)}
    for u in global_src.tolist():
        ids.setdefault(u, len(ids))
    assert src_ids.tolist() == list(ids)
    assert local.tolist() == [ids[u] for u in global_src.tolist()]


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("fanouts", [[], [0], [5, -2], [2.5], [True], "10", None])
def test_bad_fanouts(graph, fanouts):
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler(graph, fanouts)


@pytest.mark.parametrize("fanout", [0, -2, 1.0])
def test_bad_fanout_low_level(graph, fanout):
    with pytest.raises(ValueError, match="fanout"):
        sample_neighbors(graph, torch.tensor([0]), fanout, 0, 0, 0)


@pytest.mark.parametrize("bad", [-1, 300, 10**6])
def test_out_of_range_targets(graph, bad):
    sampler = NeighborSampler(graph, [2])
    with pytest.raises(ValueError, match=r"targets.*\[0, 300\)"):
        sampler.sample(torch.tensor([0, bad]), 0)
    with pytest.raises(ValueError, match=r"nodes.*\[0, 300\)"):
        sample_neighbors(graph, torch.tensor([bad]), 2, 0, 0, 0)


def test_other_bad_input(graph):
    with pytest.raises(ValueError, match="distinct"):
        NeighborSampler(graph, [2]).sample(torch.tensor([4, 5, 4]), 0)
    with pytest.raises(ValueError, match="targets must hold integers"):
        NeighborSampler(graph, [2]).sample(torch.tensor([1.0]), 0)
    with pytest.raises(ValueError, match="batch_key"):
        NeighborSampler(graph, [2]).sample(torch.tensor([1]), 0.5)
    with pytest.raises(ValueError, match="graph_or_csr"):
        sample_neighbors("cora", torch.tensor([1]), 2, 0, 0, 0)
    with pytest.raises(ValueError, match="indptr"):
        sample_neighbors((graph.indptr, graph.indices[:-1]), torch.tensor([1]), 2, 0, 0, 0)
    with pytest.raises(TypeError, match="Graph"):
        NeighborSampler((graph.indptr, graph.indices), [2])
    with pytest.raises(ValueError, match="degrees"):
        NeighborSampler(graph, [2], degrees=torch.zeros(3))


# --------------------------------------------------------------- loader
def test_loader_batches():
    ids = torch.arange(100, 203)
    loader = MiniBatchLoader(ids, 10, seed=3)
    assert len(loader) == 11
    epoch0 = loader.batches(0)
    assert [b.numel() for b in epoch0] == [10] * 10 + [3]
    assert torch.equal(torch.sort(torch.cat(epoch0)).values, ids)
    assert all(torch.equal(x, y) for x, y in zip(epoch0, MiniBatchLoader(ids, 10, seed=3).batches(0)))
    assert not torch.equal(torch.cat(epoch0), torch.cat(loader.batches(1)))
    assert not torch.equal(torch.cat(epoch0), torch.cat(MiniBatchLoader(ids, 10, seed=4).batches(0)))
    assert loader.batch_key(2, 3) == 25


def test_loader_options():
    mask = torch.zeros(50, dtype=torch.bool)
    mask[::2] = True
    loader = MiniBatchLoader(mask, 4, seed=0, shuffle=False, drop_last=True)
    assert len(loader) == 6
    assert torch.equal(torch.cat(loader.batches(7)), torch.arange(0, 48, 2))
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match="batch_size"):
            MiniBatchLoader(mask, bad)
    for bad_ids in (torch.rand(5), torch.tensor([1, 2, 1]), torch.tensor([-1, 0])):
        with pytest.raises(ValueError, match="train_ids"):
            MiniBatchLoader(bad_ids, 2)

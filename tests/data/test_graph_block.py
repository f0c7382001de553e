"""Graph (CSR by destination) and Block builders."""

import pytest
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph, csr_from_edges
from graphscale.testing import random_graph


def edge_set(g: Graph) -> set[tuple[int, int]]:
    src, dst = g.edge_index().tolist()
    return set(zip(src, dst))


def test_csr_rows_are_in_neighbours_sorted():
    indptr, indices = csr_from_edges(torch.tensor([3, 0, 2, 1]), torch.tensor([1, 1, 0, 1]), 4)
    assert indptr.tolist() == [0, 1, 4, 4, 4]
    assert indices.tolist() == [2, 0, 1, 3]


def test_csr_rejects_out_of_range_and_shape_mismatch():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        csr_from_edges(torch.tensor([0, 3]), torch.tensor([1, 1]), 3)
    with pytest.raises(ValueError, match="equally long"):
        csr_from_edges(torch.tensor([0, 1]), torch.tensor([1]), 3)


def test_graph_validates_node_data_rows():
    with pytest.raises(ValueError, match="Graph.x has 2 rows"):
        Graph.from_edges([0], [1], 3, x=torch.zeros(2, 4))


def test_symmetrize_self_loops_degrees():
    g = Graph.from_edges([0, 1, 1, 2], [1, 2, 2, 2], 3)
    assert g.coalesce().num_edges == 3
    s = g.symmetrize()
    assert edge_set(s) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 2)}
    assert s.is_symmetric() and not g.is_symmetric()
    assert g.has_self_loops() and not g.remove_self_loops().has_self_loops()
    loops = s.add_self_loops()
    assert loops.num_edges == 4 + 3 and all((v, v) in edge_set(loops) for v in range(3))
    assert s.in_degrees().tolist() == [1, 2, 2] and torch.equal(s.in_degrees(), s.out_degrees())


def test_subgraph_and_relabel_keep_data_aligned():
    g = random_graph(30, seed=1)
    nodes = torch.tensor([7, 3, 20, 11, 5])
    sub = g.subgraph(nodes)
    assert torch.equal(sub.x, g.x[nodes]) and torch.equal(sub.y, g.y[nodes])
    assert torch.equal(sub.meta["global_ids"], nodes)
    expected = {(int(nodes[s]), int(nodes[d])) for s, d in edge_set(sub)}
    inside = set(nodes.tolist())
    assert expected == {(s, d) for s, d in edge_set(g) if s in inside and d in inside}
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    r = g.relabel(perm)
    assert {(int(perm[s]), int(perm[d])) for s, d in edge_set(r)} == edge_set(g)
    with pytest.raises(ValueError, match="permutation"):
        g.relabel(torch.zeros(30, dtype=torch.long))


def test_full_block_is_the_graph():
    g = random_graph(25, seed=2)
    b = Block.full(g)
    assert b.num_dst == b.num_src == 25 and b.num_edges == g.num_edges
    assert torch.equal(b.src_deg, g.in_degrees())


@pytest.mark.parametrize("nodes", [[5, 1, 30, 17], [1, 5, 17, 30], [7], []])  # any order; ascending (searchsorted)
def test_block_from_nodes_has_all_in_edges_and_sorted_halo(nodes):
    g = random_graph(40, seed=3)
    nodes = torch.tensor(nodes, dtype=torch.int64)
    for b in (Block.from_nodes(g, nodes), Block.from_nodes(g, nodes, g.in_degrees())):
        assert torch.equal(b.dst_ids, nodes)
        halo = b.halo_ids
        assert torch.equal(halo, torch.sort(halo).values) and not set(halo.tolist()) & set(nodes.tolist())
        got = [(int(b.src_ids[s]), int(nodes[d])) for s, d in zip(b.indices.tolist(), b.dst_of_edges().tolist())]
        want = [(int(u), int(v)) for v in nodes.tolist() for u in g.indices[g.indptr[v]:g.indptr[v + 1]]]
        assert got == want  # every in-edge, in the graph's CSR order
        assert torch.equal(b.src_deg, g.in_degrees()[b.src_ids])


def test_block_rejects_fewer_sources_than_destinations():
    with pytest.raises(ValueError, match="destinations must be the first source rows"):
        Block(torch.tensor([0, 0, 0]), torch.tensor([], dtype=torch.long), torch.tensor([0]), torch.tensor([0]))

"""SPRING: the spec's P1, P4-P7 against a pure-Python Algorithm 1, chunk invariance, defaults and ties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stream_helpers import community_records, graph_of, reference_spring

from graphscale.data.edge_stream import write_edge_stream
from graphscale.partition.base import replication_factor
from graphscale.partition.metrics import balance
from graphscale.partition.spring import SpringPartitioner, spring_clusters
from graphscale.partition.streaming import GraphEdges, StreamRunner
from graphscale.registry import PARTITIONERS


@pytest.fixture(scope="module")
def records():
    return community_records(n=240, seed=3)


@pytest.fixture(scope="module")
def stream(records, tmp_path_factory):
    src, dst, n = records
    return write_edge_stream(tmp_path_factory.mktemp("spring") / "g.e32", src, dst, num_vertices=n)


@pytest.mark.parametrize("merge", ["paper", "code", "none"])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_p5_matches_reference_for_every_chunk_size(records, stream, merge, p):
    src, dst, n = records
    expected, members, initial = reference_spring(src, dst, n, p, merge=merge)
    for chunk in (1, 7, 1000, 1 << 22):
        res = SpringPartitioner(merge=merge).run(stream, p, chunk_edges=chunk)
        assert res.owner.tolist() == expected, (merge, p, chunk)
    clusters = spring_clusters(StreamRunner(stream, n, 13), p, merge=merge, keep_clusters=True)
    # same merged clusters (as sets of vertices) and same initial clustering (up to renumbering)
    ours = {frozenset(np.flatnonzero(clusters.cluster == c).tolist()) for c in np.unique(clusters.cluster)}
    assert ours == {frozenset(ms) for ms in members.values()}
    _, first = np.unique(np.asarray(initial), return_inverse=True)
    assert np.array_equal(first, clusters.initial)
    assert clusters.info["clusters_merged"] == len(members)
    assert clusters.info["isolated"] == 4
    if merge == "none":
        assert clusters.info["merges"] == 0
    else:
        assert clusters.info["clusters_merged"] < clusters.info["clusters_initial"]


@pytest.mark.parametrize("lpt", ["edges", "mix"])
@pytest.mark.parametrize("merge", ["paper", "code", "none"])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_volume_aware_lpt_matches_reference(records, stream, merge, lpt, p):
    src, dst, n = records
    expected, members, _ = reference_spring(src, dst, n, p, merge=merge, lpt=lpt)
    for chunk in (1, 7, 1 << 22):
        res = SpringPartitioner(merge=merge, lpt=lpt).run(stream, p, chunk_edges=chunk)
        assert res.owner.tolist() == expected, (merge, lpt, p, chunk)
        assert res.info["lpt"] == lpt
    clusters = spring_clusters(StreamRunner(stream, n, 13), p, merge=merge, lpt=lpt, keep_clusters=True)
    # the volumes summed from degrees and along the merges are the degree sums of the merged clusters
    deg = np.bincount(dst, minlength=n)
    expected_vol = np.bincount(clusters.cluster, weights=deg, minlength=clusters.cluster_sizes.size)
    assert np.array_equal(clusters.cluster_volumes, expected_vol.astype(np.int64))
    assert sorted(clusters.cluster_volumes[clusters.cluster_volumes > 0].tolist()) == \
        sorted(v for v in (int(deg[ms].sum()) for ms in members.values()) if v > 0)
    assert clusters.info["max_cluster_volume"] == int(expected_vol.max())


def test_lpt_modes_differ_and_edges_balance_records(records, stream):
    """``edges`` changes the packing of the default and never balances records worse than ``vertices`` here."""
    n = records[2]
    for p in (4, 8):
        by = {lpt: SpringPartitioner(lpt=lpt).run(stream, p) for lpt in ("vertices", "edges", "mix")}
        assert by["edges"].owner.tolist() != by["vertices"].owner.tolist()
        assert balance(by["edges"].records_per_part) <= balance(by["vertices"].records_per_part)
        assert all(int(r.records_per_part.sum()) == records[0].size for r in by.values())
        assert all(np.bincount(r.owner, minlength=p).sum() == n for r in by.values())


def test_reference_merge_modes_differ_somewhere():
    """The two merge modes are different algorithms: on some seed they give different partitions."""
    outcomes = []
    for seed in range(6):
        src, dst, n = community_records(n=200, seed=seed, hubs=5)
        outcomes.append(reference_spring(src, dst, n, 4, merge="paper")[0] !=
                        reference_spring(src, dst, n, 4, merge="code")[0])
    assert any(outcomes)


@pytest.mark.parametrize("merge", ["paper", "code"])
@pytest.mark.parametrize("p", [2, 4, 16])
def test_p6_bounded_merges_and_p7_lpt(records, stream, merge, p):
    n = records[2]
    clusters = spring_clusters(StreamRunner(stream, n, 100), p, merge=merge, keep_clusters=True)
    cap = 1.05 * n / p
    sizes = np.bincount(clusters.cluster, minlength=clusters.cluster_sizes.size)
    assert np.array_equal(sizes, clusters.cluster_sizes)
    for root in np.flatnonzero(sizes):
        inside = np.unique(clusters.initial[clusters.cluster == root])
        if inside.size > 1:  # the cluster is the result of merges: every merge kept it under the cap
            assert sizes[root] <= cap
    owned = np.bincount(clusters.owner, minlength=p)
    assert owned.sum() == n  # P1: every vertex in exactly one partition, isolated ones included
    assert owned.max() <= n / p + sizes.max()  # P7


@pytest.mark.parametrize("merge", ["paper", "code", "none"])
@pytest.mark.parametrize("p", [2, 4, 16])
def test_lpt_bound_on_volumes_and_mix(records, stream, merge, p):
    """P7 for the volume-aware modes: the largest load is at most the mean load plus the largest cluster's load."""
    src, dst, n = records
    m = src.size
    deg = np.bincount(dst, minlength=n)
    edges = spring_clusters(StreamRunner(stream, n, 100), p, merge=merge, lpt="edges", keep_clusters=True)
    records_per_part = np.bincount(edges.owner[dst], minlength=p)  # pass 2 sends u -> v to part(v)
    part_volume = np.bincount(edges.owner, weights=deg, minlength=p)
    assert np.array_equal(records_per_part, part_volume)
    assert part_volume.max() <= m / p + edges.cluster_volumes.max()
    for root in np.flatnonzero(edges.cluster_sizes):  # P6 on volumes: every merge kept its cluster under the cap
        if np.unique(edges.initial[edges.cluster == root]).size > 1:
            assert edges.cluster_volumes[root] <= 1.05 * m / p
    assert edges.info["merge_cap"] == pytest.approx(1.05 * m / p)
    assert np.bincount(edges.owner, minlength=p).sum() == n
    mix = spring_clusters(StreamRunner(stream, n, 100), p, merge=merge, lpt="mix", keep_clusters=True)
    load = np.bincount(mix.owner, minlength=p) / n + np.bincount(mix.owner, weights=deg, minlength=p) / m
    key = mix.cluster_sizes / n + mix.cluster_volumes / m
    assert load.max() <= 2 / p + key.max() + 1e-12
    for root in np.flatnonzero(mix.cluster_sizes):
        if np.unique(mix.initial[mix.cluster == root]).size > 1:
            assert key[root] <= 1.05 * 2 / p


def test_p1_p4_replication_matches_in_memory_csr(records, stream):
    src, dst, n = records
    g = graph_of(src, dst, n)
    for p in (2, 4, 8):
        res = SpringPartitioner().run(stream, p, chunk_edges=50)
        owner = torch.from_numpy(res.owner.astype(np.int64))
        # scipy CSR of each partition (home in-neighbourhoods), vertices = rows or columns touched + owned
        adj = g.to_scipy().tocoo()
        total = 0
        for s in range(p):
            keep = owner[adj.row].numpy() == s
            vs = set(adj.row[keep].tolist()) | set(adj.col[keep].tolist()) | set(np.flatnonzero(res.owner == s))
            total += len(vs)
        assert res.replication_factor == pytest.approx(total / n, abs=1e-12)
        assert res.replication_factor == pytest.approx(1 + replication_factor(g, owner, p), abs=1e-12)
        assert res.vertex_cut_replication == res.replication_factor
        assert int(res.records_per_part.sum()) == src.size
        assert np.array_equal(res.edge_part, res.owner[dst])


def test_defaults_and_info(records, stream):
    src, _, n = records
    res = SpringPartitioner().run(stream, 4)
    assert res.info["tau_vol"] == pytest.approx(0.1 * src.size / 4)
    assert res.info["merge_cap"] == pytest.approx(1.05 * n / 4)
    assert [p.name for p in res.passes] == ["degrees", "clustering", "edges"]
    assert all(p.edges == src.size for p in res.passes)
    assert res.owner.dtype == np.int16


def test_vertex_partitioner_api_and_determinism(records):
    src, dst, n = records
    g = graph_of(src, dst, n)
    spring = PARTITIONERS.get("spring")()
    owner = spring.partition(g, 4)
    assert owner.dtype == torch.int64 and owner.shape == (n,)
    again = SpringPartitioner().run(GraphEdges(g), 4, chunk_edges=3).owner
    assert torch.equal(owner, torch.from_numpy(again.astype(np.int64)))
    # the vertex API streams the CSR (destination order), an order the reference reproduces
    expected, _, _ = reference_spring(g.indices.numpy(), g.dst_of_edges().numpy(), n, 4)
    assert owner.tolist() == expected


def test_ties_are_deterministic_on_a_symmetric_toy():
    # a 4-cycle plus an isolated vertex: every degree ties, the rules pick one answer
    src = np.array([0, 1, 1, 2, 2, 3, 3, 0])
    dst = np.array([1, 0, 2, 1, 3, 2, 0, 3])
    expected, members, _ = reference_spring(src, dst, 5, 2)
    graph = graph_of(src, dst, 5)
    for chunk in (1, 2, 8):
        assert SpringPartitioner().run(GraphEdges(graph), 2, chunk_edges=chunk).owner.tolist() == \
            reference_spring(graph.indices.numpy(), graph.dst_of_edges().numpy(), 5, 2)[0]
    assert sorted(np.bincount(expected, minlength=2).tolist()) == [2, 3]
    assert any(ms == [4] for ms in members.values())  # the isolated vertex is a singleton cluster


def test_bad_options():
    with pytest.raises(ValueError, match="merge must be one of paper, code, none"):
        SpringPartitioner(merge="heap")
    with pytest.raises(ValueError, match="beta and volume_cap must be > 0"):
        SpringPartitioner(beta=0)
    with pytest.raises(ValueError, match="lpt must be one of vertices, edges, mix, got 'volume'"):
        SpringPartitioner(lpt="volume")
    with pytest.raises(ValueError, match="lpt must be one of vertices, edges, mix"):
        spring_clusters(None, 2, lpt="degree")


def test_lpt_option_through_the_method_string():
    from graphscale.partition.command import build_partitioner

    partitioner, name, options = build_partitioner("spring:lpt=edges,merge=code")
    assert (name, options, partitioner.lpt, partitioner.merge) == ("spring", {"lpt": "edges", "merge": "code"},
                                                                  "edges", "code")
    with pytest.raises(ValueError, match="lpt must be one of vertices, edges, mix, got 'nodes'"):
        build_partitioner("spring:lpt=nodes")


@pytest.mark.parametrize("passes", [2, 3])
def test_restreamed_clustering_matches_reference(records, stream, passes):
    """``cluster_passes``: the clustering pass again over the same records with the clusters so far (a restream),
    then merging and LPT as before; the same partition as the reference for any chunk size."""
    src, dst, n = records
    expected, _, _ = reference_spring(src, dst, n, 4, lpt="edges", cluster_passes=passes)
    assert expected != reference_spring(src, dst, n, 4, lpt="edges")[0]  # the restream moved something
    for chunk in (7, 1 << 22):
        res = SpringPartitioner(lpt="edges", cluster_passes=passes).run(stream, 4, chunk_edges=chunk)
        assert res.owner.tolist() == expected, (passes, chunk)
    with pytest.raises(ValueError, match="cluster_passes must be >= 1"):
        SpringPartitioner(cluster_passes=0)


def reference_refine(src, dst, owner, p: int, rounds: int, lpt: str, beta: float = 1.05,
                     table: int = 4) -> list[int]:
    """The refinement (``graphscale.partition.refine``) in plain Python: batches of ``ceil(n table / p)`` ids,
    neighbour counts per partition from the owners at the batch's start, then moves in id order under the cap."""
    import math

    owner, n, m = list(owner), len(owner), len(src)
    deg = [0] * n
    for v in dst:
        deg[int(v)] += 1
    a, b = {"vertices": (1.0, 0.0), "edges": (0.0, 1.0), "mix": (1.0 / n, 1.0 / m)}[lpt]
    load = [0.0] * p
    for v in range(n):
        load[owner[v]] += a + b * deg[v]
    cap = max(beta * (a * n + b * m) / p, max(load))
    batch = math.ceil(n * table / p)
    for _ in range(rounds):
        for lo in range(0, n, batch):
            conn = {v: [0] * p for v in range(lo, min(n, lo + batch))}
            for u, v in zip(src.tolist(), dst.tolist()):
                if v in conn:
                    conn[v][owner[u]] += 1
                if u in conn:
                    conn[u][owner[v]] += 1
            for v, counts in conn.items():
                here, w = owner[v], a + b * deg[v]
                gains = [(counts[q] - counts[here], -q) for q in range(p) if q != here and load[q] + w <= cap]
                best = max(gains, default=(0, 0))
                if best[0] > 0:
                    owner[v] = -best[1]
                    load[here] -= w
                    load[-best[1]] += w
    return owner


@pytest.mark.parametrize("lpt", ["vertices", "edges", "mix"])
@pytest.mark.parametrize("p", [2, 5, 16])
def test_refinement_matches_reference_keeps_the_cap_and_lowers_replication(records, stream, lpt, p):
    """``refine=R``: R rounds of label-propagation moves after LPT equal the plain-Python reference for every
    chunk size (with p = 16 the counts come in several batches per round), the most loaded partition stays
    within ``max(beta * mean, LPT's largest load)``, and the replication factor falls."""
    src, dst, n = records
    lpt_owner, _, _ = reference_spring(src, dst, n, p, lpt=lpt)
    expected = reference_refine(src, dst, lpt_owner, p, 2, lpt)
    assert expected != lpt_owner  # something moved
    for chunk in (7, 1 << 22):
        res = SpringPartitioner(lpt=lpt, refine=2).run(stream, p, chunk_edges=chunk)
        assert res.owner.tolist() == expected, (lpt, p, chunk)
    assert [q.name for q in res.passes] == ["degrees", "clustering", *["refine"] * (2 * -(-p // 4)), "edges"]
    deg = np.bincount(dst, minlength=n)
    loads = {"vertices": lambda o: np.bincount(o, minlength=p),
             "edges": lambda o: np.bincount(o, weights=deg, minlength=p),
             "mix": lambda o: np.bincount(o, minlength=p) / n + np.bincount(o, weights=deg, minlength=p) / src.size}
    before, after = loads[lpt](np.asarray(lpt_owner)), loads[lpt](res.owner)
    assert after.max() <= max(1.05 * before.sum() / p, before.max()) + 1e-12
    assert res.info["refine_moves"][0] > 0 and res.info["refine_rounds"] == 2
    plain = SpringPartitioner(lpt=lpt).run(stream, p)
    assert plain.owner.tolist() == lpt_owner and "refine_moves" not in plain.info  # refine=0: the paper's
    assert res.replication_factor < plain.replication_factor
    with pytest.raises(ValueError, match="refine must be >= 0 .refinement rounds., got -1"):
        SpringPartitioner(refine=-1)


def test_a_training_store_refines_by_default():
    from graphscale.partition.command import build_partitioner

    partitioner, _, options = build_partitioner("spring", training=True)
    assert (partitioner.lpt, partitioner.refine, options) == ("edges", 2, {"lpt": "edges", "refine": 2})
    assert build_partitioner("spring:refine=0", training=True)[0].refine == 0
    assert build_partitioner("spring")[0].refine == 0  # the paper's algorithm otherwise

"""Partitioning a graph directory in bounded memory: the chunked readers equal the in-memory ones, the traced peak
does not follow the edge or feature bytes, METIS refuses a graph beyond the host budget, restreaming beats one pass."""

from __future__ import annotations

import argparse
import gc
import math

import numpy as np
import pytest
import torch

from graphscale.data.synthetic import generate, generate_to_dir
from graphscale.partition import command, metis
from graphscale.partition.base import edge_cut, partition_sizes
from graphscale.partition.build import (
    build_partitioner,
    build_vertex_partitioner,
    node_data_of,
    partition_graph_dir,
    write_graph_dir_store,
)
from graphscale.partition.csr_source import GraphEdges
from graphscale.partition.edge_stream import HDRFPartitioner
from graphscale.partition.store_writer import write_partition_store
from graphscale.partition.vertex_stream import FennelPartitioner, RestreamPartitioner
from graphscale.testing import traced_peak

SPEC = "sbm:nodes=600,degree=8,features=5,classes=4"


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("g") / "g"
    generate_to_dir(SPEC, folder, chunk_nodes=97)
    return folder


def test_graph_directory_chunks_and_row_blocks_equal_the_in_memory_csr(graph_dir):
    graph = generate(SPEC)
    mapped, memory = GraphEdges.from_dir(graph_dir), GraphEdges(graph)
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    for chunk in (1, 7, 1000, graph.num_edges + 5):
        got = list(mapped.chunks(chunk))
        assert [s.size for s, _ in got] == [min(chunk, graph.num_edges - f) for f in range(0, graph.num_edges, chunk)]
        assert np.array_equal(np.concatenate([s for s, _ in got]), src)
        assert np.array_equal(np.concatenate([d for _, d in got]), dst)
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
                   for a, b in zip(got, memory.chunks(chunk), strict=True))
    for block in (1, 13, 10**6):
        rows, ptrs, idx = zip(*mapped.row_blocks(block), strict=True)
        assert all(p[-1] <= block or p.size == 2 for p in ptrs)  # only a single long row passes the bound
        indptr = np.concatenate([[0]] + [p[1:] + graph.indptr[r].item() for r, p in zip(rows, ptrs, strict=True)])
        assert np.array_equal(indptr, graph.indptr.numpy()) and np.array_equal(np.concatenate(idx), src)
    assert np.array_equal(mapped.in_degrees(), graph.in_degrees().numpy())


@pytest.mark.parametrize("method", ["ldg", "fennel", "fennel:order=random", "restream", "restream:balance=edges",
                                    "restream:score=fennel,passes=3", "random", "hdrf", "spring"])
def test_partitioning_a_graph_directory_equals_the_in_memory_partition(graph_dir, method):
    partitioner = build_partitioner(method)[0]
    csr = GraphEdges.from_dir(graph_dir)
    chunked = partitioner.partition_csr(csr, 3, seed=2, chunk_edges=11)
    assert torch.equal(chunked, partitioner.partition(generate(SPEC), 3, seed=2))


def _store_files(path) -> dict:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("halo_hops", [1, 2])
@pytest.mark.parametrize("vertex_cut", [False, True])
def test_store_from_a_graph_directory_in_tiny_chunks_equals_the_in_memory_store(tmp_path, graph_dir, halo_hops,
                                                                             vertex_cut):
    graph = generate(SPEC)
    edge_part = HDRFPartitioner().run(GraphEdges(graph), 3).edge_part if vertex_cut else None
    owner = RestreamPartitioner().partition(graph, 3).numpy()
    common = {"edge_part": edge_part, "halo_hops": halo_hops, "num_classes": graph.num_classes}
    write_partition_store(tmp_path / "mem", GraphEdges(graph), owner, 3, node_data=node_data_of(graph), **common)
    mapped = GraphEdges.from_dir(graph_dir)
    write_partition_store(tmp_path / "dir", mapped, owner, 3, node_data=node_data_of(mapped.graph, folder=graph_dir),
                          chunk_edges=64, feature_chunk_bytes=64, **common)
    mem, chunked = _store_files(tmp_path / "mem"), _store_files(tmp_path / "dir")
    assert mem.keys() == chunked.keys() and sum(k.endswith("/indices.npy") for k in mem) == 3
    assert all(mem[k] == chunked[k] for k in mem), [k for k in mem if mem[k] != chunked[k]]


def _traced_peak(folder, chunk: int) -> int:
    """Traced (numpy and Python) peak of restreaming a graph directory and writing its store."""
    gc.collect()

    def restream_and_write() -> None:
        csr = GraphEdges.from_dir(folder)
        owner = RestreamPartitioner(passes=2).partition_csr(csr, 2, chunk_edges=chunk).numpy()
        write_partition_store(folder.parent / f"{folder.name}-store", csr, owner, 2, chunk_edges=chunk,
                              node_data=node_data_of(csr.graph, folder=folder), feature_chunk_bytes=16 << 10)

    return traced_peak(restream_and_write)


@pytest.mark.slow  # tracemalloc traces every allocation: about 10 s
def test_traced_peak_of_partitioning_and_store_writing_does_not_follow_edges_or_features(tmp_path):
    """8x the records and 8x the feature bytes at a fixed |V| leave the traced peak within 1.5x: everything held
    is per vertex or a fixed-size chunk (an in-memory local CSR of a part alone would add 8 bytes per key)."""
    n = 2000
    small, large = tmp_path / "small", tmp_path / "large"
    generate_to_dir(f"sbm:nodes={n},degree=4,features=8", small)
    generate_to_dir(f"sbm:nodes={n},degree=32,features=64", large)
    warm = tmp_path / "warm"
    generate_to_dir("sbm:nodes=200,degree=4,features=2", warm)
    _traced_peak(warm, 256)  # numba kernels compiled or loaded from its cache outside the measured runs
    records = [GraphEdges.from_dir(d).num_edges for d in (small, large)]
    assert records[1] > 7 * records[0]
    peaks = [_traced_peak(d, 512) for d in (small, large)]
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_metis_refuses_a_graph_beyond_the_host_budget_naming_the_estimate_and_alternatives(monkeypatch, tmp_path,
                                                                                           graph_dir, capsys):
    graph = generate(SPEC)
    need = metis.metis_memory_estimate(graph.num_nodes, graph.num_edges)
    assert need == metis.METIS_FIXED_BYTES + metis.METIS_BYTES_PER_VERTEX * graph.num_nodes + \
        metis.METIS_BYTES_PER_RECORD * graph.num_edges
    partitioner = metis.MetisPartitioner()
    partitioner.host_memory = need - 1
    with pytest.raises(ValueError, match=r"metis would need about .* for 600 vertices and .* records, more than the "
                                         r".* budget \(--host-memory\); .*restream.*fennel, ldg or random") as err:
        partitioner.partition(graph, 2)
    assert "\n" not in str(err.value)
    partitioner.host_memory = need
    assert partition_sizes(partitioner.partition(graph, 2), 2).min() > 0
    # the default budget is what the machine can spare
    monkeypatch.setattr("graphscale.metrics.host_memory.available_host_memory", lambda: need - 1)
    with pytest.raises(ValueError, match="metis would need"):
        metis.MetisPartitioner().partition(graph, 2)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--dataset", f"graphdir:{graph_dir}", "--method", "metis", "--parts", "2",
                              "--out", str(tmp_path / "s"), "--host-memory", "1KiB", "--no-progress"])
    with pytest.raises(ValueError, match=r"more than the 1\.0 KiB budget"):
        command.partition_dataset(args)
    assert not (tmp_path / "s").exists()


def test_restreaming_cuts_no_more_than_one_pass_within_its_balance_constraint():
    graph = generate("sbm:nodes=3000,degree=10,classes=6,features=0")
    p = 4
    cap = math.ceil(1.05 * graph.num_nodes / p)
    one_pass = edge_cut(graph, FennelPartitioner().partition(graph, p))
    for score in ("ldg", "fennel"):
        owner = RestreamPartitioner(score=score).partition(graph, p)
        assert edge_cut(graph, owner) < 0.8 * one_pass
        assert int(partition_sizes(owner, p).max()) <= cap
    work = graph.in_degrees().double() + 1
    work *= graph.num_nodes / work.sum()
    owner = RestreamPartitioner(balance="edges").partition(graph, p)
    loads = torch.zeros(p, dtype=torch.float64).index_add_(0, owner, work)
    assert float(loads.max()) < cap + float(work.max())


def test_restream_is_a_training_partitioner_with_the_others_balance_option(tmp_path):
    assert build_vertex_partitioner("restream").balance == "edges"  # a training partition balances work
    assert build_vertex_partitioner("restream", "vertices").balance == "vertices"
    with pytest.raises(ValueError, match="restream: balance must be one of vertices, edges, got 'edges\\+train'"):
        build_vertex_partitioner("restream", "edges+train")
    with pytest.raises(ValueError, match="passes must be an integer >= 1"):
        build_partitioner("restream:passes=0")
    from graphscale.training_store import write_training_store

    meta = write_training_store(generate(SPEC), tmp_path / "store", 3, partitioner="restream")
    assert meta["num_parts"] == 3 and meta["method"] == "restream"


def test_graph_directory_helpers_partition_and_store_as_the_command_does(tmp_path, graph_dir):
    graph = generate(SPEC)
    owner = partition_graph_dir(graph_dir, "restream", 3, seed=1)
    assert np.array_equal(owner, build_vertex_partitioner("restream").partition(graph, 3, seed=1).numpy())
    write_graph_dir_store(graph_dir, tmp_path / "dir", owner, 3, chunk_edges=64, node_data="copy")
    write_partition_store(tmp_path / "mem", GraphEdges(graph), owner, 3, node_data=node_data_of(graph),
                          num_classes=graph.num_classes)
    assert _store_files(tmp_path / "dir") == _store_files(tmp_path / "mem")
    with pytest.raises(ValueError, match="metis would need"):
        partition_graph_dir(graph_dir, "metis", 3, host_memory=1024)


def test_streaming_partitions_shrink_their_chunks_to_the_budget_and_refuse_below_their_minimum(tmp_path, graph_dir,
                                                                                                monkeypatch):
    from graphscale.partition import stream_memory as sm

    n, e, feat = 1000, 10**6, 1 << 20
    fixed = sm.streaming_memory_estimate(n, e, 0, feat)
    assert fixed == sm.STREAM_FIXED_BYTES + feat + sm.STREAM_BYTES_PER_VERTEX * n
    assert sm.streaming_memory_estimate(n, e, 1 << 30, feat) == fixed + sm.STREAM_BYTES_PER_RECORD * e  # at most E
    assert sm.plan_chunk_edges(n, e, 4096, fixed + 4096 * sm.STREAM_BYTES_PER_RECORD, feat, "ldg") == 4096
    budget = fixed + 100_000 * sm.STREAM_BYTES_PER_RECORD + 7
    assert sm.plan_chunk_edges(n, e, 500_000, budget, feat, "ldg") == 100_000
    minimum = sm.streaming_memory_estimate(n, e, sm.MIN_CHUNK_EDGES, feat)
    assert sm.plan_chunk_edges(n, e, 500_000, minimum, feat, "ldg") == sm.MIN_CHUNK_EDGES
    with pytest.raises(ValueError, match=r"partitioning 1,000 vertices and 1,000,000 records with ldg needs at least "
                                         r"about .* of host memory .* more than the .* budget \(--host-memory\)$"):
        sm.plan_chunk_edges(n, e, 500_000, minimum - 1, feat, "ldg")
    # the command: a budget that holds a small chunk writes the same store; one below the minimum writes nothing
    monkeypatch.setattr(sm, "MIN_CHUNK_EDGES", 50)  # below the test graph's records
    graph = generate(SPEC)
    need = sm.streaming_memory_estimate(graph.num_nodes, graph.num_edges, 100, 1 << 20)
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    argv = ["--dataset", f"graphdir:{graph_dir}", "--method", "restream", "--parts", "2", "--feature-chunk-mb", "1",
            "--no-progress"]
    args = parser.parse_args([*argv, "--out", str(tmp_path / "small"), "--host-memory", str(need)])
    command.partition_dataset(args)
    assert args.chunk_edges == 100
    command.partition_dataset(parser.parse_args([*argv, "--out", str(tmp_path / "whole")]))
    assert _store_files(tmp_path / "small") == _store_files(tmp_path / "whole")
    args = parser.parse_args([*argv, "--out", str(tmp_path / "none"), "--host-memory", str(need - 2000 * 64)])
    with pytest.raises(ValueError, match=r"with restream needs at least about .* more than the"):
        command.partition_dataset(args)
    assert not (tmp_path / "none").exists()
    assert sm.plan_chunk_edges(n, e, 500_000, 1, feat, "ldg", refuse=False) == 50  # a run: the smallest chunk
    assert np.array_equal(partition_graph_dir(graph_dir, "ldg", 2, host_memory=1 << 10),
                          partition_graph_dir(graph_dir, "ldg", 2))

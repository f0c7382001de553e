"""``graphscale partition``: end to end on a dataset and on a bare stream; malformed input writes nothing."""

from __future__ import annotations

import argparse
import json
import math
from unittest.mock import ANY

import numpy as np
import pytest
import torch
from stream_helpers import community_records

from graphscale.data.edge_stream import graph_to_edge_stream, write_edge_stream
from graphscale.partition import command
from graphscale.partition.edge_stream import HDRFPartitioner
from graphscale.partition.spring import SpringPartitioner
from graphscale.partition.store import load_partition, read_store_meta


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args([*argv, "--no-progress"])


def test_parse_method():
    assert command.parse_method("spring") == ("spring", {})
    assert command.parse_method("Spring:merge=code, beta=1.1") == ("spring", {"merge": "code", "beta": 1.1})
    assert command.parse_method("2ps-l:cluster_passes=3") == ("2ps-l", {"cluster_passes": 3})
    with pytest.raises(ValueError, match="malformed option 'merge'"):
        command.parse_method("spring:merge")
    with pytest.raises(ValueError, match="spring has no option foo; it accepts merge, beta, volume_cap"):
        command.build_partitioner("spring:foo=1")
    with pytest.raises(KeyError, match="unknown partitioner 'nope'; choose one of: 2ps-l, dbh, fennel"):
        command.build_partitioner("nope")


def test_cora_spring_store_summary_and_json(tmp_path, capsys):
    out = tmp_path / "cora"
    summary = command.run(parse("--dataset", "cora", "--method", "spring:merge=code", "--parts", "4",
                                "--out", str(out), "--json", str(tmp_path / "s.json")))
    printed = capsys.readouterr().out
    assert "RF" in printed and "peak RSS" in printed and "edge bal" in printed and "train bal" in printed
    m = summary["metrics"]
    assert m["num_vertices"] == 2708 and m["num_edges"] == 10556 and sum(m["inner"]) == 2708
    assert m["replication_factor"] == pytest.approx(summary["info"]["stream_replication_factor"])
    assert m["peak_rss_bytes"] > 0 and m["seconds"] > 0 and sum(m["train"]) == 140
    assert json.loads((tmp_path / "s.json").read_text())["metrics"]["replication_factor"] == m["replication_factor"]
    meta = read_store_meta(out)
    # a store is built for training: SPRING balances edges and refines unless told otherwise, and says so
    assert meta["method"] == "spring" and meta["params"] == {"merge": "code", "lpt": "edges", "refine": 2}
    assert meta["num_classes"] == 7 and summary["method"] == "spring:merge=code (lpt=edges, refine=2)"
    assert "spring:merge=code (lpt=edges, refine=2)" in printed
    part = load_partition(out, 2)
    assert part.graph.x.shape == (part.graph.num_nodes, 1433) and int(part.graph.train_mask.sum()) == m["train"][2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cora", "s.json"]


@pytest.mark.parametrize("method", ["hdrf", "ldg", "spring"])
def test_bare_edge_stream(tmp_path, method):
    src, dst, n = community_records(n=150, seed=4)
    write_edge_stream(tmp_path / "g.e32", src, dst, num_vertices=n)
    summary = command.run(parse("--dataset", str(tmp_path / "g.e32"), "--method", method, "--parts", "3",
                                "--out", str(tmp_path / "st"), "--chunk-edges", "100"))
    meta = read_store_meta(tmp_path / "st")
    assert meta["node_arrays"] == [] and meta["vertex_cut_edges"] == (method == "hdrf")
    if method == "hdrf":
        expected = HDRFPartitioner().run(tmp_path / "g.e32", 3).replication_factor
    elif method == "spring":
        expected = SpringPartitioner(lpt="edges", refine=2).run(tmp_path / "g.e32", 3).replication_factor
    else:
        expected = summary["metrics"]["replication_factor"]
    assert summary["metrics"]["replication_factor"] == pytest.approx(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.e32", "g.e32.json", "st"]
    home_only = command.run(parse("--dataset", str(tmp_path / "g.e32"), "--method", method, "--parts", "3",
                                  "--out", str(tmp_path / "st"), "--overwrite", "--home-only"))
    assert home_only["metrics"]["replication_factor"] <= summary["metrics"]["replication_factor"]


def _bad_streams(tmp_path):
    pairs = np.array([[0, 1], [1, 0], [1, 2], [2, 1]], dtype="<i4")
    odd = tmp_path / "odd.e32"
    odd.write_bytes(pairs.tobytes() + b"\x01\x02\x03\x04")
    beyond = write_edge_stream(tmp_path / "beyond.e32", [0, 1, 2, 7], [1, 0, 1, 2])  # sidecar: 8 vertices
    (tmp_path / "beyond.e32.json").write_text(json.dumps({"num_vertices": 3, "num_edges": 4, "dtype": "int32"}))
    empty = write_edge_stream(tmp_path / "empty.e32", [], [], num_vertices=0)
    small = write_edge_stream(tmp_path / "small.e32", [0, 1], [1, 0], num_vertices=3)
    return {"odd": (odd, 2, "not a multiple of the 8-byte"),
            "beyond": (beyond.path, 2, r"\(7, 2\); vertex ids must lie in \[0, 3\)"),
            "empty": (empty.path, 1, r"num_parts=1 exceeds the number of vertices \(0\)"),
            "too many parts": (small.path, 4, r"num_parts=4 exceeds the number of vertices \(3\)")}


@pytest.mark.parametrize("case", ["odd", "beyond", "empty", "too many parts"])
@pytest.mark.parametrize("method", ["hdrf", "spring", "metis"])
def test_malformed_input_is_refused_and_nothing_is_written(tmp_path, case, method):
    path, parts, message = _bad_streams(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match=message):
        command.run(parse("--dataset", str(path), "--method", method, "--parts", str(parts),
                          "--out", str(tmp_path / "st"), "--chunk-edges", "2"))
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("case", ["odd", "beyond", "empty", "too many parts"])
def test_malformed_input_through_the_api(tmp_path, case):
    path, parts, message = _bad_streams(tmp_path)[case]
    with pytest.raises(ValueError, match=message):
        HDRFPartitioner().partition_stream(path, None, parts, out=tmp_path / "p.npy", chunk_edges=1)
    assert not (tmp_path / "p.npy").exists() and not list(tmp_path.glob(".p.npy*"))


def test_too_many_parts_for_a_dataset(tmp_path):
    with pytest.raises(ValueError, match=r"num_parts=3000 exceeds the number of vertices \(2708\)"):
        command.run(parse("--dataset", "cora", "--method", "spring", "--parts", "3000", "--out", str(tmp_path / "s")))
    assert list(tmp_path.iterdir()) == []


def test_existing_non_store_target_is_refused_before_partitioning(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match="is not a partition store"):
        command.run(parse("--dataset", "cora", "--method", "hash", "--parts", "2", "--out", str(tmp_path / "s")))


def test_graph_directory_node_data_is_copied_from_its_files(tmp_path):
    from stream_helpers import graph_of

    from graphscale.data.formats import save_graph_dir

    src, dst, n = community_records(n=120, seed=9)
    g = graph_of(src, dst, n, features=6)
    save_graph_dir(g, tmp_path / "g")
    args = parse("--dataset", f"graphdir:{tmp_path / 'g'}", "--method", "2ps-l", "--parts", "3",
                 "--out", str(tmp_path / "st"), "--feature-chunk-mb", "1", "--node-data", "copy")
    data = command.node_data_of(command.resolve_input(args.dataset)[0], folder=command.graph_dir_of(args.dataset))
    assert data["x"] == tmp_path / "g" / "x.npy" and data["train_mask"] == tmp_path / "g" / "train_mask.npy"
    first = command.run(args)
    graph_to_edge_stream(g, tmp_path / "g.e32")
    args = parse("--dataset", f"graphdir:{tmp_path / 'g'}", "--edges", str(tmp_path / "g.e32"), "--method", "2ps-l",
                 "--parts", "3", "--out", str(tmp_path / "st"), "--overwrite", "--node-data", "copy")
    assert command.run(args)["metrics"] == {**first["metrics"], "seconds": ANY, "peak_rss_bytes": ANY}
    for s in range(3):
        part = load_partition(tmp_path / "st", s)
        orig = part.orig_ids
        assert torch.equal(part.graph.x, g.x[orig]) and torch.equal(part.graph.y, g.y[orig])
        expected = g.train_mask[orig].clone()
        expected[part.num_inner:] = False
        assert torch.equal(part.graph.train_mask, expected)


def test_edges_option_needs_a_dataset_and_matching_count(tmp_path):
    write_edge_stream(tmp_path / "g.e32", [0, 1], [1, 0], num_vertices=2)
    with pytest.raises(ValueError, match="--edges needs a dataset spec"):
        command.run(parse("--dataset", str(tmp_path / "g.e32"), "--edges", str(tmp_path / "g.e32"),
                          "--method", "hash", "--parts", "2", "--out", str(tmp_path / "s")))
    with pytest.raises(ValueError, match="num_vertices=2708 disagrees"):
        command.run(parse("--dataset", "cora", "--edges", str(tmp_path / "g.e32"), "--method", "hash",
                          "--parts", "2", "--out", str(tmp_path / "s")))


def _refuse(token: str):
    raise ValueError(f"not strict JSON: {token}")


def test_summary_json_is_strict_json(tmp_path):
    """A stream has no training split: its training balance is NaN in the summary and null in the JSON."""
    src, dst, n = community_records(n=150, seed=4)
    write_edge_stream(tmp_path / "g.e32", src, dst, num_vertices=n)
    summary = command.run(parse("--dataset", str(tmp_path / "g.e32"), "--method", "hdrf", "--parts", "3",
                                "--out", str(tmp_path / "st"), "--json", str(tmp_path / "s.json")))
    assert math.isnan(summary["metrics"]["train_balance"])
    written = json.loads((tmp_path / "s.json").read_text(), parse_constant=_refuse)
    assert written["metrics"]["train_balance"] is None
    assert written["metrics"]["replication_factor"] == summary["metrics"]["replication_factor"]


@pytest.mark.parametrize("where, message", [("missing/s.json", "directory .*missing does not exist"),
                                            (".", "is a directory")])
def test_bad_json_path_is_refused_before_partitioning(tmp_path, where, message):
    with pytest.raises(ValueError, match=f"--json .*{message}"):
        command.run(parse("--dataset", "cora", "--method", "hash", "--parts", "2", "--out", str(tmp_path / "st"),
                          "--json", str(tmp_path / where)))
    assert list(tmp_path.iterdir()) == []  # no store, no directory


def test_workload_allocation_picks_the_partition_count_and_says_why(tmp_path, capsys):
    from graphscale.partition.allocation import choose_parts, data_bytes

    assert data_bytes(10, 30, 4, 4) == 8 * 11 + 8 * 30 + 10 * 4 * 4 + 8 * 10
    fits = choose_parts(3000, 2, device_memory=4500)  # M - T = 1500 per worker: 2 x 1500 >= 3000
    assert fits.parts == 2 and "fits in 2 worker(s)" in fits.why()
    over = choose_parts(3001, 2, device_memory=4500)  # ceil(3001 / 1500) = 3
    assert over.parts == 3 and "p = ceil(S / (M - T))" in over.why() and "up to 2 partitions" in over.why()
    assert choose_parts(1, 3).measured and choose_parts(1, 3).parts == 3
    with pytest.raises(ValueError, match="leaves no room for data"):
        choose_parts(10, 1, device_memory=1)
    # cora: S is about 14.9 MiB; 6 MiB per worker leaves 2 MiB of data each: ceil(S / 2 MiB) = 8 partitions
    summary = command.run(parse("--dataset", "cora", "--method", "random", "--workers", "2", "--device-memory",
                                "6MiB", "--out", str(tmp_path / "s")))
    size = data_bytes(2708, 10556, 1433, 4)
    assert summary["parts"] == math.ceil(size / (2 * 2**20)) == 8 == read_store_meta(tmp_path / "s")["num_parts"]
    assert "partitions chosen for --workers 2: 8 partitions" in capsys.readouterr().out
    for argv, message in [(("--parts", "2", "--workers", "2"), "give --parts, or --workers"),
                          ((), "give --parts, or --workers"),
                          (("--parts", "2", "--device-memory", "1GiB"), "--device-memory chooses"),
                          (("--workers", "2", "--device-memory", "lots"), "--device-memory: cannot parse"),
                          (("--parts", "2", "--halo-hops", "0"), "--halo-hops must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            command.run(parse("--dataset", "cora", "--method", "random", *argv, "--out", str(tmp_path / "t")))
    assert not (tmp_path / "t").exists()


def test_k_hop_store_from_the_command_reports_its_halo(tmp_path, capsys):
    summary = command.run(parse("--dataset", "cora", "--method", "spring", "--parts", "2", "--halo-hops", "2",
                                "--out", str(tmp_path / "k2")))
    one = command.run(parse("--dataset", "cora", "--method", "spring", "--parts", "2", "--out", str(tmp_path / "k1")))
    assert "2-hop halo" in capsys.readouterr().out and summary["halo_hops"] == 2
    two_hop = [p["num_halo"] for p in read_store_meta(tmp_path / "k2")["parts"]]
    one_hop = [p["num_halo"] for p in read_store_meta(tmp_path / "k1")["parts"]]
    assert all(a > b for a, b in zip(two_hop, one_hop)) and one["metrics"]["halo"] == one_hop


def test_training_stores_balance_spring_by_edges_and_balance_is_its_alias():
    """The paper's SPRING (vertex balance) outside training; ``edges`` for a store built for training, unless
    ``lpt`` or its alias ``balance`` (``--balance``) says otherwise; the two must agree."""
    from graphscale.prepare import build_vertex_partitioner

    assert command.build_partitioner("spring")[0].lpt == "vertices"
    assert command.build_partitioner("spring", training=True)[0].lpt == "edges"
    assert command.build_partitioner("spring:lpt=vertices", training=True)[0].lpt == "vertices"
    assert build_vertex_partitioner("spring").lpt == "edges"
    assert build_vertex_partitioner("spring", "vertices").lpt == "vertices"
    assert build_vertex_partitioner("spring", "mix").lpt == "mix"
    with pytest.raises(ValueError, match="spring: --balance vertices and lpt=edges disagree"):
        build_vertex_partitioner("spring:lpt=edges", "vertices")
    with pytest.raises(ValueError, match="spring: lpt must be one of vertices, edges, mix, got 'edges.train'"):
        build_vertex_partitioner("spring", "edges+train")
    from graphscale.data.datasets import load_dataset

    graph = load_dataset("cora")
    edges = build_vertex_partitioner("spring").partition(graph, 8, seed=0).numpy()
    paper = build_vertex_partitioner("spring", "vertices").partition(graph, 8, seed=0).numpy()
    degree = np.diff(graph.indptr.numpy())  # a partition's records: the in-degrees of its vertices
    records, records_paper = (np.bincount(owner, weights=degree, minlength=8) for owner in (edges, paper))
    assert records.max() / records.mean() < records_paper.max() / records_paper.mean()

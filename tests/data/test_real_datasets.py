"""Text edge lists (``edgelist:``) and MUSAE sets (``musae:``): fixtures written in tmp_path, and the real
files of /work/shared/data where that directory exists (it does not on CI machines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.data.datasets import (
    load_dataset,
    per_class_split,
    read_edgelist,
    read_int_pairs,
    read_musae,
    untrainable_reason,
)
from graphscale.data.graph import Graph

SHARED = Path("/work/shared/data")


def assert_normalised(g: Graph) -> None:
    assert not g.has_self_loops()
    canonical = g.coalesce().symmetrize()
    assert torch.equal(canonical.indptr, g.indptr) and torch.equal(canonical.indices, g.indices)
    assert "num_classes" in g.meta and "source" in g.meta


def undirected(g: Graph) -> set[tuple[int, int]]:
    src, dst = g.edge_index().tolist()
    return {(min(s, d), max(s, d)) for s, d in zip(src, dst)}


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


# ---------------------------------------------------------------- edgelist
SNAP_LIKE = """# Directed graph: toy.txt
% a KONECT-style comment
# FromNodeId\tToNodeId
10\t30
30 10
10,70
70\t70
  70   90 1.5 1200000000
90,30,0.25

30\t10
"""


def test_edgelist_syntax_and_relabelling(tmp_path):
    g = load_dataset(f"edgelist:{write(tmp_path / 'toy.txt', SNAP_LIKE.replace(chr(10), chr(13) + chr(10)))}")
    assert_normalised(g)
    assert (g.name, g.num_nodes, g.x, g.y, g.train_mask) == ("toy", 4, None, None, None)
    np.testing.assert_array_equal(g.meta["original_ids"], [10, 30, 70, 90])
    assert g.meta["original_ids"].dtype == np.int64
    # 10-30 (both ways, twice), 10-70, 70-70 (dropped), 70-90, 90-30
    assert undirected(g) == {(0, 1), (0, 2), (2, 3), (1, 3)} and g.num_edges == 8
    assert g.meta["source"] == f"edgelist:{(tmp_path / 'toy.txt').resolve()}" and g.meta["num_classes"] == 0


@pytest.mark.parametrize("text, nodes, original", [
    ("0 1\n1 2\n2 0\n", 3, None),                  # exactly 0..max: kept
    ("id_1,id_2\n1,2\n2,3\n", 3, [1, 2, 3]),       # CSV header, 1-based: relabelled
    ("0 1\n1 3\n", 3, [0, 1, 3]),                  # a gap: relabelled, 3 -> 2
    (f"{10**12} 5\n5 {2**62}\n", 3, [5, 10**12, 2**62]),  # ids far apart (sorting path)
])
def test_edgelist_ids(tmp_path, text, nodes, original):
    g = read_edgelist(write(tmp_path / "g.txt", text))
    assert g.num_nodes == nodes
    if original is None:
        assert "original_ids" not in g.meta
    else:
        np.testing.assert_array_equal(g.meta["original_ids"], original)


def test_read_int_pairs_numbers(tmp_path):
    big = 2**63 - 1
    pairs = read_int_pairs(write(tmp_path / "n.txt", f"007 08\n{big},0000000000000000000000000001\n5 6"))
    np.testing.assert_array_equal(pairs, [[7, 8], [big, 1], [5, 6]])  # no final newline
    with pytest.raises(ValueError, match=r"line 1: node ids must be below 2\*\*63, got '1 9223372036854775808'"):
        read_int_pairs(write(tmp_path / "o.txt", f"1 {big + 1}\n"))


def test_read_int_pairs_header_only_first_line(tmp_path):
    pairs = read_int_pairs(write(tmp_path / "a.csv", "\ufeffsrc,dst,weight\n# c\n3,4,x\n5 6\n"))
    np.testing.assert_array_equal(pairs, [[3, 4], [5, 6]])
    with pytest.raises(ValueError, match=r"b\.csv, line 3: node ids must be integers, got 'src,dst'"):
        read_int_pairs(write(tmp_path / "b.csv", "1 2\n\nsrc,dst\n"))


def labelled_fixture(tmp_path, seed=0):
    """130 nodes with ids 100, 103, ... (relabelled) in classes of 40/40/40/10, label values 7/3/12/5, and
    three nodes without a label."""
    rng = np.random.default_rng(seed)
    ids = 100 + 3 * np.arange(133)
    src, dst = rng.choice(ids, 600), rng.choice(ids, 600)
    src[:133], dst[:133] = ids, np.roll(ids, 1)  # every id is used
    edges = write(tmp_path / "edges.txt", "".join(f"{s} {d}\n" for s, d in zip(src, dst)))
    values = np.r_[np.full(40, 7), np.full(40, 3), np.full(40, 12), np.full(10, 5)][rng.permutation(130)]
    lines = ["% node label"] + [f"{node},{value}" for node, value in zip(ids[:130], values)]
    labels = write(tmp_path / "labels.txt", "\n".join(lines) + f"\n{ids[0]},{values[0]}\n")  # a harmless repeat
    return edges, labels, values


def test_edgelist_labels_and_split(tmp_path):
    edges, labels, values = labelled_fixture(tmp_path)
    g = load_dataset(f"edgelist:{edges}:{labels}")
    assert_normalised(g)
    assert g.num_nodes == 133 and g.num_classes == 4 and g.meta["class_names"] == ["3", "5", "7", "12"]
    expected = np.searchsorted([3, 5, 7, 12], values)
    np.testing.assert_array_equal(g.y[:130].numpy(), expected)  # ids increase, so new id = position
    assert g.y[130:].tolist() == [-1, -1, -1]
    masks = [getattr(g, m) for m in ("train_mask", "val_mask", "test_mask")]
    assert not any(bool(m[130:].any()) for m in masks)
    assert int(sum(m.int() for m in masks).max()) == 1
    for cls, size in ((0, 40), (1, 10), (2, 40), (3, 40)):
        in_cls = g.y == cls
        assert [int((m & in_cls).sum()) for m in masks] == [min(20, size), min(30, size - min(20, size)),
                                                            max(0, size - 50)]
    reference = per_class_split(g.y.numpy(), 0)
    assert all(np.array_equal(reference[k], getattr(g, k).numpy()) for k in reference)
    assert not torch.equal(read_edgelist(edges, labels, seed=3).train_mask, g.train_mask)
    assert g.meta["source"].endswith(f":{labels.resolve()}")


def test_per_class_split_is_seeded():
    y = np.r_[np.zeros(60, np.int64), np.ones(5, np.int64), -np.ones(3, np.int64)]
    a, b, c = per_class_split(y, 0), per_class_split(y, 0), per_class_split(y, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["train_mask"], c["train_mask"])
    assert [int(a[k].sum()) for k in ("train_mask", "val_mask", "test_mask")] == [25, 30, 10]
    assert not any(a[k][-3:].any() for k in a)


@pytest.mark.parametrize("text, message", [
    ("1 2\n3 4\n5\n", r"g\.txt, line 3: fewer than two node ids on the line, got '5'"),
    ("1 2\n3 x\n", r"g\.txt, line 2: node ids must be integers, got '3 x'"),
    ("# c\n1 2\n1.5 2\n", r"g\.txt, line 3: node ids must be integers, got '1.5 2'"),
    ("1 2\n-1 2\n", r"g\.txt, line 2: node ids must be non-negative, got '-1 2'"),
    ("1 2\n3 99999999999999999999\n", r"g\.txt, line 2: node ids must be below 2\*\*63"),
    ("", r"g\.txt holds no edges"),
    ("# only comments\n%\n\n", r"g\.txt holds no edges"),
    ("id_1,id_2\n", r"g\.txt holds no edges"),
])
def test_edgelist_errors(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_edgelist(write(tmp_path / "g.txt", text))


@pytest.mark.parametrize("labels, message", [
    ("0 1\n7 1\n", r"l\.txt labels node 7, which is not in the edge list"),
    ("0 1\n2 1\n", r"l\.txt labels node 2, which is not in the edge list"),  # 2 is a gap, not a node
    ("0 1\n0 2\n", r"l\.txt gives node 0 two different labels"),
    ("node label\n0 a\n", r"l\.txt, line 2: node ids and labels must be integers, got '0 a'"),
])
def test_edgelist_label_errors(tmp_path, labels, message):
    edges = write(tmp_path / "g.txt", "0 1\n1 3\n")
    with pytest.raises(ValueError, match=message):
        read_edgelist(edges, write(tmp_path / "l.txt", labels))


def test_edgelist_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt does not exist"):
        load_dataset(f"edgelist:{tmp_path / 'nope.txt'}")
    with pytest.raises(ValueError, match="is a directory; expected a text file of node ids"):
        load_dataset(f"edgelist:{tmp_path}")
    edges = write(tmp_path / "g.txt", "0 1\n")
    with pytest.raises(FileNotFoundError, match="nolabels.txt does not exist"):
        load_dataset(f"edgelist:{edges}:{tmp_path / 'nolabels.txt'}")


# ------------------------------------------------------------------- musae
def write_musae(folder: Path, prefix="facebook", column="page_type", values=None, n=60, seed=0):
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    values = values or ["tvshow", "company", "government, local", "politician"]
    labels = [values[i % len(values)] for i in range(n)]
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    src[:n], dst[:n] = np.arange(n), np.roll(np.arange(n), 1)
    write(folder / f"{prefix}_edges.csv", "id_1,id_2\n" + "".join(f"{s},{d}\n" for s, d in zip(src, dst)))
    feats = {str(i): sorted(set(rng.integers(0, 9, 3).tolist())) for i in range(n) if i != 5}  # node 5: none
    feats["7"] = [11]
    write(folder / f"{prefix}.json", json.dumps(feats))
    order = rng.permutation(n)  # rows in any order
    rows = [f'{i},{1000 + i},"Page ""{i}"", Inc.",{labels[i]}' if "," not in labels[i] else
            f'{i},{1000 + i},Page {i},"{labels[i]}"' for i in order]
    write(folder / f"{prefix}_target.csv", f"id,facebook_id,page_name,{column}\n" + "\n".join(rows) + "\n")
    return src, dst, feats, labels


def test_musae_reader(tmp_path):
    src, dst, feats, labels = write_musae(tmp_path / "fb")
    g = load_dataset(f"musae:{tmp_path / 'fb'}")
    assert_normalised(g)
    assert (g.name, g.num_nodes, g.num_features, g.num_classes) == ("facebook", 60, 12, 4)
    assert g.x.dtype == torch.float32 and g.meta["label_column"] == "page_type"
    names = ["company", "government, local", "politician", "tvshow"]
    assert g.meta["class_names"] == names
    assert [names[c] for c in g.y.tolist()] == labels
    dense = np.zeros((60, 12), np.float32)
    for node, active in feats.items():
        dense[int(node), active] = 1
    np.testing.assert_array_equal(g.x.numpy(), dense)
    assert not g.x[5].any()
    keep = src != dst
    assert undirected(g) == {(min(s, d), max(s, d)) for s, d in zip(src[keep].tolist(), dst[keep].tolist())}
    assert [int(getattr(g, m).sum()) for m in ("train_mask", "val_mask", "test_mask")] == [60, 0, 0]
    reference = per_class_split(g.y.numpy(), 0)
    assert np.array_equal(reference["train_mask"], g.train_mask.numpy())
    assert g.meta["source"].endswith("fb:0")
    other = load_dataset(f"musae:{tmp_path / 'fb'}:4")
    assert other.meta["source"].endswith("fb:4") and torch.equal(other.x, g.x)


def test_musae_other_prefix_and_numeric_labels(tmp_path):
    write_musae(tmp_path / "git", prefix="git", column="ml_target", values=["10", "2", "0"], n=45)
    g = read_musae(tmp_path / "git", seed=1)
    assert g.name == "git" and g.meta["class_names"] == ["0", "2", "10"] and g.meta["label_column"] == "ml_target"
    assert g.y[:3].tolist() == [2, 1, 0]


def test_musae_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="MUSAE directory .*nodir does not exist"):
        load_dataset(f"musae:{tmp_path / 'nodir'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds 0 MUSAE edge files"):
        read_musae(tmp_path / "empty")
    write_musae(tmp_path / "two")
    write_musae(tmp_path / "two", prefix="git")
    with pytest.raises(ValueError, match=r"holds 2 MUSAE edge files \(\['facebook_edges.csv', 'git_edges.csv'\]\)"):
        read_musae(tmp_path / "two")
    write_musae(tmp_path / "nojson")
    (tmp_path / "nojson" / "facebook.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"facebook\.json does not exist"):
        read_musae(tmp_path / "nojson")
    write_musae(tmp_path / "col", column="kind")
    with pytest.raises(ValueError, match=r"needs an 'id' column and a label column"):
        read_musae(tmp_path / "col")
    write_musae(tmp_path / "far")
    with open(tmp_path / "far" / "facebook_edges.csv", "a") as f:
        f.write("3,60\n")
    with pytest.raises(ValueError, match=r"names node 60 but .* has only 60 nodes"):
        read_musae(tmp_path / "far")
    write_musae(tmp_path / "json")
    write(tmp_path / "json" / "facebook.json", '{"0": [1, "x"]}')
    with pytest.raises(ValueError, match=r"facebook\.json: expected an object mapping integer node ids"):
        read_musae(tmp_path / "json")
    write(tmp_path / "json" / "facebook.json", "[[1, 2]]")
    with pytest.raises(ValueError, match=r"the top level is a JSON list"):
        read_musae(tmp_path / "json")
    write_musae(tmp_path / "ids")
    with open(tmp_path / "ids" / "facebook_target.csv", "a") as f:
        f.write("61,0,x,tvshow\n")
    with pytest.raises(ValueError, match=r"must list every node 0..N-1 exactly once"):
        read_musae(tmp_path / "ids")


# --------------------------------------------------------- command line
def test_cli_info_dataset_and_train_without_features(tmp_path, capsys):
    edges = write(tmp_path / "g.txt", "# c\n5 7\n7 9\n")
    assert main(["info", "--dataset", f"edgelist:{edges}"]) == 0
    out = capsys.readouterr().out
    assert "nodes" in out and "relabelled" in out
    assert main(["train", "--dataset", f"edgelist:{edges}", "--epochs", "1", "--no-progress"]) == 2
    assert f"dataset 'edgelist:{edges}' has no node features" in capsys.readouterr().err


def test_untrainable_reason():
    g = Graph.from_edges(torch.tensor([0]), torch.tensor([1]), 2)
    assert "has no node features" in untrainable_reason("graphdir:x", g)
    g.x = torch.ones(2, 3)
    assert "has no node labels" in untrainable_reason("graphdir:x", g)
    g.y = torch.zeros(2, dtype=torch.int64)
    assert "no training nodes" in untrainable_reason("graphdir:x", g)
    g.train_mask = torch.tensor([True, False])
    assert untrainable_reason("graphdir:x", g) is None and untrainable_reason("cora") is None


# ------------------------------------------------------- the real files
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} (real datasets) is not on this machine")


@needs_shared
def test_real_snap_edge_lists():
    wiki = load_dataset(f"edgelist:{SHARED / 'snap_wiki_vote' / 'Wiki-Vote.txt'}")
    assert (wiki.num_nodes, wiki.num_edges) == (7115, 201524)  # 103,689 directed -> 100,762 undirected
    assert wiki.meta["original_ids"][[0, -1]].tolist() == [3, 8297]
    email = read_edgelist(SHARED / "email_eu_core" / "email-Eu-core.txt",
                          SHARED / "email_eu_core" / "email-Eu-core-department-labels.txt")
    assert (email.num_nodes, email.num_edges, email.num_classes) == (1005, 32128, 42)  # 642 self-loops dropped
    assert "original_ids" not in email.meta and int((email.y < 0).sum()) == 0


@needs_shared
def test_real_musae_facebook():
    g = load_dataset(f"musae:{SHARED / 'musae_facebook'}")
    assert_normalised(g)
    # 171,002 listed edges, 179 of them self-loops, no duplicates: 170,823 undirected = 341,646 records
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (22470, 341646, 4714, 4)
    assert g.meta["class_names"] == ["company", "government", "politician", "tvshow"]
    assert torch.bincount(g.y).tolist() == [6495, 6880, 5768, 3327]
    assert [int(getattr(g, m).sum()) for m in ("train_mask", "val_mask", "test_mask")] == [80, 120, 22270]

"""Text edge lists (``edgelist:``), METIS graph files (``metis:``) and MUSAE sets (``musae:``): fixtures written
in tmp_path, and the real files of /work/shared/data where that directory exists (it does not on CI machines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from graphscale.cli import main
from graphscale.data.datasets import describe_dataset, load_dataset, untrainable_reason
from graphscale.data.graph import Graph
from graphscale.data.readers.edgelist import read_edgelist
from graphscale.data.readers.labels import per_class_split
from graphscale.data.readers.metis import read_metis
from graphscale.data.readers.musae import read_musae
from graphscale.data.readers.text import read_int_pairs

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


def test_edgelist_refuses_other_kinds(tmp_path):
    metis = write(tmp_path / "g.graph", "% a METIS file\n4 2\n2 3\n1\n1\n\n")
    with pytest.raises(ValueError, match=r"g\.graph is a METIS graph file .*, not an edge list; read it with "
                                         r"metis:.*g\.graph$") as info:
        load_dataset(f"edgelist:{metis}")
    assert "\n" not in str(info.value)
    cycle = write(tmp_path / "cycle.graph", "3 3\n2 3\n1 3\n1 2\n")  # two ids per line, but each edge from both ends
    with pytest.raises(ValueError, match="is a METIS graph file"):
        read_edgelist(cycle)
    (tmp_path / "g.txt.gz").write_bytes(b"\x1f\x8b\x08\x00rest")
    with pytest.raises(ValueError, match=r"g\.txt\.gz is gzip-compressed, not a text file of node ids; decompress"):
        read_edgelist(tmp_path / "g.txt.gz")


@pytest.mark.parametrize("text, nodes", [
    ("3 3\n1 2\n2 3\n3 1\n", 3),          # 'n m' header then m = n edges: not symmetric, so not METIS
    ("2 1\n1 2\n2 1\n", 2),                # first line counts the rest, ids in range, but 2 entries != 2*m
    ("3 2\n0 1\n1 2\n2 0\n", 4),          # id 0: not 1-based
    ("2 3 1.5\n3 2 2.5\n", 2),              # weighted edge list with two lines
    ("1 2\n", 2),
])
def test_edgelist_is_not_mistaken_for_metis(tmp_path, text, nodes):
    assert read_edgelist(write(tmp_path / "e.txt", text)).num_nodes == nodes


def test_edgelist_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt does not exist"):
        load_dataset(f"edgelist:{tmp_path / 'nope.txt'}")
    with pytest.raises(ValueError, match="is a directory; expected a text file of node ids"):
        load_dataset(f"edgelist:{tmp_path}")
    edges = write(tmp_path / "g.txt", "0 1\n")
    with pytest.raises(FileNotFoundError, match="nolabels.txt does not exist"):
        load_dataset(f"edgelist:{edges}:{tmp_path / 'nolabels.txt'}")


# ------------------------------------------------------------------- metis
# 5 vertices: a triangle 1-2-3, the edge 3-4, vertex 5 alone (a blank line); the same graph in the fmt variants.
METIS_PLAIN = "% the METIS manual's layout\n5 4\n2 3\n1 3\n1 2 4\n3\n\n"
METIS_WEIGHTED = {
    "1": "5 4 1\n2 7 3 1\n1 7 3 2\n1 1 2 2 4 9\n3 9\n\n",                           # edge weights
    "011 2": "% two weights per vertex\n5 4 011 2\n4 1 2 7 3 1\n1 0 1 7 3 2\n2 2 1 1 2 2 4 9\n1 1 3 9\n5 5\n",
    "100": "5 4 100\n1 2 3\n1 1 3\n3 1 2 4\n1 3\n1\n",                                # vertex sizes
    "010": "5   4   010\n\t3\t2 3\n1 1 3   \n1 1 2 4\r\n% a comment inside\n1 3\n0\n\n\n",  # blanks, CRLF
}
METIS_EDGES = {(0, 1), (0, 2), (1, 2), (2, 3)}


@pytest.mark.parametrize("fmt", [None, *METIS_WEIGHTED])
def test_metis_reader(tmp_path, fmt):
    file = write(tmp_path / "g.graph", METIS_PLAIN if fmt is None else METIS_WEIGHTED[fmt])
    g = load_dataset(f"metis:{file}")
    assert_normalised(g)
    assert (g.name, g.num_nodes, g.num_edges, g.num_features, g.num_classes) == ("g", 5, 8, 0, 0)
    assert undirected(g) == METIS_EDGES and g.x is None and g.y is None
    assert g.meta["source"] == f"metis:{file.resolve()}"
    reason = untrainable_reason(f"metis:{file}")  # from the spec alone
    assert "has no node features" in reason and "METIS" in reason


def test_metis_matches_a_random_graph(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    src, dst = rng.integers(0, n, 20000), rng.integers(0, n, 20000)
    keep = src != dst
    edges = {(min(a, b), max(a, b)) for a, b in zip(src[keep].tolist(), dst[keep].tolist())}
    neighbours = [[] for _ in range(n)]
    for a, b in edges:
        neighbours[a].append(b + 1)
        neighbours[b].append(a + 1)
    text = f"{n} {len(edges)}\n" + "".join(" ".join(map(str, row)) + "\n" for row in neighbours)
    g = read_metis(write(tmp_path / "big.graph", text))
    assert (g.num_nodes, g.num_edges) == (n, 2 * len(edges)) and undirected(g) == edges


@pytest.mark.parametrize("text, message", [
    ("5 5\n2 3\n1 3\n1 2 4\n3\n\n", (r"the METIS header says 5 edges, so 2\*m = 10 adjacency entries .* but the "
                                    r"vertex lines hold 8; is it an edge list\?")),
    ("5 4\n2 3\n1 3\n1 2 6\n3\n\n", r"line 4: a neighbour outside 1\.\.5 \(METIS ids are 1-based\), got '1 2 6'"),
    ("5 4\n2 3\n1 3\n1 2 4\n3\n", r"the METIS header says 5 vertices but only 4 vertex lines follow"),
    ("3 2\n2\n1 3\n2\n4 1\n", r"line 5: more vertex lines than the 3 the header announces, got '4 1'"),
    ("3 2 1\n2 1\n1 1 3\n2 1\n", (r"line 3: a neighbour without its edge weight \(fmt 001 puts a weight after every "
                                 r"neighbour\), got '1 1 3'")),
    ("3 2 010 2\n1 2 2\n1 1 1 3\n1\n", r"line 4: the line ends before the vertex's 2 size/weight field\(s\)"),
    ("3 2\n2\n1 x\n2\n", r"line 3: expected integers, got '1 x'"),
    ("3 2\n2\n1,3\n2\n", r"line 3: expected integers, got '1,3'"),
    ("id_1,id_2\n1,2\n", r"line 1: expected a METIS header 'n m \[fmt \[ncon\]\]'.*, got 'id_1,id_2'"),
    ("3 2 12\n", r"line 1: expected a METIS header"),
    ("% only a comment\n", r"holds no METIS header"),
    ("0 1\n1 2\n2 0\n", r"line 2: more vertex lines than the 0 the header announces.*edgelist:"),
    ("1 99999999\n\n", r"the METIS header says 99,999,999 edges, more than its 12 bytes can list"),
])
def test_metis_errors(tmp_path, text, message):
    file = write(tmp_path / "bad.graph", text)
    with pytest.raises(ValueError, match=message) as info:
        load_dataset(f"metis:{file}")
    assert str(info.value).startswith(str(file)) and "\n" not in str(info.value)


def test_metis_wrong_kinds(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.graph does not exist; expected a METIS graph file"):
        load_dataset(f"metis:{tmp_path / 'nope.graph'}")
    np.savez(tmp_path / "g.npz", a=np.ones(2))
    with pytest.raises(ValueError, match=r"g\.npz is a zip archive \(a \.npz\?\), not a text file of a METIS graph; "
                                         r"read it with npz:"):
        load_dataset(f"metis:{tmp_path / 'g.npz'}")
    with pytest.raises(ValueError, match="is a directory; expected a text file of a METIS graph"):
        load_dataset(f"metis:{tmp_path}")


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
    write_musae(tmp_path / "notarget")
    (tmp_path / "notarget" / "facebook_target.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"facebook_target\.csv does not exist"):
        read_musae(tmp_path / "notarget")
    write_musae(tmp_path / "col", column="kind")  # columns id, facebook_id, page_name, kind
    with pytest.raises(ValueError, match=r"facebook_target\.csv: cannot tell which of the columns \['id', "
                                         r"'facebook_id', 'page_name', 'kind'\] is the label .*; name it as "
                                         r"musae:.*col:label=COLUMN$"):
        read_musae(tmp_path / "col")
    assert load_dataset(f"musae:{tmp_path / 'col'}:label=kind").meta["label_column"] == "kind"
    with pytest.raises(ValueError, match=r"has no label column 'nope'; its columns are \['id', 'facebook_id'"):
        load_dataset(f"musae:{tmp_path / 'col'}:label=nope")
    with pytest.raises(ValueError, match=r"bad option 'column=kind'; musae: takes label=\.\.\.,seed=\.\.\."):
        load_dataset(f"musae:{tmp_path / 'col'}:column=kind")
    with pytest.raises(ValueError, match=r"option seed must be a non-negative integer, got 'x'"):
        load_dataset(f"musae:{tmp_path / 'col'}:label=kind,seed=x")
    write(tmp_path / "col" / "facebook_target.csv", "node,kind\n0,a\n")
    with pytest.raises(ValueError, match=r"has no node id column \('new_id' or 'id'\)"):
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


def test_musae_without_features(tmp_path):
    src, dst, _, _ = write_musae(tmp_path / "fb")
    (tmp_path / "fb" / "facebook.json").unlink()
    g = load_dataset(f"musae:{tmp_path / 'fb'}")
    assert_normalised(g)
    keep = src != dst
    edges = {(min(s, d), max(s, d)) for s, d in zip(src[keep].tolist(), dst[keep].tolist())}
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes, g.x) == (60, 2 * len(edges), 0, 4, None)
    assert int(g.train_mask.sum()) == 60
    reason = untrainable_reason(f"musae:{tmp_path / 'fb'}", g)
    assert "has no node features" in reason and "NAME_features.json" in reason
    assert describe_dataset(f"musae:{tmp_path / 'fb'}")["features"] == 0


def write_twitch(folder: Path, n=50, seed=0):
    """A Twitch set as SNAP ships it (twitch/DE/): musae_DE_edges.csv with a from,to header,
    musae_DE_features.json and musae_DE_target.csv whose 'id' is the Twitch id and 'new_id' the node id."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 150), rng.integers(0, n, 150)
    src[:n], dst[:n] = np.arange(n), np.roll(np.arange(n), 1)
    write(folder / "musae_DE_edges.csv", "from,to\n" + "".join(f"{s},{d}\n" for s, d in zip(src, dst)))
    write(folder / "musae_DE_features.json", json.dumps({str(i): [int(i % 5), 5 + int(i % 3)] for i in range(n)}))
    mature, partner = rng.random(n) < 0.4, rng.random(n) < 0.2
    order = rng.permutation(n)
    rows = [f"{98000000 + 17 * i},{int(rng.integers(100, 3000))},{mature[i]},{int(rng.integers(0, 10**6))},"
            f"{partner[i]},{i}\n" for i in order]
    write(folder / "musae_DE_target.csv", "id,days,mature,views,partner,new_id\n" + "".join(rows))
    return src, dst, mature, partner


def test_musae_twitch_layout(tmp_path):
    src, dst, mature, partner = write_twitch(tmp_path / "twitch" / "DE")
    g = load_dataset(f"musae:{tmp_path / 'twitch' / 'DE'}")
    assert_normalised(g)
    assert (g.name, g.num_nodes, g.num_features, g.num_classes) == ("musae_DE", 50, 8, 2)
    assert g.meta["label_column"] == "mature" and g.meta["class_names"] == ["False", "True"]
    assert torch.equal(g.y, torch.from_numpy(mature.astype(np.int64)))  # rows by new_id, not by Twitch id
    keep = src != dst
    edges = {(min(s, d), max(s, d)) for s, d in zip(src[keep].tolist(), dst[keep].tolist())}
    assert undirected(g) == edges and g.num_edges == 2 * len(edges)
    assert g.x[7].nonzero().flatten().tolist() == [2, 6]
    by_partner = load_dataset(f"musae:{tmp_path / 'twitch' / 'DE'}:label=partner,seed=3")
    assert by_partner.meta["label_column"] == "partner"
    assert by_partner.meta["source"].endswith("DE:label=partner,seed=3")
    assert torch.equal(by_partner.y, torch.from_numpy(partner.astype(np.int64)))
    assert not torch.equal(by_partner.train_mask, load_dataset(f"musae:{tmp_path / 'twitch' / 'DE'}:label=partner")
                           .train_mask)


# --------------------------------------------------------- command line
def test_cli_info_dataset_and_train_without_features(tmp_path, capsys):
    edges = write(tmp_path / "g.txt", "# c\n5 7\n7 9\n")
    assert main(["info", "--dataset", f"edgelist:{edges}"]) == 0
    out = capsys.readouterr().out
    assert "nodes" in out and "relabelled" in out
    assert main(["train", "--dataset", f"edgelist:{edges}", "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err  # structural features by default, but a bare edge list has no labels
    assert f"dataset 'edgelist:{edges}' has no node features: training on --features fastrp:128" in err
    assert f"dataset 'edgelist:{edges}' has no node labels" in err


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

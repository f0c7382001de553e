"""The Python API's data kinds (graphscale/data/convert.py): PyG Data, OGB dataset objects, Graph; their errors."""

from __future__ import annotations

import gzip
import sys

import numpy as np
import pytest
import torch

from graphscale.data.convert import graph_digest, kind_of, to_graph
from graphscale.data.graph import Graph
from graphscale.testing import random_graph

Data = pytest.importorskip("torch_geometric.data").Data


def directed_graph() -> Graph:
    """A directed graph with a self-loop and a repeated edge (kept as stored)."""
    g = random_graph(12, num_features=3, num_classes=3, seed=3, symmetric=False)
    src = torch.cat([g.indices, torch.tensor([4, 5])])
    dst = torch.cat([g.dst_of_edges(), torch.tensor([4, 7])])  # a self-loop 4 -> 4 and 5 -> 7 again
    return Graph.from_edges(src, dst, 12, x=g.x, y=g.y, train_mask=g.train_mask, val_mask=g.val_mask,
                            test_mask=g.test_mask, name="directed", meta={"num_classes": 3})


def assert_same_graph(a: Graph, b: Graph) -> None:
    for key in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert a.num_classes == b.num_classes


def test_pyg_data_edges_as_stored():
    g = directed_graph()
    data = Data(x=g.x, edge_index=g.edge_index(), y=g.y, train_mask=g.train_mask, val_mask=g.val_mask,
                test_mask=g.test_mask)
    out = to_graph(data)
    assert_same_graph(out, g)  # not symmetrised, self-loop and repeated edge kept
    assert out.has_self_loops() and not out.is_symmetric() and out.num_edges == g.num_edges
    assert kind_of(data) == "pyg" and out.name == "pyg" and to_graph(data, name="mine").name == "mine"


def test_pyg_index_splits_and_label_forms():
    g = random_graph(20, seed=1)
    ids = {split: torch.nonzero(getattr(g, f"{split}_mask")).flatten() for split in ("train", "val", "test")}
    data = Data(x=g.x.double(), edge_index=g.edge_index(), y=g.y.unsqueeze(1).float(), train_idx=ids["train"],
                valid_idx=ids["val"], test_idx=ids["test"])
    out = to_graph(data)
    assert torch.equal(out.train_mask, g.train_mask) and torch.equal(out.val_mask, g.val_mask)
    assert torch.equal(out.test_mask, g.test_mask)
    assert torch.equal(out.y, g.y) and out.x.dtype == torch.float64  # [N, 1] float ids -> [N] int64; float64 kept
    y = g.y.double()
    y[3] = float("nan")  # OGB's unlabelled
    data = Data(x=g.x, edge_index=g.edge_index(), y=y, train_idx=ids["train"][ids["train"] != 3])
    out = to_graph(data)
    assert int(out.y[3]) == -1 and int(out.val_mask.sum()) == 0 and int(out.test_mask.sum()) == 0
    multi = torch.zeros(20, 4)
    multi[torch.arange(20), torch.arange(20) % 4] = 1
    out = to_graph(Data(x=g.x, edge_index=g.edge_index(), y=multi, train_mask=g.train_mask))
    assert out.multilabel and out.y.dtype == torch.uint8 and out.num_classes == 4
    bare = to_graph(Data(x=g.x, edge_index=g.edge_index(), y=multi))  # multi-label without a split: seeded later
    assert bare.train_mask is None


def test_graph_checked_and_missing_splits_filled():
    g = random_graph(10)
    g.val_mask = g.test_mask = None
    out = to_graph(g)
    assert out is not g and torch.equal(out.train_mask, g.train_mask) and int(out.val_mask.sum()) == 0
    assert kind_of(g) == "graph" and to_graph(random_graph(10), name="x").name == "x"


def _data(**overrides):
    g = random_graph(10, num_features=2)
    fields = {"x": g.x, "edge_index": g.edge_index(), "y": g.y, "train_mask": g.train_mask}
    fields.update(overrides)
    return Data(**{k: v for k, v in fields.items() if v is not None})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"y": None}, "data.y is missing: node classification needs labels"),
    ({"train_mask": None}, "data: the training split is missing; set data.train_mask (bool [N]) or data.train_idx"),
    ({"train_mask": torch.zeros(10, dtype=torch.bool)}, "data: the training split is empty"),
    ({"y": torch.zeros(9, dtype=torch.long)}, "data.y has 9 rows but the graph has 10 nodes"),
    ({"x": torch.zeros(11, 2), "num_nodes": 10}, "data.x has 11 rows but the graph has 10 nodes"),
    ({"x": torch.zeros(10, 0)}, "data.x has no columns; leave it out and give features="),
    ({"edge_index": torch.tensor([[0, 12], [1, 2]])}, ("data.edge_index holds node id 12 as the source of edge 1, "
                                                      "outside [0, 10)")),
    ({"edge_index": torch.tensor([[0.0, 1.0], [1.0, 2.0]])}, "data.edge_index must hold integer node ids"),
    ({"edge_index": torch.tensor([0, 1, 2])}, "data.edge_index must be an [2, E] tensor"),
    ({"train_mask": torch.ones(10, 3, dtype=torch.bool)}, ("data.train_mask has shape [10, 3]: one column per split; "
                                                          "choose one, e.g. train_mask = train_mask[:, 0]")),
    ({"train_mask": torch.ones(10, dtype=torch.long)}, "data.train_mask must be a bool [N] mask"),
    ({"train_idx": torch.tensor([0, 1])}, "data has both data.train_mask and data.train_idx"),
    ({"train_mask": None, "train_idx": torch.tensor([0, 10])}, "data.train_idx holds node id 10, outside [0, 10)"),
    ({"y": torch.tensor([0.5] * 10)}, "data.y must hold whole class ids"),
    ({"y": torch.full((10,), -2)}, "data.y[0] is -2: class ids must be >= 0 (-1 = unlabelled)"),
    ({"y": torch.full((10, 3), 2.0)}, "data.y has shape [10, 3]: a multi-label matrix must hold only 0 and 1"),
])
def test_bad_data_one_line_errors(overrides, message):
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]").replace(
            "(", r"\(").replace(")", r"\)").replace("+", r"\+")) as err:
        to_graph(_data(**overrides))
    assert "\n" not in str(err.value)


def test_unsupported_kinds():
    with pytest.raises(TypeError, match="^data: expected a dataset spec string, a graphscale Graph, a torch_geometric"):
        to_graph([1, 2])
    HeteroData = pytest.importorskip("torch_geometric.data").HeteroData
    with pytest.raises(ValueError, match="HeteroData"):
        to_graph(HeteroData())
    g = random_graph(10)
    g.y = None
    with pytest.raises(ValueError, match=r"^Graph\.y is missing"):
        to_graph(g)


def test_digest_is_content():
    g = random_graph(15)
    assert graph_digest(g) == graph_digest(random_graph(15))
    h = random_graph(15)
    h.x[0, 0] += 1
    assert graph_digest(h) != graph_digest(g)
    h = random_graph(15)
    h.train_mask = h.train_mask.clone()
    h.train_mask[int(torch.nonzero(~h.train_mask)[0])] = True
    assert graph_digest(h) != graph_digest(g)


# --------------------------------------------------------------------- OGB
class OgbShaped:
    """An object shaped like an OGB node-property dataset (``__len__``, ``dataset[0]``, ``get_idx_split()``,
    ``name``, ``num_classes``), for the conversion where the ogb package is not installed."""

    def __init__(self, item, split, name="ogbn-shaped", num_classes=None):
        self.item, self.split, self.name, self.num_classes = item, split, name, num_classes

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return self.item

    def get_idx_split(self):
        return self.split


def _ogb_split(g: Graph) -> dict:
    return {key: torch.nonzero(getattr(g, f"{split}_mask")).flatten()
            for key, split in (("train", "train"), ("valid", "val"), ("test", "test"))}


def test_ogb_shaped_objects():
    """PygNodePropPredDataset's shape (dataset[0] a Data, labels [N, 1]) and NodePropPredDataset's (dataset[0] a
    (graph dict of numpy arrays, labels [N, 1]) pair); the real classes are tested below when ogb is installed."""
    g = directed_graph()
    split = _ogb_split(g)
    pyg = OgbShaped(Data(x=g.x, edge_index=g.edge_index(), y=g.y.unsqueeze(1)), split, num_classes=3)
    out = to_graph(pyg)
    assert_same_graph(out, g)
    assert kind_of(pyg) == "ogb" and out.name == "ogbn-shaped" and out.meta["source"] == "ogb"
    graph = {"edge_index": g.edge_index().numpy(), "node_feat": g.x.numpy(), "edge_feat": None, "num_nodes": 12}
    plain = OgbShaped((graph, g.y.numpy().reshape(-1, 1).astype(np.float64)),
                      {k: v.numpy() for k, v in split.items()}, num_classes=3)
    assert_same_graph(to_graph(plain), g)
    with pytest.raises(ValueError, match=r"^dataset\.get_idx_split\(\)\['valid'\] holds node id 12, outside"):
        to_graph(OgbShaped(pyg.item, {**split, "valid": torch.tensor([12])}))
    with pytest.raises(ValueError, match=r"^dataset\[0\]\.y holds class id 2, but num_classes is 2"):
        to_graph(OgbShaped(pyg.item, split, num_classes=2))
    tasks = OgbShaped(Data(x=g.x, edge_index=g.edge_index(), y=torch.ones(12, 5)), split, num_classes=2)
    tasks.num_tasks = 5  # ogbn-proteins' shape: 5 binary tasks (num_classes 2 per task) -> 5 label columns
    assert to_graph(tasks).multilabel and to_graph(tasks).num_classes == 5
    with pytest.raises(ValueError, match="heterogeneous OGB datasets"):
        to_graph(OgbShaped(pyg.item, {"train": {"paper": torch.tensor([0])}}))
    with pytest.raises(ValueError, match=r"^dataset\.get_idx_split\(\): the training split is missing"):
        to_graph(OgbShaped((graph, g.y.numpy()), {"valid": split["valid"].numpy()}))


def _csv_gz(path, rows) -> None:
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows)


def _write_ogb_dir(root, g: Graph) -> dict:
    """An OGB dataset directory of ``g`` in OGB's own layout (raw/*.csv.gz, split/NAME/*.csv.gz, RELEASE_v1.txt)
    and the ``meta_dict`` that OGB's dataset classes take for a dataset outside their master list."""
    raw, split = root / "raw", root / "split" / "random"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    _csv_gz(raw / "edge.csv.gz", g.edge_index().T.numpy())
    _csv_gz(raw / "node-feat.csv.gz", g.x.numpy())
    _csv_gz(raw / "node-label.csv.gz", g.y.numpy())
    _csv_gz(raw / "num-node-list.csv.gz", [g.num_nodes])
    _csv_gz(raw / "num-edge-list.csv.gz", [g.num_edges])
    for key, ids in _ogb_split(g).items():
        _csv_gz(split / f"{key}.csv.gz", ids.numpy())
    (root / "RELEASE_v1.txt").write_text("")
    return {"dir_path": str(root), "version": 1, "download_name": "tiny", "url": "none", "num tasks": 1,
            "task type": "multiclass classification", "eval metric": "acc", "num classes": 3, "is hetero": "False",
            "binary": "False", "add_inverse_edge": "False", "has_node_attr": "True", "has_edge_attr": "False",
            "additional node files": "None", "additional edge files": "None", "split": "random"}


def test_real_ogb_dataset_objects(tmp_path, monkeypatch):
    """OGB's own PygNodePropPredDataset and NodePropPredDataset, built offline from a directory in OGB's layout
    (its meta_dict form), convert to the graph they hold: edges as OGB stores them (here directed)."""
    monkeypatch.setitem(sys.modules, "outdated", None)  # else importing ogb starts a network version check
    pytest.importorskip("pandas")
    nodeproppred = pytest.importorskip("ogb.nodeproppred")
    g = directed_graph().coalesce()  # OGB's csv holds each edge once: no repeated edge
    meta = _write_ogb_dir(tmp_path / "tiny", g)
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    for cls in (nodeproppred.PygNodePropPredDataset, nodeproppred.NodePropPredDataset):
        # ogb 1.3.6 reads its processed file with torch.load's default weights_only=True (torch >= 2.6), which
        # refuses PyG's classes: what its users do, allow them
        with torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage]):
            dataset = cls("tiny", meta_dict=meta)
        out = to_graph(dataset)
        assert_same_graph(out, g)
        assert out.x.dtype == torch.float32 and kind_of(dataset) == "ogb"

"""Link splits given with the data: PyG ``RandomLinkSplit``'s triple and an offline ``ogbl:DIR`` dataset are the
run's split, scored against their own negatives; malformed ones are one-line errors before any worker starts."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from graphscale.config import build_config
from graphscale.data.block import Block
from graphscale.data.convert import to_graph
from graphscale.data.datasets import load_dataset
from graphscale.data.link_inputs import from_link_data
from graphscale.data.readers.pyg import to_pyg
from graphscale.run import run
from graphscale.tasks.metrics import auc, hits_at_k, mrr
from graphscale.tasks.split import TEST, TRAIN, VAL, split_edges

SBM = "sbm:nodes=200,degree=6,classes=3,features=8,seed=1"


def link_triple():
    import torch_geometric.transforms as T

    torch.manual_seed(0)
    data = to_pyg(load_dataset(SBM))
    return T.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True, add_negative_train_samples=False)(data)


def embeddings(model, graph) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(Block.full(graph), graph.x.to(next(model.parameters()).dtype))


def test_a_random_link_split_triple_is_the_split_and_its_negatives_are_scored(tmp_path):
    import graphscale as gs

    train, val, test = link_triple()
    split = split_edges(from_link_data((train, val, test)), [0.5, 0.2, 0.2], seed=7)  # given: fractions and seed unused
    assert split.message_graph.num_edges == train.edge_index.shape[1]  # the held-out pairs were never in it
    assert torch.equal(split.pairs[:, split.split_of == TRAIN], train.edge_label_index)
    assert torch.equal(split.pairs[:, split.split_of == VAL], val.edge_label_index[:, val.edge_label == 1])
    assert torch.equal(split.neg_pairs["test"], test.edge_label_index[:, test.edge_label == 0])
    assert int((split.split_of == TEST).sum()) == int(test.edge_label.sum())

    report = gs.train("gcn", (train, val, test), task="link", epochs=2, hidden=8, dtype="float64", progress=False,
                      cache_dir=str(tmp_path))
    z = embeddings(report.model, split.message_graph)
    for name, data in (("val", val), ("test", test)):
        a, b = data.edge_label_index
        score = (z[a] * z[b]).sum(1)
        pos, neg = score[data.edge_label == 1], score[data.edge_label == 0]
        best = report.raw["final"]
        assert best[f"{name}_auc"] == pytest.approx(auc(pos, neg), abs=1e-12)
        assert best[f"{name}_hits@20"] == pytest.approx(hits_at_k(pos, neg, 20), abs=1e-12)
        assert f"{name}_mrr" not in best  # shared negatives: no per-positive candidates


def test_node_classification_on_a_link_triple_is_refused():
    import graphscale as gs

    with pytest.raises(ValueError, match=r"task=\"link\"; this run's task is 'node'"):
        gs.train("gcn", link_triple(), epochs=1, progress=False)


@pytest.mark.parametrize("field, change, message", [
    ("edge_label_index", lambda d: d.edge_label_index.clone().fill_(500),
     r"data\[1\].edge_label_index has node ids outside \[0, 200\)"),
    ("edge_label_index", lambda d: d.edge_label_index[0], r"data\[1\].edge_label_index must be an \[2, P\]"),
    ("edge_label", lambda d: d.edge_label * 2, r"data\[1\].edge_label must hold 0 \(negative\) and 1"),
    ("edge_label", lambda d: d.edge_label[:3], r"data\[1\].edge_label must be a \[\d+\] tensor"),
    ("edge_label_index", lambda d: None, r"data\[1\].edge_label_index is missing"),
])
def test_a_malformed_triple_is_one_line_naming_the_field(field, change, message):
    train, val, test = link_triple()
    setattr(val, field, change(val))
    with pytest.raises(ValueError, match=message) as err:
        from_link_data((train, val, test))
    assert "\n" not in str(err.value)


def test_a_single_data_with_link_pairs_or_a_short_tuple_is_refused():
    train, val, _ = link_triple()
    with pytest.raises(ValueError, match=r"data.edge_label_index is set: one Data holds one split's link pairs"):
        to_graph(val)
    with pytest.raises(ValueError, match=r"expected RandomLinkSplit's \(train, val, test\) triple"):
        from_link_data((train, val))


# ---------------------------------------------------------------- ogbl:DIR
def write_csv_gz(path, rows) -> None:
    with gzip.open(path, "wt") as f:
        f.write("\n".join(",".join(str(v) for v in row) for row in rows) + "\n")


def write_ogbl(root, *, citation: bool = False, split: bool = True):
    """A tiny dataset in ogbl-collab's raw layout (``citation``: ogbl-citation2's split keys), from an SBM graph:
    20 test and 20 validation pairs held out of ``raw/edge.csv.gz``, 40 shared negatives (or 5 tails each)."""
    graph = load_dataset(SBM)
    pairs = torch.stack([graph.indices, graph.dst_of_edges()])
    pairs = pairs[:, pairs[0] < pairs[1]].numpy().T
    order = np.random.default_rng(0).permutation(len(pairs))
    test, valid, train = pairs[order[:20]], pairs[order[20:40]], pairs[order[40:]]
    (root / "raw").mkdir(parents=True)
    write_csv_gz(root / "raw" / "edge.csv.gz", train)
    write_csv_gz(root / "raw" / "node-feat.csv.gz", graph.x.numpy())
    write_csv_gz(root / "raw" / "num-node-list.csv.gz", [[graph.num_nodes]])
    if not split:
        return graph
    (root / "split" / "time").mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name, edges in (("train", train), ("valid", valid), ("test", test)):
        if citation:
            item = {"source_node": edges[:, 0], "target_node": edges[:, 1]}
            if name != "train":
                item["target_node_neg"] = rng.integers(0, graph.num_nodes, (len(edges), 5))
        else:
            item = {"edge": edges}
            if name != "train":
                item["edge_neg"] = rng.integers(0, graph.num_nodes, (40, 2))
        torch.save(item, root / "split" / "time" / f"{name}.pt")  # numpy arrays, as OGB saves them
    return graph


@pytest.mark.parametrize("citation", [False, True])
def test_an_ogbl_directory_is_read_offline_with_its_split_and_negatives(tmp_path, citation):
    write_ogbl(tmp_path / "ogbl_tiny", citation=citation)
    spec = f"ogbl:{tmp_path}"
    graph = load_dataset(spec)
    valid = torch.load(tmp_path / "ogbl_tiny" / "split" / "time" / "valid.pt", weights_only=False)
    split = split_edges(graph, [0.85, 0.05, 0.1], seed=0)
    assert graph.name == "ogbl-tiny" and graph.num_edges == 2 * int((split.split_of == TRAIN).sum())
    assert split.counts() == {"train": split.pairs.shape[1] - 40, "val": 20, "test": 20}
    config = build_config({"task": "link", "data": {"dataset": spec}, "optim": {"epochs": 2}, "dtype": "float64",
                           "model": {"hidden": 8}, "hits_k": [10], "progress": False})
    report = run(config, write=False, keep_model=True)
    z = embeddings(report["models"]["best"], split.message_graph)
    pos = (z[valid["source_node"]] * z[valid["target_node"]]).sum(1) if citation else \
        (z[valid["edge"][:, 0]] * z[valid["edge"][:, 1]]).sum(1)
    final = report["final"]
    if citation:  # each positive's own 5 candidate tails: MRR among them, AUC against the first
        neg = (z[valid["source_node"]][:, None, :] * z[torch.as_tensor(valid["target_node_neg"])]).sum(-1)
        assert final["val_mrr"] == pytest.approx(mrr(pos, neg), abs=1e-12)
        assert final["val_auc"] == pytest.approx(auc(pos, neg[:, 0]), abs=1e-12)
    else:  # the 40 shared negatives: AUC and Hits@K as ogbl-collab is scored, no MRR
        a, b = torch.as_tensor(valid["edge_neg"]).T
        neg = (z[a] * z[b]).sum(1)
        assert final["val_auc"] == pytest.approx(auc(pos, neg), abs=1e-12)
        assert final["val_hits@10"] == pytest.approx(hits_at_k(pos, neg, 10), abs=1e-12)
        assert "val_mrr" not in final


def test_an_ogbl_directory_without_its_split_or_under_task_node_is_refused(tmp_path):
    write_ogbl(tmp_path / "ogbl_tiny", split=False)
    with pytest.raises(FileNotFoundError, match=r"ogbl_tiny/split holds splits none; an OGB link-property dataset "
                                                r"needs exactly one split/NAME/\{train,valid,test\}.pt"):
        load_dataset(f"ogbl:{tmp_path}")
    with pytest.raises(ValueError, match=r"is a link-prediction dataset .*train it with --task link"):
        run(build_config({"data": {"dataset": f"ogbl:{tmp_path}"}, "progress": False}), write=False)


def test_ogbl_split_ids_out_of_range_are_named(tmp_path):
    root = tmp_path / "ogbl_tiny"
    write_ogbl(root)
    torch.save({"edge": np.array([[0, 1], [2, 999]])}, root / "split" / "time" / "test.pt")
    with pytest.raises(ValueError, match=r"split/time: test.pos has node ids outside \[0, 200\)"):
        load_dataset(f"ogbl:{root}")


def test_link_split_is_refused_with_data_that_brings_its_own(tmp_path, capsys):
    import graphscale as gs
    from graphscale.cli import main

    with pytest.raises(ValueError, match=r"^link_split= is not read with data that brings its own split"):
        gs.train("gcn", link_triple(), task="link", link_split=[0.8, 0.1, 0.1], epochs=1, progress=False)
    write_ogbl(tmp_path / "ogbl_tiny")
    args = ["train", "--task", "link", "--dataset", f"ogbl:{tmp_path}", "--link-split", "0.8,0.1,0.1", "--epochs", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--link-split is not read with --dataset ogbl:" in err


@pytest.mark.parametrize("strategy", ["graph-parallel", "offload"])
def test_strategies_scoring_keyed_candidates_refuse_a_given_split(tmp_path, strategy):
    """graph-parallel and offload score every split against the candidates they draw: a dataset's own negatives
    would be replaced silently, so its split is refused in the parent, naming the strategies that score them."""
    write_ogbl(tmp_path / "ogbl_tiny")
    config = build_config({"task": "link", "data": {"dataset": f"ogbl:{tmp_path}"}, "progress": False,
                           "strategy": {"name": strategy, "workers": 2}, "oversubscribe": True,
                           "cache_dir": str(tmp_path / "cache")})
    with pytest.raises(ValueError, match=rf"--task link: strategy '{strategy}' scores every split against the keyed "
                                         r"candidates it draws, not the given split's own negatives of 'ogbl:.*'; "
                                         r"strategies that score them: data-parallel, model-averaging, single, "
                                         r"split-parallel"):
        run(config, write=False)


@pytest.mark.slow
def test_an_ogbl_directory_trains_under_the_strategies_that_score_its_negatives(tmp_path):
    """An ogbl: dataset (no node labels, no node split) trains under the mini-batch strategies and model-averaging:
    split-parallel and data-parallel x2 with full fan-outs and one batch score its negatives as single does."""
    write_ogbl(tmp_path / "ogbl_tiny")
    finals = {}
    for strategy in ("single", "split-parallel", "data-parallel", "model-averaging"):
        extra = {"fanouts": [-1, -1], "batch_size": 10000} if strategy.endswith("-parallel") else {}
        config = build_config({"task": "link", "data": {"dataset": f"ogbl:{tmp_path}"}, "optim": {"epochs": 2},
                               "progress": False, "dtype": "float64", "hits_k": [10], "oversubscribe": True,
                               "cache_dir": str(tmp_path / "cache"),
                               "strategy": {"name": strategy, "workers": 1 if strategy == "single" else 2, **extra}})
        finals[strategy] = run(config, write=False)["final"]
    for strategy in ("split-parallel", "data-parallel"):
        for key in ("val_auc", "val_hits@10", "test_auc", "test_hits@10"):
            assert finals[strategy][key] == pytest.approx(finals["single"][key], abs=1e-9), (strategy, key)
    assert 0.0 <= finals["model-averaging"]["val_auc"] <= 1.0 and "val_mrr" not in finals["model-averaging"]

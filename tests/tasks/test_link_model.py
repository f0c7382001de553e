"""The trained link-prediction model in the user's hands: ``Report.model`` carries the trained decoder as
``link_decoder`` (a graphscale model and a PyG model), ``gs.predict`` gives the embeddings the run scored, and
``gs.load_model`` loads a link checkpoint's decoder too."""

from __future__ import annotations

import pytest
import torch

import graphscale as gs
from graphscale.config import build_config
from graphscale.data.datasets import load_dataset
from graphscale.nn.models import build_model
from graphscale.tasks.link import LinkTask
from graphscale.tasks.split import split_edges

SBM = "sbm:nodes=300,degree=8,classes=4,features=16,seed=0"


def test_report_model_decoder_and_predict_reproduce_the_runs_scores(tmp_path):
    path = str(tmp_path / "c.pt")
    report = gs.train("gcn", SBM, task="link", decoder="distmult", epochs=3, hidden=8, dtype="float64",
                      checkpoint=path, progress=False)
    model = report.model
    saved = torch.load(path, weights_only=False)["best"]["state"]
    assert torch.equal(model.link_decoder.relation.detach(), saved["link_decoder.relation"])
    assert not torch.equal(saved["link_decoder.relation"], torch.ones(8, dtype=torch.float64))  # trained
    z = gs.predict(model, SBM, task="link", decoder="distmult", dtype="float64")  # over the message-passing graph
    config = build_config({"task": "link", "data": {"dataset": SBM}, "model": {"hidden": 8}})
    split = split_edges(load_dataset(SBM), config.link_split, config.seed)
    scores = LinkTask(split, model.link_decoder, config.seed, [20], "cpu").evaluate(z)
    assert scores["test_auc"] == pytest.approx(report.final.test_acc, abs=1e-12)
    assert scores["test_mrr"] == pytest.approx(report.raw["final"]["test_mrr"], abs=1e-12)

    fresh = build_model(config.model, 16, 8, seed=5, dtype=torch.float64)  # a GCN without a decoder
    loaded = gs.load_model(path, fresh)
    assert torch.equal(loaded.link_decoder.relation, saved["link_decoder.relation"])
    assert torch.equal(loaded.layers[0].lin.weight, model.layers[0].lin.weight)


def make_pyg_gcn():
    from torch_geometric.nn import GCN

    return GCN(16, 12, num_layers=2, out_channels=10)


def test_a_pyg_models_report_module_and_load_model_carry_the_decoder(tmp_path):
    path = str(tmp_path / "c.pt")
    report = gs.train(make_pyg_gcn, SBM, task="link", decoder="mlp", epochs=2, checkpoint=path, progress=False)
    model = report.model
    assert type(model).__name__ == "GCN" and model.link_decoder.hidden.weight.shape == (10, 10)
    loaded = gs.load_model(path, make_pyg_gcn())
    for a, b in zip(loaded.link_decoder.parameters(), model.link_decoder.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(loaded.convs[0].lin.weight, model.convs[0].lin.weight)

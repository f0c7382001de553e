"""``--task link`` under ``offload`` equals ``single`` full-graph: per-epoch losses, the last epoch's trained
parameters (decoder included) and the best epoch's scores, on one and two workers with two chunks each, in float64
and float32, through ``run`` (the split's message graph written as the run's graph directory, its pairs beside it).
The scoring exchange is graph-parallel's (its bytes are held to the closed form in ``test_link_graph_parallel.py``);
here the recorded link bytes equal the same closed form over offload's partition, and each worker's reads of its own
``H^L`` rows are counted too."""

from __future__ import annotations

import pytest
import torch
from test_link_graph_parallel import expected_link_bytes

from graphscale.config import build_config
from graphscale.data.datasets import load_dataset
from graphscale.run import run
from graphscale.strategies.link_scoring import LINK
from graphscale.strategies.offload.plan import ChunkSets
from graphscale.testing import assert_close_rel

SBM = "sbm:nodes=120,degree=4,classes=3,features=8,seed=1"
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def config(strategy: str, workers: int, dtype: str, cache, decoder: str = "dot", **strategy_options):
    return build_config({"task": "link", "decoder": decoder, "data": {"dataset": SBM},
                         "model": {"hidden": 6, "dropout": 0.5}, "optim": {"epochs": 3}, "dtype": dtype,
                         "progress": False, "oversubscribe": True, "cache_dir": str(cache), "hits_k": [5, 20],
                         "strategy": {"name": strategy, "workers": workers, **strategy_options}})


@pytest.mark.parametrize("workers, dtype, decoder", [(1, "float64", "mlp"), (2, "float64", "dot"),
                                                      (2, "float32", "distmult")])
def test_offload_link_equals_single(workers, dtype, decoder, tmp_path):
    single = run(config("single", 1, dtype, tmp_path, decoder), write=False, keep_model=True)
    offload_config = config("offload", workers, dtype, tmp_path, decoder, chunks=2)
    offload = run(offload_config, write=False, keep_model=True)
    precision = DTYPES[dtype]
    assert_close_rel(torch.tensor([e["loss"] for e in offload["epochs"]], dtype=torch.float64),
                     torch.tensor([e["loss"] for e in single["epochs"]], dtype=torch.float64), precision, "losses")
    expected = single["models"]["last"].state_dict()
    for name, value in offload["models"]["last"].state_dict().items():
        assert_close_rel(value, expected[name], precision, name)
    assert offload["warnings"] == single["warnings"]  # the split's, drawn over the whole graph
    assert decoder == "dot" or any(name.startswith("link_decoder.") for name in expected)
    for key, value in single["final"].items():  # float32: two scores within ~1e-7 may swap (a Hits@K by 1 / 24)
        if key.startswith("test_") and not key.endswith("_loss"):
            assert offload["final"][key] == pytest.approx(value, rel=1e-10, abs=1e-10 if dtype == "float64" else 0.05)
    graph = load_dataset(SBM)
    (shared,) = (tmp_path / "shared").iterdir()  # the offload layout the parent wrote: its owner of every vertex
    owner = ChunkSets.load(shared).owner
    for epoch, record in enumerate(offload["epochs"]):
        assert record["bytes"].get(LINK, 0) == expected_link_bytes(graph, offload_config, owner, workers, epoch)
        assert record["bytes"]["h2d_dst"] >= graph.num_nodes * 6 * precision.itemsize  # own H^L rows read back

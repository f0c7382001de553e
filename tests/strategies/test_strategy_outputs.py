"""``Strategy.outputs``, the full-graph inference :func:`graphscale.predict` runs: under graph-parallel, offload and
pipeline (2 workers) every vertex's outputs come from exactly one worker and equal ``single``'s (float64 within
1e-10); the other strategies refuse in one line naming why."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.testing import assert_close_rel, random_graph, run_distributed

#: strategy -> its options; each runs both models
PREDICTING = {"graph-parallel": {"partitioner": "random"}, "offload": {"chunks": 2}, "pipeline": {"chunks": 2}}
MODELS = [("gcn", 2), ("gcnii", 4)]


def make_graph():
    return random_graph(40, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=torch.float64, isolated=2)


def make_config(model: str, layers: int, name: str, workers: int, **options) -> RunConfig:
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=layers, dropout=0.5),
                     optim=OptimConfig(lr=0.05), strategy=StrategyConfig(name=name, workers=workers, **options),
                     seed=0, dtype="float64")


def _outputs(env: DistEnv, runs: list[tuple]) -> list[tuple]:
    """``(ids, logits)`` of every ``(model, layers, strategy, options)`` run: the initial weights, no training."""
    out = []
    for model_name, layers, name, options in runs:
        graph = make_graph()
        config = make_config(model_name, layers, name, env.world_size, **options)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
        strategy = STRATEGIES.get(name)()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        with torch.no_grad():
            ids, logits = strategy.outputs()
        out.append((ids.cpu(), logits.cpu()))
        strategy.teardown()
    return out


@pytest.mark.slow
def test_outputs_under_graph_parallel_offload_and_pipeline_equal_single():
    reference = {m: _outputs(DistEnv.local(), [(m, layers, "single", {})])[0] for m, layers in MODELS}
    runs = [(m, layers, name, options) for name, options in PREDICTING.items() for m, layers in MODELS]
    results = run_distributed(_outputs, 2, runs, timeout_s=120)
    for i, (model_name, _, name, _) in enumerate(runs):
        ref_ids, ref = reference[model_name]
        assert torch.equal(ref_ids, torch.arange(ref.shape[0]))
        ids = torch.cat([r[i][0] for r in results])
        assert torch.equal(torch.sort(ids).values, ref_ids), name  # every vertex from exactly one worker
        got = torch.empty_like(ref)
        got[ids] = torch.cat([r[i][1] for r in results if r[i][0].numel()])
        assert_close_rel(got, ref, what=f"{name}/{model_name}")


@pytest.mark.parametrize("name", ["data-parallel", "split-parallel", "task-parallel", "model-averaging"])
def test_the_other_strategies_refuse_predict_in_one_line(name):
    import graphscale as gs

    with pytest.raises(ValueError, match=rf"^predict: strategy='{name}' cannot predict \(it keeps no full-graph "
                                         r"outputs: .*\); predict runs single, graph-parallel, offload, pipeline") \
            as err:
        gs.predict("gcn", make_graph(), strategy=name, workers=2)
    assert "\n" not in str(err.value)

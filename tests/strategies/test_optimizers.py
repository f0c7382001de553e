"""The optimiser and the learning-rate schedule (:mod:`graphscale.strategies.optimizers`): each optimiser with each
schedule is exact across the exact strategies (graph-parallel and offload on 2 workers equal ``single``,
split-parallel on 2 equals ``single --minibatch``, float64 within 1e-10), every training strategy steps the
configured optimiser at the epoch's rate, the rates are torch's schedulers', and the stage-state gathering carries
SGD's momentum."""

from __future__ import annotations

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.distributed.env import DistEnv
from graphscale.prepare import prepare_graph
from graphscale.strategies.optimizers import LRSchedule, make_optimizer, state_layout
from graphscale.testing import assert_close_rel, random_graph, run_distributed
from graphscale.testing.distributed import train_epochs

EPOCHS = 5
#: (optimizer, momentum, schedule, step size): every optimiser and every schedule at least once
CASES = [("adam", None, "cosine", None), ("adamw", None, "step", 2), ("sgd", None, "none", None),
         ("sgd", 0.5, "step", 1)]
FULL_GRAPH = {"graph-parallel": {"partitioner": "random"}, "offload": {"chunks": 2}}
MINIBATCH = {"fanouts": [3, 3], "batch_size": 8, "minibatch": True}


def make_graph():
    return random_graph(40, avg_degree=4.0, num_features=6, num_classes=3, seed=0, dtype=torch.float64)


def make_config(case, name: str, workers: int, **strategy) -> RunConfig:
    optimizer, momentum, schedule, step = case
    return RunConfig(model=ModelConfig(name="gcn", hidden=4, layers=2, dropout=0.5),
                     optim=OptimConfig(optimizer=optimizer, lr=0.05, weight_decay=5e-4, momentum=momentum,
                                       lr_schedule=schedule, lr_step_size=step, epochs=EPOCHS),
                     strategy=StrategyConfig(name=name, workers=workers, **strategy), seed=0, dtype="float64")


def _train(env: DistEnv, runs: list[tuple]) -> list[list[torch.Tensor]]:
    """The parameters each ``(case, strategy, options)`` run ends with."""
    out = []
    for case, name, options in runs:
        config = make_config(case, name, env.world_size, **options)
        model = train_epochs(env, config, prepare_graph(make_graph(), config), EPOCHS - 1)
        out.append([p.detach().clone() for p in model.parameters()])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("minibatch", [False, True], ids=["full-graph", "minibatch"])
def test_each_optimiser_and_schedule_is_exact_across_strategies(minibatch):
    strategies = {"split-parallel": {}} if minibatch else FULL_GRAPH
    extra = MINIBATCH if minibatch else {}
    reference = _train(DistEnv.local(), [(case, "single", extra) for case in CASES])
    runs = [(case, name, {**options, **extra}) for name, options in strategies.items() for case in CASES]
    results = run_distributed(_train, 2, runs, timeout_s=120)
    for i, (case, name, _) in enumerate(runs):
        for rank, got in enumerate(results):
            for p, q in zip(got[i], reference[i % len(CASES)]):
                assert_close_rel(p, q, what=f"{name} rank {rank} {case}")
    # the cases differ from each other: the options reach the optimiser
    firsts = [reference[i][0] for i in range(len(CASES))]
    assert all(not torch.equal(a, b) for i, a in enumerate(firsts) for b in firsts[i + 1:])


def _kinds(env: DistEnv, runs: list[tuple]) -> list[tuple]:
    """``(optimiser class, its rate, the schedule's rate)`` after epoch 1 of every ``(name, options)``."""
    out = []
    case = ("sgd", 0.3, "step", 1)
    for name, options in runs:
        config = make_config(case, name, env.world_size, **options)
        from graphscale.nn.models import build_model
        from graphscale.registry import STRATEGIES

        graph = make_graph()
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
        strategy = STRATEGIES.get(name)()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        schedule = LRSchedule(config.optim)
        for epoch in range(2):
            strategy.set_lr(schedule.lr(epoch))
            strategy.train_epoch(epoch)
        groups = strategy.optimizer.param_groups
        out.append((type(strategy.optimizer).__name__, {g["lr"] for g in groups}, {g["momentum"] for g in groups},
                    schedule.lr(1)))
        strategy.teardown()
    return out


@pytest.mark.slow
def test_every_training_strategy_steps_the_configured_optimiser_at_the_epochs_rate():
    runs = [("data-parallel", {"fanouts": [3, 3], "batch_size": 8}), ("pipeline", {"chunks": 2}),
            ("task-parallel", {}), ("model-averaging", {"partitioner": "random"})]
    for (name, _), (kind, rates, momenta, expected) in zip(runs, run_distributed(_kinds, 2, runs, timeout_s=120)[0]):
        assert kind == "SGD" and rates == {expected} and momenta == {0.3}, name
        assert expected == pytest.approx(0.05 * 0.1)


def test_rates_are_torchs_schedulers():
    """cosine is CosineAnnealingLR with T_max = --epochs, step is StepLR, bit for bit; none keeps --lr."""
    for schedule, make in (("cosine", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7)),
                           ("step", lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5))):
        optim = OptimConfig(lr=0.2, lr_schedule=schedule, epochs=7, lr_step_size=3 if schedule == "step" else None,
                            lr_gamma=0.5 if schedule == "step" else None)
        param = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([param], lr=0.2)
        scheduler = make(opt)
        ours = LRSchedule(optim)
        for epoch in range(7):
            assert ours.lr(epoch) == opt.param_groups[0]["lr"], (schedule, epoch)
            opt.step()
            scheduler.step()
        assert ours.state(3)["lr"] == ours.lr(3) and ours.state(3)["kind"] == schedule
    assert [LRSchedule(OptimConfig(lr=0.3)).lr(e) for e in range(3)] == [0.3] * 3


def test_each_optimiser_is_the_torch_one_with_the_options():
    model = torch.nn.Linear(2, 2)
    adamw = make_optimizer(model, OptimConfig(optimizer="adamw", lr=0.1, weight_decay=0.01))
    assert type(adamw) is torch.optim.AdamW and adamw.param_groups[0]["weight_decay"] == 0.01
    sgd = make_optimizer(model, OptimConfig(optimizer="sgd", lr=0.1))
    assert type(sgd) is torch.optim.SGD and sgd.param_groups[0]["momentum"] == 0.9
    assert state_layout(sgd).tensors == ("momentum_buffer",)
    plain = make_optimizer(model, OptimConfig(optimizer="sgd", momentum=0.0))
    assert state_layout(plain).tensors == () and not state_layout(plain).step
    assert state_layout(make_optimizer(model, OptimConfig())).tensors == ("exp_avg", "exp_avg_sq")

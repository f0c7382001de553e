"""NeutronTask (``--strategy task-parallel``): spec ``shared/specs/neutrontask.md`` §3.2, §3.4, §4 and issue 12.

The oracles are ``single`` on the same model (``full`` dependency: placement invariance; the coupled order against
standard GCN) and :class:`TaskReference` (one process, the epoch's masked operator from the same shuffle: causal,
block_diag, subgraph-mean). One spawn of 4 workers runs every distributed configuration (T/P splits, both
p_splits, hybrid groups, recompute on/off, serial/pipelined) and checks numbers and Ledger bytes; one end-to-end run
goes through ``graphscale train``'s path (2 workers). The rest runs in-process.
"""

from __future__ import annotations

import copy

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.data.block import Block
from graphscale.distributed.env import DistEnv
from graphscale.nn.layers import gcn_aggregate, gcn_aggregate_transpose
from graphscale.nn.models import build_model, is_decoupled
from graphscale.prepare import prepare_graph
from graphscale.strategies.graph_parallel import allreduce_bytes_per_epoch
from graphscale.strategies.single import SingleStrategy
from graphscale.strategies.stage_state import stage_state_bytes
from graphscale.strategies.task_parallel.chain import (
    H2D,
    HALO,
    TASK_BWD,
    TASK_FWD,
    build_segments,
    epoch_bytes,
    num_chunks,
    resolve_plan,
)
from graphscale.strategies.task_parallel.chunks import (
    assign_chunks,
    expected_keep_rate,
    keep_rate,
    layout,
    masked_operator,
)
from graphscale.strategies.task_parallel.reference import TaskReference
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy
from graphscale.strategies.task_parallel.tasks import (
    chain_bytes_per_epoch,
    coupled_boundary_widths,
    task_split,
    td_boundary_widths,
)
from graphscale.testing import assert_close_rel, random_graph, run_distributed

EPOCHS = 5
WORKERS = 4


def graph():
    return random_graph(48, avg_degree=4.0, num_features=6, num_classes=3, seed=3, dtype=torch.float64, isolated=1)


def make_config(workers: int = WORKERS, model: str = "gcn", layers: int = 2, decoupled: str = "on",
                dropout: float = 0.3, heads: int = 1, **strategy) -> RunConfig:
    strategy.setdefault("t_workers", 2)
    strategy.setdefault("chunking", "contiguous")  # the tests' hand-checked chunks (the default is METIS)
    return RunConfig(model=ModelConfig(name=model, hidden=5, layers=layers, dropout=dropout, decoupled=decoupled,
                                       heads=heads),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="task-parallel", workers=workers, **strategy),
                     seed=0, dtype="float64")


def fresh_model(config: RunConfig, g):
    return build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64, decoupled=is_decoupled(config))


def single_run(config: RunConfig, g, epochs: int = EPOCHS):
    """``single`` on the same model (the decoupled form when the config's is): losses and the model."""
    model = fresh_model(config, g)
    single_config = copy.deepcopy(config)
    single_config.strategy = StrategyConfig(name="single")
    single = SingleStrategy()
    single.setup(g, model, DistEnv(), single_config)
    return [single.train_epoch(e).loss for e in range(epochs)], model


def reference_run(config: RunConfig, g, epochs: int = EPOCHS):
    model = fresh_model(config, g)
    sc = config.strategy
    chunk_of = assign_chunks(g, num_chunks(config), sc.chunking, sc.partitioner, sc.balance, config.seed)
    ref = TaskReference(model, g, chunk_of, sc.subgraphs, sc.dependency, config.optim,
                        config.seed, sc.shuffle, sc.loss_norm)
    return [ref.train_epoch(e) for e in range(epochs)], model


# ------------------------------------------------------------------ semantics, in-process
def test_masked_operators_follow_the_shuffle():
    g = graph()
    chunk_of = assign_chunks(g, 8, "contiguous")
    assert torch.equal(chunk_of, torch.arange(48) * 8 // 48)  # contiguous ranges
    lay = layout(8, 4, seed=5, epoch=2)
    assert torch.equal(lay.order, layout(8, 4, seed=5, epoch=2).order)  # a pure function of (seed, epoch)
    assert sorted(lay.order.tolist()) == list(range(8)) and lay.k == 2
    assert not torch.equal(lay.order, layout(8, 4, seed=5, epoch=3).order)
    full = Block.full(g)
    edges = set(zip(full.dst_of_edges().tolist(), full.indices.tolist()))
    sub = lay.sub
    for mode, rule in (("causal", lambda a, b: a <= b), ("block_diag", lambda a, b: a == b)):
        op = masked_operator(g, chunk_of, sub, mode)
        kept = set(zip(op.dst_of_edges().tolist(), op.src_ids[op.indices].tolist()))
        assert kept == {(v, u) for v, u in edges if rule(int(sub[chunk_of[u]]), int(sub[chunk_of[v]]))}
        assert torch.equal(op.src_deg, full.src_deg[op.src_ids])  # global degrees
    one = layout(8, 1, seed=5, epoch=2)  # S = 1: causal keeps every edge
    assert masked_operator(g, chunk_of, one.sub, "causal").num_edges == full.num_edges


def test_keep_rate_matches_the_formula():
    g = random_graph(200, avg_degree=6.0, seed=1)
    chunk_of = assign_chunks(g, 8, "contiguous")
    rates = [keep_rate(g, chunk_of, layout(8, 4, 0, e).sub) for e in range(300)]
    assert abs(sum(rates) / len(rates) - expected_keep_rate(8, 2)) < 0.02
    assert expected_keep_rate(4, 2) == pytest.approx(2 / 3) and expected_keep_rate(5, 1) == 0.5


def test_transposed_propagation_is_the_autograd_gradient():
    g = graph()
    block = Block.from_nodes(g, torch.tensor([3, 1, 7, 20]))
    x = torch.randn(block.num_src, 4, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(block.num_dst, 4, dtype=torch.float64)
    gcn_aggregate(block, x).backward(grad)
    assert_close_rel(gcn_aggregate_transpose(block, grad), x.grad)


@pytest.mark.parametrize("model, heads", [("gcn", 1), ("gat", 1), ("gat", 3)])
def test_reference_full_is_single_on_the_decoupled_model(model, heads):
    """``single`` trains the decoupled model; the reference with ``full`` equals it (losses, parameters)."""
    g = graph()
    config = make_config(model=model, dependency="full", heads=heads)
    losses, single_model = single_run(config, g)
    ref_losses, ref_model = reference_run(config, g)
    for e in range(EPOCHS):
        assert_close_rel(ref_losses[e], losses[e], torch.float64, what=f"loss {e}")
    for (name, p), q in zip(ref_model.named_parameters(), single_model.parameters()):
        assert_close_rel(p, q, what=name)


def test_causal_with_one_subgraph_is_full_and_more_subgraphs_differ():
    g = graph()
    full, _ = reference_run(make_config(dependency="full", subgraphs=1), g)
    causal1, _ = reference_run(make_config(dependency="causal", subgraphs=1), g)
    causal4, _ = reference_run(make_config(dependency="causal", subgraphs=4), g)
    assert causal1 == full
    assert abs(causal4[-1] - full[-1]) > 1e-6


@pytest.mark.parametrize("heads", [1, 3])
def test_decoupled_gat_attention_gradients_are_exact(heads):
    """Gradients into every head's attention vectors sum every propagation step's contribution (checked
    numerically)."""
    g = random_graph(12, avg_degree=3.0, num_features=4, num_classes=3, seed=0, dtype=torch.float64)
    model = build_model(ModelConfig(name="gat", hidden=4, layers=3, dropout=0.0, heads=heads), 4, 3, seed=0,
                        dtype=torch.float64, decoupled=True)
    assert model.att_src.shape == (heads, 3)
    block = Block.full(g)
    inputs = (model.att_src.detach().clone().requires_grad_(True), model.att_dst.detach().clone().requires_grad_(True))
    assert torch.autograd.gradcheck(lambda a, b: _with_params(model, a, b, block, g.x), inputs)


def test_decoupled_gat_heads_are_one_head_models_averaged():
    """``H`` heads: head ``h`` propagates its slice of the T output with the attention of its own scores, exactly
    as a one-head propagation of ``[z_h | z_h a_src,h | z_h a_dst,h]``; heads stay apart between the steps and the
    output averages them (the standard GAT's output layer, ``concat=False``)."""
    from graphscale.nn.layers import ScoredAttentionPropagation

    g = random_graph(20, avg_degree=3.0, num_features=4, num_classes=3, seed=1, dtype=torch.float64)
    heads, block = 3, Block.full(g)
    model = build_model(ModelConfig(name="gat", hidden=4, layers=2, dropout=0.0, heads=heads), 4, 3, seed=0,
                        dtype=torch.float64, decoupled=True)
    assert model.t_width(1) == model.layer_widths()[0] == heads * (3 + 2)
    with torch.no_grad():
        z = model.input_map(g.x, block.src_ids)[:, : heads * 3]
        one = ScoredAttentionPropagation(3)
        per_head = []
        for h in range(heads):
            zh = z[:, 3 * h: 3 * h + 3]
            rows = torch.cat([zh, (zh @ model.att_src[h])[:, None], (zh @ model.att_dst[h])[:, None]], dim=1)
            for _ in range(2):
                rows = one(block, rows)
            per_head.append(rows[:, :3])
        assert_close_rel(model(block, g.x), torch.stack(per_head).mean(0), what="averaged heads")


def _with_params(model, att_src, att_dst, block, x):
    saved = model.att_src, model.att_dst
    try:
        del model.att_src, model.att_dst
        model.att_src, model.att_dst = att_src, att_dst
        return model(block, x).pow(2).sum()
    finally:
        del model.att_src, model.att_dst
        model.att_src, model.att_dst = saved


# ------------------------------------------------------------------ bad input, before any worker starts
@pytest.mark.parametrize("argv, message", [
    (["--workers", "4", "--t-workers", "4"], "--t-workers 4 leaves no P worker among --workers 4"),
    (["--workers", "2", "--chunks", "6", "--subgraphs", "4"], "--subgraphs 4 must be >= 1 and divide --chunks 6"),
    (["--workers", "2", "--model", "sage"], "model 'sage' has no decoupled form"),
    (["--workers", "2", "--model", "gat", "--decoupled", "off"], "coupled order (--decoupled off) for model gcn only"),
    (["--workers", "4", "--t-workers", "1", "--layers", "2"], "--t-workers 1 with --workers 4 gives 3 P workers for 2 layers"),
    (["--workers", "4", "--t-workers", "2", "--layers", "1", "--chunks", "4", "--subgraphs", "4"],
     "do not divide among a group of 2 ranks"),
    (["--workers", "1"], "needs --workers >= 2"),
    (["--workers", "2", "--last-relu", "--decoupled", "off"], ("--last-relu is not used by model 'gcn' without "
                                                             "--decoupled")),
    (["--workers", "2", "--dependency", "full", "--no-shuffle"], ("--shuffle is not used by strategy "
                                                                "'task-parallel' with --dependency full and --loss-norm global")),
    (["--workers", "2", "--task-gamma", "1.5"], "--task-gamma must lie in [0, 1], got 1.5"),
    (["--workers", "2", "--device-flops", "-1"], "--device-flops must be a positive rate (or 0: measured)"),
    (["--workers", "2", "--device-bandwidth", "nan"], "--device-bandwidth must be a positive rate"),
    (["--workers", "2", "--t-workers", "1", "--device-flops", "1e12"],
     "--device-flops is not used by strategy 'task-parallel' with --t-workers (the scheduling model does not run)"),
    (["--workers", "2", "--subgraphs", "1", "--no-shuffle"],
     "--shuffle is not used by strategy 'task-parallel' with --subgraphs 1"),
])
def test_bad_input_fails_before_any_worker_starts(argv, message, capsys):
    from graphscale.cli import main

    assert main(["train", "--strategy", "task-parallel", *argv, "--epochs", "1", "--oversubscribe"]) == 2
    assert message in capsys.readouterr().err


def test_valid_plans_pass_and_choices_are_checked():
    from graphscale.config import build_config
    from graphscale.validation import validate

    base = {"strategy": {"name": "task-parallel", "workers": 3}, "model": {"layers": 1}, "oversubscribe": True}
    validate(build_config({**base, "checkpoint": "/tmp/graphscale-tp-check.pt"}))  # one T stage: rank 0 holds all
    with pytest.raises(ValueError, match="--dependency must be one of full, causal, block_diag"):
        validate(build_config({**base, "strategy": {**base["strategy"], "dependency": "later"}}))


def test_decoupled_is_refused_where_it_cannot_be_trained(capsys):
    from graphscale.cli import main

    assert main(["train", "--strategy", "graph-parallel", "--workers", "2", "--decoupled", "on", "--epochs", "1",
                 "--oversubscribe"]) == 2
    assert "is trained by strategies single, task-parallel, not by 'graph-parallel'" in capsys.readouterr().err
    for option in ("--task-gamma", "--device-flops", "--device-bandwidth"):  # task-parallel's scheduling model
        assert main(["train", "--strategy", "graph-parallel", "--workers", "2", option, "0.5", "--epochs", "1",
                     "--oversubscribe"]) == 2
        assert f"{option} is not used by strategy 'graph-parallel'" in capsys.readouterr().err


# ------------------------------------------------------------------ the distributed runs (one spawn)
#: (name, model options, strategy options, oracle): each a configuration of the 4-worker run
CASES = [
    ("chain full", {}, {"dependency": "full", "t_workers": 2}, "single"),
    ("chain full serial", {}, {"dependency": "full", "t_workers": 2, "pipelined": False}, "single"),
    ("chain full keep T", {}, {"dependency": "full", "t_workers": 2, "t_recompute": False}, "single"),
    ("1T + 3P subgraphs full", {}, {"dependency": "full", "t_workers": 1, "p_split": "subgraphs"}, "single"),
    ("3T + 1P full", {"layers": 3}, {"dependency": "full", "t_workers": 3}, "single"),
    ("hybrid full", {"layers": 1}, {"dependency": "full", "t_workers": 2, "subgraphs": 2}, "single"),
    ("causal chain", {}, {"dependency": "causal", "t_workers": 2}, "reference"),
    ("causal subgraphs", {}, {"dependency": "causal", "t_workers": 1, "p_split": "subgraphs"}, "reference"),
    ("causal hybrid", {"layers": 1}, {"dependency": "causal", "t_workers": 2, "subgraphs": 3}, "reference"),
    ("block_diag subgraph-mean", {}, {"dependency": "block_diag", "t_workers": 1, "p_split": "subgraphs",
                                      "loss_norm": "subgraph-mean"}, "reference"),
    ("gat causal chain", {"model": "gat"}, {"dependency": "causal", "t_workers": 2}, "reference"),
    ("gat hybrid full", {"model": "gat", "layers": 1}, {"dependency": "full", "t_workers": 2}, "single"),
    ("gat 3 heads causal chain", {"model": "gat", "heads": 3}, {"dependency": "causal", "t_workers": 2}, "reference"),
    ("gat 3 heads full serial keep T", {"model": "gat", "heads": 3}, {"dependency": "full", "t_workers": 2,
                                                                      "pipelined": False, "t_recompute": False},
     "single"),
    ("gat 2 heads causal hybrid", {"model": "gat", "heads": 2, "layers": 1},
     {"dependency": "causal", "t_workers": 2, "subgraphs": 3}, "reference"),
    ("gat 2 heads block_diag subgraphs", {"model": "gat", "heads": 2},
     {"dependency": "block_diag", "t_workers": 1, "p_split": "subgraphs", "pipelined": False}, "reference"),
    ("coupled full", {"decoupled": "off"}, {"dependency": "full", "t_workers": 2}, "single"),
    ("coupled causal serial", {"decoupled": "off"}, {"dependency": "causal", "t_workers": 1, "p_split": "subgraphs",
                                                     "pipelined": False, "t_recompute": False}, "reference"),
]


def _config(case, workers: int = WORKERS) -> RunConfig:
    _, model_options, strategy_options, _ = case
    return make_config(workers, **model_options, **strategy_options)


def _worker(env: DistEnv, g, cases) -> list[dict]:
    out = []
    for case in cases:
        config = _config(case, env.world_size)
        model = fresh_model(config, g)
        strategy = TaskParallelStrategy()
        strategy.setup(prepare_graph(g, config), model, env, config)
        stats = [strategy.train_epoch(e) for e in range(EPOCHS)]
        owned = {n: (p.detach().clone(), p.grad.clone()) for n, p in model.named_parameters() if p.grad is not None}
        out.append({"losses": [s.loss for s in stats], "bytes": [s.bytes for s in stats], "owned": owned,
                    "timeline": stats[0].extra["timeline"], "role": stats[0].extra["role"],
                    "metrics": strategy.evaluate()})
    return out


def _mirror_rows(g, config, plan, epoch: int) -> dict[int, int]:
    """Per P group: the (row, reading member) pairs of the epoch's kept edges whose row another member owns,
    counted from the edges (independently of the strategy's exchange lists)."""
    sc = config.strategy
    m = num_chunks(config)
    chunk_of = assign_chunks(g, m, sc.chunking)
    lay = layout(m, sc.subgraphs, config.seed, epoch, sc.shuffle)
    op = masked_operator(g, chunk_of, lay.sub, sc.dependency)
    dst, src = op.dst_of_edges(), op.src_ids[op.indices]
    rows = {}
    for stage, group in enumerate(plan.p_groups):
        size = len(group)
        if size == 1:
            continue
        owner = (lay.sub if plan.p_split == "subgraphs" else lay.pos % lay.k) % size
        member = owner[chunk_of]
        pairs = {(int(u), int(member[v])) for u, v in zip(src, dst) if member[u] != member[v]}
        rows[stage] = len(pairs)
    return rows


@pytest.mark.slow
def test_distributed_runs_equal_their_oracles_and_move_the_closed_form_bytes():
    """§4 on 4 workers: placement invariance (T/P splits, both p_splits, hybrid groups: loss, every gradient and
    parameter after 5 Adam steps = single on the decoupled model); causal / block_diag / subgraph-mean = the masked
    reference from the same shuffle, forward and backward; recompute on/off and serial/pipelined give the same
    numbers; coupled TP = single standard GCN. Bytes: the chain's closed form, h2d, the groups' mirrors and
    all-reduce, exactly, every epoch."""
    g = graph()
    results = run_distributed(_worker, WORKERS, g, CASES, timeout_s=120)
    by_name = {}
    for i, case in enumerate(CASES):
        name, _, _, oracle = case
        config = _config(case)
        losses, ref = single_run(config, g) if oracle == "single" else reference_run(config, g)
        per_rank = [r[i] for r in results]
        by_name[name] = per_rank
        for r in per_rank:
            for e in range(EPOCHS):
                assert_close_rel(r["losses"][e], losses[e], torch.float64, what=f"{name}: loss {e}")
        for pname, p in ref.named_parameters():
            holders = [r for r in per_rank if pname in r["owned"]]
            assert holders, f"{name}: {pname} trained nowhere"
            assert all(r["role"][0] == "T" for r in holders), f"{name}: a P rank holds {pname}"
            for r in holders:
                value, grad = r["owned"][pname]
                assert_close_rel(grad, p.grad, what=f"{name}: grad {pname}")
                assert_close_rel(value, p, what=f"{name}: {pname}")
        assert len({tuple(sorted(r["metrics"].items())) for r in per_rank}) == 1
        # bytes
        plan = resolve_plan(config)
        model = fresh_model(config, g)
        if is_decoupled(config):
            t_out = [model.t_width(b - 1) for _, b in plan.t_layers[:-1]]
            widths = td_boundary_widths(t_out, model.t_width(model.num_layers - 1), len(plan.p_layers))
            p_width = model.layer_widths()[0]
        else:
            widths = coupled_boundary_widths([layer.out_dim for layer in model.layers])
            p_width = None
        chain = chain_bytes_per_epoch(g.num_nodes, widths, 8)
        split = task_split(model)
        stage_params = {seg.stage: 0 for seg in build_segments(split, plan) if seg.kind == "T"}
        for seg in build_segments(split, plan):
            if seg.kind == "T":
                stage_params[seg.stage] += sum(p.numel() for op in seg.ops for p in split.t_params(op.index))
        for e in range(EPOCHS):
            sent = {cat: sum(r["bytes"][e].get(cat, 0) for r in per_rank) for cat in
                    (TASK_FWD, TASK_BWD, H2D, HALO, "allreduce")}
            assert sent[TASK_FWD] == sent[TASK_BWD] == chain // 2, f"{name}: epoch {e} {sent}"
            recompute = config.strategy.t_recompute
            assert sent[H2D] == g.num_nodes * g.num_features * 8 * (2 if recompute else 1)
            mirrors = _mirror_rows(g, config, plan, e)
            if is_decoupled(config):
                per_layer = [p_width * (b - a) for a, b in plan.p_layers]
                expected = sum(2 * n * per_layer[stage] * 8 for stage, n in mirrors.items())
            else:
                expected = sum(2 * n * sum(layer.out_dim for layer in model.layers[slice(*plan.p_layers[stage])]) * 8
                               for stage, n in mirrors.items())
            assert sent[HALO] == expected, f"{name}: epoch {e} halo {sent[HALO]} != {expected}"
            expected_ar = sum(allreduce_bytes_per_epoch(stage_params[stage], len(group), 8)
                              for stage, group in enumerate(plan.t_groups) if len(group) > 1)
            assert sent["allreduce"] == expected_ar, f"{name}: allreduce {sent['allreduce']} != {expected_ar}"
            if all(len(group) == 1 for group in plan.p_groups):  # the strategy's own closed form, every category
                cats = {cat for r in per_rank for cat in r["bytes"][e]}
                ledger = {cat: sum(r["bytes"][e].get(cat, 0) for r in per_rank) for cat in cats}
                closed = epoch_bytes(model, plan, g.num_nodes, g.num_features, 8, config.strategy.t_recompute)
                assert {k: v for k, v in ledger.items() if v} == closed, f"{name}: epoch {e} {ledger} != {closed}"
    # the hybrid and p_split=subgraphs runs did exchange mirrors; the hybrid T group all-reduced
    assert any(r["bytes"][0].get(HALO, 0) for r in by_name["causal hybrid"])
    assert any(r["bytes"][0].get(HALO, 0) for r in by_name["causal subgraphs"])
    assert any(r["bytes"][0].get("allreduce", 0) for r in by_name["hybrid full"])
    # P moves every head's slice and scores: T0 -> T1 (hidden 5), T1 -> P0 and P0 -> P1 (3 heads x (3 + 2))
    assert sum(r["bytes"][0].get(TASK_FWD, 0) for r in by_name["gat 3 heads causal chain"]) == g.num_nodes * (5 + 2 * 15) * 8
    assert any(r["bytes"][0].get(HALO, 0) for r in by_name["gat 2 heads causal hybrid"])
    # scheduling changes no number: bit for bit
    for other in ("chain full serial", "chain full keep T"):
        assert [r["losses"] for r in by_name[other]] == [r["losses"] for r in by_name["chain full"]]
    # the T rank streams the subgraphs forward in order and backward in reverse order (the timestamps)
    t_rank = next(r for r in by_name["chain full"] if r["role"] == ["T", 0, 0])
    assert [s for _, _, phase, s, *_ in t_rank["timeline"] if phase == "fwd"] == [0, 1, 2, 3]
    assert [s for _, _, phase, s, *_ in t_rank["timeline"] if phase == "bwd"] == [3, 2, 1, 0]
    assert all(start <= end for *_, start, end in t_rank["timeline"])


def _resume_worker(env: DistEnv, g, path: str) -> dict:
    def strategy():
        config = make_config(env.world_size, dependency="causal", t_workers=2)
        config.checkpoint = path
        model = build_model(config.model, g.num_features, 3, seed=0, dtype=torch.float64, decoupled=True)
        tp = TaskParallelStrategy()
        tp.setup(prepare_graph(g, config), model, env, config)
        return tp

    straight = strategy()
    stats = [straight.train_epoch(e) for e in range(4)]
    losses = [s.loss for s in stats]
    first = strategy()
    for e in range(2):
        first.train_epoch(e)
    if env.rank == 0:
        torch.save(first.state_dict(), path)
    first.comm.barrier()
    resumed = strategy()
    with torch.no_grad():
        for p in resumed.model.parameters():  # everything must come from the checkpoint
            p.fill_(0.25)
    resumed.load_state_dict(torch.load(path))
    again = [resumed.train_epoch(e).loss for e in (2, 3)]
    params = {n: (p.detach().clone(), q.detach().clone()) for (n, p), q in
              zip(straight.model.named_parameters(), resumed.model.parameters())}
    owned = [n for n, p in straight.model.named_parameters() if any(p is q for q in straight.stage_params)]
    return {"losses": losses, "again": again, "params": params, "owned": owned,
            "checkpoint": [s.bytes.get("checkpoint", 0) for s in stats]}


def test_checkpoint_with_several_t_stages_resumes_identically(tmp_path):
    """Two T stages (ranks 0 and 1) and one P rank: rank 0's checkpoint gathers stage 1's weights and Adam state;
    resuming from it continues exactly as the uninterrupted run (losses and every owner's parameters)."""
    g = graph()
    results = run_distributed(_resume_worker, 3, g, str(tmp_path / "tp.pt"), timeout_s=120)
    for r in results:
        assert r["again"] == r["losses"][2:]
        for name in r["owned"]:
            assert torch.equal(*r["params"][name]), name
    assert sorted(n for r in results for n in r["owned"]) == sorted(results[0]["params"])  # every weight checked
    saved = torch.load(tmp_path / "tp.pt")
    assert len(saved["optimizer"]["state"]) == len(saved["model"])  # every parameter's Adam state
    # every epoch, stage 1's parameters once (values, both Adam moments, step): b sum(3 n + 1), as stage_state says
    sent = [p.numel() for name, (p, _) in results[0]["params"].items() if name not in results[0]["owned"]]
    assert sent and all(sum(r["checkpoint"][e] for r in results) == sum(3 * n + 1 for n in sent) * 8
                        == stage_state_bytes(sent, 8, True) for e in range(4))


def test_a_run_trains_the_decoupled_model_by_default(tmp_path):
    """``graphscale train --strategy task-parallel``: the parent writes the METIS chunks (host-shared), 1 T + 1 P
    workers train the decoupled model (the report says so), the stage bytes equal the closed form."""
    from graphscale.config import build_config
    from graphscale.run import run

    config = build_config({"data": {"dataset": "sbm:nodes=120,degree=5,features=8,classes=3,seed=0"},
                           "model": {"hidden": 8}, "optim": {"epochs": 2},
                           "strategy": {"name": "task-parallel", "workers": 2,
                                        "chunks": 8},
                           "cache_dir": str(tmp_path), "progress": False, "oversubscribe": True})
    report = run(config)
    assert report["model_form"] == "decoupled"
    assert list((tmp_path / "shared").glob("*/chunk_of.npy"))
    assert list((tmp_path / "shared").glob("*/plan.json"))  # the scheduling model chose in the parent
    model = build_model(config.model, 8, 3, seed=0, decoupled=True)
    closed = epoch_bytes(model, resolve_plan(config, 1), 120, 8, 4)
    assert closed[TASK_FWD] == closed[TASK_BWD] == 120 * 3 * 4  # N C b, one boundary
    assert closed[H2D] == 2 * 120 * 8 * 4  # read twice: forward and recomputation
    for epoch in report["epochs"]:
        assert epoch["bytes"] == closed  # every category, exactly
        roles = [e["role"] for e in epoch["extra_per_worker"]]
        assert roles == [["T", 0, 0], ["P", 0, 0]]
        assert all(e["model_form"] == "decoupled" and e["timeline"] for e in epoch["extra_per_worker"])
        # the tracked peak's parts sum to it: the T rank holds parameters (+ Adam), the P rank its caches
        for extra, peak in zip(epoch["extra_per_worker"], epoch["peak_memory_per_worker"]):
            assert sum(extra["memory"].values()) == peak
        assert epoch["extra_per_worker"][1]["memory"]["caches"] >= 2 * 120 * 3 * 4  # P views + gradients, L = 2
    assert 0 <= report["final"]["test_acc"] <= 1

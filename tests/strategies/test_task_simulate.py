"""The discrete-event model of NeutronTask's pipeline, on small cases computed by hand."""

from __future__ import annotations

import pytest

from graphscale.strategies.task_parallel.plan import layer_costs, make_plan
from graphscale.strategies.task_parallel.simulate import Costs, analyse, epoch_tasks, modelled_costs, simulate


def uniform(plan, subgraphs: int, tf: float, tb: float, pf: float, pb: float, link: float = 0.0,
            host: float = 0.0) -> Costs:
    def table(v):
        return tuple(tuple(v for _ in range(subgraphs)) for _ in range(plan.layers))
    boundaries = len(plan.t_groups) + len(plan.p_groups) - 1
    return Costs(table(tf), table(tb), table(pf), table(pb),
                 tuple(tuple(link for _ in range(subgraphs)) for _ in range(boundaries)),
                 tuple(host for _ in range(subgraphs)))


def test_forward_pipeline_fills_like_a_flow_shop():
    plan = make_plan(2, 1, t_workers=1)
    costs = uniform(plan, 4, tf=1, tb=0, pf=1, pb=0)
    # 2 stages, 4 subgraphs of 1 s: (2 + 4 - 1) s pipelined against 2 x 4 s serially
    assert simulate(plan, costs, mode="block_diag", recompute=False).makespan == 5.0
    assert simulate(plan, costs, mode="block_diag", recompute=False, serial=True).makespan == 8.0


@pytest.mark.parametrize(("mode", "pipelined"), [("block_diag", 7.0), ("causal", 8.0), ("full", 9.0)])
def test_forward_and_backward_by_mode(mode, pipelined):
    # 1 T + 1 P, one layer, 2 subgraphs; T: 1 s forward, 2 s backward; P: 1 s each way.
    # block_diag: T F0 [0,1] F1 [1,2]; P F0 [1,2], B0 [2,3] (backward first), F1 [3,4], B1 [4,5]; T B0 [3,5], B1 [5,7]
    # causal: P F1 reads s0 too: F0 [1,2] F1 [2,3]; B0 needs the loss of s1 (s1 reads s0): B0 [3,4] B1 [4,5];
    #         T B0 [4,6] B1 [6,8]
    # full: P F0 waits for both T outputs: F0 [2,3] F1 [3,4] B0 [4,5] B1 [5,6]; T B0 [5,7] B1 [7,9]
    # serial: 1 + 1 + 1 + 2 = 5 s per subgraph in every mode
    plan = make_plan(2, 1, t_workers=1)
    costs = uniform(plan, 2, tf=1, tb=2, pf=1, pb=1)
    assert simulate(plan, costs, mode=mode, recompute=False).makespan == pipelined
    assert simulate(plan, costs, mode=mode, recompute=False, serial=True).makespan == 10.0


def test_causal_backward_runs_in_reverse_subgraph_order():
    # two P layers: P-backward of layer 0 for s0 needs layer 1's gradient rows of s1 (s1 reads s0)
    plan = make_plan(2, 2, t_workers=1)
    sched = simulate(plan, uniform(plan, 3, tf=1, tb=1, pf=1, pb=1), mode="causal", recompute=False)
    bwd0 = {t.subgraph: s for t, s in zip(sched.tasks, sched.start) if (t.kind, t.phase, t.layer) == ("P", "bwd", 0)}
    bwd1_end = {t.subgraph: e for t, e in zip(sched.tasks, sched.end) if (t.kind, t.phase, t.layer) == ("P", "bwd", 1)}
    assert all(bwd0[s] >= bwd1_end[x] for s in range(3) for x in range(s, 3))
    assert bwd0[2] < bwd0[1] < bwd0[0]


def test_recompute_runs_concurrently_with_p_backward():
    # S = 1: T F [0,1], P F [1,2]; then recompute [2,3] on T while P-backward [2,2.5]; T-backward [3,5]
    plan = make_plan(2, 1, t_workers=1)
    costs = uniform(plan, 1, tf=1, tb=2, pf=1, pb=0.5)
    sched = simulate(plan, costs, mode="block_diag")
    assert sched.makespan == 5.0
    spans = {(t.kind, t.phase): (s, e) for t, s, e in zip(sched.tasks, sched.start, sched.end) if t.kind in "TP"}
    assert spans["T", "recompute"] == (2.0, 3.0) and spans["P", "bwd"] == (2.0, 2.5)
    assert simulate(plan, costs, mode="block_diag", recompute=False).makespan == 4.5  # T-backward right at 2.5


def test_transfers_and_host_loads():
    # 2 T + 2 P stages of one layer, S = 1, forward 1 s per layer, backward free, links 0.5 s, host 0.25 s:
    # host .25 + T0 1 + .5 + T1 1 + .5 + P0 1 + .5 + P1 1 = 5.75, then gradients back over 3 links: + 1.5
    plan = make_plan(4, 2, t_workers=2)
    costs = uniform(plan, 1, tf=1, tb=0, pf=1, pb=0, link=0.5, host=0.25)
    assert simulate(plan, costs, recompute=False).makespan == pytest.approx(7.25)
    # recompute reloads from the host and resends between the T stages: .25 + 1 + .5 + 1 after the loss at 5.75
    # and T-backward of layer 1 waits for it (gradients reach T1 at 6.75, the recomputed layer is there at 8.5)
    assert simulate(plan, costs).makespan == pytest.approx(8.5 + 0.5)


def test_round_robin_and_hybrid_stages():
    rr = make_plan(3, 1, t_workers=1, p_split="subgraphs")  # s0 -> P member 0, s1 -> member 1
    costs = uniform(rr, 2, tf=1, tb=0, pf=2, pb=0)
    sched = simulate(rr, costs, mode="block_diag", recompute=False)
    assert sched.makespan == 4.0  # T [0,1] [1,2]; P0.0 [1,3]; P0.1 [2,4]
    assert {t.resource for t in sched.tasks if t.kind == "P"} == {"P0.0", "P0.1"}
    chain = make_plan(2, 1, t_workers=1)
    assert simulate(chain, uniform(chain, 2, tf=1, tb=0, pf=2, pb=0), mode="block_diag",
                    recompute=False).makespan == 5.0
    hybrid = make_plan(3, 1, t_workers=1)  # one P group of 2 ranks: half the P time each
    assert simulate(hybrid, costs, mode="block_diag", recompute=False).makespan == 3.0  # P [1,2] [2,3]


def test_modelled_costs_split_eqs_5_6_per_subgraph():
    plan = make_plan(2, 2, t_workers=1)
    widths, rates = (8, 4, 2), {"flops": 1e3, "bandwidth": 1e4}
    costs = modelled_costs(plan, [10, 30], [20, 90], widths, link_bandwidth=100.0, host_bandwidth=50.0, **rates)
    t1, p1 = layer_costs(30, 90, widths, **rates)
    assert [row[1] for row in costs.t_forward] == pytest.approx(t1)
    assert [row[1] for row in costs.t_backward] == pytest.approx([2 * x for x in t1])
    assert [row[1] for row in costs.p_forward] == pytest.approx(p1) == [row[1] for row in costs.p_backward]
    assert costs.link == ((10 * 2 * 4 / 100.0, 30 * 2 * 4 / 100.0),)  # T output width 2, 4 bytes
    assert costs.host == (10 * 8 * 4 / 50.0, 30 * 8 * 4 / 50.0)
    two_t = make_plan(4, 2, t_workers=2)  # T0 hands over layer 0's output (width 4)
    assert modelled_costs(two_t, [10], [20], widths, link_bandwidth=100.0, **rates).link[0] == (10 * 4 * 4 / 100.0,)


def test_bad_input():
    plan = make_plan(2, 1, t_workers=1)
    costs = uniform(plan, 2, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="mode"):
        epoch_tasks(plan, costs, mode="ring")
    with pytest.raises(ValueError, match="t_forward must be 2 x 2"):
        epoch_tasks(make_plan(2, 2, t_workers=1), costs)
    with pytest.raises(ValueError, match="permutation"):
        epoch_tasks(plan, costs, order=[0, 0])
    with pytest.raises(ValueError, match="widths"):
        modelled_costs(plan, [1], [1], (3,), flops=1, bandwidth=1, link_bandwidth=1)
    with pytest.raises(ValueError, match="no timestamps"):
        analyse([])


def test_analyse_measured_timestamps():
    records = [(0, 0, "T_fwd", 10.0, 11.0), (0, 1, "T_fwd", 11.0, 12.0), (1, 0, "P_fwd", 11.0, 13.0),
               (1, 1, "P_fwd", 13.0, 14.0)]
    out = analyse(records)
    assert out["makespan"] == 4.0
    assert out["busy"] == {0: 2.0, 1: 3.0}
    assert out["concurrency"] == pytest.approx(5.0 / 4.0)
    # s0 has a task running during [10,13], s1 during [11,12] and [13,14]: both during [11,12]
    assert out["overlap"] == pytest.approx(1.0 / 4.0)
    assert out["serial_estimate"] == pytest.approx(3.0 + 2.0)
    # the simulator's records read the same way, and a serial schedule has no overlap
    plan = make_plan(2, 1, t_workers=1)
    costs = uniform(plan, 3, tf=1, tb=1, pf=1, pb=1)
    serial = simulate(plan, costs, mode="block_diag", serial=True)
    assert analyse(serial.records())["overlap"] == 0.0
    pipelined = analyse(simulate(plan, costs, mode="block_diag").records())
    assert pipelined["overlap"] > 0 and pipelined["makespan"] < serial.makespan

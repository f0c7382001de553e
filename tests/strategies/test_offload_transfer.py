"""The offload transfer pipeline: overlap shown by event order (no clocks), exact rows, every mechanism exact.

* :func:`pipelined` with the staging thread: batch ``j+1``'s fill starts before batch ``j``'s compute ends (the
  compute blocks until it sees that fill start: a serial pipeline cannot get there), slots alternate, rows are
  bit-identical to a host ``index_select``; the write-behind lands by :meth:`Transfers.flush`.
* The strategy with every (topology, transfer) mechanism that runs on CPU (streamed + staged, the default;
  resident + staged; resident + uva, whose "alias" on CPU is the host array) gives bit-identical losses, host
  representations and parameters, and the Ledger equals the closed form (no ``h2d_topo`` per epoch when resident,
  the plan's bytes once at setup).
"""

from __future__ import annotations

import threading

import pytest
import torch

from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.prepare import prepare_graph
from graphscale.strategies.offload import OffloadStrategy
from graphscale.strategies.offload.cost import epoch_bytes
from graphscale.strategies.offload.transfer import Request, Transfers, pipelined
from graphscale.testing import random_graph


class _Trace(list):
    """A trace that signals when a given event is appended (the compute waits on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[str, int], threading.Event] = {}

    def signal(self, what: str, index: int) -> threading.Event:
        return self.seen.setdefault((what, index), threading.Event())

    def append(self, item) -> None:
        super().append(item)
        self.signal(item[1], item[2]).set()


def _first(trace, what: str, index: int) -> int:
    return min(seq for seq, w, i, _ in trace if w == what and i == index)


def test_staged_fill_of_next_batch_overlaps_compute():
    gen = torch.Generator().manual_seed(0)
    host = torch.randn(50, 3, generator=gen, dtype=torch.float64)
    batches = [torch.randint(0, 50, (n,), generator=gen) for n in (7, 12, 0, 9, 20)]
    trace = _Trace()
    t = Transfers({"H": host, "G": torch.zeros(50, 3, dtype=torch.float64)}, "cpu", trace=trace)
    assert t.mode == "staged"
    got = []
    for j, ids, rows in pipelined(t, batches, lambda ids: [Request("x", "H", ids)]):
        if j + 1 < len(batches):  # compute j cannot finish before the fill of j+1 has started (deadlock guard only)
            assert trace.signal("fill_start", j + 1).wait(60), f"fill of batch {j + 1} never started during compute {j}"
        got.append(rows["x"])
        t.accumulate("G", torch.arange(ids.numel()), None, rows["x"])
    t.close()
    for ids, rows in zip(batches, got):
        assert torch.equal(rows, host.index_select(0, ids))
    expected = torch.zeros(50, 3, dtype=torch.float64)
    for ids in batches:
        expected[: ids.numel()] += host.index_select(0, ids)
    assert torch.equal(t.arrays["G"], expected)  # write-behind landed, in order
    for j in range(len(batches)):
        assert _first(trace, "fill_end", j) < _first(trace, "ready", j) < _first(trace, "compute_start", j)
        assert {slot for _, w, i, slot in trace if w == "fill_start" and i == j} == {j % 2}
        if j + 1 < len(batches):
            assert _first(trace, "submit", j + 1) < _first(trace, "compute_start", j)
            assert _first(trace, "fill_start", j + 1) < _first(trace, "compute_end", j)


def test_disk_arrays_are_gathered_and_written_in_pieces_with_the_same_rows(monkeypatch):
    """Arrays read at random from disk are gathered, copied and accumulated in pieces on several threads; the rows
    and the host arrays equal a single thread's (slots of 4 rows split a batch further; batches below two rows per
    thread go whole)."""
    from graphscale.strategies.offload import transfer

    pieces = []
    whole = transfer.rows_in_parallel
    monkeypatch.setattr(transfer, "rows_in_parallel", lambda pool, op, n: pieces.append((pool is not None, n))
                        or whole(pool, op, n))
    gen = torch.Generator().manual_seed(2)
    host = torch.randn(400, 3, generator=gen, dtype=torch.float64)
    batches = [torch.randperm(400, generator=gen)[:n] for n in (5, 40, 300)]
    results = {}
    for disk in ((), ("H", "G", "A")):
        arrays = {"H": host, **{name: torch.zeros(400, 3, dtype=torch.float64) for name in ("G", "A")}}
        t = Transfers(arrays, "cpu", disk=disk, staging_bytes=200 * 3 * 8)
        got = []
        for _, ids, rows in pipelined(t, batches, lambda ids: [Request("x", "H", ids)]):
            got.append(rows["x"])
            t.accumulate("G", ids, None, rows["x"] * 2)
            t.write("A", ids.flip(0), None, rows["x"] + 1)
        t.close()
        results[disk] = (got, arrays["G"], arrays["A"])
        assert t.disk == frozenset(disk)
    (rows, grads, written), (disk_rows, disk_grads, disk_written) = results[()], results[("H", "G", "A")]
    for a, b in zip([*rows, grads, written], [*disk_rows, disk_grads, disk_written]):
        assert torch.equal(a, b)
    assert all(torch.equal(r, host.index_select(0, ids)) for r, ids in zip(rows, batches))
    threaded = [n for parallel, n in pieces if parallel]
    assert {200, 100, 300} <= set(threaded)  # a 300-row gather in slots of 200 + 100 rows; 300-row writes whole
    assert not any(parallel for parallel, _ in pieces[: len(pieces) // 2])  # no disk arrays: one thread


def test_staging_slots_stay_at_their_size_and_stage_large_batches_in_pieces():
    gen = torch.Generator().manual_seed(1)
    host = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    wide = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    t = Transfers({"H": host, "W": wide}, "cpu", staging_bytes=4 * 5 * 8)  # room for 4 rows of W, 6 of H
    t.reserve(10_000, 5)
    assert all(slot.numel() == 20 for slot in t._slots)
    batches = [torch.randint(0, 40, (n,), generator=gen) for n in (0, 3, 17, 40)]
    for j, ids, rows in pipelined(t, batches, lambda ids: [Request("h", "H", ids), Request("w", "W", ids.flip(0))]):
        assert torch.equal(rows["h"], host.index_select(0, ids)), j
        assert torch.equal(rows["w"], wide.index_select(0, ids.flip(0))), j
    t.close()
    assert all(slot.numel() == 20 for slot in t._slots)  # the slots never grew with the batches
    with pytest.raises(ValueError, match="staging_bytes must be >= 1, got 0"):
        Transfers({"H": host}, "cpu", staging_bytes=0)


def test_uva_writes_and_gathers_on_cpu_alias():
    host = torch.arange(24, dtype=torch.float32).view(8, 3).clone()
    t = Transfers({"H": host}, "cpu", mode="uva", device_ids=True)
    ids = torch.tensor([5, 1, 6])
    t.accumulate("H", ids, ids, torch.ones(3, 3))
    t.write("H", torch.tensor([0]), torch.tensor([0]), torch.full((1, 3), 7.0))
    rows = t.wait(t.gather([Request("x", "H", ids, ids)]))["x"]
    t.close()
    assert torch.equal(rows, torch.arange(24, dtype=torch.float32).view(8, 3)[ids] + 1)
    assert torch.equal(host[0], torch.full((3,), 7.0))


def test_bad_transfer_options_fail_clearly():
    with pytest.raises(ValueError, match="transfer mode must be one of auto, staged, uva, got 'fast'"):
        OffloadStrategy(transfer="fast")
    with pytest.raises(ValueError, match="uva needs --offload-topology resident"):
        Transfers({"H": torch.zeros(2, 2)}, "cpu", mode="uva", device_ids=False)
    with pytest.raises(ValueError, match="uva needs --offload-topology resident"):
        _run("gcn", "intra", "hybrid", transfer="uva")
    with pytest.raises(ValueError, match="resident topology is not covered by --memory-budget"):
        _run("gcn", "intra", "hybrid", resident_topology=True, memory_budget="1GiB")


def _config(model: str, dedup: str, recompute: str, memory_budget: str | None) -> RunConfig:
    chunks = None if memory_budget else 4
    return RunConfig(model=ModelConfig(name=model, hidden=4, layers=2, dropout=0.5, heads=2),
                     optim=OptimConfig(lr=0.01, weight_decay=5e-4),
                     strategy=StrategyConfig(name="offload", workers=1, partitioner="metis", chunks=chunks,
                                             dedup=dedup, recompute=recompute, memory_budget=memory_budget), seed=0)


def _run(model_name: str, dedup: str, recompute: str, memory_budget: str | None = None, **kwargs) -> dict:
    graph = random_graph(90, avg_degree=4.0, num_features=5, num_classes=3, seed=1, dtype=torch.float64, isolated=1)
    config = _config(model_name, dedup, recompute, memory_budget)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0, dtype=torch.float64)
    strategy = OffloadStrategy(**kwargs)
    env = DistEnv.local()
    before = env.ledger.snapshot()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        strategy.setup(prepare_graph(graph, config), model, env, config)
        setup = env.ledger.since(before)
        stats = [strategy.train_epoch(e) for e in range(2)]
        metrics = strategy.evaluate()
        num_params = sum(p.numel() for p in model.parameters())
        closed = epoch_bytes(strategy.sets, dedup, strategy.modes, strategy.dims, 8, num_params,
                             resident_topology=strategy.dplan.resident)
        out = {"loss": [s.loss for s in stats], "bytes": [s.bytes for s in stats], "closed": closed,
               "reps": [strategy.host[f"H{l}"].clone() for l in range(model.num_layers + 1)],
               "params": [p.detach().clone() for p in model.parameters()], "metrics": metrics, "setup": setup,
               "plan_bytes": strategy.dplan.setup_bytes, "mode": strategy.transfers.mode}
        strategy.teardown()
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.mark.parametrize("model_name,dedup,recompute", [("gcn", "intra", "hybrid"), ("gat", "baseline", "recompute"),
                                                        ("gcnii", "reorg", "auto"), ("gcn", "inter", "none")])
def test_every_mechanism_is_exact_and_counted(model_name, dedup, recompute):
    default = _run(model_name, dedup, recompute)
    assert default["mode"] == "staged" and default["plan_bytes"] == 0
    for kwargs in ({"resident_topology": True}, {"resident_topology": True, "transfer": "uva"}):
        run = _run(model_name, dedup, recompute, **kwargs)
        tag = f"{model_name}/{dedup}/{recompute}/{kwargs}"
        assert run["mode"] == kwargs.get("transfer", "staged"), tag
        assert run["loss"] == default["loss"], tag
        assert run["metrics"] == default["metrics"], tag
        for a, b in zip(run["reps"] + run["params"], default["reps"] + default["params"]):
            assert torch.equal(a, b), tag
        for epoch in range(2):
            assert run["bytes"][epoch] == run["closed"], tag
            assert "h2d_topo" not in run["bytes"][epoch], tag
            assert {c: n for c, n in default["bytes"][epoch].items() if c != "h2d_topo"} == run["bytes"][epoch], tag
        assert run["setup"].get("h2d_topo") == run["plan_bytes"] > 0, tag
    assert default["bytes"][0] == default["closed"]


def test_strategy_submits_next_batch_before_computing_this_one():
    trace: list = []
    _run("gcn", "intra", "hybrid", trace=trace)
    starts = [i for _, w, i, _ in trace if w == "compute_start"]
    assert starts  # every pass goes through the pipeline
    seq = {(w, i): s for s, w, i, _ in reversed(trace)}  # first occurrence of every (event, batch)
    ahead = 0
    for i in starts:
        assert seq["fill_end", i] < seq["ready", i] < seq["compute_start", i]
        if ("submit", i + 1) in seq and seq["submit", i + 1] < seq["compute_end", i]:  # the same pass
            assert seq["submit", i + 1] < seq["compute_start", i]
            ahead += 1
    # 4 batches a pass, 3 of them with their successor in flight; 10 passes: 2 epochs x (2 forward + 2 backward)
    # + 2 evaluation layers
    assert ahead == 3 * (len(starts) // 4) and len(starts) == 4 * 10


def test_the_topology_and_transfer_options_reach_the_strategy_and_are_checked_first(tmp_path):
    """``--offload-topology resident`` removes the per-epoch topology bytes and nothing else (same losses); bad
    combinations are refused before any worker starts."""
    import json

    from graphscale.cli import main

    reports = {}
    for topo in ("streamed", "resident"):
        out = tmp_path / f"{topo}.json"
        assert main(["train", "--strategy", "offload", "--workers", "1", "--chunks", "2", "--epochs", "2",
                     "--offload-topology", topo, "--no-progress", "--json", str(out)]) == 0
        reports[topo] = json.loads(out.read_text())
    streamed, resident = (reports[t]["epochs"][-1] for t in ("streamed", "resident"))
    assert streamed["bytes"]["h2d_topo"] > 0 and "h2d_topo" not in resident["bytes"]
    assert {k: v for k, v in streamed["bytes"].items() if k != "h2d_topo"} == resident["bytes"]
    assert [e["loss"] for e in reports["streamed"]["epochs"]] == [e["loss"] for e in reports["resident"]["epochs"]]
    for argv, message in ((["--offload-transfer", "uva"], "uva needs --offload-topology resident"),
                          (["--offload-topology", "resident", "--memory-budget", "1MiB"], "not covered by")):
        with pytest.raises(ValueError, match=message):
            from graphscale.config import build_config
            from graphscale.validation import validate

            flags = dict(zip((a.lstrip("-").replace("-", "_") for a in argv[::2]), argv[1::2]))
            validate(build_config({"strategy": {"name": "offload", **flags}, "optim": {"epochs": 1}}))

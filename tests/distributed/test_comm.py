"""Comm collectives, their Ledger records, and the differentiable exchanges (world sizes 1 and 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from graphscale.data.block import Block
from graphscale.distributed.comm import CONTROL, CollectiveError, Comm, ring_allreduce_bytes
from graphscale.distributed.env import DistEnv
from graphscale.distributed.functional import HaloExchange, all_to_all_v
from graphscale.partition.base import halo_sizes
from graphscale.partition.random import RandomPartitioner
from graphscale.testing import random_graph, run_distributed

FEAT = 3


def _rows(src: int, dst: int, count: int) -> torch.Tensor:
    """Rows that say who sent them to whom: [src, dst, i]."""
    i = torch.arange(count, dtype=torch.float64)
    return torch.stack([torch.full_like(i, src), torch.full_like(i, dst), i], dim=1)


def _comm_checks(env: DistEnv) -> dict:
    comm, rank, w = Comm(env), env.rank, env.world_size
    out: dict = {}

    # exchange_counts + all_to_all_v with uneven (and zero) splits
    send_counts = [(rank + p) % 3 for p in range(w)]
    recv_counts = comm.exchange_counts(send_counts)
    assert recv_counts == [(p + rank) % 3 for p in range(w)], recv_counts
    send = torch.cat([_rows(rank, p, c) for p, c in enumerate(send_counts)])
    got = comm.all_to_all_v(send, send_counts, recv_counts, "a2a")
    assert torch.equal(got, torch.cat([_rows(p, rank, c) for p, c in enumerate(recv_counts)]))
    assert env.ledger.by_peer("a2a") == {p: c * FEAT * 8 for p, c in enumerate(send_counts) if p != rank and c}
    assert env.ledger.by_peer(CONTROL) == {p: 8 for p in range(w) if p != rank}

    # all_gather_v with uneven rows
    mine = _rows(rank, -1, rank + 1)
    gathered = comm.all_gather_v(mine, "gather")
    assert all(torch.equal(g, _rows(p, -1, p + 1)) for p, g in enumerate(gathered))
    out["gather"] = env.ledger.total("gather")

    # all_reduce (ring model) and broadcast (flat tree from the root)
    t = torch.arange(10, dtype=torch.float32) * (rank + 1)
    comm.all_reduce(t, "ar")
    assert torch.equal(t, torch.arange(10, dtype=torch.float32) * (w * (w + 1) // 2))
    assert env.ledger.total("ar") == ring_allreduce_bytes(10, 4, rank, w)
    out["ar"] = env.ledger.total("ar")
    b = torch.full((5,), float(rank), dtype=torch.float64)
    root = w - 1
    comm.broadcast(b, root, "bc")
    assert torch.equal(b, torch.full((5,), float(root), dtype=torch.float64))
    assert env.ledger.total("bc") == (40 * (w - 1) if rank == root else 0)

    # point to point around a ring; env.receives counts the receives only (no collective, no send)
    assert env.receives == 0
    if w > 1:
        buf = torch.empty(4, dtype=torch.int64)
        works = [comm.send(torch.full((4,), rank, dtype=torch.int64), (rank + 1) % w, "p2p"),
                 comm.recv(buf, (rank - 1) % w)]
        for work in works:
            work.wait()
        assert torch.equal(buf, torch.full((4,), (rank - 1) % w, dtype=torch.int64))
        assert env.ledger.by_peer("p2p") == {(rank + 1) % w: 32}
        assert env.receives == 1

    # differentiable all_to_all_v: backward = reverse exchange, recorded under its own category
    x = send.clone().requires_grad_()
    y = all_to_all_v(x, comm, send_counts, recv_counts, "fwd", backward_category="bwd")
    (y * (y[:, :1] + 10 * y[:, 1:2] + 1).detach()).sum().backward()  # weight depends on (sender, receiver)
    assert torch.equal(x.grad, (send[:, :1] + 10 * send[:, 1:2] + 1).expand_as(send))
    out["fwd"], out["bwd"] = env.ledger.total("fwd"), env.ledger.total("bwd")
    out["a2a_rows_sent"] = sum(c for p, c in enumerate(send_counts) if p != rank)

    # halo exchange on a random partition of a small graph
    graph = random_graph(30, avg_degree=3.0, seed=2)
    owner = RandomPartitioner().partition(graph, w, seed=1)
    parts = [torch.nonzero(owner == p).flatten() for p in range(w)]
    blocks = [Block.from_nodes(graph, parts[p]) for p in range(w)]
    block = blocks[rank]
    halo = HaloExchange.build(comm, parts[rank], block.halo_ids, owner[block.halo_ids])
    x_global = torch.arange(graph.num_nodes * FEAT, dtype=torch.float64).reshape(-1, FEAT)
    x_local = x_global[parts[rank]].clone().requires_grad_()
    before = env.ledger.total("halo")
    x_src = halo.gather(x_local)
    assert torch.equal(x_src, x_global[block.src_ids])
    assert env.ledger.total("halo") - before == halo.volume(FEAT, 8)
    coef = (block.src_ids.double() + 1) * (rank + 1)
    (x_src * coef[:, None]).sum().backward()
    expected = torch.zeros(graph.num_nodes, dtype=torch.float64)
    for p, blk in enumerate(blocks):  # every worker holding v as a source row contributes (v+1)(p+1)
        expected[blk.src_ids] += (blk.src_ids.double() + 1) * (p + 1)
    assert torch.equal(x_local.grad, expected[parts[rank]][:, None].expand(-1, FEAT))
    out["halo_grad"] = env.ledger.total("halo")
    # an input that does not require grad: forward only, the backward exchange never happens
    halo.gather(x_global[parts[rank]]).sum()
    out["halo_total"] = env.ledger.total("halo")
    out["halo_sizes"] = halo_sizes(graph, owner, w)
    return out


@pytest.mark.parametrize("world_size", [1, 4])
def test_collectives_and_ledger(world_size):
    results = run_distributed(_comm_checks, world_size)
    w = world_size
    # summed over workers, the ring all-reduce sends 2 (W-1) times the tensor
    assert sum(r["ar"] for r in results) == 2 * (w - 1) * 10 * 4
    assert sum(r["gather"] for r in results) == (w - 1) * sum((p + 1) * FEAT * 8 for p in range(w))
    for r in results:
        # forward and backward move the same rows in opposite directions
        assert r["fwd"] == r["a2a_rows_sent"] * FEAT * 8
    assert sum(r["bwd"] for r in results) == sum(r["fwd"] for r in results)
    one_way = int(results[0]["halo_sizes"].sum()) * FEAT * 8
    assert sum(r["halo_grad"] for r in results) == 2 * one_way  # forward + backward
    assert sum(r["halo_total"] for r in results) == 3 * one_way  # + a forward-only gather
    if w > 1:
        assert one_way > 0


def test_single_worker_short_circuits_and_validates():
    comm = Comm(DistEnv.local())
    t = torch.ones(3)
    assert comm.all_reduce(t, "ar") is t
    assert comm.exchange_counts([4]) == [4]
    assert comm.all_to_all_v(torch.ones(2, 2), [2], [2], "x").shape == (2, 2)
    assert comm.ledger.total() == 0
    with pytest.raises(ValueError, match="one entry per rank"):
        comm.exchange_counts([1, 2])
    with pytest.raises(ValueError, match="rows"):
        comm.all_to_all_v(torch.ones(3, 2), [2], [2], "x")
    with pytest.raises(ValueError, match="src=1"):
        comm.broadcast(t, 1, "bc")
    with pytest.raises(ValueError, match="expected 2 local rows"):
        HaloExchange.build(comm, torch.arange(2), torch.zeros(0, dtype=torch.int64),
                           torch.zeros(0, dtype=torch.int64)).gather(torch.ones(3, 1))


def test_ring_allreduce_bytes_sums_to_twice_w_minus_one():
    for w in (2, 3, 4, 7):
        for numel in (0, 1, 5, 13, 64):
            assert sum(ring_allreduce_bytes(numel, 8, r, w) for r in range(w)) == 2 * (w - 1) * numel * 8
    assert ring_allreduce_bytes(100, 4, 0, 1) == 0


def test_collective_error_says_whether_it_timed_out():
    cause = RuntimeError("Connection closed by peer")
    failed = CollectiveError(1, "broadcast", "setup", 0.3, timedelta(seconds=10), cause)
    assert not failed.timed_out
    assert str(failed) == "rank 1: collective broadcast (category 'setup') failed after 0.3 s: Connection closed by peer"
    waited = CollectiveError(0, "barrier", None, 10.0, timedelta(seconds=10), cause)
    assert waited.timed_out and str(waited).startswith("rank 0: collective barrier timed out after 10.0 s (timeout 10 s)")

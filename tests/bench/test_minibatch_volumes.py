"""``graphscale bench minibatch``: its counts against brute force on a small graph, and the command itself."""

from __future__ import annotations

import argparse

import pytest
import torch

from graphscale.bench.papers import gsplit as minibatch
from graphscale.config import ModelConfig
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.nn.models import build_model
from graphscale.partition.metis import MetisPartitioner
from graphscale.strategies.data_parallel import MicroBatchSchedule
from graphscale.testing import random_graph

WORKERS, FANOUTS, BATCH, FRACTIONS = 2, [3, 3], 16, [0.0, 0.25]


def test_counts_match_brute_force():
    graph = random_graph(120, avg_degree=5.0, num_features=8, num_classes=3, seed=1)
    model = build_model(ModelConfig(name="sage", hidden=4, layers=2, dropout=0.0), 8, 3, seed=0)
    result = minibatch.measure(graph, WORKERS, FANOUTS, BATCH, FRACTIONS, model, epochs=2)
    row = 8 * 4
    owner = MetisPartitioner().partition(graph, WORKERS, seed=0)
    deg = graph.out_degrees().tolist()
    train = torch.nonzero(graph.train_mask).flatten()
    sampler = NeighborSampler(graph, FANOUTS, seed=0)
    loader = MiniBatchLoader(train, BATCH, seed=0)
    schedule = MicroBatchSchedule(train, BATCH, WORKERS, 0)
    sp_h2d = {f: 0 for f in FRACTIONS}
    dp_none = edges_mini = edges_micro = 0
    for epoch in range(2):
        micro = schedule.iterations(epoch)
        for i, targets in enumerate(loader.batches(epoch)):
            blocks = sampler.sample(targets, loader.batch_key(epoch, i))
            edges_mini += sum(b.num_edges for b in blocks)
            for f in FRACTIONS:
                cap = int(f * graph.num_nodes)
                cached = set()
                for p in range(WORKERS):
                    part = sorted((v for v in range(graph.num_nodes) if owner[v] == p), key=lambda v: (-deg[v], v))
                    cached |= set(part[:cap])
                sp_h2d[f] += len(set(blocks[0].src_ids.tolist()) - cached) * row
            for r, t in enumerate(micro[i]):
                if t.numel():
                    mb = sampler.sample(t, schedule.batch_key(epoch, i, r))
                    dp_none += mb[0].num_src * row
                    edges_micro += sum(b.num_edges for b in mb)
    for f in FRACTIONS:
        assert result["raw"]["sp_h2d"][f] == sp_h2d[f]
        assert result["raw"]["dp_h2d"][("none", f)] == dp_none
        assert result["raw"]["dp_h2d"][("quiver", f)] + result["raw"]["dp_p2p"][f] <= dp_none
    assert result["raw"]["sp_h2d"][0.0] > result["raw"]["sp_h2d"][0.25]
    assert result["table2"][0]["1x mini (B) edges"] == edges_mini / 2
    assert result["table2"][0]["redundancy %"] == pytest.approx(100 * (edges_micro / edges_mini - 1))
    assert result["goals"]["split-parallel loads each missing row once (|V0 \\ C| d s)"] is True
    metis, rnd = result["table5"]
    assert metis["local edges"] > rnd["local edges"]


def test_command_prints_the_tables(capsys):
    parser = argparse.ArgumentParser()
    minibatch.add_arguments(parser)
    args = parser.parse_args(["--dataset", "cora", "--workers", "2", "--layers", "2", "--fanout", "4",
                              "--batch-size", "64", "--batches", "1", "--skew-batch-sizes", "64"])
    minibatch.run(args)
    out = capsys.readouterr().out
    for title in ("Table 1 analogue", "Table 2 analogue", "Table 4 analogue", "Table 5 analogue", "goals"):
        assert title in out
    with pytest.raises(ValueError, match="--cache-fractions"):
        minibatch.run(parser.parse_args(["--cache-fractions", "2"]))

"""Streaming partition metrics against direct computations on the in-memory graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stream_helpers import community_records, graph_of

from graphscale.partition.base import edge_cut, halo_sizes, replication_factor
from graphscale.partition.metrics import balance, stream_metrics
from graphscale.partition.random import RandomPartitioner


@pytest.mark.parametrize("p", [1, 3, 66])
def test_metrics_of_a_vertex_partition(p):
    src, dst, n = community_records(n=180, seed=5)
    g = graph_of(src, dst, n)
    owner = RandomPartitioner().partition(g, p, seed=1)
    m = stream_metrics(g, owner, p, train_mask=g.train_mask, chunk_edges=29)
    assert m.replication_factor == pytest.approx(1 + replication_factor(g, owner, p), abs=1e-12)
    assert m.halo == halo_sizes(g, owner, p).tolist()
    assert m.edge_cut == edge_cut(g, owner) and m.edge_cut_fraction == pytest.approx(m.edge_cut / g.num_edges)
    inner = torch.bincount(owner, minlength=p)
    assert m.inner == inner.tolist()
    assert m.vertex_balance == pytest.approx(float(inner.max()) / (n / p))
    records = torch.bincount(owner[g.dst_of_edges()], minlength=p)
    assert m.records == records.tolist()
    assert m.edge_balance == pytest.approx(float(records.max()) / (g.num_edges / p))
    train = torch.bincount(owner[g.train_mask], minlength=p)
    assert m.train == train.tolist()
    assert m.train_balance == pytest.approx(float(train.max()) / (int(g.train_mask.sum()) / p))
    assert set(m.to_dict()) >= {"replication_factor", "edge_cut_fraction", "halo", "seconds", "peak_rss_bytes"}


def test_balance_and_validation():
    assert balance([2, 2, 2]) == 1.0 and balance([3, 1]) == 1.5 and np.isnan(balance([0, 0]))
    src, dst, n = community_records(n=50, seed=1)
    g = graph_of(src, dst, n)
    with pytest.raises(ValueError, match=r"owner values must lie in \[0, 2\)"):
        stream_metrics(g, np.full(n, 3), 2)
    with pytest.raises(ValueError, match="edge_part must have shape"):
        stream_metrics(g, np.zeros(n, int), 2, edge_part=np.zeros(3, int))
    with pytest.raises(ValueError, match="owner must be an integer array"):
        stream_metrics(g, np.zeros(n), 2)

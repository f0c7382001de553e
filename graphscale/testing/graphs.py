"""Tiny deterministic graphs for tests."""

from __future__ import annotations

import torch

from graphscale.data.graph import Graph


def random_graph(num_nodes: int = 40, avg_degree: float = 4.0, num_features: int = 8, num_classes: int = 3,
                 seed: int = 0, symmetric: bool = True, dtype: torch.dtype = torch.float32,
                 isolated: int = 0) -> Graph:
    """An Erdos-Renyi-style graph with random features, labels and a 50/25/25 split.

    No self-loops, no duplicate edges. The last ``isolated`` vertices have no edges.

    Args:
        num_nodes: vertices.
        avg_degree: expected in-degree.
        num_features: columns of ``x``.
        num_classes: classes of ``y``.
        seed: everything is a function of the seed.
        symmetric: add the reverse of every edge.
        dtype: feature dtype.
        isolated: number of trailing vertices left without edges.
    """
    gen = torch.Generator().manual_seed(seed)
    connected = num_nodes - isolated
    num_edges = int(avg_degree * connected / (2 if symmetric else 1))
    src = torch.randint(0, connected, (num_edges,), generator=gen)
    dst = torch.randint(0, connected, (num_edges,), generator=gen)
    keep = src != dst
    g = Graph.from_edges(src[keep], dst[keep], num_nodes).coalesce()
    if symmetric:
        g = g.symmetrize()
    perm = torch.randperm(num_nodes, generator=gen)
    train, val = torch.zeros(num_nodes, dtype=torch.bool), torch.zeros(num_nodes, dtype=torch.bool)
    train[perm[: num_nodes // 2]] = True
    val[perm[num_nodes // 2: 3 * num_nodes // 4]] = True
    g.x = torch.randn(num_nodes, num_features, generator=gen).to(dtype)
    g.y = torch.randint(0, num_classes, (num_nodes,), generator=gen)
    g.train_mask, g.val_mask, g.test_mask = train, val, ~(train | val)
    g.name = f"random-{num_nodes}-{seed}"
    g.meta["num_classes"] = num_classes
    return g


def tiny_npz(path, class_ids, per_class):
    """A ring graph with ``per_class`` vertices of each class id (features: one-hot of the class)."""
    import numpy as np
    import scipy.sparse as sp

    labels = np.repeat(np.asarray(class_ids), per_class)
    n = labels.size
    adj = sp.csr_matrix((np.ones(2 * n), (np.r_[np.arange(n), (np.arange(n) + 1) % n],
                                           np.r_[(np.arange(n) + 1) % n, np.arange(n)])), shape=(n, n))
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=adj.shape,
             attr_matrix=np.eye(max(class_ids) + 1, dtype=np.float32)[labels], labels=labels)
    return path

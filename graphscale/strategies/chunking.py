"""Graph chunks for the strategies that stream a host-shared graph through their workers chunk by chunk (pipeline,
task-parallel): the chunk of every vertex (the run's vertex partitioner, reverse Cuthill-McKee without METIS), and
the per-epoch chunk order drawn from ``(seed, epoch)`` alone, so every rank computes the same without
communication."""

from __future__ import annotations

import numpy as np
import torch

from graphscale.data.graph import Graph


def chunk_order(num_chunks: int, epoch: int, seed: int, shuffle: bool) -> torch.Tensor:
    """The order chunks enter the pipeline in ``epoch``: a permutation drawn from ``(seed, epoch)`` alone (the same
    on every rank, no communication), or the identity without shuffling (GNNPipe §3.5 technique 1)."""
    if not shuffle:
        return torch.arange(num_chunks)
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch) + 1)
    return torch.randperm(num_chunks, generator=gen)


def rcm_chunks(graph: Graph, num_chunks: int) -> torch.Tensor:
    """Fallback chunking without METIS (GNNPipe §3.2): reverse Cuthill-McKee order cut into equal contiguous ranges."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    adj = graph.to_scipy()
    order = torch.from_numpy(np.asarray(reverse_cuthill_mckee((adj + adj.T).tocsr(), symmetric_mode=True),
                                        dtype=np.int64))
    chunk = torch.empty(graph.num_nodes, dtype=torch.int64)
    chunk[order] = torch.arange(graph.num_nodes) * num_chunks // max(graph.num_nodes, 1)
    return chunk


def assign_chunks(graph: Graph, num_chunks: int, partitioner: str = "metis", balance: str = "",
                  seed: int = 0) -> torch.Tensor:
    """The chunk of every vertex: the run's vertex partitioner into ``K`` parts (METIS by default), or
    :func:`rcm_chunks` when pymetis is missing.

    Raises:
        ValueError: more chunks than vertices.
    """
    if not 1 <= num_chunks <= graph.num_nodes:
        raise ValueError(f"--chunks must lie in [1, {graph.num_nodes}] (the vertices), got {num_chunks}")
    if num_chunks == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    from graphscale.partition.build import build_vertex_partitioner

    try:
        return build_vertex_partitioner(partitioner, balance).partition(graph, num_chunks, seed=seed)
    except ImportError:
        if partitioner.split(":")[0].strip().lower() != "metis":
            raise  # only METIS has a fallback; another partitioner's missing dependency is the user's to see
        return rcm_chunks(graph, num_chunks)


def positions(order: torch.Tensor) -> torch.Tensor:
    """``pos[k]``: where chunk ``k`` stands in ``order``."""
    pos = torch.empty_like(order)
    pos[order] = torch.arange(order.numel())
    return pos

"""Random balanced vertex partitioning: a seeded permutation cut into equal parts."""

from __future__ import annotations

import torch

from graphscale.data.graph import Graph
from graphscale.partition.base import VertexPartitioner
from graphscale.registry import PARTITIONERS


@PARTITIONERS.register("random")
class RandomPartitioner(VertexPartitioner):
    """Shuffle the vertices with ``seed`` and cut the order into ``num_parts`` runs.

    Position ``i`` of the permutation goes to part ``floor(i P / N)``, i.e. part
    ``p`` gets positions ``[ceil(p N / P), ceil((p+1) N / P))``, so part sizes
    differ by at most one.
    """

    name = "random"

    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        n = graph.num_nodes
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        owner = torch.empty(n, dtype=torch.int64)
        owner[perm] = torch.arange(n, dtype=torch.int64) * num_parts // n
        return owner

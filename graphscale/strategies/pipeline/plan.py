"""GNNPipe's static plan: stages, chunks, the per-epoch chunk order and history epoch, the closed-form volume.

Everything here is a pure function of the configuration, the graph and the seed, so every rank computes the same
plan without communication (spec ``shared/specs/gnnpipe.md`` §3.1-3.3, §3.5, §3.7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph

#: ``--history-grad`` values: drop gradients along stale edges (GNNPipe's technique 3), or apply the previous
#: epoch's (the ablation).
HISTORY_GRADS = ("zero", "historical")
#: Chunks per stage when ``--chunks`` is not given (the paper's K = 4M).
CHUNKS_PER_STAGE = 4


def default_chunks(stages: int) -> int:
    """``K`` when ``--chunks`` is not given: four per stage."""
    return CHUNKS_PER_STAGE * stages


def check_plan(num_layers: int, stages: int, chunks: int, history_period: int, history_grad: str) -> None:
    """Refuse a pipeline that cannot run, naming the option.

    Raises:
        ValueError: more stages than layers, fewer chunks than stages, a history period below 1, an unknown
            ``--history-grad``.
    """
    if stages > num_layers:
        raise ValueError(f"strategy 'pipeline': --workers {stages} gives {stages} stages but the model has "
                         f"{num_layers} layers (--layers); every stage needs at least one layer")
    if chunks < stages:
        raise ValueError(f"strategy 'pipeline': --chunks {chunks} is smaller than the {stages} stages (--workers); "
                         "the pipeline needs at least one chunk per stage")
    if history_period < 1:
        raise ValueError(f"--history-period must be >= 1, got {history_period}")
    if history_grad not in HISTORY_GRADS:
        raise ValueError(f"--history-grad must be one of {', '.join(HISTORY_GRADS)}, got {history_grad!r}")


def stage_layers(num_layers: int, stages: int) -> list[range]:
    """The contiguous layers of every stage: equal shares, the remainder to the middle stages (§3.1).

    Stage 0 also runs the input map and stage ``S-1`` the output map and the loss, so the extra layers go to the
    stages closest to the middle.
    """
    if not 1 <= stages <= num_layers:
        raise ValueError(f"cannot split {num_layers} layers into {stages} stages")
    base, extra = divmod(num_layers, stages)
    middle = (stages - 1) / 2
    favoured = set(sorted(range(stages), key=lambda s: (abs(s - middle), s))[:extra])
    out, start = [], 0
    for s in range(stages):
        n = base + (s in favoured)
        out.append(range(start, start + n))
        start += n
    return out


def chunk_order(num_chunks: int, epoch: int, seed: int, shuffle: bool) -> torch.Tensor:
    """The order chunks enter the pipeline in ``epoch``: a permutation drawn from ``(seed, epoch)`` alone (the same
    on every rank, no communication), or the identity without shuffling (§3.5 technique 1)."""
    if not shuffle:
        return torch.arange(num_chunks)
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch) + 1)
    return torch.randperm(num_chunks, generator=gen)


def refreshes_history(epoch: int, period: int) -> bool:
    """Whether ``epoch`` (0-based) starts by taking the current rows as its history (§3.5 technique 2).

    Epoch ``e`` reads the rows as they stood at the end of epoch ``period * floor(e / period) - 1`` (the exact
    initial forward for ``e < period``): the spec's ``s(t) = alpha * floor((t - 1) / alpha)`` with 1-based
    ``t = e + 1`` and epoch 0 the initial forward.
    """
    return epoch % period == 0


def rcm_chunks(graph: Graph, num_chunks: int) -> torch.Tensor:
    """Fallback chunking without METIS (§3.2): reverse Cuthill-McKee order cut into equal contiguous ranges."""
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
    from graphscale.prepare import build_vertex_partitioner

    try:
        return build_vertex_partitioner(partitioner, balance).partition(graph, num_chunks, seed=seed)
    except ImportError:
        return rcm_chunks(graph, num_chunks)


@dataclass
class ChunkPlan:
    """The chunks of a graph: vertex ids, one block per chunk (destinations = the chunk, sources = the chunk then
    its in-neighbours elsewhere, global degrees), the chunk of every vertex.

    Attributes:
        chunk_of: int64 ``[N]``.
        nodes: ``K`` ascending int64 id tensors.
        blocks: ``K`` blocks (``Block.from_nodes``: rows keep the graph's neighbour order).
        halo_chunk: ``K`` tensors: the chunk of every halo row of each block.
        cross_edges: ``K`` tensors: for every cross-chunk in-edge of each chunk, the chunk of its source.
        num_edges: edges of the graph.
    """

    chunk_of: torch.Tensor
    nodes: list[torch.Tensor]
    blocks: list[Block]
    halo_chunk: list[torch.Tensor]
    cross_edges: list[torch.Tensor]
    num_edges: int

    @classmethod
    def build(cls, graph: Graph, chunk_of: torch.Tensor) -> ChunkPlan:
        chunk_of = torch.as_tensor(chunk_of, dtype=torch.int64)
        num_chunks = int(chunk_of.max()) + 1 if chunk_of.numel() else 0
        degrees = graph.in_degrees()
        nodes, blocks, halo_chunk, cross = [], [], [], []
        for k in range(num_chunks):
            ids = torch.nonzero(chunk_of == k).flatten()
            if ids.numel() == 0:
                raise ValueError(f"chunk {k} of {num_chunks} is empty; use fewer chunks (--chunks)")
            block = Block.from_nodes(graph, ids, degrees)
            nodes.append(ids)
            blocks.append(block)
            halo_chunk.append(chunk_of[block.halo_ids])
            src = block.indices[block.indices >= block.num_dst] - block.num_dst
            cross.append(halo_chunk[-1][src])
        return cls(chunk_of, nodes, blocks, halo_chunk, cross, graph.num_edges)

    @property
    def num_chunks(self) -> int:
        return len(self.nodes)

    def cut_fraction(self) -> float:
        """Edges whose endpoints lie in different chunks, as a fraction of all edges (the staleness proxy)."""
        return sum(int(c.numel()) for c in self.cross_edges) / max(self.num_edges, 1)

    def stale_fraction(self, order: torch.Tensor) -> float:
        """Edges read from history in an epoch with this chunk order (source chunk later than the reader's)."""
        pos = positions(order)
        stale = sum(int((pos[c] > pos[k]).sum()) for k, c in enumerate(self.cross_edges))
        return stale / max(self.num_edges, 1)


def positions(order: torch.Tensor) -> torch.Tensor:
    """``pos[k]``: where chunk ``k`` stands in ``order``."""
    pos = torch.empty_like(order)
    pos[order] = torch.arange(order.numel())
    return pos


def pipeline_bytes_per_epoch(num_nodes: int, boundary_widths: list[int], element_size: int,
                             carries_h0: bool) -> int:
    """Closed-form stage traffic of one training epoch, summed over workers (§3.7's ``V_p``).

    Every boundary carries every vertex's row once forward and its gradient once backward:
    ``2 * N * sum_i d_i * c * b`` with ``d_i`` the width entering stage ``i + 1`` and ``c = 2`` when the initial
    residual ``H^0`` travels with it (GCNII); with all ``d_i = H`` that is ``2 (S-1) N H c b``.
    """
    c = 2 if carries_h0 else 1
    return 2 * num_nodes * sum(int(d) for d in boundary_widths) * c * element_size

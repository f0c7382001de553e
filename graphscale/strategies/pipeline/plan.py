"""GNNPipe's static plan: stages, hybrid sub-chunks, the schedule and history epochs, the closed-form volume (the
chunks and their per-epoch order are :mod:`graphscale.strategies.chunking`'s, shared with task-parallel).

Everything here is a pure function of the configuration, the graph and the seed, so every rank computes the same
plan without communication (spec ``shared/specs/gnnpipe.md`` §3.1-3.3, §3.5, §3.7).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.options.pipeline import CROSS_CHUNK_GRADS, HISTORY_GRADS, HYBRID_SPLITS, SCHEDULES
from graphscale.strategies.chunking import assign_chunks, positions, rcm_chunks

#: the two phases of a schedule step
FORWARD, BACKWARD = "F", "B"
#: Chunks per worker when ``--chunks`` is not given (the paper's K = 4M).
CHUNKS_PER_STAGE = 4


def default_chunks(workers: int) -> int:
    """``K`` when ``--chunks`` is not given: four per worker (the paper's ``K = 4M``)."""
    return CHUNKS_PER_STAGE * workers


def check_plan(num_layers: int, stages: int, chunks: int, history_period: int, history_grad: str,
               width: int = 1, schedule: str = "gpipe", cross_chunk_grad: str = "fresh") -> None:
    """Refuse a pipeline that cannot run, naming the option.

    Raises:
        ValueError: more stages than layers, fewer chunks than stages, a history period below 1, an unknown
            ``--history-grad``, ``--schedule`` or ``--cross-chunk-grad``, historical gradients in a hybrid or
            without fresh cross-chunk gradients, 1F1B with fresh cross-chunk gradients.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if cross_chunk_grad not in CROSS_CHUNK_GRADS:
        raise ValueError(f"--cross-chunk-grad must be one of {', '.join(CROSS_CHUNK_GRADS)}, got {cross_chunk_grad!r}")
    if schedule == "1f1b" and cross_chunk_grad == "fresh":
        raise ValueError("--schedule 1f1b needs --cross-chunk-grad none: with fresh cross-chunk gradients a chunk's "
                         "backward needs the gradients of every later chunk that read its rows, which 1F1B runs "
                         "after it, so it would have to keep every chunk's activations as GPipe does (no memory "
                         "saved) or compute other numbers than GPipe")
    if cross_chunk_grad == "none" and history_grad != "zero":
        raise ValueError(f"--history-grad {history_grad} needs --cross-chunk-grad fresh (with none no gradient "
                         "along a cross-chunk edge is kept)")
    if width > 1 and history_grad != "zero":
        raise ValueError(f"--history-grad {history_grad} is not supported with --hybrid-width {width} (only zero)")
    if stages > num_layers:
        raise ValueError(f"strategy 'pipeline': --workers {stages * width} gives {stages} stages"
                         + (f" (--hybrid-width {width})" if width > 1 else "")
                         + f" but the model has {num_layers} layers (--layers); every stage needs at least one layer")
    if chunks < stages:
        raise ValueError(f"strategy 'pipeline': --chunks {chunks} is smaller than the {stages} stages; "
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


def pipeline_schedule(order: torch.Tensor, stage: int, stages: int, schedule: str) -> list[tuple[str, int]]:
    """The ``(phase, chunk)`` steps stage ``stage`` of ``stages`` runs in an epoch whose chunk order is ``order``.

    ``gpipe``: every forward in ``order``, then every backward in reverse. ``1f1b``: ``min(S - 1 - stage, K)``
    warm-up forwards, then one forward and one backward (the oldest chunk's) in turn, then the remaining
    backwards; backwards in forward order, so a stage holds at most ``S - stage`` chunks' activations.
    """
    chunks = order.tolist()
    if schedule == "gpipe":
        return [(FORWARD, k) for k in chunks] + [(BACKWARD, k) for k in reversed(chunks)]
    if schedule != "1f1b":
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    warmup = min(stages - 1 - stage, len(chunks))
    steps = [(FORWARD, k) for k in chunks[:warmup]]
    for i, k in enumerate(chunks[warmup:]):
        steps += [(FORWARD, k), (BACKWARD, chunks[i])]
    steps += [(BACKWARD, k) for k in chunks[len(chunks) - warmup:]]
    return steps


def refreshes_history(epoch: int, period: int) -> bool:
    """Whether ``epoch`` (0-based) starts by taking the current rows as its history (§3.5 technique 2).

    Epoch ``e`` reads the rows as they stood at the end of epoch ``period * floor(e / period) - 1`` (the exact
    initial forward for ``e < period``): the spec's ``s(t) = alpha * floor((t - 1) / alpha)`` with 1-based
    ``t = e + 1`` and epoch 0 the initial forward.
    """
    return epoch % period == 0


def assign_subchunks(graph: Graph, chunk_of: torch.Tensor, width: int, partitioner: str = "metis",
                     balance: str = "", seed: int = 0) -> torch.Tensor:
    """The hybrid's sub-chunk (group rank) of every vertex: each chunk's induced subgraph partitioned into ``W``
    parts by the run's vertex partitioner (§3.6's faithful split; :func:`~graphscale.strategies.chunking.rcm_chunks`
    without pymetis).

    Raises:
        ValueError: a chunk with fewer than ``W`` vertices.
    """
    sub_of = torch.zeros_like(chunk_of)
    if width == 1:
        return sub_of
    from graphscale.partition.build import build_vertex_partitioner

    for k in range(int(chunk_of.max()) + 1):
        nodes = torch.nonzero(chunk_of == k).flatten()
        if nodes.numel() < width:
            raise ValueError(f"chunk {k} has {nodes.numel()} vertices, fewer than --hybrid-width {width}; "
                             "use fewer chunks (--chunks)")
        part = graph.subgraph(nodes)
        try:
            sub_of[nodes] = build_vertex_partitioner(partitioner, balance).partition(part, width, seed=seed)
        except ImportError:
            sub_of[nodes] = rcm_chunks(part, width)
    return sub_of


def assign_hybrid(graph: Graph, num_chunks: int, width: int, split: str = "chunks-first", partitioner: str = "metis",
                  balance: str = "", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(chunk_of, sub_of)``: every vertex's chunk and sub-chunk (group member) for ``--hybrid-split`` (§3.6).

    Raises:
        ValueError: an unknown split, a part with fewer vertices than chunks.
    """
    if split not in HYBRID_SPLITS:
        raise ValueError(f"--hybrid-split must be one of {', '.join(HYBRID_SPLITS)}, got {split!r}")
    if width == 1 or split == "chunks-first":
        chunk_of = assign_chunks(graph, num_chunks, partitioner, balance, seed)
        return chunk_of, assign_subchunks(graph, chunk_of, width, partitioner, balance, seed)
    sub_of = assign_chunks(graph, width, partitioner, balance, seed)
    chunk_of = torch.empty_like(sub_of)
    for r in range(width):
        nodes = torch.nonzero(sub_of == r).flatten()
        if nodes.numel() < num_chunks:
            raise ValueError(f"part {r} of the --hybrid-width {width} split has {nodes.numel()} vertices, fewer "
                             f"than --chunks {num_chunks}")
        chunk_of[nodes] = assign_chunks(graph.subgraph(nodes), num_chunks, partitioner, balance, seed)
    return chunk_of, sub_of


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
    def build(cls, graph: Graph, chunk_of: torch.Tensor, sub_of: torch.Tensor | None = None,
              rank: int = 0) -> ChunkPlan:
        """The chunks; with ``sub_of`` (a hybrid's sub-chunk of every vertex) the blocks are those of rank
        ``rank``'s sub-chunks (``nodes`` likewise), ``halo_chunk`` and ``cross_edges`` still whole-graph counts."""
        chunk_of = torch.as_tensor(chunk_of, dtype=torch.int64)
        num_chunks = int(chunk_of.max()) + 1 if chunk_of.numel() else 0
        degrees = graph.gcn_degrees()  # (weighted for a weighted graph, whose blocks carry the weights)
        nodes, blocks, halo_chunk, cross = [], [], [], []
        for k in range(num_chunks):
            ids = torch.nonzero(chunk_of == k).flatten()
            if ids.numel() == 0:
                raise ValueError(f"chunk {k} of {num_chunks} is empty; use fewer chunks (--chunks)")
            whole = Block.from_nodes(graph, ids, degrees)
            src = whole.indices[whole.indices >= whole.num_dst] - whole.num_dst
            cross.append(chunk_of[whole.halo_ids][src])
            if sub_of is not None:
                ids = ids[sub_of[ids] == rank]
            block = Block.from_nodes(graph, ids, degrees) if sub_of is not None else whole
            nodes.append(ids)
            blocks.append(block)
            halo_chunk.append(chunk_of[block.halo_ids])
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


@dataclass
class GroupExchange:
    """Which rows rank ``r`` of a hybrid group pushes to and receives from the others, per chunk (§3.6).

    Every rank keeps ghost copies of its boundary set ``B_r`` (in-neighbours of its vertices owned by another rank
    of the group). After a layer, the rows of chunk ``k`` that are ghosts elsewhere go to those ranks; in the
    backward pass the ghosts' accumulated gradients go back the same way. Lists are ascending ids, the same on
    every rank without communication.

    Attributes:
        send: ``send[k][p]``: my rows of chunk ``k`` in ``B_p``.
        recv: ``recv[k][p]``: rank ``p``'s rows of chunk ``k`` in my ``B_r``.
    """

    send: list[list[torch.Tensor]]
    recv: list[list[torch.Tensor]]

    @classmethod
    def build(cls, graph: Graph, chunk_of: torch.Tensor, sub_of: torch.Tensor, width: int, rank: int) -> GroupExchange:
        src, dst = graph.indices, graph.dst_of_edges()
        cross = sub_of[src] != sub_of[dst]
        n = max(graph.num_nodes, 1)
        pairs = torch.unique(sub_of[dst[cross]] * n + src[cross])  # (reader rank, ghost vertex)
        reader, ghost = pairs // n, pairs % n
        num_chunks = int(chunk_of.max()) + 1
        send = [[ghost[(reader == p) & (sub_of[ghost] == rank) & (chunk_of[ghost] == k)] for p in range(width)]
                for k in range(num_chunks)]
        recv = [[ghost[(reader == rank) & (sub_of[ghost] == p) & (chunk_of[ghost] == k)] for p in range(width)]
                for k in range(num_chunks)]
        return cls(send, recv)


def halo_rows(graph: Graph, chunk_of: torch.Tensor) -> list[int]:
    """Rows every chunk's block gathers from other chunks (its in-neighbours outside the chunk, each once: the
    ``halo_ids`` of :meth:`ChunkPlan.build`'s pure-pipeline blocks), counted from the CSR without building the
    blocks. A stage's layer reads them for every chunk: with 8 chunks of the 200k-vertex SBM and R-MAT they are 1.38
    and 1.31 times the vertices."""
    chunk_of = torch.as_tensor(chunk_of, dtype=torch.int64)
    n = graph.num_nodes
    indptr = torch.as_tensor(graph.indptr, dtype=torch.int64)
    src = torch.as_tensor(graph.indices, dtype=torch.int64)
    dst_chunk = torch.repeat_interleave(chunk_of, indptr[1:] - indptr[:-1])
    cross = chunk_of[src] != dst_chunk
    keys = torch.unique(dst_chunk[cross] * n + src[cross])
    chunks = int(chunk_of.max()) + 1 if chunk_of.numel() else 0
    return torch.bincount(keys // n, minlength=chunks).tolist()


def pipeline_bytes_per_epoch(num_nodes: int, boundary_widths: list[int], element_size: int,
                             carries_h0: bool) -> int:
    """Closed-form stage traffic of one training epoch, summed over workers (§3.7's ``V_p``).

    Every boundary carries every vertex's row once forward and its gradient once backward:
    ``2 * N * sum_i d_i * c * b`` with ``d_i`` the width entering stage ``i + 1`` and ``c = 2`` when the initial
    residual ``H^0`` travels with it (GCNII); with all ``d_i = H`` that is ``2 (S-1) N H c b``.
    """
    c = 2 if carries_h0 else 1
    return 2 * num_nodes * sum(int(d) for d in boundary_widths) * c * element_size


def group_halo_bytes_per_epoch(boundary_rows: int, exchanged_widths: list[int], element_size: int) -> int:
    """Closed-form halo traffic of a hybrid's groups in one epoch, summed over workers: every ghost row of every
    exchanged layer once forward and its gradient once backward, ``2 sum_r |B_r| sum_l d_l b`` per group
    (``boundary_rows`` = ``sum_r |B_r|`` for the ``W``-way split, summed over the groups)."""
    return 2 * boundary_rows * sum(int(d) for d in exchanged_widths) * element_size

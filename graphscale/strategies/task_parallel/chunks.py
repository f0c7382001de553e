r"""NeutronTask's intra-worker chunks and vertex-dependency management (spec ``neutrontask.md`` §3.2).

The vertices are cut once into ``M`` chunks (``--chunks``): the run's vertex partitioner's ``M`` parts
(``--chunking partitioner``, the default: METIS by default, i.e. the ranges of a METIS reordering, which is what the
NeutronTask artifact trains), or equal contiguous id ranges (``--chunking contiguous``, the spec's plain form).
METIS chunks are the default because ``causal`` drops cross-chunk edges: on Cora with contiguous ranges about half
of them go every epoch and the Done-means run lost 1.5 points to ``single`` on the decoupled model (0.811 against
0.826 over 3 seeds); METIS chunks cut few edges (0.825). Every worker uses the same chunks. At the start of every epoch
the chunks are shuffled (``Chunk_Shuffle``: a permutation that is a pure function of ``(seed, epoch)``, the same
on every rank without communication; :func:`~graphscale.strategies.chunking.chunk_order`) and every
``k = M / S`` consecutive ones form a subgraph (``S = --subgraphs``).

The block grid ``C[i][j]`` (edges from chunk ``j`` into chunk ``i``) is never stored as ``M^2`` pieces: a
subgraph's (or a worker's share of a subgraph's) destinations are one :class:`~graphscale.data.block.Block`
(``Block.from_nodes``: its rows keep the graph's neighbour order, so the kernels reproduce the whole-graph rows
bit for bit), masked by :func:`block_keep` to the blocks its dependency mode keeps (``Block.select_edges``);
normalisation always uses the *global* degrees.

Dependency modes (``--dependency``), by the subgraph ``sub(c)`` of every chunk in this epoch's order:

* ``full``: every edge (exact; the P task of subgraph 0 waits for the T task of every subgraph);
* ``causal`` (Algorithm 1, the paper's DM): edge ``u -> v`` is kept iff ``sub(chunk(u)) <= sub(chunk(v))``,
  so the epoch's operator :math:`\hat A_\varepsilon` is block lower-triangular in subgraph order; the rows of
  earlier subgraphs are cached, edges from later subgraphs dropped for this epoch;
* ``block_diag`` (the artifact's): only edges inside a subgraph, ``sub(chunk(u)) == sub(chunk(v))``.

:func:`masked_operator` is the whole-graph operator of an epoch (the single-process oracle's block). A
cross-chunk edge survives ``causal`` with probability ``(M + k - 2) / (2 (M - 1))`` over the shuffles
(:func:`expected_keep_rate`; :func:`keep_rate` measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.options.task_parallel import CHUNKINGS, DEPENDENCIES
from graphscale.strategies.chunking import assign_chunks as partition_chunks
from graphscale.strategies.chunking import chunk_order, positions

FULL, CAUSAL, BLOCK_DIAG = "full", "causal", "block_diag"


def contiguous_chunks(num_nodes: int, num_chunks: int) -> torch.Tensor:
    """The chunk of every vertex for ``M`` equal contiguous id ranges (sizes differ by at most one)."""
    return torch.arange(num_nodes, dtype=torch.int64) * num_chunks // max(num_nodes, 1)


def assign_chunks(graph: Graph, num_chunks: int, chunking: str = "partitioner", partitioner: str = "metis",
                  balance: str = "", seed: int = 0) -> torch.Tensor:
    """The chunk of every vertex (int64 ``[N]``): the run's vertex partitioner's parts (the default; pipeline's
    :func:`~graphscale.strategies.pipeline.plan.assign_chunks`, RCM ranges without pymetis), or contiguous ranges.

    Raises:
        ValueError: more chunks than vertices, or an unknown chunking.
    """
    if chunking not in CHUNKINGS:
        raise ValueError(f"--chunking must be one of {', '.join(CHUNKINGS)}, got {chunking!r}")
    if not 1 <= num_chunks <= graph.num_nodes:
        raise ValueError(f"--chunks must lie in [1, {graph.num_nodes}] (the vertices), got {num_chunks}")
    if chunking == "contiguous":
        return contiguous_chunks(graph.num_nodes, num_chunks)
    return partition_chunks(graph, num_chunks, partitioner, balance, seed)


def chunk_members(chunk_of: torch.Tensor, num_chunks: int) -> list[torch.Tensor]:
    """The (ascending) vertex ids of every chunk."""
    order = torch.argsort(chunk_of, stable=True)
    return list(torch.split(order, torch.bincount(chunk_of, minlength=num_chunks).tolist()))


@dataclass(frozen=True)
class Layout:
    """One epoch's shuffle: chunk ``order[p]`` stands at position ``p``; subgraph ``s`` is positions
    ``[s k, (s + 1) k)``."""

    order: torch.Tensor
    num_subgraphs: int

    @property
    def num_chunks(self) -> int:
        return self.order.numel()

    @property
    def k(self) -> int:
        """Chunks per subgraph."""
        return self.num_chunks // self.num_subgraphs

    @property
    def pos(self) -> torch.Tensor:
        """``pos[c]``: the position of chunk ``c``."""
        return positions(self.order)

    @property
    def sub(self) -> torch.Tensor:
        """``sub[c]``: the subgraph of chunk ``c``."""
        return self.pos // self.k

    def chunks(self, s: int) -> list[int]:
        """The chunks of subgraph ``s``, in position order."""
        return self.order[s * self.k: (s + 1) * self.k].tolist()


def check_subgraphs(num_chunks: int, num_subgraphs: int) -> None:
    """Raises ``ValueError`` unless ``--subgraphs`` divides ``--chunks``."""
    if num_subgraphs < 1 or num_chunks < 1 or num_chunks % num_subgraphs:
        raise ValueError(f"--subgraphs {num_subgraphs} must be >= 1 and divide --chunks {num_chunks} (every "
                         "subgraph groups k = chunks / subgraphs chunks)")


def layout(num_chunks: int, num_subgraphs: int, seed: int, epoch: int, shuffle: bool = True) -> Layout:
    """``Chunk_Shuffle`` of ``epoch``: a pure function of ``(seed, epoch)`` (identity order without ``shuffle``)."""
    check_subgraphs(num_chunks, num_subgraphs)
    return Layout(chunk_order(num_chunks, epoch, seed, shuffle), num_subgraphs)


def block_keep(block: Block, chunk_of: torch.Tensor, sub: torch.Tensor, mode: str) -> torch.Tensor:
    """Which of ``block``'s edges (CSR order) dependency mode ``mode`` keeps, for subgraphs ``sub[c]``."""
    if mode not in DEPENDENCIES:
        raise ValueError(f"--dependency must be one of {', '.join(DEPENDENCIES)}, got {mode!r}")
    if mode == FULL:
        return torch.ones(block.num_edges, dtype=torch.bool)
    dst_sub = sub[chunk_of[block.dst_ids]][block.dst_of_edges()]
    src_sub = sub[chunk_of[block.src_ids[block.indices]]]
    return src_sub <= dst_sub if mode == CAUSAL else src_sub == dst_sub


def masked_block(block: Block, chunk_of: torch.Tensor, sub: torch.Tensor, mode: str) -> Block:
    """``block`` restricted to the edges ``mode`` keeps (the block itself for ``full``)."""
    return block if mode == FULL else block.select_edges(block_keep(block, chunk_of, sub, mode))


def masked_operator(graph: Graph, chunk_of: torch.Tensor, sub: torch.Tensor, mode: str) -> Block:
    r"""The epoch's whole-graph operator as one block: :math:`\hat A` (``full``), :math:`\hat A_\varepsilon`
    (``causal``) or its diagonal subgraph blocks (``block_diag``), all with global degrees."""
    return masked_block(Block.full(graph), chunk_of, sub, mode)


def keep_rate(graph: Graph, chunk_of: torch.Tensor, sub: torch.Tensor, mode: str = CAUSAL) -> float:
    """The fraction of cross-chunk edges ``mode`` keeps in one epoch (``nan`` without cross-chunk edges)."""
    block = Block.full(graph)
    cross = chunk_of[block.dst_ids][block.dst_of_edges()] != chunk_of[block.indices]
    if not bool(cross.any()):
        return float("nan")
    return float(block_keep(block, chunk_of, sub, mode)[cross].double().mean())


def expected_keep_rate(num_chunks: int, k: int) -> float:
    """The probability that ``causal`` keeps a cross-chunk edge over uniform shuffles: ``(M + k - 2) / (2 (M - 1))``
    (same subgraph: ``(k - 1) / (M - 1)``; otherwise the source's subgraph comes first half of the time)."""
    if num_chunks < 2:
        return float("nan")
    return (num_chunks + k - 2) / (2 * (num_chunks - 1))

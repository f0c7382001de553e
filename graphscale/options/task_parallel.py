"""``task-parallel`` (NeutronTask): its options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from graphscale.options import option
from graphscale.options.shared import ChunkOrder, Partitioning

#: ``--p-split``: P ranks split the propagation layers, or take whole subgraphs
P_SPLITS = ("layers", "subgraphs")
#: ``--chunking``
CHUNKINGS = ("contiguous", "partitioner")
#: ``--dependency``: every edge, the causal ones (own and earlier subgraphs), or the own subgraph's only
DEPENDENCIES = ("full", "causal", "block_diag")
#: ``--loss-norm``
LOSS_NORMS = ("global", "subgraph-mean")


@dataclass
class TaskParallelOptions(Partitioning, ChunkOrder):
    """``task-parallel``: dense T tasks and sparse P tasks on different ranks, subgraphs pipelined through them."""

    #: the field ``--chunks`` stands for with this strategy
    CHUNKS: ClassVar[str] = "task_chunks"

    task_chunks: int | None = option(None, "task-parallel: chunks (M) in all, --subgraphs of them per epoch "
                                     "(default: --subgraphs x the largest group)")
    t_workers: int = option(0, "ranks running the dense T tasks (the first Q; the others run the sparse P tasks); 0: "
                            "the scheduling model decides", metavar="Q")
    p_split: str = option("layers", "P ranks split the propagation layers (a chain, the paper's) or take whole "
                          "subgraphs round-robin (the artifact's)", choices=P_SPLITS)
    subgraphs: int = option(4, "subgraphs streamed through the task pipeline every epoch (each --chunks / S chunks)",
                            metavar="S")
    chunking: str = option("partitioner", "chunks as the --partitioner's parts (a METIS reordering, the artifact's: "
                           "few edges cross chunks, so causal drops few) or equal contiguous id ranges",
                           choices=CHUNKINGS)
    dependency: str = option("causal", "edges a subgraph's propagation reads: every edge (exact), its own and earlier "
                             "subgraphs' (the paper's), or its own subgraph's only (the artifact's)",
                             choices=DEPENDENCIES)
    t_recompute: bool = option(True, "recompute the T stack in backward instead of keeping its activations")
    pipelined: bool = option(True, "T of subgraph s+1 runs while P of subgraph s runs (--no-pipelined: stage by "
                             "stage, the same numbers)")
    loss_norm: str = option("global", "loss over the global training count, or the sum of per-subgraph means (the "
                            "artifact's)", choices=LOSS_NORMS)
    task_gamma: float = option(0.5, "scheduling model (without --t-workers): Eq. 6's compute / memory overlap weight, "
                               "in [0, 1]", metavar="GAMMA")
    device_flops: float = option(0.0, "scheduling model (without --t-workers): one worker's FLOP/s, e.g. 27.8e12 (0: "
                                 "measured)", metavar="FLOPS")
    device_bandwidth: float = option(0.0, "scheduling model (without --t-workers): one worker's memory bytes/s, e.g. "
                                     "768e9 (0: measured)", metavar="BYTES_PER_S")

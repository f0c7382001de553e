"""``pipeline`` (GNNPipe): its options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from graphscale.options import option
from graphscale.options.shared import ChunkOrder, Partitioning

#: ``--history-grad`` values: drop gradients along stale edges (GNNPipe's technique 3), or apply the previous
#: epoch's (the ablation).
HISTORY_GRADS = ("zero", "historical")
#: ``--schedule``: GPipe (every chunk's forward, then the backwards in reverse order) or 1F1B (one forward, one
#: backward in the steady state, chunks' backwards in forward order).
SCHEDULES = ("gpipe", "1f1b")
#: ``--cross-chunk-grad``: gradients along cross-chunk edges read fresh are propagated (GNNPipe) or dropped.
CROSS_CHUNK_GRADS = ("fresh", "none")
#: ``--hybrid-split``: chunks first, each cut into ``W`` sub-chunks (the paper's), or ``W`` parts first, each cut
#: into ``K`` pieces, chunk ``k`` being the ``k``-th piece of every part (fewer ghosts: the rho of ``W`` parts).
HYBRID_SPLITS = ("chunks-first", "parts-first")


@dataclass
class PipelineOptions(Partitioning, ChunkOrder):
    """``pipeline``: stages of contiguous layers, chunks of vertices streamed through them."""

    #: the field ``--chunks`` stands for with this strategy
    CHUNKS: ClassVar[str] = "pipeline_chunks"

    pipeline_chunks: int | None = option(None, "pipeline: chunks (K) in all, streamed through the stages (default 4 "
                                         "per worker)")
    history_period: int = option(10, "refresh the historical embeddings every this many epochs (1: every epoch)",
                                 metavar="EPOCHS")
    history_grad: str = option("zero", "gradients along stale edges: zero (GNNPipe) or the previous epoch's (the "
                               "ablation)", choices=HISTORY_GRADS)
    hybrid_width: int = option(1, "W-way graph parallelism inside each of --workers / W pipeline stages (1: pure "
                               "pipeline)", metavar="W")
    hybrid_split: str = option("chunks-first", "hybrid: cut each chunk into W sub-chunks (the paper's), or W parts "
                               "into the chunks' pieces (fewer ghost rows)", choices=HYBRID_SPLITS)
    schedule: str = option("gpipe", "pipeline schedule: gpipe or 1f1b (fewer chunks' activations held; needs "
                           "--cross-chunk-grad none)", choices=SCHEDULES)
    cross_chunk_grad: str = option("fresh", "gradients along cross-chunk edges read fresh: fresh (GNNPipe) or none "
                                   "(dropped)", choices=CROSS_CHUNK_GRADS)

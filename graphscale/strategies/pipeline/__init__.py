"""GNNPipe (``--strategy pipeline``): the static plan (:mod:`.plan`: stages, chunks, chunk orders, history epochs,
closed-form volume), the single-process chunked reference of its semantics (:mod:`.reference`) and the
strategy (:mod:`.strategy`; its chunk passes in :mod:`.passes`, its collective checkpoints in :mod:`.checkpoint`)."""

from graphscale.strategies.pipeline.strategy import PipelineStrategy

__all__ = ["PipelineStrategy"]

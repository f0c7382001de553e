"""SDT-GNN (``--strategy model-averaging``): weighted model averaging (:mod:`.averaging`), per-partition states
kept in memory or on disk (:mod:`.state`) and the strategy (:mod:`.strategy`)."""

from graphscale.strategies.model_averaging.strategy import ModelAveraging, partitions_of

__all__ = ["ModelAveraging", "partitions_of"]

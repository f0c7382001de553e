"""The options each strategy declares, by strategy name (:data:`BY_STRATEGY`).

One module per strategy with options of its own (``offload``, ``pipeline``, ``task_parallel``,
``model_averaging``, ``split_parallel``) and :mod:`.shared` (options several strategies read, declared once,
and the single-module strategies'). They sit in the configuration layer, apart from the strategies'
code, so that :mod:`graphscale.config` can assemble :class:`~graphscale.config.StrategyConfig` from them without
importing any strategy (the declarations import only :mod:`graphscale.options`); each strategy class reads its own
(``options = option_names(...)``), which a test holds equal to this table.
"""

from __future__ import annotations

from graphscale.options.model_averaging import ModelAveragingOptions
from graphscale.options.offload import OffloadOptions
from graphscale.options.pipeline import PipelineOptions
from graphscale.options.shared import DataParallelOptions, GraphParallelOptions, SingleOptions
from graphscale.options.split_parallel import SplitParallelOptions
from graphscale.options.task_parallel import TaskParallelOptions

#: strategy name -> its option dataclass
BY_STRATEGY = {"single": SingleOptions, "graph-parallel": GraphParallelOptions, "data-parallel": DataParallelOptions,
               "split-parallel": SplitParallelOptions, "offload": OffloadOptions,
               "model-averaging": ModelAveragingOptions, "pipeline": PipelineOptions,
               "task-parallel": TaskParallelOptions}


def own_chunks(strategy: str) -> str | None:
    """The field ``--chunks`` stands for with ``strategy`` (``pipeline_chunks`` for pipeline), else ``None``."""
    return getattr(BY_STRATEGY.get(strategy), "CHUNKS", None)

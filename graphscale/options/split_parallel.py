"""``split-parallel`` (GSplit): its options (all shared with other strategies)."""

from __future__ import annotations

from dataclasses import dataclass

from graphscale.options.shared import CacheFraction, Partitioning, SampledEvaluation, Sampling


@dataclass
class SplitParallelOptions(Partitioning, Sampling, SampledEvaluation, CacheFraction):
    """``split-parallel``: one mini-batch split between the workers by vertex owner."""

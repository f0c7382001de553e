"""``split-parallel`` (GSplit): its options (all shared with other strategies)."""

from __future__ import annotations

from dataclasses import dataclass

from graphscale.options.shared import CacheFraction, Partitioning, Sampling


@dataclass
class SplitParallelOptions(Partitioning, Sampling, CacheFraction):
    """``split-parallel``: one mini-batch split between the workers by vertex owner."""

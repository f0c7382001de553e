"""Helpers for tests: tiny graphs with known structure, multi-worker runs, parity asserts."""

from graphscale.testing.distributed import assert_close_rel, run_distributed
from graphscale.testing.graphs import random_graph
from graphscale.testing.traced import traced_peak

__all__ = ["assert_close_rel", "random_graph", "run_distributed", "traced_peak"]

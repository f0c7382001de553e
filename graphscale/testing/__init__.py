"""Helpers for tests: tiny graphs with known structure, multi-worker runs, parity asserts."""

from graphscale.testing.graphs import random_graph

__all__ = ["random_graph"]

"""Measurement: the byte Ledger, memory accounting, epoch statistics."""

from graphscale.metrics.ledger import Ledger
from graphscale.metrics.stats import EpochStats

__all__ = ["EpochStats", "Ledger"]

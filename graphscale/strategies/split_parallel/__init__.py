"""GSplit (``--strategy split-parallel``): the offline split plan (:mod:`.plan`), the online split (:mod:`.split`)
and its kernels (:mod:`.kernels`), and the strategy (:mod:`.strategy`)."""

from graphscale.strategies.split_parallel.strategy import (
    SplitParallel,
    layer_kinds,
    shipped_widths,
    shuffle_backward,
    split_modes,
)

__all__ = ["SplitParallel", "layer_kinds", "shipped_widths", "shuffle_backward", "split_modes"]

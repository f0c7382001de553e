"""HongTu (``--strategy offload``): plan, cost model, reorganisation, host arrays, memory model, the strategy.

Modules: :mod:`.plan` (two-level partition, neighbour / transition sets, slot plans), :mod:`.cost` (closed-form
volumes, the transfer cost model, per-layer mode choice), :mod:`.reorg` (two-phase chunk reorganisation),
:mod:`.host` (host arrays in shared memory), :mod:`.memory` (peak-memory model, ``--memory-budget``) and
:mod:`.strategy` (the registered strategy).
"""

from graphscale.strategies.offload.strategy import OffloadStrategy

__all__ = ["OffloadStrategy"]

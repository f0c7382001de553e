"""HongTu (``--strategy offload``): plan, cost model, reorganisation, host arrays, memory model, the strategy.

Modules: :mod:`.plan` (two-level partition, neighbour / transition sets, slot plans), :mod:`.cost` (closed-form
volumes, the transfer cost model, per-layer mode choice), :mod:`.reorg` (two-phase chunk reorganisation),
:mod:`.host` (host arrays in shared memory), :mod:`.memory` (peak-memory model, ``--memory-budget``),
:mod:`.device` (streams, events, pinned memory, UVA aliases), :mod:`.transfer` (the pipelined host <-> device
transfers), :mod:`.resident` (chunk topology on the device, streamed or resident), :mod:`.passes` (the epoch's
chunk passes) and :mod:`.strategy` (the registered strategy).
"""

from graphscale.strategies.offload.strategy import OffloadStrategy

__all__ = ["OffloadStrategy"]

"""Chunk topology and plan indices on the device: streamed per chunk pass, or resident (moved once).

Every chunk pass needs its block (``indptr``, ``indices``, ``src_ids``, ``src_deg``) and some of its slot
plans (``src_index``, ``load_slots``, ``send_slots``, ``flush_slots``) on the device. Two policies:

* **streamed** (HongTu's, and the default on every device, so the Ledger's closed form and the equality of CPU
  and CUDA byte counts hold; ``--memory-budget``'s memory model counts one chunk's topology at a time):
  :meth:`DevicePlan.package` moves the block and the named slot plans for every chunk pass (on CPU a new block
  object over the plan's memory-mapped tensors, so the topology a layer caches on a block, its transpose and
  operators, lives for one chunk pass, as on an accelerator) and returns their bytes, which the strategy records
  as ``h2d_topo`` (the closed form of :func:`~graphscale.strategies.offload.cost.epoch_bytes`). The gathers read host ids (``staged`` transfers).
* **resident** (``OffloadStrategy(resident_topology=True)``; not with ``--memory-budget``): every batch's block,
  slot plans and the ids the transfers index with (``load_ids``, ``flush_ids``, ``src_local``) are moved once,
  at setup (:attr:`DevicePlan.setup_bytes`, recorded by the strategy as ``h2d_topo`` outside any epoch), and
  reused by every layer, pass and epoch: nothing is re-sent, and the device block keeps its cached
  :class:`~graphscale.nn.ops.Topology` (the transpose is built once per chunk, not per pass). An epoch then
  moves no ``h2d_topo`` bytes (``epoch_bytes(..., resident_topology=True)``); the whole plan stays tracked as
  device memory (category ``"topology"``), which ``--memory-budget``'s model does not cover. ``uva`` transfers
  need it: their kernels index with device ids.

On CPU a resident block is the host block itself (device and host memory are the same RAM).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from graphscale.data.block import Block
from graphscale.strategies.offload.plan import BatchPlan, WorkerPlan

#: slot plans a chunk pass may need on the device
SLOTS = ("src_index", "load_slots", "send_slots", "flush_slots")
#: ids the transfers index with on the device (resident only)
IDS = ("load_ids", "flush_ids", "src_local")


def _nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def block_tensors(block: Block | None) -> tuple:
    if block is None:
        return ()
    weight = () if block.edge_weight is None else (block.edge_weight,)
    return (block.indptr, block.indices, block.src_ids, block.src_deg, *weight)


class DevicePlan:
    """A worker plan's device side (see the module docstring).

    Args:
        plan: the worker's plan.
        device: the compute device.
        resident: move everything once (``True``) or per chunk pass (``False``).
    """

    def __init__(self, plan: WorkerPlan, device: torch.device, resident: bool) -> None:
        self.device = torch.device(device)
        self.resident = resident
        self.setup_bytes = 0
        self._blocks: list[Block] = []
        self._tensors: list[dict[str, torch.Tensor]] = []
        if not resident:
            return
        cpu = self.device.type == "cpu"
        for bp in plan.batches:
            self._blocks.append(bp.block if cpu else bp.block.to(self.device))
            self.setup_bytes += _nbytes(*block_tensors(bp.block))
            moved = {}
            for name in SLOTS + IDS:
                t = getattr(bp, name)
                moved[name] = t if cpu else t.to(self.device, non_blocking=True)
                self.setup_bytes += _nbytes(t)
            self._tensors.append(moved)

    def tensors(self) -> list[torch.Tensor]:
        """Every resident tensor (for the memory tracker); empty when streamed."""
        out = []
        for block, moved in zip(self._blocks, self._tensors):
            out += [*block_tensors(block), *moved.values()]
        return out

    def package(self, j: int, bp: BatchPlan, block: bool, slots: tuple[str, ...]) -> tuple[Block | None, dict, int]:
        """``(device block or None, slot name -> device tensor, bytes moved now)`` for batch ``j``'s chunk pass."""
        if self.resident:
            return (self._blocks[j] if block else None), {n: self._tensors[j][n] for n in slots}, 0
        moved, nbytes, dev_block = {}, 0, None
        if block:
            b = bp.block
            # a fresh block per pass on every device: the topology a layer caches on it (transpose, operators)
            # goes with the pass, so a worker holds one chunk's at a time, never its whole plan's
            dev_block = replace(b) if self.device.type == "cpu" else b.to(self.device)
            nbytes += _nbytes(*block_tensors(b))
        for name in slots:
            t = getattr(bp, name)
            moved[name] = t.to(self.device, non_blocking=True)
            nbytes += _nbytes(t)
        return dev_block, moved, nbytes

    def ids(self, j: int, name: str) -> torch.Tensor | None:
        """Batch ``j``'s device ids ``name`` (``load_ids``, ``flush_ids``, ``src_local``, ``src_ids``, ``dst_ids``);
        ``None`` when streamed (the transfers then use host ids)."""
        if not self.resident:
            return None
        if name == "src_ids":
            return self._blocks[j].src_ids
        if name == "dst_ids":
            return self._blocks[j].dst_ids
        return self._tensors[j][name]

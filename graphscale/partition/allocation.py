"""Workload allocation (SDT-GNN §2.5): how many partitions ``p`` for ``q`` workers with ``M`` bytes of device memory.

``S`` is the data a worker would hold for the whole graph (the CSR as training holds it, the features and the
labels: :func:`data_bytes`) and ``T`` the memory the GNN computation needs, ``2/3 M`` by default (the paper's
conservative figure: a 3-layer GAT used 2-3x the graph object). If ``S <= q (M - T)`` the data fits in one
partition per worker and ``p = q``; otherwise ``p = ceil(S / (M - T))``, so that each partition fits in
``M - T`` and a worker trains ``ceil(p / q)`` of them in turn. ``M`` defaults to what is measured: the free
memory of the device (CUDA), or the host's available memory shared by the ``q`` workers (CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: T / M: the share of device memory left for computation (SDT-GNN's default)
COMPUTE_SHARE = 2 / 3


@dataclass(frozen=True)
class Allocation:
    """The chosen partition count and the figures it came from."""

    parts: int
    workers: int
    data_bytes: int
    device_memory: int
    measured: bool

    @property
    def data_budget(self) -> int:
        """``M - T``: the bytes of one partition's data a worker can hold."""
        return int(self.device_memory * (1 - COMPUTE_SHARE))

    def why(self) -> str:
        """One sentence: the figures and the rule that chose :attr:`parts`."""
        from graphscale.metrics.units import format_bytes

        m = f"{format_bytes(self.device_memory)} {'measured' if self.measured else 'given'}"
        budget = format_bytes(self.data_budget)
        if self.parts == self.workers:
            return (f"{self.parts} partitions: the data ({format_bytes(self.data_bytes)}) fits in {self.workers} "
                    f"worker(s) x (M - T) = {self.workers} x {budget} (M = {m}, T = 2/3 M)")
        return (f"{self.parts} partitions: the data ({format_bytes(self.data_bytes)}) exceeds {self.workers} "
                f"worker(s) x (M - T) = {self.workers} x {budget} (M = {m}, T = 2/3 M), so p = ceil(S / (M - T)) "
                f"and each worker trains up to {math.ceil(self.parts / self.workers)} partitions in turn")


def data_bytes(num_nodes: int, num_records: int, num_features: int, feature_itemsize: int = 4) -> int:
    """``S``: the whole graph as a worker holds it (int64 CSR by destination, features, int64 labels)."""
    return 8 * (num_nodes + 1) + 8 * num_records + num_nodes * num_features * feature_itemsize + 8 * num_nodes


def measured_device_memory(device: str, workers: int) -> int:
    """Free memory of the CUDA device, or the host's available memory divided among ``workers`` (CPU)."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024 // max(workers, 1)


def choose_parts(data: int, workers: int, device_memory: int | None = None, device: str = "cpu") -> Allocation:
    """The SDT-GNN rule: ``p = q`` when ``S <= q (M - T)``, else ``ceil(S / (M - T))``.

    Args:
        data: ``S`` in bytes (:func:`data_bytes`).
        workers: ``q``.
        device_memory: ``M`` in bytes; ``None``: measured (:func:`measured_device_memory`).
        device: where training runs (``cpu`` or ``cuda[:i]``), for the measurement.

    Raises:
        ValueError: fewer than one worker, or a device memory that leaves no room for data.
    """
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    measured = device_memory is None
    m = measured_device_memory(device, workers) if measured else int(device_memory)
    budget = int(m * (1 - COMPUTE_SHARE))
    if budget < 1:
        raise ValueError(f"--device-memory {m} bytes leaves no room for data (M - T = M / 3 < 1 byte)")
    parts = workers if data <= workers * budget else math.ceil(data / budget)
    return Allocation(parts, workers, int(data), m, measured)

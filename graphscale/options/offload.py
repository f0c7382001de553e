"""``offload`` (HongTu): its options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from graphscale.options import option
from graphscale.options.shared import Partitioning

#: ``--dedup``: host-device communication deduplication, each mode adding to the previous
DEDUP_MODES = ("baseline", "inter", "intra", "reorg")
#: ``--recompute``: intermediate data per layer
RECOMPUTE_MODES = ("auto", "hybrid", "recompute", "none")
#: ``--offload-topology``
TOPOLOGIES = ("streamed", "resident")
#: ``--offload-transfer``
TRANSFER_MODES = ("auto", "staged", "uva")


@dataclass
class OffloadOptions(Partitioning):
    """``offload``: vertex data in host memory, streamed through the device chunk by chunk."""

    #: the field ``--chunks`` stands for with this strategy
    CHUNKS: ClassVar[str] = "chunks_per_part"

    chunks_per_part: int | None = option(None, "offload: chunks (K) per partition (default: the fewest whose working "
                                         "set fits --host-memory; --memory-budget: the fewest that fit it)")
    dedup: str = option("reorg", "host-device communication dedup, each adding to the previous", choices=DEDUP_MODES)
    recompute: str = option("auto", "intermediate data per layer (auto: the cost model decides)",
                            choices=RECOMPUTE_MODES)
    offload_topology: str = option("streamed", "offload: chunk topology sent with each batch (streamed, HongTu's) or "
                                   "kept on the device (resident: no per-epoch topology traffic; not with "
                                   "--memory-budget)", choices=TOPOLOGIES)
    offload_transfer: str = option("auto", "offload: host-device transfers (auto: uva where the GPU can read pinned "
                                   "host rows and the topology is resident, else staged: pinned double buffers "
                                   "filled by a thread)", choices=TRANSFER_MODES)
    memory_budget: str = option("", "per-worker device-memory budget, e.g. 256MiB; picks the smallest K that fits "
                                "(then no --chunks)", metavar="SIZE")
    shm_dir: str = option("/dev/shm", "directory of the host arrays the workers share", metavar="DIR")

"""A host's machine profile: the measured figures every cost model prices work with (how each is measured:
:mod:`graphscale.advise.profile`), and :func:`synthetic`, a fixed profile for tests and for predictions that must not
depend on this machine."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass, field

#: version of the profile's fields; a file of another version is measured again (4: the host costs per block, per
#: sampled mini-batch and per byte of offload's host-array traffic; 5: ``corun_free``, the co-run slowdown of workers
#: that compute without synchronising)
PROFILE_VERSION = 5


#: the per-event host costs (:mod:`graphscale.advise.host_costs`)
HOST_COSTS = ("block_call_s", "block_edge_s", "sample_call_s", "sample_edge_s", "host_transfer_bandwidth")


@dataclass
class Machine:
    """One host's measured rates (module docstring)."""

    host: str
    device: str
    gemm_flops: float
    spmm_edge_s: float
    spmm_edge_col_s: float
    memory_bandwidth: float
    collective_latency_s: float
    collective_bandwidth: float
    h2d_bandwidth: float
    free_memory: int
    threads: int
    measured_at: float = 0.0
    how: dict = field(default_factory=dict)
    version: int = PROFILE_VERSION
    layer_call_s: float = 0.0
    step_s: float = 0.0
    process_rss: int = 0
    elementwise_s: float = 0.0
    cores: int = 1
    thread_speedup: float = 1.0
    sync_s: float = 0.0
    corun_slowdown: float = 1.0
    corun_free: float = 1.0
    load_factor: float = 1.0
    block_call_s: float = 0.0
    block_edge_s: float = 0.0
    sample_call_s: float = 0.0
    sample_edge_s: float = 0.0
    host_transfer_bandwidth: float = 0.0
    calibration: dict | None = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Machine:
        names = {f for f in cls.__dataclass_fields__}
        missing = sorted(names - set(d) - {"how", "measured_at", "version", "layer_call_s", "step_s", "process_rss",
                                             "elementwise_s", "cores", "thread_speedup", "sync_s", "corun_slowdown", "load_factor", "corun_free",
                                             "calibration", *HOST_COSTS})
        if missing:
            raise ValueError(f"machine profile lacks {', '.join(missing)}")
        return cls(**{k: v for k, v in d.items() if k in names})


def synthetic(device: str = "cpu", free_memory: int = 8 << 30) -> Machine:
    """A fixed profile (tests, and predictions that must not depend on this machine): a few-core CPU's rates."""
    how = {k: "synthetic (not measured)" for k in ("gemm_flops", "spmm", "memory_bandwidth", "collective",
                                                  "h2d_bandwidth", "free_memory")}
    how.update({k: "synthetic (not measured)" for k in ("fixed_costs", "process_rss", "threads", "sync", "blocks",
                                                        "sampling", "host_transfer")})
    return Machine(platform.node(), device, 5e10, 5e-9, 1e-9, 1e10, 1e-4, 1e9, 0.0, free_memory, 1, time.time(), how,
                   layer_call_s=2e-4, step_s=1e-3, process_rss=300 << 20, elementwise_s=2e-9, cores=1,
                   sync_s=1e-4, block_call_s=1e-4, block_edge_s=2e-8, sample_call_s=1e-4, sample_edge_s=5e-8,
                   host_transfer_bandwidth=2e9 if device == "cpu" else 0.0, calibration=None)

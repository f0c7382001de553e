"""An out-of-core mini-batch epoch against the same epoch in memory (a measurement, not a test).

:func:`outofcore_row` trains one epoch of ``single --minibatch`` twice on a graph directory:

* **in memory**: the graph read whole into memory (``load_graph_dir(mmap=False)``), the memory view;
* **out of core** (timed between an untimed warm-up epoch and the in-memory one): the graph directory memory-mapped (the host-shared view ``single --minibatch`` gets), feature
  rows read through a hot-row cache holding ``cache_fraction`` of the rows (the ``--host-memory`` that sizes it so
  is passed to the run), the next batch prefetched. Before it, the mapped files' pages are dropped from the page
  cache (``posix_fadvise(DONTNEED)``), so the epoch starts cold and reads its misses from the disk.

Both epochs are the same computation (the run is bit for bit the in-memory one); the row gives both times, their
ratio, the cache's hit rate and the bytes of feature rows read from the file. :func:`write_synthetic` writes a
synthetic graph for it with :func:`graphscale.data.synthetic.generate_to_dir` (chunked, never whole in memory).

Example (a ``python -c`` call; ``graphscale bench scale`` can call the same functions)::

    from graphscale.bench.tools.outofcore import outofcore_row, write_synthetic
    folder = write_synthetic("sbm:nodes=1000000,degree=10,features=128", "/tmp/g1m")
    print(outofcore_row(folder))
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

from graphscale.data.row_cache import FEATURE_CACHE_SHARE


def write_synthetic(spec: str, folder: str | Path) -> Path:
    """``spec``'s synthetic graph written to ``folder`` in chunks (reused when it is already there)."""
    from graphscale.data.formats import is_graph_dir
    from graphscale.data.synthetic import generate_to_dir

    folder = Path(folder)
    if not is_graph_dir(folder):
        generate_to_dir(spec, folder)
    return folder


def drop_page_cache(folder: str | Path) -> None:
    """Ask the kernel to drop the cached pages of the graph directory's files (clean pages only; no privileges)."""
    for file in Path(folder).glob("*.npy"):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _config(cache_dir: str, budget: str, batch_size: int, fanouts: list[int], hidden: int):
    from graphscale.config import ModelConfig, RunConfig, StrategyConfig

    return RunConfig(model=ModelConfig(name="sage", hidden=hidden, layers=len(fanouts), dropout=0.5),
                     strategy=StrategyConfig(name="single", minibatch=True, fanouts=list(fanouts),
                                             batch_size=batch_size),
                     seed=0, host_memory=budget, cache_dir=cache_dir)


def _epoch(data, config, num_features: int, num_classes: int):
    from graphscale.distributed.env import DistEnv
    from graphscale.nn.models import build_model
    from graphscale.strategies.single import SingleStrategy

    model = build_model(config.model, num_features, num_classes, seed=0)
    strategy = SingleStrategy()
    strategy.setup(data, model, DistEnv.local(), config)
    start = time.perf_counter()
    loss = strategy.train_epoch(0).loss
    return time.perf_counter() - start, loss, strategy


def outofcore_row(folder: str | Path, cache_fraction: float = 0.2, batch_size: int = 1024,
                  fanouts: tuple[int, ...] = (10, 10), hidden: int = 128, cold: bool = True,
                  warmup: bool = True) -> dict:
    """One mini-batch epoch out of core (a hot-row cache of ``cache_fraction`` of the rows) and in memory, after an
    untimed in-memory epoch (``warmup``); ``cold``: the graph's files dropped from the page cache first.

    Returns:
        ``nodes``, ``edges``, ``features``, ``batches``, ``cache_rows``, ``memory_s`` and ``disk_s`` (the epochs'
        seconds), ``ratio`` (``disk_s / memory_s``), ``hit_rate`` (input rows served by the cache),
        ``read_bytes`` (feature bytes read from the file), and whether both epochs' losses are ``equal``.
    """
    from graphscale.data.formats import load_graph_dir
    from graphscale.data.handle import HOST_SHARED, DataHandle

    folder = Path(folder)
    mapped = load_graph_dir(folder)
    n, f = mapped.num_nodes, mapped.x.shape[1]
    row_bytes = f * torch.empty(0, dtype=torch.float32).element_size()
    rows = int(cache_fraction * n)
    budget = str(math.ceil(rows * row_bytes / FEATURE_CACHE_SHARE))  # the --host-memory whose share holds them
    cache_dir = str(folder.parent / f".{folder.name}-cache")
    handle = DataHandle(HOST_SHARED, {**mapped.summary(), "name": mapped.name}, path=str(folder))
    graph = load_graph_dir(folder, mmap=False)
    in_memory = _config(cache_dir, "", batch_size, list(fanouts), hidden)
    if warmup:  # an untimed epoch first: the process's first epoch pays one-time costs (kernels, thread pools)
        _epoch(graph, in_memory, f, graph.num_classes)
    if cold:
        drop_page_cache(folder)
    disk_s, disk_loss, strategy = _epoch(handle, _config(cache_dir, budget, batch_size, list(fanouts), hidden), f,
                                         mapped.num_classes)
    cache = strategy.rows
    del strategy
    memory_s, memory_loss, _ = _epoch(graph, in_memory, f, graph.num_classes)
    lookups = max(1, cache.hits + cache.misses)
    return {"nodes": n, "edges": mapped.num_edges, "features": f, "batches": -(-int(mapped.train_mask.sum())
                                                                                // batch_size),
            "cache_rows": cache.capacity, "memory_s": round(memory_s, 2), "disk_s": round(disk_s, 2),
            "ratio": round(disk_s / memory_s, 2), "hit_rate": round(cache.hits / lookups, 3),
            "read_bytes": cache.misses * row_bytes, "equal": disk_loss == memory_loss}

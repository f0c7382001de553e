r"""How many chunks a worker's host memory allows: ``K`` from ``--host-memory`` when ``--chunks`` is not given.

A worker's anonymous memory is a fixed part (the interpreter and libraries, :data:`RUNTIME_BYTES`; two staging
slots of :data:`~graphscale.strategies.offload.transfer.STAGING_BYTES`; the parameters, their gradients and the
optimiser's moments) plus one chunk pass's working set (the graph, the chunk sets and the plans are memory-mapped
files; the host arrays live in shared memory or on disk, within :data:`~graphscale.strategies.offload.host.ARRAY_SHARE`
of the budget). For the largest part (``P`` vertices, ``E_P`` in-edges) cut into ``K`` chunks, a chunk has
``D = ceil(P / K)`` destinations, ``E = ceil(E_P / K)`` in-edges and at most ``S = min(N, D + E)`` sources (its
destinations and one per in-edge), and the working set is bounded by (``w``: the widest row, ``b``: bytes per
element)::

    buffers   = 3 (min(P, S) + min(N - P, S)) w b     transition buffer + receive area, twice in a recomputing backward
                                                       plus the gradient buffer
    rows      = (3 S + 4 D) w b                        the chunk's sources, their gradients and a gather copy;
                                                       aggregate, output, loaded gradient and cache rows
    in flight = (3 S + 8 D) w b                        the next batch's gathered rows (sources and up to four
                                                       destination reads) and two batches' rows written behind
                                                       (outputs, cached aggregates, flushed gradients: S + 2 D each)
    topology  = 8 (D + 1 + E + 2 S) + 32 S + 16 (E + S)  the block, its slot plans and the transpose a layer caches

an upper bound (the sources of a local chunk are far fewer than ``D + E``), so a ``K`` it accepts meets the budget
and may be larger than needed. :func:`choose_host_chunks` takes the smallest ``K`` (up to the smallest part's
size) whose fixed part plus working set fits the worker's share, ``(1 - ARRAY_SHARE) * budget``.

The working set is what the worker's tensors take; its heap returns freed blocks to the system
(:func:`~graphscale.allocator.bound_heap`, set by the worker), without which glibc kept freed chunk blocks pass
after pass: measured on a 1M-vertex GCN, 2 workers, ``K = 320`` (tracked peak 44 MiB), the workers' anonymous peaks
were 511-517 MiB with glibc's adaptive threshold and 410-417 MiB with the bound, against 400 MiB modelled before
the runtime figure and the in-flight term were measured (:data:`RUNTIME_BYTES`); 495 MiB with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphscale.metrics.units import format_bytes
from graphscale.strategies.offload.host import ARRAY_SHARE
from graphscale.strategies.offload.transfer import STAGING_BYTES

#: a worker's anonymous memory besides its data: the interpreter, torch, numpy, numba with the layer kernels compiled
#: for the run's types, the mapped plans' views (measured on a 1M-vertex GCN, 2 workers: 271-274 MiB after setup,
#: 296-300 MiB after the first chunk pass less its staging slots)
RUNTIME_BYTES = 320 << 20


@dataclass(frozen=True)
class ChunkShape:
    """The largest part of a level-1 partition: ``nodes`` of the graph's ``num_nodes``, with ``edges`` in-edges;
    ``smallest``: the smallest part's vertices (the largest ``K``)."""

    num_nodes: int
    nodes: int
    edges: int
    smallest: int

    @classmethod
    def of(cls, owner: np.ndarray, degrees: np.ndarray, parts: int) -> ChunkShape:
        sizes = np.bincount(owner, minlength=parts)
        edges = np.bincount(owner, weights=degrees.astype(np.float64), minlength=parts)
        return cls(int(owner.size), int(sizes.max()), round(float(edges.max())), int(sizes.min()))


def chunk_working_set(shape: ChunkShape, chunks: int, width: int, element_size: int) -> int:
    """The bound on one chunk pass's bytes (module docstring) for ``K = chunks``."""
    d = math.ceil(shape.nodes / chunks)
    e = math.ceil(shape.edges / chunks)
    s = min(shape.num_nodes, d + e)
    buffers = 3 * (min(shape.nodes, s) + min(shape.num_nodes - shape.nodes, s)) * width * element_size
    rows = (3 * s + 4 * d) * width * element_size
    in_flight = (3 * s + 8 * d) * width * element_size
    topology = 8 * (d + 1 + e + 2 * s) + 32 * s + 16 * (e + s)
    return buffers + rows + in_flight + topology


def worker_fixed(num_params: int, moments: int, element_size: int) -> int:
    """A worker's bytes besides the chunk pass (module docstring)."""
    return RUNTIME_BYTES + 2 * STAGING_BYTES + (2 + moments) * num_params * element_size


def worker_share(budget: int) -> int:
    """The part of a ``--host-memory`` budget a worker's own memory may take (the rest: its host arrays)."""
    return int(budget * (1 - ARRAY_SHARE))


def worker_bytes(shape: ChunkShape, chunks: int, width: int, element_size: int, fixed: int) -> int:
    return fixed + chunk_working_set(shape, chunks, width, element_size)


def minimum_budget(shape: ChunkShape, width: int, element_size: int, fixed: int) -> int:
    """The smallest ``--host-memory`` any ``K`` fits: the largest ``K``'s worker bytes over the worker's share."""
    return math.ceil(worker_bytes(shape, max(shape.smallest, 1), width, element_size, fixed) / (1 - ARRAY_SHARE))


def choose_host_chunks(shape: ChunkShape, budget: int, width: int, element_size: int, fixed: int) -> int | None:
    """The smallest ``K`` in ``[1, smallest part]`` whose worker bytes fit :func:`worker_share` of ``budget``;
    ``None`` when none does. Bisection: the bound falls with ``K``."""
    share = worker_share(budget)
    k_max = max(shape.smallest, 1)
    if worker_bytes(shape, k_max, width, element_size, fixed) > share:
        return None
    lo, hi = 0, 1  # worker_bytes(lo) > share (0: unknown), worker_bytes(hi) <= share once found
    while worker_bytes(shape, hi, width, element_size, fixed) > share:
        lo, hi = hi, min(2 * hi, k_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if worker_bytes(shape, mid, width, element_size, fixed) <= share:
            hi = mid
        else:
            lo = mid
    return hi


def describe(shape: ChunkShape, chunks: int, budget: int, width: int, element_size: int, fixed: int) -> str:
    """One line: a worker's modelled bytes at ``K = chunks`` against its share of the budget."""
    need = worker_bytes(shape, chunks, width, element_size, fixed)
    return (f"{chunks} chunk{'s' if chunks != 1 else ''} per worker: a worker needs about {format_bytes(need)} (one chunk of "
            f"{math.ceil(shape.nodes / chunks):,} vertices and its sources, plus {format_bytes(fixed)} fixed) of the "
            f"{format_bytes(worker_share(budget))} its {format_bytes(budget)} --host-memory leaves besides its "
            "host arrays")


def plan_chunks(graph, owner, world: int, config, model, dims, scratch=None) -> tuple[int, str]:
    """``(K, why)`` for the parent's layout: ``--memory-budget``'s choice (the modelled device peak of every
    candidate's layout, planned in bounded memory under the folder ``scratch``), ``--chunks``
    as given (a line on stderr when the bound exceeds the worker's share of ``--host-memory``: the run goes on),
    else :func:`choose_host_chunks` of ``--host-memory``.

    Raises:
        ValueError: ``--chunks`` below 1; a ``--host-memory`` given by the user below :func:`minimum_budget`
            (one line naming the minimum). Without one, what the machine can spare is the budget, and when it is
            below the minimum the largest ``K`` is taken, with a line on stderr.
    """
    import sys

    from graphscale.distributed.launch import is_main_process
    from graphscale.metrics.host_memory import AUTO, resolve_host_memory
    from graphscale.metrics.units import parse_bytes
    from graphscale.strategies.optimizers import moment_count

    sc = config.strategy
    if sc.memory_budget:
        from graphscale.strategies.offload.cost import Bandwidths
        from graphscale.strategies.offload.memory import choose_chunks

        k = choose_chunks(graph, model, owner, world, parse_bytes(sc.memory_budget), config, dims, Bandwidths(),
                          scratch=scratch)
        return k, f"{k} chunks per worker: the fewest whose modelled device peak fits --memory-budget {sc.memory_budget}"
    if sc.chunks is not None and sc.chunks < 1:
        raise ValueError(f"--chunks must be >= 1, got {sc.chunks}")
    elem = next(model.parameters()).element_size()
    width = max(dims.in_dim, *dims.widths, *dims.agg, *dims.out)
    fixed = worker_fixed(sum(p.numel() for p in model.parameters()), moment_count(config.optim), elem)
    shape = ChunkShape.of(owner.numpy(), np.diff(graph.indptr.numpy()), world)
    budget = resolve_host_memory(config.host_memory)
    given = config.host_memory.strip().lower() not in AUTO
    fits = choose_host_chunks(shape, budget, width, elem, fixed)
    say = (lambda line: print(f"graphscale: {line}", file=sys.stderr)) if is_main_process() else (lambda line: None)
    if sc.chunks is not None:
        k = sc.chunks
        if worker_bytes(shape, k, width, elem, fixed) > worker_share(budget):
            better = f"{fits} would fit (omit --chunks to take it)" if fits is not None else \
                f"none fits below about {format_bytes(minimum_budget(shape, width, elem, fixed))}"
            say(f"warning: offload --chunks {k}: a worker may need about "
                f"{format_bytes(worker_bytes(shape, k, width, elem, fixed))}, more than the "
                f"{format_bytes(worker_share(budget))} its --host-memory {format_bytes(budget)} leaves besides its "
                f"host arrays; {better}")
        return k, f"--chunks {k}"
    if fits is None:
        minimum = minimum_budget(shape, width, elem, fixed)
        if given:
            raise ValueError(f"--host-memory {config.host_memory} is below offload's minimum for this graph on {world} "
                             f"workers: about {format_bytes(minimum)} ({minimum:,} bytes) per process")
        k = max(shape.smallest, 1)
        why = (f"{k} chunks per worker (the most): what the machine can spare, {format_bytes(budget)}, is below "
               f"offload's minimum of about {format_bytes(minimum)}")
    else:
        k = fits
        why = f"{describe(shape, k, budget, width, elem, fixed)}; the fewest chunks that fit"
    if config.progress:  # a setup notice, as the setup steps' lines (a warning above prints regardless)
        say(f"offload: {why}")
    return k, why

"""METIS vertex partitioning through pymetis, balancing vertices, aggregation work or work and training vertices."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import sys
import tempfile
import warnings

import numpy as np
import torch

from graphscale.config import DEFAULT_BALANCE
from graphscale.data.graph import Graph
from graphscale.options.shared import BALANCE_CHOICES
from graphscale.partition.base import VertexPartitioner, validate_num_parts, validate_owner
from graphscale.registry import PARTITIONERS

_METIS_OK = 1
_METIS_NOPTIONS = 40  # METIS 5's options array length


def _import_pymetis():
    try:
        import pymetis
    except ImportError as err:  # pragma: no cover - pymetis is a dependency
        raise ImportError("the 'metis' partitioner needs pymetis: pip install pymetis "
                          "(or choose --partitioner random)") from err
    return pymetis


def check_balance(balance: str) -> str:
    """Validate the ``balance`` option and return it.

    Raises:
        ValueError: ``balance`` is not one of :data:`BALANCE_CHOICES`.
    """
    if balance not in BALANCE_CHOICES:
        raise ValueError(f"balance must be one of {', '.join(BALANCE_CHOICES)}, got {balance!r}")
    return balance


def work_weights(graph: Graph) -> np.ndarray:
    """Aggregation work of every vertex: its in-edges plus its own row (``in-degree + 1``), int64 ``[N]``.

    Summed over a set of destinations this is what a layer's sparse kernels cost there (they run over row
    ranges balanced by the same ``edges + rows``); the ``+1`` also makes isolated vertices count.
    """
    return graph.in_degrees().numpy().astype(np.int64) + 1


def vertex_weights(graph: Graph, balance: str) -> np.ndarray | None:
    """METIS vertex weights for a ``balance`` mode.

    * ``vertices``: ``None`` (unit weights: equal vertex counts);
    * ``edges``: :func:`work_weights`, ``[N]``;
    * ``edges+train``: two constraints, ``[N, 2]``: the work and a training-vertex indicator (DistDGL's
      multi-constraint balancing), so parts get both equal work and equal shares of the training set. Without a
      training mask, or with an empty one, it is ``edges``.

    Raises:
        ValueError: unknown ``balance``.
    """
    check_balance(balance)
    if balance == "vertices":
        return None
    work = work_weights(graph)
    if balance == "edges" or graph.train_mask is None or not bool(graph.train_mask.any()):
        return work
    return np.stack([work, graph.train_mask.numpy().astype(np.int64)], axis=1)


#: METIS's peak extra host memory, fitted to pymetis's measured peak RSS on SBM graphs (docs/partitioners.md):
#: the symmetrised self-loop-free copy and its int64 temporaries, xadj / adjncy and METIS's coarsening levels
METIS_BYTES_PER_VERTEX = 640
METIS_BYTES_PER_RECORD = 128
METIS_FIXED_BYTES = 32 << 20
#: O(|V|) partitioners to name when METIS does not fit
METIS_ALTERNATIVES = "restream (restreaming LDG, close to METIS's cut), fennel, ldg or random"


def metis_memory_estimate(num_vertices: int, num_edges: int) -> int:
    """Bytes of host memory METIS's partition of a graph with ``num_vertices`` and ``num_edges`` records needs
    beyond the graph itself: ``METIS_FIXED_BYTES + METIS_BYTES_PER_VERTEX * N + METIS_BYTES_PER_RECORD * E``."""
    return METIS_FIXED_BYTES + METIS_BYTES_PER_VERTEX * int(num_vertices) + METIS_BYTES_PER_RECORD * int(num_edges)


def check_metis_memory(num_vertices: int, num_edges: int, host_memory: int | str | None = None, held: int = 0,
                       what: str = "") -> int:
    """Refuse (one line: the estimate, the budget, the alternatives) when METIS will not fit in the budget.

    Args:
        num_vertices, num_edges: the graph's size.
        host_memory: the budget in bytes or as a ``--host-memory`` value; ``None``/``auto``: what the machine can
            spare now (:func:`~graphscale.metrics.host_memory.resolve_host_memory`).
        held: bytes the caller must build in memory for METIS besides :func:`metis_memory_estimate` (offload's
            level 2: a part's induced subgraph), counted in the estimate.
        what: what the graph is, in the message (default: nothing, the graph being partitioned).

    Returns:
        The estimate in bytes.

    Raises:
        ValueError: the estimate exceeds the budget.
    """
    from graphscale.metrics.host_memory import resolve_host_memory
    from graphscale.metrics.units import format_bytes

    need = metis_memory_estimate(num_vertices, num_edges) + held
    budget = resolve_host_memory(host_memory)
    if need > budget:
        raise ValueError(f"metis would need about {format_bytes(need)} of host memory for {num_vertices:,} vertices "
                         f"and {num_edges:,} records{f' ({what})' if what else ''}, more than the "
                         f"{format_bytes(budget)} budget (--host-memory); partition in O(|V|) memory with "
                         f"{METIS_ALTERNATIVES}")
    return need


def _metis_library(pymetis) -> ctypes.CDLL | None:
    """METIS's C API as exported by pymetis's extension module (``None`` when this build hides it)."""
    if not (hasattr(pymetis, "zero_copy_dtype") and hasattr(pymetis, "OptionKey")):  # idx_t width, option indices
        return None
    try:
        from pymetis import _internal

        lib = ctypes.CDLL(_internal.__file__)
    except (ImportError, OSError):
        return None
    names = ("METIS_SetDefaultOptions", "METIS_PartGraphKway", "METIS_PartGraphRecursive")
    return lib if all(hasattr(lib, name) for name in names) else None


@contextlib.contextmanager
def c_stdout_captured():
    """Keep what C code writes to file descriptor 1 (METIS prints its complaints, such as ``***Cannot bisect a graph
    with 0 vertices!``, there) out of the command's output: it is collected and yielded as a list holding the text
    after the block (``[]`` where nothing was written or the descriptor cannot be redirected)."""
    captured: list[str] = []
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield captured
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace").strip()
            if text:
                captured.append(text)


def _part_graph_multi(pymetis, lib: ctypes.CDLL, xadj: np.ndarray, adjncy: np.ndarray, num_parts: int,
                      weights: np.ndarray, seed: int, ufactor: int | None) -> np.ndarray:
    """``METIS_PartGraph*`` with ``ncon = weights.shape[1]`` constraints (pymetis always passes ``ncon = 1``).

    Same choices as ``pymetis.part_graph``: recursive bisection up to 8 parts, k-way above, METIS's default
    options plus ``seed`` (and ``ufactor``).
    """
    idx = pymetis.zero_copy_dtype()
    n, ncon = weights.shape

    def ptr(a: np.ndarray):
        return a.ctypes.data_as(ctypes.c_void_p)

    options = np.zeros(_METIS_NOPTIONS, dtype=idx)
    lib.METIS_SetDefaultOptions(ptr(options))
    options[int(pymetis.OptionKey.SEED)] = seed
    options[int(pymetis.OptionKey.NUMBERING)] = 0
    if ufactor is not None:
        options[int(pymetis.OptionKey.UFACTOR)] = ufactor
    xadj, adjncy = np.ascontiguousarray(xadj, dtype=idx), np.ascontiguousarray(adjncy, dtype=idx)
    vwgt = np.ascontiguousarray(weights, dtype=idx)
    nvtxs, ncon_a, nparts = (np.array([v], dtype=idx) for v in (n, ncon, num_parts))
    edgecut, part = np.zeros(1, dtype=idx), np.zeros(n, dtype=idx)
    run = lib.METIS_PartGraphRecursive if num_parts <= 8 else lib.METIS_PartGraphKway
    status = run(ptr(nvtxs), ptr(ncon_a), ptr(xadj), ptr(adjncy), ptr(vwgt), None, None, ptr(nparts), None, None,
                 ptr(options), ptr(edgecut), ptr(part))
    if status != _METIS_OK:
        raise RuntimeError(f"METIS failed with status {status} on {n} vertices, {num_parts} parts, {ncon} constraints")
    return part


@PARTITIONERS.register("metis")
class MetisPartitioner(VertexPartitioner):
    """Minimise the edge cut of balanced parts with METIS.

    METIS needs an undirected graph without self-loops, so it sees the
    symmetrised, self-loop-free adjacency; the owner array and the vertex
    weights (:func:`vertex_weights`: in-degrees of the graph as given) apply to
    the graph as given. The METIS seed is ``seed``, which makes the result
    deterministic for a given pymetis build. METIS may leave a part empty on
    tiny or disconnected graphs; callers that need every part non-empty must
    check :func:`~graphscale.partition.base.partition_sizes`.

    pymetis passes a single balance constraint to METIS, so ``edges+train``
    calls METIS's C API from pymetis's extension module; a pymetis build that
    does not export it falls back to ``edges`` with a warning.

    Args:
        balance: what the parts balance, one of :data:`BALANCE_CHOICES`: ``vertices`` (equal vertex counts),
            ``edges`` (equal aggregation work, :func:`work_weights`) or ``edges+train`` (equal work and equal
            training vertices; ``edges`` without a training mask). Default :data:`DEFAULT_BALANCE`.
        ufactor: allowed imbalance per constraint in thousandths (METIS's default: 30 = 3% for k-way, 1 for the
            recursive bisection pymetis uses up to 8 parts); ``None`` keeps METIS's default.

    Before it starts, METIS's memory (:func:`metis_memory_estimate`) is checked against :attr:`host_memory`;
    a graph that will not fit is refused, naming the O(|V|) alternatives.

    Raises:
        ValueError: unknown ``balance``; the graph will not fit in the host memory budget.
    """

    name = "metis"

    def __init__(self, balance: str = DEFAULT_BALANCE, ufactor: int | None = None) -> None:
        self.balance = check_balance(balance)
        self.ufactor = ufactor

    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        return self._metis(graph, num_parts, seed, vertex_weights(graph, self.balance))

    def partition_weighted(self, graph: Graph, num_parts: int, weights, seed: int = 0) -> torch.Tensor:
        """Owner of every vertex, balancing the given vertex weights instead of ``balance``'s.

        Args:
            graph: the graph.
            num_parts: number of parts, ``1 <= num_parts <= graph.num_nodes``.
            weights: non-negative integer weights, ``[N]`` (one constraint) or ``[N, ncon]``.
            seed: METIS seed.

        Raises:
            ValueError: ``num_parts`` out of range, or ``weights`` of the wrong shape or sign.
        """
        validate_num_parts(num_parts, graph.num_nodes)
        weights = np.asarray(weights)
        if weights.shape[:1] != (graph.num_nodes,) or weights.ndim not in (1, 2) or \
                not np.issubdtype(weights.dtype, np.integer) or (weights.size and int(weights.min()) < 0):
            raise ValueError(f"weights must be non-negative integers of shape ({graph.num_nodes},) or "
                             f"({graph.num_nodes}, ncon), got {weights.dtype} {weights.shape}")
        if num_parts == 1:
            return torch.zeros(graph.num_nodes, dtype=torch.int64)
        return validate_owner(self._metis(graph, num_parts, seed, weights), graph.num_nodes, num_parts)

    def _metis(self, graph: Graph, num_parts: int, seed: int, weights: np.ndarray | None) -> torch.Tensor:
        check_metis_memory(graph.num_nodes, graph.num_edges, self.host_memory)
        pymetis = _import_pymetis()
        if graph.weighted:  # the cut counts edges: METIS reads the topology only
            graph = dataclasses.replace(graph, edge_weight=None)
        g = graph.remove_self_loops().symmetrize()
        xadj = g.indptr.numpy().astype(np.int32 if g.num_edges < 2**31 else np.int64)
        adjncy = g.indices.numpy().astype(xadj.dtype)
        if weights is not None and weights.ndim == 2 and weights.shape[1] == 1:
            weights = weights[:, 0]
        if weights is not None and weights.ndim == 2:
            lib = _metis_library(pymetis)
            if lib is not None:
                with c_stdout_captured():
                    parts = _part_graph_multi(pymetis, lib, xadj, adjncy, num_parts, weights, int(seed),
                                              self.ufactor)
                return torch.as_tensor(parts, dtype=torch.int64)
            warnings.warn(f"this pymetis build does not export METIS's C API, so METIS balances only the first of "
                          f"{weights.shape[1]} constraints (balance='edges+train' becomes 'edges')", RuntimeWarning,
                          stacklevel=3)
            weights = weights[:, 0]
        options = pymetis.Options(seed=int(seed))
        if self.ufactor is not None:
            options.ufactor = int(self.ufactor)
        idx = pymetis.zero_copy_dtype() if hasattr(pymetis, "zero_copy_dtype") else np.int64
        extra = {} if weights is None else {"vweights": np.ascontiguousarray(weights, dtype=idx)}
        with c_stdout_captured():
            if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
                result = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy), options=options, **extra)
            else:  # pragma: no cover - older pymetis
                result = pymetis.part_graph(num_parts, xadj=xadj, adjncy=adjncy, options=options, **extra)
        parts = result[1] if isinstance(result, tuple) else result.vertex_part
        return torch.as_tensor(np.asarray(parts), dtype=torch.int64)

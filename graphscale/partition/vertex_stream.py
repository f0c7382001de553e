"""Streaming vertex partitioners over vertices with their adjacency: LDG, Fennel, and their restreaming forms.

Vertices arrive one at a time (``order="natural"``: by id; ``"random"``: a
permutation drawn from ``seed``) together with their neighbours, the CSR row of
the graph (in-neighbours; graphscale datasets are symmetric, so these are all
neighbours). Each vertex is placed from the partitions of its placed
neighbours ``|N(v) ∩ P_s|`` and the current sizes ``|P_s|``:

* **LDG** (Stanton & Kliot, KDD 2012): maximise
  ``|N(v) ∩ P_s| * (1 - |P_s| / C)`` with capacity ``C = ceil(N / p)``.
* **Fennel** (Tsourakakis et al., WSDM 2014): maximise
  ``|N(v) ∩ P_s| - alpha * gamma * |P_s|^(gamma - 1)`` with ``gamma = 1.5``,
  ``alpha = sqrt(p) * m / N^gamma`` (``m`` = records / 2, the undirected edge
  count of a symmetric graph) and the hard cap ``|P_s| < nu * N / p``, ``nu = 1.1``.
* **restream** (Nishimura & Ugander, KDD 2013): the same scores over several
  passes in the same order; pass ``t`` starts with empty parts and counts each
  neighbour in the part it holds now (from this pass when already placed, else
  from pass ``t - 1``), so later passes see every neighbour. Passes stop early
  when one moves no vertex. ``balance="edges"`` weighs each vertex by its
  aggregation work (in-degree + 1), scaled so the weights sum to ``N``.

A full partition is never chosen; ties go to the smaller partition, then to the
smaller index; a neighbour equal to the vertex itself (a self-loop) is ignored.

Placing a vertex costs O(degree + log p), not O(p): only the parts its placed
neighbours hold are scored, plus the top of a tournament tree over the parts
below the cap (rebuilt in O(p) at the start of a pass, updated in O(log p) per
placement) that ranks them by the score a part with no neighbour of the vertex
gets, then by size, then by index. A part scores at least that much when it holds
neighbours, so no part outside the neighbours' parts beats the tree's top: the
choice is the same as scoring all ``p`` parts, ties included. A pass is
O(|E| + |V| log p) time.
State is the owner array, a per-vertex weight when balancing edges, and O(p)
counters and tree nodes. In natural order the CSR is read in blocks of rows
(:meth:`~graphscale.partition.csr_source.GraphEdges.row_blocks`: a graph
directory is read with positioned reads, a chunk at a time); in random order
each vertex's row is read where it lies (the graph's arrays, or read-only maps
of a directory's files).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
from graphscale.data.graph import Graph
from graphscale.partition.base import VertexPartitioner, validate_num_parts, validate_owner
from graphscale.partition.csr_source import GraphEdges
from graphscale.registry import PARTITIONERS

ORDERS = ("natural", "random")
#: what a restreaming partition balances (``--balance``)
RESTREAM_BALANCE = ("vertices", "edges")


@numba.njit(nogil=True, cache=True, inline="always")
def _score(count, load, fennel, cap, alpha, gamma):  # pragma: no cover - numba
    """A part's score for a vertex with ``count`` neighbours in it, the part's size being ``load``."""
    if fennel:
        return count - alpha * gamma * load ** (gamma - 1.0)
    return count * (1.0 - load / cap)


@numba.njit(nogil=True, cache=True, inline="always")
def _better(a, b, key, load):  # pragma: no cover - numba
    """The better of parts ``a`` and ``b`` (``-1``: none) for a vertex with no neighbour in either: the higher
    ``key`` (the score of an untouched part), then the smaller size, then the smaller index."""
    if a < 0:
        return b
    if b < 0:
        return a
    if key[a] > key[b] or (key[a] == key[b] and (load[a] < load[b] or (load[a] == load[b] and a < b))):
        return a
    return b


@numba.njit(nogil=True, cache=True)
def _set_leaf(s, tree, key, load, fennel, cap, alpha, gamma):  # pragma: no cover - numba
    """Re-rank part ``s`` after its size changed: O(log p)."""
    leaf = tree.size // 2 + s
    if load[s] < cap:
        key[s] = _score(0, load[s], fennel, cap, alpha, gamma)
        tree[leaf] = s
    else:
        tree[leaf] = -1  # a full part is never chosen
    i = leaf // 2
    while i >= 1:
        tree[i] = _better(tree[2 * i], tree[2 * i + 1], key, load)
        i //= 2


@numba.njit(nogil=True, cache=True)
def _empty_parts(load, tree, key, fennel, cap, alpha, gamma):  # pragma: no cover - numba
    """Start a pass: every part empty, ``tree`` (a tournament tree over the parts, ``tree[1]`` the best part for a
    vertex with no placed neighbour) rebuilt in O(p)."""
    p, leaves = load.size, tree.size // 2
    for s in range(leaves):
        if s < p:
            load[s] = 0.0
            key[s] = _score(0, 0.0, fennel, cap, alpha, gamma)
            tree[leaves + s] = s if 0.0 < cap else -1
        else:
            tree[leaves + s] = -1
    for i in range(leaves - 1, 0, -1):
        tree[i] = _better(tree[2 * i], tree[2 * i + 1], key, load)


@numba.njit(nogil=True, cache=True)
def _place(indptr, indices, row0, verts, owner, load, weight, weighted, fennel, cap, alpha, gamma,
           counts, touched, tree, key):  # pragma: no cover - numba
    """Place ``verts`` in turn; vertex ``v``'s row is ``indices[indptr[v - row0] - indptr[0]:...]``.

    Each vertex goes to the part of the highest score among those below ``cap``, ties to the smaller size, then the
    smaller index. Only the parts its placed neighbours hold are scored, and the best part for a vertex with no
    neighbour in it (``tree[1]``, kept by :func:`_set_leaf`): an untouched part scores no more than with the
    neighbours it could have had, and no more than ``tree[1]``, which is the best untouched score, ties to the
    smaller size and index (the winner is the same as scoring all ``p`` parts). O(degree + log p) per vertex;
    ``tree`` and ``key`` must match ``load`` on entry (:func:`_empty_parts`) and match it on return.

    Returns how many vertices changed part (a first placement counts)."""
    base = indptr[0]
    moved = 0
    for k in range(verts.size):
        v = verts[k]
        nt = 0
        for e in range(indptr[v - row0] - base, indptr[v - row0 + 1] - base):
            u = indices[e]
            if u == v:
                continue
            s = owner[u]
            if s >= 0:
                if counts[s] == 0:
                    touched[nt] = s
                    nt += 1
                counts[s] += 1
        best, best_score = -1, 0.0
        for j in range(nt + 1):
            s = touched[j] if j < nt else tree[1]
            if s < 0 or load[s] >= cap:
                continue
            score = _score(counts[s], load[s], fennel, cap, alpha, gamma)
            if best < 0 or score > best_score or (score == best_score and (
                    load[s] < load[best] or (load[s] == load[best] and s < best))):
                best, best_score = s, score
        if owner[v] != best:
            moved += 1
        owner[v] = best
        load[best] += weight[v] if weighted else 1.0
        _set_leaf(best if best >= 0 else load.size - 1, tree, key, load, fennel, cap, alpha, gamma)
        for j in range(nt):  # only the parts counted above
            counts[touched[j]] = 0
    return moved


class _VertexStreamPartitioner(VertexPartitioner):
    _fennel = False
    gamma = 1.5
    passes = 1
    balance = "vertices"

    def __init__(self, order: str = "natural") -> None:
        if order not in ORDERS:
            raise ValueError(f"{self.name}: order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.order = order

    @property
    def streams_rows(self) -> bool:
        """Whether :meth:`partition_csr` reads the CSR in blocks of rows only (natural order; random order reads
        rows anywhere): an induced subgraph can then be given as
        :class:`~graphscale.partition.induced.InducedEdges`, never built whole."""
        return self.order == "natural"

    def _capacity(self, n: int, num_parts: int) -> float:
        return float(math.ceil(n / num_parts))

    def _alpha(self, num_vertices: int, num_edges: int, num_parts: int) -> float:
        return 0.0

    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        return torch.from_numpy(self._stream(GraphEdges(graph), num_parts, seed))

    def partition_csr(self, csr: GraphEdges, num_parts: int, seed: int = 0,
                      chunk_edges: int = DEFAULT_CHUNK_EDGES) -> torch.Tensor:
        """Owner of every vertex of a CSR read in chunks (e.g. :meth:`GraphEdges.from_dir`): O(|V|) memory plus
        one block of about ``chunk_edges`` records; equal to :meth:`partition` of the same graph.

        Raises:
            TypeError / ValueError: as :meth:`partition`.
        """
        n = csr.num_vertices
        validate_num_parts(num_parts, n)
        if num_parts == 1:
            return torch.zeros(n, dtype=torch.int64)
        return validate_owner(self._stream(csr, num_parts, seed, chunk_edges), n, num_parts)

    def _weights(self, csr: GraphEdges) -> np.ndarray | None:
        if self.balance == "vertices":
            return None
        work = csr.in_degrees().astype(np.float64) + 1.0
        work *= csr.num_vertices / work.sum()
        return work

    def _stream(self, csr: GraphEdges, num_parts: int, seed: int, block_edges: int = DEFAULT_CHUNK_EDGES) -> np.ndarray:
        n = csr.num_vertices
        owner = np.full(n, -1, np.int64)
        load = np.zeros(num_parts, np.float64)
        leaves = 1 << max(num_parts - 1, 0).bit_length()
        tree, key = np.empty(2 * leaves, np.int64), np.empty(num_parts, np.float64)
        weight = self._weights(csr)
        score = (self._fennel, self._capacity(n, num_parts), self._alpha(n, csr.num_edges, num_parts), self.gamma)
        args = (owner, load, np.empty(0) if weight is None else weight, weight is not None, *score,
                np.zeros(num_parts, np.int64), np.empty(num_parts, np.int64), tree, key)
        order = np.random.default_rng(seed).permutation(n).astype(np.int64) if self.order == "random" else None
        for _ in range(self.passes):
            _empty_parts(load, tree, key, *score)
            if order is not None:
                indptr, indices = (np.asarray(a) for a in csr.arrays())
                moved = _place(indptr, indices, 0, order, *args)
            else:
                moved = 0
                for row, ptr, idx in csr.row_blocks(block_edges):
                    moved += _place(ptr, idx, row, np.arange(row, row + ptr.size - 1, dtype=np.int64), *args)
            if moved == 0:
                break
        return owner


@PARTITIONERS.register("ldg")
class LDGPartitioner(_VertexStreamPartitioner):
    """Linear Deterministic Greedy; see the module docstring.

    Args:
        order: ``natural`` (by vertex id) or ``random`` (seeded permutation).
    """

    name = "ldg"


class _FennelScore:
    """Fennel's capacity and size penalty (mixed into the Fennel and restreaming partitioners)."""

    gamma, nu = 1.5, 1.1

    def _capacity(self, n: int, num_parts: int) -> float:
        return float(max(math.ceil(self.nu * n / num_parts), math.ceil(n / num_parts)))

    def _alpha(self, num_vertices: int, num_edges: int, num_parts: int) -> float:
        return math.sqrt(num_parts) * (num_edges / 2) / num_vertices ** self.gamma


@PARTITIONERS.register("fennel")
class FennelPartitioner(_FennelScore, _VertexStreamPartitioner):
    """Fennel; see the module docstring.

    Args:
        order: ``natural`` (by vertex id) or ``random`` (seeded permutation).
        gamma: the size-penalty exponent (default 1.5).
        nu: hard cap on a partition as a multiple of ``N / p`` (default 1.1).
    """

    name = "fennel"
    _fennel = True

    def __init__(self, order: str = "natural", gamma: float = 1.5, nu: float = 1.1) -> None:
        super().__init__(order)
        if gamma <= 1 or nu < 1:
            raise ValueError(f"fennel: need gamma > 1 and nu >= 1, got gamma={gamma}, nu={nu}")
        self.gamma, self.nu = float(gamma), float(nu)


@PARTITIONERS.register("restream")
class RestreamPartitioner(_FennelScore, _VertexStreamPartitioner):
    """Restreaming LDG or Fennel in O(|V|) memory; see the module docstring.

    Args:
        score: ``ldg`` (default) or ``fennel``: the placement score of every pass.
        passes: streaming passes, at least 1 (default 10; 1 is plain Fennel / LDG with this ``nu``).
        order: ``natural`` (by vertex id; the CSR is read in blocks) or ``random`` (a seeded permutation,
            the same every pass).
        gamma: Fennel's size-penalty exponent (default 1.5).
        nu: hard cap on a part's size (its weight with ``balance="edges"``) as a multiple of the mean
            (default 1.05): a vertex goes only to a part below the cap.
        balance: ``vertices`` (default) or ``edges`` (aggregation work: in-degree + 1 per vertex).
    """

    name = "restream"
    training_defaults = {"balance": "edges"}

    def __init__(self, score: str = "ldg", passes: int = 10, order: str = "natural", gamma: float = 1.5,
                 nu: float = 1.05, balance: str = "vertices") -> None:
        super().__init__(order)
        if score not in ("fennel", "ldg"):
            raise ValueError(f"restream: score must be fennel or ldg, got {score!r}")
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ValueError(f"restream: passes must be an integer >= 1, got {passes!r}")
        if gamma <= 1 or nu < 1:
            raise ValueError(f"restream: need gamma > 1 and nu >= 1, got gamma={gamma}, nu={nu}")
        if balance not in RESTREAM_BALANCE:
            raise ValueError(f"restream: balance must be one of {', '.join(RESTREAM_BALANCE)}, got {balance!r} "
                             "(metis balances edges+train)")
        self.score, self.passes, self.gamma, self.nu, self.balance = score, passes, float(gamma), float(nu), balance
        self._fennel = score == "fennel"

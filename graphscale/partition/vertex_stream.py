"""One-pass streaming vertex partitioners over vertices with their adjacency: LDG and Fennel.

Vertices arrive one at a time (``order="natural"``: by id; ``"random"``: a
permutation drawn from ``seed``) together with their neighbours, the CSR row of
the graph (in-neighbours; graphscale datasets are symmetric, so these are all
neighbours). Each vertex is placed for good, from the partitions of its
already-placed neighbours ``|N(v) ∩ P_s|`` and the current sizes ``|P_s|``:

* **LDG** (Stanton & Kliot, KDD 2012): maximise
  ``|N(v) ∩ P_s| * (1 - |P_s| / C)`` with capacity ``C = ceil(N / p)``.
* **Fennel** (Tsourakakis et al., WSDM 2014): maximise
  ``|N(v) ∩ P_s| - alpha * gamma * |P_s|^(gamma - 1)`` with ``gamma = 1.5``,
  ``alpha = sqrt(p) * m / N^gamma`` (``m`` = records / 2, the undirected edge
  count of a symmetric graph) and the hard cap ``|P_s| < nu * N / p``, ``nu = 1.1``.

A full partition is never chosen; ties go to the smaller partition, then to the
smaller index. State is the owner array plus ``p`` counters; one pass of a numba
kernel over the CSR (which may be memory-mapped).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from graphscale.data.graph import Graph
from graphscale.partition.base import VertexPartitioner
from graphscale.registry import PARTITIONERS

ORDERS = ("natural", "random")


@numba.njit(nogil=True, cache=True)
def _vertex_stream(indptr, indices, order, owner, load, fennel, cap, alpha, gamma):  # pragma: no cover - numba
    p = load.size
    counts = np.zeros(p, np.int64)
    for k in range(order.size):
        v = order[k]
        for e in range(indptr[v], indptr[v + 1]):
            s = owner[indices[e]]
            if s >= 0:
                counts[s] += 1
        best, best_score = -1, 0.0
        for s in range(p):
            if load[s] >= cap:
                continue
            if fennel:
                score = counts[s] - alpha * gamma * load[s] ** (gamma - 1.0)
            else:
                score = counts[s] * (1.0 - load[s] / cap)
            if best < 0 or score > best_score or (score == best_score and load[s] < load[best]):
                best, best_score = s, score
        owner[v] = best
        load[best] += 1
        for s in range(p):
            counts[s] = 0


class _VertexStreamPartitioner(VertexPartitioner):
    _fennel = False
    gamma = 1.5

    def __init__(self, order: str = "natural") -> None:
        if order not in ORDERS:
            raise ValueError(f"{self.name}: order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.order = order

    def _capacity(self, n: int, num_parts: int) -> float:
        return float(math.ceil(n / num_parts))

    def _alpha(self, graph: Graph, num_parts: int) -> float:
        return 0.0

    def _partition(self, graph: Graph, num_parts: int, seed: int) -> torch.Tensor:
        n = graph.num_nodes
        order = np.random.default_rng(seed).permutation(n) if self.order == "random" else np.arange(n)
        owner = np.full(n, -1, np.int64)
        load = np.zeros(num_parts, np.int64)
        _vertex_stream(graph.indptr.numpy(), graph.indices.numpy(), order.astype(np.int64), owner, load,
                       self._fennel, self._capacity(n, num_parts), self._alpha(graph, num_parts), self.gamma)
        return torch.from_numpy(owner)


@PARTITIONERS.register("ldg")
class LDGPartitioner(_VertexStreamPartitioner):
    """Linear Deterministic Greedy; see the module docstring.

    Args:
        order: ``natural`` (by vertex id) or ``random`` (seeded permutation).
    """

    name = "ldg"


@PARTITIONERS.register("fennel")
class FennelPartitioner(_VertexStreamPartitioner):
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

    def _capacity(self, n: int, num_parts: int) -> float:
        return float(max(math.ceil(self.nu * n / num_parts), math.ceil(n / num_parts)))

    def _alpha(self, graph: Graph, num_parts: int) -> float:
        m = graph.num_edges / 2
        return math.sqrt(num_parts) * m / graph.num_nodes ** self.gamma

"""Device feature caches of the data-parallel baselines: DGL-like (none), PaGraph-like and Quiver-like.

Every policy gives worker ``r`` a set ``C_r`` of at most ``cap = floor(cache_fraction * N)``
vertices whose feature rows stay on its device for the whole run, ranked by the
degree in the sampling direction (how often a vertex can be drawn as a source:
its out-degree; the in-degree on symmetric graphs), ties by ascending id:

* ``none`` (DGL): ``C_r`` is empty; every input row of a micro-batch comes from the host.
* ``pagraph``: ``C_r`` = the ``cap`` highest-degree vertices of the ``L``-hop
  in-neighbourhood of worker ``r``'s own training vertices. Caches are
  independent and overlap; a local miss always comes from the host.
* ``quiver``: the ``W * cap`` highest-degree vertices of the whole graph, dealt out
  round-robin by hotness rank (rank ``k`` to worker ``k mod W``), so the caches are
  disjoint. A local miss is read from the peer that caches the row when one
  does (a worker-to-worker transfer), else from the host.

With ``V0_r`` the input rows of worker ``r``'s micro-batch and ``C = union_r C_r``,
the rows moved per micro-batch are (``d`` features, ``s`` bytes per element)::

    host -> device   none: |V0_r|,   pagraph: |V0_r \\ C_r|,   quiver: |V0_r \\ C|     (x d s)
    peer -> device   quiver: |V0_r ∩ (C \\ C_r)|                                      (x d s)

:meth:`FeatureCache.classify` splits a micro-batch's input ids into exactly these
three groups (own cache, peer cache, host).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
import torch

from graphscale.data.graph import Graph
from graphscale.options.shared import CACHE_POLICIES as POLICIES


@nb.njit(cache=True)
def _khop_kernel(indptr, indices, seeds, hops, num_nodes):
    """bool mask of the vertices within ``hops`` in-edges of ``seeds`` (seeds included)."""
    seen = np.zeros(num_nodes, np.bool_)
    frontier = np.empty(num_nodes, np.int64)
    n = 0
    for s in seeds:
        if not seen[s]:
            seen[s] = True
            frontier[n] = s
            n += 1
    lo = 0
    for _ in range(hops):
        hi = n
        for f in range(lo, hi):
            v = frontier[f]
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if not seen[u]:
                    seen[u] = True
                    frontier[n] = u
                    n += 1
        lo = hi
    return seen


def khop_in_neighbourhood(graph: Graph, seeds: torch.Tensor, hops: int) -> torch.Tensor:
    """bool ``[N]``: vertices from which a path of at most ``hops`` edges reaches a seed (seeds included)."""
    seeds_np = np.ascontiguousarray(torch.as_tensor(seeds).cpu().numpy(), dtype=np.int64)
    mask = _khop_kernel(graph.indptr.numpy(), graph.indices.numpy(), seeds_np, int(hops), graph.num_nodes)
    return torch.from_numpy(mask)


def hotness_order(degrees: torch.Tensor, candidates: torch.Tensor | None = None) -> torch.Tensor:
    """Vertex ids by descending degree, ties by ascending id (restricted to ``candidates`` when given)."""
    ids = torch.arange(degrees.numel()) if candidates is None else torch.as_tensor(candidates, dtype=torch.int64)
    deg = degrees[ids].numpy()
    order = np.lexsort((ids.numpy(), -deg))
    return ids[torch.from_numpy(order)]


def access_order(reads: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """Vertex ids by descending ``reads`` (how often a replayed epoch read each row), ties by descending degree,
    then ascending id: deterministic whatever the counts."""
    ids = np.arange(degrees.numel())
    order = np.lexsort((ids, -degrees.numpy().astype(np.int64), -reads.numpy().astype(np.int64)))
    return torch.from_numpy(order.astype(np.int64))


def cache_rows(cache_fraction: float, num_nodes: int) -> int:
    """``cap = floor(cache_fraction * N)``, the cache rows of one worker."""
    if not 0.0 <= float(cache_fraction) <= 1.0:
        raise ValueError(f"cache_fraction must lie in [0, 1], got {cache_fraction!r}")
    return int(np.floor(float(cache_fraction) * num_nodes + 1e-9))


@dataclass
class FeatureCache:
    """The cache layout of one data-parallel worker (see the module docstring).

    Attributes:
        policy: ``none``, ``pagraph`` or ``quiver``.
        rank: the worker.
        world_size: workers ``W``.
        ids: int64 vertex ids this worker caches, in slot order.
        holder: int16 ``[N]``: the worker whose cache holds ``v`` as far as this worker can use it
            (this worker for its own rows; a peer for Quiver's rows of other workers), ``-1`` = host.
        slot: int32 ``[N]`` (int64 from 2^31 vertices on): the row of ``v`` in ``holder``'s cache
            (``-1`` where ``holder`` is -1).
    """

    policy: str
    rank: int
    world_size: int
    ids: torch.Tensor
    holder: torch.Tensor
    slot: torch.Tensor

    @classmethod
    def build(cls, policy: str, graph: Graph, rank: int, world_size: int, cache_fraction: float,
              own_train: torch.Tensor | None = None, hops: int = 1,
              degrees: torch.Tensor | None = None) -> FeatureCache:
        """Choose the cached vertices of worker ``rank``.

        Args:
            policy: ``none``, ``pagraph`` or ``quiver``.
            graph: the whole graph.
            rank, world_size: this worker and ``W``.
            cache_fraction: rows per worker as a fraction of all vertices, in ``[0, 1]``.
            own_train: ``pagraph``: this worker's training vertices.
            hops: ``pagraph``: neighbourhood depth (the model's layer count).
            degrees: degree in the sampling direction (default: ``graph.out_degrees()``).

        Raises:
            ValueError: unknown policy or bad fraction (naming the option), missing ``own_train``.
        """
        if policy not in POLICIES:
            raise ValueError(f"--cache must be one of {', '.join(POLICIES)}, got {policy!r}")
        n = graph.num_nodes
        cap = cache_rows(cache_fraction, n)
        degrees = graph.out_degrees() if degrees is None else torch.as_tensor(degrees, dtype=torch.int64)
        if world_size > torch.iinfo(torch.int16).max:
            raise ValueError(f"feature caches support at most {torch.iinfo(torch.int16).max} workers")
        holder = torch.full((n,), -1, dtype=torch.int16)
        slot = torch.full((n,), -1, dtype=torch.int32 if n < 2**31 else torch.int64)
        if policy == "none" or cap == 0:
            ids = torch.zeros(0, dtype=torch.int64)
        elif policy == "pagraph":
            if own_train is None:
                raise ValueError("the pagraph cache needs the worker's own training vertices")
            candidates = torch.nonzero(khop_in_neighbourhood(graph, own_train, hops)).flatten()
            ids = hotness_order(degrees, candidates)[:cap]
        else:  # quiver
            hot = hotness_order(degrees)[: min(n, world_size * cap)]
            ranks = torch.arange(hot.numel())
            holder[hot] = (ranks % world_size).to(holder.dtype)
            slot[hot] = (ranks // world_size).to(slot.dtype)
            ids = hot[rank::world_size].clone()
        holder[ids] = rank
        slot[ids] = torch.arange(ids.numel(), dtype=slot.dtype)
        return cls(policy, rank, world_size, ids, holder, slot)

    def classify(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split input ids into own-cache hits, peer-cache hits and host loads.

        Returns:
            ``own_pos``, ``own_slot``: rows served by this worker's cache and their slots;
            ``peer_pos``, ``peer_holder``, ``peer_slot``: rows served by a peer (Quiver only);
            ``host_pos``: rows loaded from the host. Positions index ``ids``.
        """
        holder = self.holder[ids].long()
        own = holder == self.rank
        peer = (holder >= 0) & ~own
        own_pos = torch.nonzero(own).flatten()
        peer_pos = torch.nonzero(peer).flatten()
        return {"own_pos": own_pos, "own_slot": self.slot[ids[own_pos]].long(),
                "peer_pos": peer_pos, "peer_holder": holder[peer_pos], "peer_slot": self.slot[ids[peer_pos]].long(),
                "host_pos": torch.nonzero(holder < 0).flatten()}

r"""Cost-effective subgraph reorganisation: HongTu's two-phase greedy (spec §3.6, Algorithm 4).

The two-level partition fixes *which* chunks exist; the schedule decides which
chunk of every partition runs in which batch, and in which order the batches
run. Minimising the cost ``C = V_H/B_H + V_P/B_P + V_R/B_R`` over schedules is
NP-hard (a TSP variant), so the chunks are permuted greedily:

* **Phase 1** (inter-worker duplication): batch ``j`` starts as chunk
  ``(0, j)``, with ``T_j = N(S_{0,j})``. For every further partition ``i`` and
  batch ``j = 0..K-1`` in turn, the remaining chunk ``s`` of partition ``i``
  with the largest overlap ``|N(S_{i,s}) ∩ T_j|`` joins batch ``j`` and
  ``T_j ← T_j ∪ N(S_{i,s})`` (ties: lowest chunk index).
* **Phase 2** (intra-worker reuse): order the batches as a greedy
  nearest-neighbour path starting at batch 0: next is the unvisited batch
  ``b`` maximising ``|T_cur ∩ T_b|`` (``= Σ_i |T_{i,cur} ∩ T_{i,b}|``, since
  ownership is fixed; ties: lowest index).

The cost model guides the result: the reorganised schedule is kept only if its
modelled cost of one ``+intra`` layer pass is not higher than the identity
schedule's (the greedy has no quality bound).

Work: phase 1 evaluates ``K`` overlap vectors per partition, each one pass
over the partition's concatenated neighbour lists (``O(K α |V|)`` in all,
with ``K`` boolean masks over ``|V|``); phase 2 is one sparse ``K x K``
overlap product and an ``O(K^2)`` path.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from graphscale.data.graph import Graph
from graphscale.strategies.offload.cost import Bandwidths, layer_pass_rows, pass_cost
from graphscale.strategies.offload.plan import ChunkSets, neighbour_sets


def phase1(nbr: list[list[np.ndarray]], num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Assign chunks to batches greedily by overlap with the batch's transition set.

    Args:
        nbr: ``nbr[i][s]`` = ``N(S_{i,s})`` as int64 arrays.
        num_nodes: ``|V|``.

    Returns:
        ``(assign, masks)``: ``assign[i, j]`` = chunk of partition ``i`` in batch ``j``; ``masks[j]`` = ``T_j``.
    """
    m, k = len(nbr), len(nbr[0])
    assign = np.zeros((m, k), dtype=np.int64)
    assign[0] = np.arange(k)
    masks = np.zeros((k, num_nodes), dtype=bool)
    for j in range(k):
        masks[j, nbr[0][j]] = True
    for i in range(1, m):
        flat = np.concatenate(nbr[i]) if k else np.zeros(0, dtype=np.int64)
        seg = np.repeat(np.arange(k), [a.size for a in nbr[i]])
        remaining = np.ones(k, dtype=bool)
        for j in range(k):
            overlap = np.bincount(seg, weights=masks[j, flat], minlength=k)
            overlap[~remaining] = -1
            s = int(np.argmax(overlap))
            assign[i, j] = s
            remaining[s] = False
            masks[j, nbr[i][s]] = True
    return assign, masks


def phase2(masks: np.ndarray) -> np.ndarray:
    """Order batches by a greedy nearest-neighbour path over ``|T_a ∩ T_b|``, starting at batch 0."""
    k = masks.shape[0]
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    incidence = sp.csr_matrix(masks.astype(np.float32))
    return greedy_path((incidence @ incidence.T).toarray())


def greedy_path(overlap: np.ndarray) -> np.ndarray:
    """The greedy nearest-neighbour path over a ``[K, K]`` overlap matrix from batch 0: next is the unvisited
    batch with the largest overlap with the current one (ties: lowest index)."""
    k = overlap.shape[0]
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    order = [0]
    left = np.ones(k, dtype=bool)
    left[0] = False
    cur = 0
    for _ in range(k - 1):
        score = np.where(left, overlap[cur], -1)
        cur = int(np.argmax(score))
        order.append(cur)
        left[cur] = False
    return np.asarray(order, dtype=np.int64)


def schedule_batches(owner: torch.Tensor, chunk: torch.Tensor, assign: np.ndarray,
                     order: np.ndarray) -> torch.Tensor:
    """``batch[v]`` for chunk ``assign[i, order[p]]`` of partition ``i`` running at position ``p``."""
    m, k = assign.shape
    position = np.zeros((m, k), dtype=np.int64)
    for p, b in enumerate(order):
        position[np.arange(m), assign[:, b]] = p
    return torch.from_numpy(position[owner.numpy(), chunk.numpy()])


def reorganize(graph: Graph, owner: torch.Tensor, chunk: torch.Tensor, num_parts: int, num_chunks: int,
               width: int, element_size: int, bw: Bandwidths | None = None) -> torch.Tensor:
    """The two-phase greedy schedule, kept if its modelled ``+intra`` pass cost is not higher.

    Args:
        graph: the graph.
        owner, chunk: the two-level partition.
        num_parts, num_chunks: ``M``, ``K``.
        width: row width used to weigh the cost terms (all three scale with it).
        element_size: bytes per element.
        bw: link speeds.

    Returns:
        ``batch`` (int64 ``[N]``): the batch position of every vertex's chunk.
    """
    bw = bw or Bandwidths()
    owner = torch.as_tensor(owner, dtype=torch.int64)
    chunk = torch.as_tensor(chunk, dtype=torch.int64)
    if num_chunks == 1:
        return chunk.clone()
    sets = neighbour_sets(graph, owner * num_chunks + chunk, num_parts * num_chunks)
    nbr = [[sets[i * num_chunks + s].numpy() for s in range(num_chunks)] for i in range(num_parts)]
    assign, masks = phase1(nbr, graph.num_nodes)
    order = phase2(masks)
    batch = schedule_batches(owner, chunk, assign, order)

    def cost(b: torch.Tensor) -> float:
        rows = layer_pass_rows(ChunkSets.build(graph, owner, b, num_parts, num_chunks), "intra")
        return pass_cost(rows, width, element_size, bw)

    return batch if cost(batch) <= cost(chunk) else chunk.clone()


def random_schedule(owner: torch.Tensor, batch: torch.Tensor, num_parts: int, num_chunks: int,
                    seed: int) -> torch.Tensor:
    """Permute every partition's batch positions independently at random (re-pairs and reorders chunks)."""
    gen = torch.Generator().manual_seed(int(seed))
    perms = torch.stack([torch.randperm(num_chunks, generator=gen) for _ in range(num_parts)])
    return perms[torch.as_tensor(owner, dtype=torch.int64), torch.as_tensor(batch, dtype=torch.int64)]

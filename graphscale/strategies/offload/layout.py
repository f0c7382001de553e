r"""The parent's offload planner in bounded memory: chunk sets and worker plans written one piece at a time.

:meth:`~graphscale.strategies.offload.strategy.OffloadStrategy.prepare_shared` writes, into the shared folder
the workers map, what :meth:`ChunkSets.build <graphscale.strategies.offload.plan.ChunkSets.build>`,
:func:`~graphscale.strategies.offload.reorg.reorganize` and
:func:`~graphscale.strategies.offload.plan.build_worker_plan` compute in memory, the very same files
(:func:`write_layout`), holding no edge-sized array of the whole graph and no set of all chunks at once:

1. the two-level partition (:func:`~graphscale.strategies.offload.plan.two_level_partition`; a partitioner that
   streams rows reads each part's induced subgraph in blocks of rows);
2. every chunk's destinations ``S_{i,s}`` (one stable sort of the chunk ids) and neighbour set ``N(S_{i,s})``
   (its destinations' CSR rows gathered block by block from the graph, marked in one ``bool [N]`` array, the
   members collected as they are first marked: linear in the chunk, not in ``N``) go to a scratch folder, one chunk
   at a time;
3. ``--dedup reorg``: HongTu's two-phase greedy over the mapped sets, ``T_j`` as bit-packed ``[K, N/8]`` masks
   (:func:`reorganize_sets`, the same choices as :func:`~graphscale.strategies.offload.reorg.reorganize`);
4. the scheduled sets ``V_{i,j}``, ``N_{i,j}`` (the chunk sets permuted), ``T_{i,j}`` (per batch and owner) are
   written and mapped back, the scratch folder removed;
5. each worker's plan is written batch by batch (:func:`~graphscale.strategies.offload.plan.batch_plans`, each
   chunk's block built in one pass over its rows: :mod:`~graphscale.strategies.offload.chunk_block`), one worker
   after the other.

Memory: a few ``int64 [N]`` arrays (owner, chunk, schedule, degrees, the slot map, the chunk blocks' position map,
a sort's result), ``bool [N]``
marks and ``K / 8`` bytes per vertex of masks, plus one chunk's rows and plan at a time: that chunk's size is
what ``K`` (:mod:`~graphscale.strategies.offload.chunk_budget`) bounds. METIS needs each part's induced topology
whole: its memory is checked against the host budget first, and a part that will not fit is refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from graphscale.data.graph import Graph
from graphscale.partition.induced import gather_rows, row_ranges
from graphscale.strategies.offload.chunk_block import mark_new
from graphscale.strategies.offload.cost import Bandwidths, pass_cost, rows_from_counts
from graphscale.strategies.offload.plan import (
    ChunkSets,
    batch_plans,
    plan_folder,
    two_level_partition,
    worker_plan_header,
)
from graphscale.strategies.offload.ragged import RaggedWriter, load_ragged
from graphscale.strategies.offload.reorg import greedy_path

#: parent records whose sources are gathered at a time when marking a chunk's neighbour set (16 bytes each of
#: temporaries)
GATHER_EDGES = 1 << 20


def write_group_sets(graph: Graph, group: np.ndarray, num_groups: int, folder: Path,
                     gather_edges: int | None = None) -> None:
    """Write ``dst`` (every group's vertices, ascending) and ``nbr`` (``V_g ∪ in-neighbours(V_g)``, ascending) as
    ragged files in ``folder``, one group at a time: the sets :func:`~graphscale.strategies.offload.plan.neighbour_sets`
    gives, with one ``bool [N]`` mark array and ``gather_edges`` (default :data:`GATHER_EDGES`) gathered records as
    temporaries."""
    gather_edges = GATHER_EDGES if gather_edges is None else gather_edges
    order = np.argsort(group, kind="stable")  # ascending ids within a group, as ChunkSets.build's stable argsort
    offsets = np.zeros(num_groups + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=num_groups), out=offsets[1:])
    np.save(folder / "dst.npy", order)
    np.save(folder / "dst_offsets.npy", offsets)
    indptr, indices = graph.indptr.numpy(), graph.indices.numpy()
    mark = np.zeros(graph.num_nodes, bool)
    writer = RaggedWriter(folder, "nbr")
    for g in range(num_groups):
        nodes = order[offsets[g]:offsets[g + 1]]
        mark[nodes] = True
        found = [nodes]  # the set's members as they are first marked: linear in the group, not in N
        degree = np.asarray(indptr[nodes + 1], np.int64) - np.asarray(indptr[nodes], np.int64)
        for first, last in row_ranges(degree, gather_edges):
            found.append(mark_new(gather_rows(indptr, indices, nodes[first:last])[1], mark))
        members = np.sort(np.concatenate(found))
        writer.append(members)
        mark[members] = False
    writer.close()


def _popcount(bits: np.ndarray) -> int:
    return int(np.bitwise_count(bits).sum(dtype=np.int64))


def schedule_counts(nbr: list[torch.Tensor], owner: np.ndarray, num_parts: int, num_chunks: int,
                    position: np.ndarray) -> tuple[int, int, int, int, int]:
    """``(local, remote, neighbours, transition, overlap)`` of :func:`~graphscale.strategies.offload.cost.rows_from_counts`
    for the schedule ``position[i, s]`` (batch of chunk ``s`` of part ``i``), from the chunk sets ``nbr[i*K + s]``;
    two ``bool [N]`` batch masks as temporaries."""
    m, k = num_parts, num_chunks
    local = remote = neighbours = 0
    for i in range(m):
        for s in range(k):
            nb = nbr[i * k + s].numpy()
            r = int(np.count_nonzero(owner[nb] != i))
            remote, local, neighbours = remote + r, local + nb.size - r, neighbours + nb.size
    chunk_at = np.argsort(position, axis=1)  # chunk_at[i, j]: the chunk of part i in batch j
    transition = overlap = 0
    prev = None
    for j in range(k):
        mask = np.zeros(owner.size, bool)
        for i in range(m):
            mask[nbr[i * k + chunk_at[i, j]].numpy()] = True
        transition += int(np.count_nonzero(mask))
        if prev is not None:
            overlap += int(np.count_nonzero(mask & prev))
        prev = mask
    return local, remote, neighbours, transition, overlap


def reorganize_sets(nbr: list[torch.Tensor], owner: np.ndarray, num_parts: int, num_chunks: int, width: int,
                    element_size: int, bw: Bandwidths) -> np.ndarray:
    """:func:`~graphscale.strategies.offload.reorg.reorganize` on mapped chunk sets ``nbr[i*K + s]``: the schedule
    ``position[i, s]`` (int64 ``[M, K]``), the reorganised one when its modelled ``+intra`` pass cost is not higher
    than the identity's. The batch masks are bit-packed (``K / 8`` bytes per vertex); overlaps are exact counts."""
    m, k, n = num_parts, num_chunks, owner.size
    identity = np.tile(np.arange(k, dtype=np.int64), (m, 1))
    if k == 1:
        return identity
    packed = np.zeros((k, (n + 7) // 8), np.uint8)
    row = np.zeros(n, bool)
    for j in range(k):
        row[:] = False
        row[nbr[j].numpy()] = True
        packed[j] = np.packbits(row)
    assign = identity.copy()  # phase 1: assign[i, j] = the chunk of part i in batch j
    for i in range(1, m):
        remaining = np.ones(k, dtype=bool)
        for j in range(k):
            row = np.unpackbits(packed[j], count=n).view(bool)
            overlap = np.array([np.count_nonzero(row[nbr[i * k + s].numpy()]) if remaining[s] else -1
                                for s in range(k)], np.int64)
            s = int(np.argmax(overlap))
            assign[i, j], remaining[s] = s, False
            row[nbr[i * k + s].numpy()] = True
            packed[j] = np.packbits(row)
    overlaps = np.array([[_popcount(packed[a] & packed[b]) for b in range(k)] for a in range(k)], np.int64)
    order = greedy_path(overlaps)  # phase 2
    del packed
    position = np.zeros((m, k), np.int64)
    for p, b in enumerate(order):
        position[np.arange(m), assign[:, b]] = p

    def cost(pos: np.ndarray) -> float:
        return pass_cost(rows_from_counts(*schedule_counts(nbr, owner, m, k, pos), "intra"), width, element_size, bw)

    return position if cost(position) <= cost(identity) else identity


def write_chunk_sets(graph: Graph, owner: np.ndarray, chunk: np.ndarray, position: np.ndarray, nbr: list,
                     folder: Path) -> None:
    """Write the scheduled :class:`ChunkSets` (its :meth:`ChunkSets.save` files) from the chunk sets ``nbr[i*K+s]``
    and the schedule ``position[i, s]``, one set at a time."""
    m, k = position.shape
    batch = position[owner, chunk]
    group = owner * k + batch
    np.save(folder / "owner.npy", owner)
    np.save(folder / "batch.npy", batch)
    degrees = np.diff(graph.indptr.numpy()).astype(np.float64)
    edges = np.round(np.bincount(group, weights=degrees, minlength=m * k)).astype(np.int64)
    np.save(folder / "num_edges.npy", edges.reshape(m, k))
    del degrees
    order = np.argsort(group, kind="stable")
    offsets = np.zeros(m * k + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=m * k), out=offsets[1:])
    del group
    np.save(folder / "dst.npy", order)
    np.save(folder / "dst_offsets.npy", offsets)
    del order
    chunk_at = np.argsort(position, axis=1)
    writer = RaggedWriter(folder, "nbr")
    for i in range(m):
        for j in range(k):
            writer.append(nbr[i * k + chunk_at[i, j]])
    writer.close()
    writer = RaggedWriter(folder, "trans")
    for i in range(m):  # T_{i,j} = (∪_p N_{p,j}) ∩ V_i
        for j in range(k):
            parts = [nb[owner[nb] == i] for nb in (nbr[p * k + chunk_at[p, j]].numpy() for p in range(m))]
            writer.append(np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64))
    writer.close()


def write_layout(graph: Graph, owner: torch.Tensor, world: int, chunks: int, partitioner: str, seed: int,
                 dedup: str, width: int, element_size: int, folder: Path, bw: Bandwidths | None = None,
                 host_memory: int | str | None = None) -> None:
    """Plan the offload layout of ``graph`` and write it into ``folder`` (module docstring): the scheduled chunk
    sets (:meth:`ChunkSets.load` maps them) and every worker's plan (``plan_folder(folder, rank)``), equal to
    ``ChunkSets.build`` and ``build_worker_plan`` of :func:`~graphscale.strategies.offload.strategy.plan_layout`'s
    schedule.

    Args:
        graph: the graph (memory-mapped from its graph directory, or in memory).
        owner: the level-1 partition (``None``: the partitioner computes it).
        world: ``M``, the workers.
        chunks: ``K``.
        partitioner: the vertex partitioner of both levels.
        seed: its seed.
        dedup: ``--dedup`` (``reorg`` reorganises the schedule).
        width, element_size: the row width and bytes per element the reorganisation's cost model weighs.
        folder: the (existing, empty) shared folder.
        bw: link speeds of the cost model.
        host_memory: the budget METIS's memory is checked against (``--host-memory``; ``None``: what the machine
            can spare).
    """
    folder = Path(folder)
    owner, chunk = two_level_partition(graph, world, chunks, partitioner, seed, owner=owner, host_memory=host_memory)
    owner, chunk = owner.numpy(), chunk.numpy()
    scratch = folder / ".chunks"
    scratch.mkdir()
    try:
        write_group_sets(graph, owner * chunks + chunk, world * chunks, scratch)
        nbr = load_ragged(scratch, "nbr", world * chunks)
        if dedup == "reorg":
            position = reorganize_sets(nbr, owner, world, chunks, width, element_size, bw or Bandwidths())
        else:
            position = np.tile(np.arange(chunks, dtype=np.int64), (world, 1))
        write_chunk_sets(graph, owner, chunk, position, nbr, folder)
        del nbr, chunk
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sets = ChunkSets.load(folder)
    degrees = graph.gcn_degrees()  # weighted for a weighted graph, whose chunk blocks carry the weights
    for rank in range(world):
        plan = worker_plan_header(sets, rank, dedup)
        plan.save(plan_folder(folder, rank), batch_plans(graph, sets, plan, degrees))

r"""HongTu's two-level partitioning, chunk sets and the per-worker transfer plans.

**Two-level partitioning** (spec §3.1). Level 1 splits the vertices into ``M``
partitions, one per worker, with the configured vertex partitioner (METIS by
default); partition ``i`` owns ``V_i``. Level 2 splits every partition into
``K`` chunks by running the same partitioner on the partition's induced
subgraph, so a chunk is a local piece of its partition (the paper's chunks
inherit METIS locality: its Table 8 replication factors equal those of a METIS
partition into ``M*K`` parts). METIS chunks are computation-balanced, as the
spec's ranges are: their vertices weigh their aggregation work in the whole
graph, ``|E_{i,s}| + |V_{i,s}|`` summed
(:func:`~graphscale.partition.metis.work_weights`); other partitioners cut
chunks with their own balance. A chunk ``(i, s)`` holds its
destination set ``V_{i,s}`` and *all* in-edges of those destinations, so a
softmax over the full in-neighbourhood (GAT) is computed inside one chunk.

**Neighbour sets.** A chunk runs as a :class:`~graphscale.data.block.Block`
built by ``Block.from_nodes(graph, V_{i,s})``: destinations first, then the
halo. Its source set is

.. math::
    N_{i,s} = V_{i,s} \cup \{u : (u \to v) \in E,\ v \in V_{i,s}\},

which includes the destinations themselves (every built-in layer reads its
destinations' own rows: GCN's implicit self-loop, SAGE's root weight, GAT's
self-attention), as the spec asks for GAT. The replication factor of a set of
pieces is :math:`\alpha = \sum_p |N_p| / |V| = 1 + \sum_p |halo_p| / |V|`,
so the minimal traffic of a layer pass is ``|V|`` rows and ``alpha - 1`` is the
redundant part (the paper's reading of Table 8).

**Schedule.** ``batch[v]`` is the position ``j`` in the schedule of the chunk
whose destination ``v`` is; batch ``j`` is chunk ``(i, j)`` of every
partition ``i``, run concurrently, one per worker. The schedule is a choice of
which level-2 chunk of each partition goes into which batch and in which
order the batches run (identity, or :mod:`graphscale.strategies.offload.reorg`).

**Transition sets** (spec §2): :math:`T_j = \bigcup_i N_{i,j}`,
:math:`T_{i,j} = T_j \cap V_i` (worker ``i`` loads them from the host),
:math:`D_{i,j} = T_{i,j} \cap T_{i,j-1}` (kept in place),
:math:`R_{i,j} = T_{i,j} \setminus D_{i,j}` (loaded), with :math:`T_{i,-1} = \emptyset`
at every layer boundary (buffers change width and contents between layers).

**Slot plans** (spec §3.7). Worker ``i`` has one merged device buffer of
``C_i + P_i`` rows per layer: the transition buffer ``TB_i`` (slots
``[0, C_i)``, ``C_i = max_j |T_{i,j}|``) followed by a receive area for the
rows peers send it (``P_i = max_j |N_{i,j} \setminus V_i|``). With intra-worker
reuse, rows of ``D_{i,j}`` keep their slot from batch ``j-1`` and rows of
``R_{i,j}`` take the lowest slots not held by ``D_{i,j}`` (capacity ``C_i``
always suffices because ``|D| + |R| = |T_{i,j}| <= C_i``); without it every
batch fills slots ``0..|T_{i,j}|-1``. The remote rows of ``N_{i,j}`` arrive in
the receive area grouped by owner, ascending id within an owner; the chunk's
source matrix is one gather of the merged buffer (``src_index``). The
gradient twin uses the same slots: a chunk's source gradients are
scatter-added at ``src_index`` (own rows accumulate in ``TB``, remote rows fill
the receive area, which is pushed back to the owners), and after batch ``j``
the rows :math:`F_{i,j} = T_{i,j} \setminus T_{i,j+1}` leave the buffer (are
added to the host gradients and zeroed); :math:`F_{i,K-1} = T_{i,K-1}`. Without
reuse :math:`F_{i,j} = T_{i,j}`. Backward batches run in the forward order.

All plans are pure functions of ``(graph, owner, batch)``; every worker builds
the same ones, so no requests are exchanged at run time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.options.offload import DEDUP_MODES
from graphscale.partition.induced import InducedEdges
from graphscale.partition.metis import check_metis_memory, work_weights
from graphscale.registry import PARTITIONERS
from graphscale.strategies.offload.chunk_block import ChunkBlocks
from graphscale.strategies.offload.ragged import RaggedWriter, _read, load_ragged, save_ragged


def check_dedup(dedup: str) -> str:
    """Validate the ``dedup`` option and return it."""
    if dedup not in DEDUP_MODES:
        raise ValueError(f"--dedup must be one of {', '.join(DEDUP_MODES)}, got {dedup!r}")
    return dedup


# ----------------------------------------------------------------------------- partitioning
#: parent records an induced subgraph is read in per block (:func:`two_level_partition`; about 25 bytes each of
#: temporaries)
INDUCED_BLOCK_EDGES = 1 << 20


def two_level_partition(graph: Graph, num_parts: int, num_chunks: int, partitioner: str = "metis",
                        seed: int = 0, owner: torch.Tensor | None = None,
                        host_memory: int | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 1: ``M`` partitions; level 2: ``K`` chunks of each partition's induced subgraph.

    A partitioner that streams rows (LDG, Fennel, restream in natural order: ``streams_rows``) reads each induced
    subgraph in blocks of rows (:class:`~graphscale.partition.induced.InducedEdges`: O(|V|) memory plus one block).
    METIS (``partition_weighted``) needs it whole: its records are counted in blocks first, and its memory (the
    induced CSR, 8 bytes per vertex and per record, plus :func:`~graphscale.partition.metis.metis_memory_estimate`)
    is checked against ``host_memory`` before the CSR is built (topology only, read in blocks of rows); METIS
    balances the chunks' in-edges in the whole graph plus their rows (the module docstring). The others get the
    induced subgraph built in memory and run as they are on it.

    Args:
        graph: the whole graph.
        num_parts: ``M`` (one partition per worker).
        num_chunks: ``K`` chunks per partition.
        partitioner: registered vertex partitioner used at both levels.
        seed: partitioner seed.
        owner: a precomputed level-1 owner array (skips level 1).
        host_memory: the budget METIS's memory is checked against at both levels (bytes or a ``--host-memory``
            value; ``None``: what the machine can spare).

    Returns:
        ``(owner, chunk)``: int64 ``[N]`` partition of every vertex and its level-2 chunk index in ``[0, K)``.

    Raises:
        ValueError: ``K < 1``, a partition is empty, or has fewer than ``K`` vertices; METIS would not fit in
            ``host_memory`` (one line: the estimate, the budget and the O(|V|) partitioners to use instead).
    """
    if num_chunks < 1:
        raise ValueError(f"--chunks must be >= 1, got {num_chunks}")
    part = PARTITIONERS.get(partitioner)()
    part.host_memory = host_memory
    if owner is None:
        owner = part.partition(graph, num_parts, seed=seed)
    owner = torch.as_tensor(owner, dtype=torch.int64)
    chunk = torch.zeros(graph.num_nodes, dtype=torch.int64)
    weighted = hasattr(part, "partition_weighted")
    work = work_weights(graph) if weighted and num_chunks > 1 else None
    sizes = torch.bincount(owner, minlength=num_parts)
    local = None  # the induced subgraphs' global-to-local map, allocated once
    for i in range(num_parts):
        n_i = int(sizes[i])
        if n_i == 0:
            raise ValueError(f"partitioner {partitioner!r} left partition {i} empty for {num_parts} workers; "
                             "use fewer workers or --partitioner random")
        if n_i < num_chunks:
            raise ValueError(f"--chunks {num_chunks} exceeds the {n_i} vertices of partition {i}; use fewer chunks")
        if num_chunks == 1:
            continue
        nodes = torch.nonzero(owner == i).flatten()
        streams = getattr(part, "streams_rows", False)
        if streams or weighted:  # the induced subgraph read in blocks of rows
            if local is None:
                local = np.full(graph.num_nodes, -1, np.int64)
            sub = InducedEdges(graph, nodes.numpy(), local, INDUCED_BLOCK_EDGES)
            try:
                if streams:  # never built whole
                    chunk[nodes] = part.partition_csr(sub, num_chunks, seed=seed, chunk_edges=INDUCED_BLOCK_EDGES)
                    continue
                check_metis_memory(n_i, sub.num_edges, host_memory, held=8 * (n_i + 1 + sub.num_edges),
                                   what=f"part {i}'s induced subgraph, cut into offload's chunks")
                indptr, indices = sub.arrays()  # the topology graph.subgraph(nodes) has: METIS reads no more
            finally:
                sub.close()
            topology = Graph(torch.from_numpy(indptr), torch.from_numpy(indices), name=graph.name)
            chunk[nodes] = part.partition_weighted(topology, num_chunks, work[nodes.numpy()], seed=seed)
            del topology, indptr, indices
            continue
        chunk[nodes] = part.partition(graph.subgraph(nodes), num_chunks, seed=seed)
    return owner, chunk


# ----------------------------------------------------------------------------- chunk sets
#: the three kinds of per-chunk vertex sets of :class:`ChunkSets`
_SET_KINDS = ("dst", "nbr", "trans")


#: destination rows whose in-edges :func:`neighbour_sets` keys at a time (bounds its temporaries)
NEIGHBOUR_CHUNK_ROWS = 1 << 18


def neighbour_sets(graph: Graph, group: torch.Tensor, num_groups: int,
                   chunk_rows: int = NEIGHBOUR_CHUNK_ROWS) -> list[torch.Tensor]:
    """``N_g = V_g ∪ in-neighbours(V_g)`` for every group of destinations, ascending ids.

    The in-edges are keyed ``group(dst) * N + src`` one range of ``chunk_rows`` destination rows at a time (the
    CSR may be memory-mapped), each range deduplicated before the next, so the temporaries stay at one range's
    edges and the result at the sets' own size; the sets do not depend on ``chunk_rows``.

    Args:
        graph: the graph.
        group: int64 ``[N]`` group of every vertex (e.g. ``owner * K + batch``).
        num_groups: number of groups.
        chunk_rows: destination rows per range.

    Returns:
        ``num_groups`` sorted int64 tensors.
    """
    n = max(graph.num_nodes, 1)
    group = torch.as_tensor(group, dtype=torch.int64)
    parts = [group * n + torch.arange(graph.num_nodes)]
    indptr = graph.indptr
    for start in range(0, graph.num_nodes, chunk_rows):
        stop = min(start + chunk_rows, graph.num_nodes)
        lo, hi = int(indptr[start]), int(indptr[stop])
        dst = torch.repeat_interleave(torch.arange(start, stop), (indptr[start + 1: stop + 1] - indptr[start:stop]))
        parts.append(torch.unique(group[dst] * n + graph.indices[lo:hi].to(torch.int64)))
    keys = torch.unique(torch.cat(parts))
    g = keys // n
    counts = torch.bincount(g, minlength=num_groups).tolist()
    return list(torch.split(keys % n, counts))


@dataclass
class ChunkSets:
    """The scheduled chunk sets of a two-level partition (every worker can build them).

    Attributes:
        num_parts: ``M``.
        num_chunks: ``K``.
        owner: int64 ``[N]``.
        batch: int64 ``[N]`` batch position of every vertex's chunk.
        dst: ``dst[i][j]`` = ``V_{i,j}`` ascending.
        nbr: ``nbr[i][j]`` = ``N_{i,j}`` ascending.
        trans: ``trans[i][j]`` = ``T_{i,j}`` ascending.
        num_edges: int64 ``[M, K]`` = ``|E_{i,j}|``.
    """

    num_parts: int
    num_chunks: int
    owner: torch.Tensor
    batch: torch.Tensor
    dst: list[list[torch.Tensor]]
    nbr: list[list[torch.Tensor]]
    trans: list[list[torch.Tensor]]
    num_edges: torch.Tensor

    @classmethod
    def build(cls, graph: Graph, owner: torch.Tensor, batch: torch.Tensor, num_parts: int,
              num_chunks: int) -> ChunkSets:
        """Compute ``V_{i,j}``, ``N_{i,j}`` and ``T_{i,j}`` for a schedule."""
        owner = torch.as_tensor(owner, dtype=torch.int64)
        batch = torch.as_tensor(batch, dtype=torch.int64)
        m, k = num_parts, num_chunks
        if owner.shape != (graph.num_nodes,) or batch.shape != (graph.num_nodes,):
            raise ValueError("ChunkSets.build: owner and batch must have one entry per vertex")
        if graph.num_nodes and (int(batch.min()) < 0 or int(batch.max()) >= k):
            raise ValueError(f"ChunkSets.build: batch positions must lie in [0, {k})")
        group = owner * k + batch
        order = torch.argsort(group, stable=True)
        counts = torch.bincount(group, minlength=m * k).tolist()
        dst_flat = list(torch.split(order, counts))  # stable argsort: ascending ids within a group
        nbr_flat = neighbour_sets(graph, group, m * k)
        edges = torch.bincount(group, weights=graph.in_degrees().double(), minlength=m * k).round().long()
        dst = [dst_flat[i * k:(i + 1) * k] for i in range(m)]
        nbr = [nbr_flat[i * k:(i + 1) * k] for i in range(m)]
        trans: list[list[torch.Tensor]] = [[] for _ in range(m)]
        for j in range(k):
            union = torch.unique(torch.cat([nbr[p][j] for p in range(m)]))  # T_j, ascending
            union_owner = owner[union]
            for i in range(m):
                trans[i].append(union[union_owner == i])
        return cls(m, k, owner, batch, dst, nbr, trans, edges.view(m, k))

    @property
    def num_nodes(self) -> int:
        return self.owner.numel()

    def save(self, folder: Path) -> None:
        """Write the sets as ``.npy`` files into the (new, empty) ``folder``: ``owner``, ``batch``,
        ``num_edges`` and, per kind of set, the concatenation of every ``[i][j]`` set plus ``[M*K+1]`` offsets."""
        np.save(folder / "owner.npy", self.owner.numpy())
        np.save(folder / "batch.npy", self.batch.numpy())
        np.save(folder / "num_edges.npy", self.num_edges.numpy())
        for kind in _SET_KINDS:
            save_ragged(folder, kind, [s for row in getattr(self, kind) for s in row])

    @classmethod
    def load(cls, folder: Path) -> ChunkSets:
        """The sets :meth:`save` wrote, memory-mapped: every set is a view of one shared file."""
        folder = Path(folder)
        num_edges = _read(folder, "num_edges")
        m, k = (int(v) for v in num_edges.shape)
        sets = {}
        for kind in _SET_KINDS:
            views = load_ragged(folder, kind, m * k)
            sets[kind] = [views[i * k:(i + 1) * k] for i in range(m)]
        return cls(m, k, _read(folder, "owner"), _read(folder, "batch"), sets["dst"], sets["nbr"], sets["trans"],
                   num_edges)

    def alpha(self) -> float:
        """Replication factor ``sum_{i,j} |N_{i,j}| / |V|``."""
        return sum(int(s.numel()) for row in self.nbr for s in row) / max(self.num_nodes, 1)


# ----------------------------------------------------------------------------- worker plans
@dataclass
class BatchPlan:
    """What worker ``i`` does in batch ``j`` (all index tensors int64, on the host until moved).

    Attributes:
        block: the chunk block (``dst = V_{i,j}``, ``src = N_{i,j}`` in block order, global degrees).
        src_local: bool ``[|N_{i,j}|]``: source row owned by this worker (baseline host-read split).
        src_index: ``[|N_{i,j}|]`` merged-buffer row of every source row.
        load_ids: ``R_{i,j}``: host rows loaded into the transition buffer.
        load_slots: their slots.
        num_reused: ``|D_{i,j}|``.
        num_trans: ``|T_{i,j}|``.
        send_slots: transition-buffer slots of the rows peers read, grouped by peer, ascending id within.
        send_counts: rows read by each peer (0 for this worker).
        recv_counts: rows this worker reads from each peer (0 for itself).
        flush_ids: ``F_{i,j}``: rows whose gradients leave the buffer after this batch.
        flush_slots: their slots.
    """

    block: Block
    src_local: torch.Tensor
    src_index: torch.Tensor
    load_ids: torch.Tensor
    load_slots: torch.Tensor
    num_reused: int
    num_trans: int
    send_slots: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]
    flush_ids: torch.Tensor
    flush_slots: torch.Tensor

    @property
    def num_dst(self) -> int:
        return self.block.num_dst

    @property
    def num_recv(self) -> int:
        return sum(self.recv_counts)


#: the index arrays of a :class:`BatchPlan`'s block (in :class:`Block`'s order) and of the batch plan itself
#: (:meth:`WorkerPlan.save`)
_BLOCK_ARRAYS = ("indptr", "indices", "src_ids", "src_deg")
_BATCH_ARRAYS = ("src_local", "src_index", "load_ids", "load_slots", "send_slots", "flush_ids", "flush_slots")


@dataclass
class WorkerPlan:
    """All batch plans of one worker for one dedup mode.

    Attributes:
        rank: the worker (partition) ``i``.
        dedup: ``baseline`` | ``inter`` | ``intra`` | ``reorg``.
        capacity: transition-buffer slots ``C_i = max_j |T_{i,j}|`` (0 for the baseline).
        recv_capacity: receive-area rows ``P_i = max_j |N_{i,j} \\ V_i|`` (0 for the baseline).
        batches: one :class:`BatchPlan` per batch position.
        owned: ascending ids of ``V_i``.
    """

    rank: int
    dedup: str
    capacity: int
    recv_capacity: int
    batches: list[BatchPlan] = field(default_factory=list)
    owned: torch.Tensor | None = None

    @property
    def reuse(self) -> bool:
        return self.dedup in ("intra", "reorg")

    @property
    def buffer_rows(self) -> int:
        return self.capacity + self.recv_capacity

    def save(self, folder: Path, batches=None) -> None:
        """Write the plan into the (new) ``folder``: per index array of :class:`BatchPlan` (and of its block) the
        concatenation over batches with offsets (:func:`save_ragged`), the per-batch counts, and ``meta.json``.

        ``batches``: an iterable of the batch plans to write instead of :attr:`batches`, each written as it comes
        (the parent's planner hands :func:`batch_plans`, so one batch is held at a time)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=False)
        writers = {name: RaggedWriter(folder, name) for name in _BLOCK_ARRAYS + _BATCH_ARRAYS}
        rows, m = [], 0
        for bp in self.batches if batches is None else batches:
            block_arrays = _BLOCK_ARRAYS
            if bp.block.edge_weight is not None:  # a weighted graph's chunk blocks keep their weights
                writers.setdefault("edge_weight", RaggedWriter(folder, "edge_weight"))
                block_arrays += ("edge_weight",)
            for name in block_arrays:
                writers[name].append(getattr(bp.block, name))
            for name in _BATCH_ARRAYS:
                writers[name].append(getattr(bp, name))
            m = len(bp.send_counts)
            rows.append([bp.num_reused, bp.num_trans, *bp.send_counts, *bp.recv_counts])
        for writer in writers.values():
            writer.close()
        np.save(folder / "counts.npy", np.array(rows, np.int64).reshape(len(rows), 2 + 2 * m))
        np.save(folder / "owned.npy", self.owned.numpy())
        (folder / "meta.json").write_text(json.dumps({"rank": self.rank, "dedup": self.dedup, "capacity": self.capacity,
                                                      "recv_capacity": self.recv_capacity, "parts": m}))

    @classmethod
    def load(cls, folder: Path) -> WorkerPlan:
        """The plan :meth:`save` wrote, memory-mapped: every index tensor is a view of a file the page cache holds
        (HongTu keeps the chunks' topology in host memory and copies it to the device per use)."""
        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text())
        counts = np.load(folder / "counts.npy")
        k, m = counts.shape[0], int(meta["parts"])
        weights = ("edge_weight",) if (folder / "edge_weight.npy").exists() else ()
        arrays = {name: load_ragged(folder, name, k) for name in _BLOCK_ARRAYS + weights + _BATCH_ARRAYS}
        plan = cls(int(meta["rank"]), meta["dedup"], int(meta["capacity"]), int(meta["recv_capacity"]),
                   owned=_read(folder, "owned"))
        for j in range(k):
            row = [int(c) for c in counts[j]]
            plan.batches.append(BatchPlan(Block(*(arrays[name][j] for name in _BLOCK_ARRAYS + weights)),
                                          num_reused=row[0],
                                          num_trans=row[1], send_counts=row[2:2 + m], recv_counts=row[2 + m:],
                                          **{name: arrays[name][j] for name in _BATCH_ARRAYS}))
        return plan


def plan_folder(folder: str | Path, rank: int) -> Path:
    """Where a host-shared layout in ``folder`` keeps worker ``rank``'s :class:`WorkerPlan`."""
    return Path(folder) / "plans" / str(rank)


def _np64(t: torch.Tensor) -> np.ndarray:
    return t.numpy().astype(np.int64, copy=False)


def build_worker_plan(graph: Graph, sets: ChunkSets, rank: int, dedup: str,
                      degrees: torch.Tensor | None = None) -> WorkerPlan:
    """Slot plans, peer exchange plans and flush plans of worker ``rank`` (module docstring), all batches held.

    Args:
        graph: the whole graph.
        sets: the scheduled chunk sets.
        rank: the worker.
        dedup: the dedup mode (``check_dedup``).
        degrees: global in-degrees (default :meth:`Graph.gcn_degrees`: weighted for a weighted graph).
    """
    plan = worker_plan_header(sets, rank, dedup)
    plan.batches.extend(batch_plans(graph, sets, plan, degrees))
    return plan


def worker_plan_header(sets: ChunkSets, rank: int, dedup: str) -> WorkerPlan:
    """Worker ``rank``'s :class:`WorkerPlan` without its batches: capacities and owned rows."""
    check_dedup(dedup)
    m, k = sets.num_parts, sets.num_chunks
    if not 0 <= rank < m:
        raise ValueError(f"build_worker_plan: rank {rank} is not in [0, {m})")
    owner = sets.owner
    baseline = dedup == "baseline"
    capacity = 0 if baseline else max((int(t.numel()) for t in sets.trans[rank]), default=0)
    owner_np = _np64(owner)
    remote_counts = [int(np.count_nonzero(owner_np[_np64(sets.nbr[rank][j])] != rank)) for j in range(k)]
    recv_capacity = 0 if baseline else max(remote_counts, default=0)
    return WorkerPlan(rank, dedup, capacity, recv_capacity, owned=torch.nonzero(owner == rank).flatten())


def batch_plans(graph: Graph, sets: ChunkSets, plan: WorkerPlan, degrees: torch.Tensor | None = None):
    """Yield the :class:`BatchPlan` of every batch of ``plan``'s worker in turn (``plan``: its
    :func:`worker_plan_header`); only the current batch, an ``int64 [N]`` slot map and the ``int64 [N]`` position
    map of :class:`~graphscale.strategies.offload.chunk_block.ChunkBlocks` are held."""
    rank, dedup, capacity = plan.rank, plan.dedup, plan.capacity
    m, k = sets.num_parts, sets.num_chunks
    degrees = graph.gcn_degrees() if degrees is None else degrees
    owner_np = _np64(sets.owner)
    n = graph.num_nodes
    baseline = dedup == "baseline"
    reuse = dedup in ("intra", "reorg")
    trans = sets.trans[rank]
    slot_of = np.full(n, -1, dtype=np.int64)
    empty = torch.zeros(0, dtype=torch.int64)
    prev = np.zeros(0, dtype=np.int64)
    blocks = ChunkBlocks(graph, degrees)
    for j in range(k):
        block = blocks.block(sets.dst[rank][j])
        src = _np64(block.src_ids)
        src_owner = owner_np[src]
        src_local = torch.from_numpy(src_owner == rank)
        if baseline:
            yield BatchPlan(block, src_local, empty, empty, empty, 0, 0, empty, [0] * m, [0] * m, empty, empty)
            continue
        cur = _np64(trans[j])
        # -- transition-buffer slots
        if reuse:
            kept = np.intersect1d(prev, cur, assume_unique=True)
            slot_of[np.setdiff1d(prev, cur, assume_unique=True)] = -1
            load = np.setdiff1d(cur, kept, assume_unique=True)
            held = np.zeros(capacity, dtype=bool)
            held[slot_of[kept]] = True
            free = np.flatnonzero(~held)
            slot_of[load] = free[:load.size]
            num_reused = int(kept.size)
        else:
            slot_of[prev] = -1
            load = cur
            slot_of[cur] = np.arange(cur.size)
            num_reused = 0
        # -- source rows: own rows from TB, remote rows from the receive area (grouped by owner, ascending id)
        src_index = np.empty(src.size, dtype=np.int64)
        own = src_owner == rank
        src_index[own] = slot_of[src[own]]
        remote = np.flatnonzero(~own)
        order = np.lexsort((src[remote], src_owner[remote]))
        src_index[remote[order]] = capacity + np.arange(remote.size)
        recv_counts = np.bincount(src_owner[remote], minlength=m).tolist()
        # -- rows peers read from my transition buffer
        send_parts, send_counts = [], [0] * m
        for p in range(m):
            if p == rank:
                continue
            nb = _np64(sets.nbr[p][j])
            rows = nb[owner_np[nb] == rank]  # ascending (nbr sets are sorted)
            send_parts.append(slot_of[rows])
            send_counts[p] = int(rows.size)
        send_slots = np.concatenate(send_parts) if send_parts else np.zeros(0, dtype=np.int64)
        # -- rows whose gradients leave after this batch
        if reuse and j + 1 < k:
            flush = np.setdiff1d(cur, _np64(trans[j + 1]), assume_unique=True)
        else:
            flush = cur
        yield BatchPlan(
            block, src_local, torch.from_numpy(src_index), torch.from_numpy(load.copy()),
            torch.from_numpy(slot_of[load].copy()), num_reused, int(cur.size), torch.from_numpy(send_slots),
            send_counts, recv_counts, torch.from_numpy(flush.copy()), torch.from_numpy(slot_of[flush].copy()))
        prev = cur

"""GSplit's split of a sampled mini-batch into per-worker local splits (numba kernels in
:mod:`~graphscale.strategies.split_parallel.kernels`, O(1) per vertex and edge), on the offline
:class:`~graphscale.strategies.split_parallel.plan.SplitPlan`.

**Online** (:func:`split_minibatch`, per mini-batch, on the blocks of one
sample of all ``B`` targets). The levels ``V^(0) ⊇ V^(1) ⊇ ... ⊇ V^(L)`` of a
sample are prefixes of ``blocks[0].src_ids`` (the sampler lists destinations
first), so one pass over ``V^(0)`` gives every vertex its owner, its position
in its owner's list (``own_pos``: the owner's rows of every level are a prefix
of its rows of the level below) and whether its owner caches it. Then, per block, one
branch-free pass over its edges ``u -> v`` (``v`` in ``V^(l+1)``, ``u`` in
``V^(l)``) writes every local edge into its worker's CSR and lists the cut
edges; a pass over the (vertex, worker) pairs numbers the shipped rows and a
pass over the cut edges only finishes them. With ``i = owner(u)``, ``j = owner(v)``:

* ``i == j``: a local edge of split ``j``;
* ``i != j``, mode ``"preagg"`` (GraphSAGE): ``v`` is a *reference vertex* of
  ``i`` for ``j``; ``i`` pre-aggregates its sources of ``v`` into one row of
  ``ref[i->j]`` and ships it (one row per reference vertex and sender);
* ``i != j``, mode ``"halo"`` (GAT and generic layers): ``u`` joins
  ``halo[i->j]``; its row is shipped once to ``j``, which computes the edge.

A weighted graph's blocks (``Block.edge_weight``) split in halo mode: every local edge keeps its weight
(``SplitLayer.edge_weight``, in the local CSRs' order), so worker ``j``'s block carries the weights of the edges it
computes; pre-aggregation (graphscale's GraphSAGE) takes no weights and refuses them.

Every ``i -> j`` list is in ascending row order of the sample (one order, known
to sender and receiver alike, because every worker splits the same sample).

**Closed forms** (``s`` bytes per element, ``d`` feature width, ``h_l`` the width
shipped at layer ``l``):

* rows loaded from the host: ``sum_i |load_i| = |V^(0) \\ C|`` (each miss once,
  by its owner); feature bytes ``|V^(0) \\ C| * d * s``;
* shuffle rows of layer ``l``: ``sum_{i != j} |ref_l[i->j]|`` (preagg) or
  ``sum_{i != j} |halo_l[i->j]|`` (halo); bytes ``rows * h_l * s`` forward and the
  same again backward when the shipped tensor depends on parameters;
* edges computed: ``sum_i |E_i| = sum_l |E^(l)|`` (each sampled edge once; in
  preagg mode a cut edge is computed by the source's owner, in halo mode by the
  destination's owner);
* split quality: edge skew ``(max_i |E_i| - min_i |E_i|) / mean_i |E_i|`` and
  local-edge fraction ``#local / #edges``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.strategies.split_parallel.kernels import assign_kernel, split_halo_kernel, split_preagg_kernel
from graphscale.strategies.split_parallel.plan import SplitPlan

PREAGG = "preagg"
HALO = "halo"
MODES = (PREAGG, HALO)


def _assign(gids: np.ndarray, plan: SplitPlan, level_sizes: list[int] | None = None):
    """``(code, cached, own_counts [levels, W])`` of the rows ``gids`` of V^(0) (see :func:`assign_kernel`).

    ``code`` is int32 when ``own_pos << 8`` fits (half the cache footprint for the edge passes).
    """
    sizes = [gids.size] if level_sizes is None else list(level_sizes)
    order = np.argsort(sizes, kind="stable")
    ends = np.asarray(sizes, np.int64)[order]
    code = np.empty(gids.size, np.int32 if gids.size < (1 << 23) else np.int64)
    cached = np.empty(gids.size, np.bool_)
    counts = np.zeros((len(sizes), plan.num_parts), np.int64)
    assign_kernel(gids, plan.part_code, ends, code, cached, counts)
    own_counts = np.empty_like(counts)
    own_counts[order] = counts
    return code, cached, own_counts


@dataclass
class SplitLayer:
    """The split of one block (model layer), for all workers at once.

    Pairs ``(i, j)`` are stored sender-major: ``cnt[i * W + j]`` rows go from ``i``
    to ``j``; ``rows[pair_off[i*W+j]:pair_off[i*W+j+1]]`` are, in halo mode, the
    *source* rows of the block that ``i`` ships to ``j`` and, in preagg mode, the
    *destination* rows (reference vertices) whose partial sums ``i`` ships to ``j``.
    ``lptr``/``lidx`` hold each worker's local CSR over its own destinations:
    worker ``j``'s row pointers are ``lptr[lptr_off[j]:lptr_off[j+1]]`` and its
    entries ``lidx[lidx_start[j]:lidx_start[j] + lidx_count[j]]``; ``xptr``/``xidx``
    (preagg only) hold the partial-sum CSR over the reference slots; ``indptr`` is
    the block's own row pointer (sampled in-degrees). ``computed[i]`` counts the
    edges worker ``i`` computes.
    """

    mode: str
    num_dst: int
    num_src: int
    cnt: np.ndarray
    pair_off: np.ndarray
    rows: np.ndarray
    lptr: np.ndarray
    lidx: np.ndarray
    indptr: np.ndarray
    lptr_off: np.ndarray
    lidx_start: np.ndarray
    lidx_count: np.ndarray
    computed: np.ndarray
    local_edges: int
    num_edges: int
    xptr: np.ndarray | None = None
    xidx: np.ndarray | None = None
    edge_weight: np.ndarray | None = None  # halo mode, weighted: the weight of every ``lidx`` entry

    def pair_counts(self, world: int) -> np.ndarray:
        """``[W, W]`` rows shipped from ``i`` (row) to ``j`` (column)."""
        return self.cnt.reshape(world, world)

    def shuffle_rows(self) -> int:
        """Rows crossing between workers in one direction: ``sum_{i != j}`` of the pair lists."""
        return int(self.cnt.sum())


@dataclass
class SplitMiniBatch:
    """One sampled mini-batch split for ``W`` workers (see the module docstring).

    Attributes:
        num_parts: ``W``.
        gids: int64 ``[|V^(0)|]`` vertex ids of ``V^(0)`` in sample order (levels are prefixes).
        level_sizes: ``|V^(l)|`` for ``l = 0..L`` (``V^(L)`` = the targets).
        code: per row of ``V^(0)``: ``own_pos << 8 | owner`` (see :attr:`owner`, :attr:`own_pos`).
        cached: bool per row of ``V^(0)``: whether its owner caches it.
        plan: the plan the split was made with.
        own_counts: int64 ``[L+1, W]`` rows each worker owns at each level.
        layers: one :class:`SplitLayer` per block.
    """

    num_parts: int
    gids: np.ndarray
    level_sizes: list[int]
    code: np.ndarray
    cached: np.ndarray
    own_counts: np.ndarray
    plan: SplitPlan
    layers: list[SplitLayer] = field(default_factory=list)

    # ------------------------------------------------------------ statistics
    @property
    def owner(self) -> np.ndarray:
        """Owner of every row of ``V^(0)``."""
        return (self.code & 255).astype(np.int64)

    @property
    def own_pos(self) -> np.ndarray:
        """Position of every row of ``V^(0)`` in its owner's list (the same at every level it belongs to)."""
        return (self.code >> 8).astype(np.int64)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def loads(self) -> np.ndarray:
        """``|load_i|``: rows of ``V^(0)`` each worker loads from the host (its global cache misses)."""
        return np.bincount(self.owner[~self.cached], minlength=self.num_parts)

    def hits(self) -> np.ndarray:
        """Rows of ``V^(0)`` each worker gathers from its own cache."""
        return np.bincount(self.owner[self.cached], minlength=self.num_parts)

    def edges_per_split(self) -> np.ndarray:
        """``|E_i|``: edges computed by each worker over all layers."""
        return sum((layer.computed for layer in self.layers), np.zeros(self.num_parts, np.int64))

    def num_edges(self) -> int:
        return int(sum(layer.num_edges for layer in self.layers))

    def local_edges(self) -> int:
        return int(sum(layer.local_edges for layer in self.layers))

    def edge_skew(self) -> float:
        """``(max_i |E_i| - min_i |E_i|) / mean_i |E_i|``."""
        e = self.edges_per_split().astype(np.float64)
        return float((e.max() - e.min()) / e.mean()) if e.mean() > 0 else 0.0

    # ------------------------------------------------------------ per worker
    def local(self, rank: int) -> LocalSplit:
        """The record worker ``rank`` trains on (its part of the structure, as torch tensors)."""
        w = self.num_parts
        if not 0 <= rank < w:
            raise ValueError(f"rank {rank} is not one of the {w} splits")
        own_pos = self.own_pos
        mine = np.flatnonzero((self.code & 255) == rank)  # rows of V^(0) owned by rank, in own_pos order
        gids = self.gids[mine]
        cached = self.cached[mine]
        hit = np.flatnonzero(cached)
        miss = np.flatnonzero(~cached)
        counts = [int(c) for c in self.own_counts[:, rank]]
        layers = []
        for b, layer in enumerate(self.layers):
            n_src, n_dst = counts[b], counts[b + 1]
            p0, p1 = int(layer.lptr_off[rank]), int(layer.lptr_off[rank + 1])
            e0 = int(layer.lidx_start[rank])
            e1 = e0 + int(layer.lidx_count[rank])
            dst_rows = mine[:n_dst]
            send_counts = [int(layer.cnt[rank * w + j]) for j in range(w)]
            recv_counts = [int(layer.cnt[i * w + rank]) for i in range(w)]
            out_rows = layer.rows[layer.pair_off[rank * w]: layer.pair_off[rank * w + w]]
            in_rows = np.concatenate([layer.rows[layer.pair_off[i * w + rank]: layer.pair_off[i * w + rank + 1]]
                                      for i in range(w)]) if w else np.zeros(0, np.int64)
            t = torch.from_numpy
            local = LocalLayer(mode=layer.mode, num_src=n_src, num_dst=n_dst,
                               indptr=t(layer.lptr[p0:p1].copy()), indices=t(layer.lidx[e0:e1].astype(np.int64)),
                               deg=t(layer.indptr[dst_rows + 1] - layer.indptr[dst_rows]), send_counts=send_counts,
                               recv_counts=recv_counts,
                               edge_weight=None if layer.edge_weight is None else t(layer.edge_weight[e0:e1]))
            if layer.mode == HALO:
                local.send_index = t(own_pos[out_rows])
                local.halo_ids = t(self.gids[in_rows])
            else:
                x0, x1 = int(layer.pair_off[rank * w]), int(layer.pair_off[rank * w + w])
                xptr = layer.xptr[x0:x1 + 1]
                local.xptr = t(xptr - xptr[0])
                local.xidx = t(layer.xidx[int(xptr[0]):int(xptr[-1])].astype(np.int64))
                local.recv_pos = t(own_pos[in_rows])
            layers.append(local)
        return LocalSplit(rank=rank, gids=torch.from_numpy(gids), own_counts=counts,
                          hit_pos=torch.from_numpy(hit),
                          hit_slot=torch.from_numpy(self.plan.cache_slot(gids[hit], rank)),
                          miss_pos=torch.from_numpy(miss), miss_ids=torch.from_numpy(gids[miss]), layers=layers)


@dataclass
class LocalLayer:
    """Worker ``i``'s part of one block.

    Attributes:
        mode: ``"preagg"`` or ``"halo"``.
        num_src, num_dst: own rows at the block's source and destination level (destinations are a prefix).
        indptr, indices: local CSR over the own destinations; indices are own source rows, and in halo
            mode also halo rows ``num_src + k`` (the ``k``-th received row).
        deg: sampled in-degree of each own destination over *all* splits (the mean's denominator).
        send_counts, recv_counts: rows shipped to / received from each worker.
        send_index: halo mode: own source rows shipped, grouped by receiver.
        halo_ids: halo mode: vertex ids of the received rows, grouped by sender.
        xptr, xidx: preagg mode: CSR of the partial sums shipped (one row per reference slot, grouped by
            receiver; entries are own source rows).
        recv_pos: preagg mode: own destination row of every received partial sum, grouped by sender.
        edge_weight: halo mode on a weighted graph: the weight of every local edge (aligned with ``indices``).
    """

    mode: str
    num_src: int
    num_dst: int
    indptr: torch.Tensor
    indices: torch.Tensor
    deg: torch.Tensor
    send_counts: list[int]
    recv_counts: list[int]
    send_index: torch.Tensor | None = None
    halo_ids: torch.Tensor | None = None
    xptr: torch.Tensor | None = None
    xidx: torch.Tensor | None = None
    recv_pos: torch.Tensor | None = None
    edge_weight: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.indptr, self.indices, self.deg, self.send_index, self.halo_ids, self.xptr,
                            self.xidx, self.recv_pos, self.edge_weight) if t is not None]


@dataclass
class LocalSplit:
    """Worker ``rank``'s local split of a mini-batch.

    Attributes:
        rank: the worker.
        gids: vertex ids of its own rows of ``V^(0)``, in own order (its rows of ``V^(l)`` are the first
            ``own_counts[l]``; its targets are the first ``own_counts[L]``).
        own_counts: own rows per level ``l = 0..L``.
        hit_pos, hit_slot: own input rows served by its cache and their cache slots.
        miss_pos, miss_ids: own input rows loaded from the host and their vertex ids.
        layers: one :class:`LocalLayer` per block.
    """

    rank: int
    gids: torch.Tensor
    own_counts: list[int]
    hit_pos: torch.Tensor
    hit_slot: torch.Tensor
    miss_pos: torch.Tensor
    miss_ids: torch.Tensor
    layers: list[LocalLayer]

    @property
    def num_targets(self) -> int:
        return self.own_counts[-1]

    def ids(self, level: int) -> torch.Tensor:
        """Vertex ids of the own rows of level ``level``."""
        return self.gids[: self.own_counts[level]]

    def tensors(self) -> list[torch.Tensor]:
        out = [self.gids, self.hit_pos, self.hit_slot, self.miss_pos, self.miss_ids]
        for layer in self.layers:
            out += layer.tensors()
        return out

    def structure_bytes(self) -> int:
        """Bytes of the index arrays the worker receives for this mini-batch (its split structure)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def to(self, device) -> LocalSplit:
        def move(t):
            return None if t is None else t.to(device, non_blocking=True)
        layers = [LocalLayer(mode=l.mode, num_src=l.num_src, num_dst=l.num_dst, indptr=move(l.indptr),
                             indices=move(l.indices), deg=move(l.deg), send_counts=l.send_counts,
                             recv_counts=l.recv_counts, send_index=move(l.send_index), halo_ids=move(l.halo_ids),
                             xptr=move(l.xptr), xidx=move(l.xidx), recv_pos=move(l.recv_pos),
                             edge_weight=move(l.edge_weight)) for l in self.layers]
        return LocalSplit(self.rank, move(self.gids), self.own_counts, move(self.hit_pos), move(self.hit_slot),
                          move(self.miss_pos), move(self.miss_ids), layers)


class SplitWorkspace:
    """Arrays reused by successive :func:`split_minibatch` calls (no fresh pages to fault in per batch).

    A split made with a workspace keeps its local CSRs (``lptr``, ``lidx``, ``xidx``) in it:
    they stay valid until the next call with the same workspace (:meth:`SplitMiniBatch.local` copies
    them out). One workspace per thread.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple[str, str], np.ndarray] = {}

    def get(self, name: str, size: int, dtype=np.int64) -> np.ndarray:
        """An array of at least ``size`` entries of ``dtype`` (contents undefined)."""
        key = (name, np.dtype(dtype).str)
        array = self._arrays.get(key)
        if array is None or array.size < size:
            array = np.empty(max(int(size), int(1.5 * (0 if array is None else array.size))), dtype)
            self._arrays[key] = array
        return array


def _np64(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.ascontiguousarray(t, dtype=np.int64)


def input_loads(input_ids, plan: SplitPlan) -> np.ndarray:
    """``|load_i|`` per worker for the input rows ``input_ids`` (``V^(0)``) under ``plan``'s caches.

    The vertex pass of :func:`split_minibatch` alone (owner and cache test from ``plan.part_code``),
    for comparing cache sizes on one sample without splitting its edges again.
    """
    code, cached, _ = _assign(_np64(input_ids), plan)
    return np.bincount(code[~cached] & 255, minlength=plan.num_parts)


def _local_weights(block: Block, code: np.ndarray) -> np.ndarray | None:
    """A weighted block's edge weights in the order of the halo kernel's local CSRs (every worker's segment in
    turn, its destinations' edges in block order: a stable sort of the edges by their destination's owner)."""
    if block.edge_weight is None:
        return None
    indptr = _np64(block.indptr)
    owner = np.repeat(code[: block.num_dst] & 255, np.diff(indptr))
    return block.edge_weight.detach().cpu().numpy()[np.argsort(owner, kind="stable")]


def split_minibatch(blocks: list[Block], plan: SplitPlan, modes: str | list[str],
                    workspace: SplitWorkspace | None = None) -> SplitMiniBatch:
    """Split one sampled mini-batch for ``plan.num_parts`` workers.

    Args:
        blocks: the chained blocks of one sample (``NeighborSampler.sample``), input layer first.
        plan: the offline :class:`SplitPlan`.
        modes: ``"preagg"`` or ``"halo"``, for every block or one per block.
        workspace: scratch arrays to reuse across calls (default: fresh ones).

    Returns:
        The :class:`SplitMiniBatch` of all workers.

    Raises:
        ValueError: unknown mode, wrong number of modes, or blocks that do not chain.
    """
    modes = [modes] * len(blocks) if isinstance(modes, str) else list(modes)
    if len(modes) != len(blocks):
        raise ValueError(f"split_minibatch: {len(modes)} modes for {len(blocks)} blocks")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"split_minibatch: mode must be one of {MODES}, got {m!r}")
    for b in range(1, len(blocks)):
        if blocks[b].num_src != blocks[b - 1].num_dst:
            raise ValueError(f"split_minibatch: blocks[{b}] has {blocks[b].num_src} sources but blocks[{b - 1}] "
                             f"has {blocks[b - 1].num_dst} destinations")
    w = plan.num_parts
    ws = SplitWorkspace() if workspace is None else workspace
    gids = _np64(blocks[0].src_ids)
    sizes = [blocks[0].num_src] + [b.num_dst for b in blocks]
    code, cached, own_counts = _assign(gids, plan, sizes)
    out = SplitMiniBatch(w, gids, sizes, code, cached, own_counts, plan)
    for b, (block, mode) in enumerate(zip(blocks, modes)):
        indptr, indices = _np64(block.indptr), _np64(block.indices)
        nd, ns = block.num_dst, block.num_src
        tag = f"{b}"  # one set of output arrays per block: all blocks' splits live until the next call
        lptr_buf = ws.get("lptr" + tag, nd + w)
        lidx_buf = ws.get("lidx" + tag, indices.size, code.dtype)
        mark, cut_a = ws.get("mark", max(ns, nd) * w), ws.get("cut_a", indices.size)
        if mode == HALO:
            cnt, pair_off, rows, lptr, lidx, lptr_off, start, count, computed, local = split_halo_kernel(
                indptr, indices, code, nd, ns, w, own_counts[b], lptr_buf, lidx_buf, mark, cut_a,
                ws.get("cut_b", indices.size))
            layer = SplitLayer(mode, nd, ns, cnt, pair_off, rows, lptr, lidx, indptr, lptr_off, start, count,
                               computed, int(local), int(indices.size), edge_weight=_local_weights(block, code))
        else:
            if block.edge_weight is not None:
                raise ValueError("split_minibatch: pre-aggregation (mode 'preagg') takes no edge weights; split a "
                                 "weighted block in mode 'halo'")
            cnt, pair_off, rows, xptr, xidx, lptr, lidx, lptr_off, start, count, computed, local = \
                split_preagg_kernel(indptr, indices, code, nd, w, lptr_buf, lidx_buf,
                                     ws.get("xidx" + tag, indices.size, code.dtype), mark, cut_a,
                                     ws.get("cut_pos", indices.size, code.dtype))
            layer = SplitLayer(mode, nd, ns, cnt, pair_off, rows, lptr, lidx, indptr, lptr_off, start, count,
                               computed, int(local), int(indices.size), xptr, xidx)
        out.layers.append(layer)
    return out

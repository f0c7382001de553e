"""Uniform neighbour sampling into blocks: seeded, rank-agnostic, numba kernels.

A mini-batch of ``L`` layers is sampled top-down from the targets. Block
``blocks[l]`` uses ``fanouts[l]`` (DGL's convention: ``fanouts[0]`` is the input
layer, ``fanouts[-1]`` the layer whose destinations are the targets). Every
destination ``v`` draws ``min(fanout, deg(v))`` of its in-edges uniformly
*without replacement*; fanout ``-1`` takes all of them.

**Rank-agnostic determinism.** The in-edges drawn for vertex ``v`` in layer
``layer`` of batch ``batch_key`` are a pure function of
``(seed, batch_key, layer, v)``: they do not depend on the other vertices of the
batch, on their order, or on the process that draws them. A distributed strategy
can therefore sample only its own vertices and still reproduce the
single-process sample exactly. The random stream is a counter-based hash
(``splitmix64``), all arithmetic modulo ``2**64``::

    mix(x)  = splitmix64 output for state x:
              z = x + 0x9E3779B97F4A7C15
              z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
              z = (z ^ (z >> 27)) * 0x94D049BB133111EB
              z ^ (z >> 31)
    base    = mix(mix(mix(seed) ^ batch_key) ^ layer)
    h_v     = mix(base ^ v)
    r_i     = mix(h_v + i * 0x9E3779B97F4A7C15)           i = 0, 1, ..., k-1

(negative integers are taken modulo ``2**64``). With ``d = deg(v)`` and
``k = fanout < d``, Floyd's algorithm picks ``k`` distinct CSR positions: for
``i, j in enumerate(range(d - k, d))``, ``t = r_i % (j + 1)``; if ``t`` was
already picked, pick ``j`` instead. The picked positions are emitted in
ascending order, so a sampled row is a subsequence of the graph's CSR row
(ascending source ids for a canonical CSR). When ``d <= fanout`` (or fanout is
``-1``) the whole row is taken and no random number is drawn.

**Ordering of block rows.** The first ``num_dst`` source rows of a block are
its destinations, in the order given. The remaining source rows are the
sampled vertices that are not destinations, in *first-appearance order*
(scanning the sampled edges in CSR order), as DGL's ``to_block`` does. Both
orders are functions of the destination order and the sample only, so the
same call gives the same block in any process.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numba as nb
import numpy as np
import torch

from graphscale.data.block import Block
from graphscale.data.graph import Graph

_MASK64 = (1 << 64) - 1


# ------------------------------------------------------------------ kernels
@nb.njit(cache=True, inline="always")
def _mix(x):
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@nb.njit(cache=True)
def _stream_base(seed, batch_key, layer):
    return _mix(_mix(_mix(seed) ^ batch_key) ^ layer)


@nb.njit(cache=True)
def _row_sizes(indptr, nodes, fanout):
    out = np.empty(nodes.size + 1, dtype=np.int64)
    out[0] = 0
    for r in range(nodes.size):
        v = nodes[r]
        d = indptr[v + 1] - indptr[v]
        out[r + 1] = out[r] + (d if fanout < 0 or d <= fanout else fanout)
    return out


@nb.njit(cache=True)
def _floyd_small(h, d, k, out, lo):
    """Floyd's algorithm; membership by scanning the ``k`` picks made so far (k small)."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    for i in range(k):
        j = d - k + i
        t = np.int64(_mix(h + np.uint64(i) * golden) % np.uint64(j + 1))
        for q in range(lo, lo + i):
            if out[q] == t:
                t = j
                break
        out[lo + i] = t


@nb.njit(cache=True)
def _floyd_hashed(h, d, k, out, lo):
    """Floyd's algorithm; membership through an open-addressing set (k large). Same picks as ``_floyd_small``."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    cap = 2
    while cap < 2 * k:
        cap *= 2
    mask = cap - 1
    table = np.full(cap, -1, dtype=np.int64)
    for i in range(k):
        j = d - k + i
        t = np.int64(_mix(h + np.uint64(i) * golden) % np.uint64(j + 1))
        slot = t & mask
        while table[slot] != -1 and table[slot] != t:
            slot = (slot + 1) & mask
        if table[slot] == t:  # t already picked: pick j, which cannot have been picked before
            t = j
            slot = t & mask
            while table[slot] != -1:
                slot = (slot + 1) & mask
        table[slot] = t
        out[lo + i] = t


@nb.njit(cache=True)
def _sort_small(a, lo, hi):
    """Insertion sort of ``a[lo:hi]`` in place (faster than a general sort for short rows)."""
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


#: what :func:`_sample_kernel` is given as ``indices`` to write edge positions instead of sources
_NO_INDICES = np.empty(0, dtype=np.int64)


@nb.njit(cache=True)
def _sample_kernel(indptr, indices, nodes, keys, fanout, base, row_ptr, out):
    for r in range(nodes.size):
        v = nodes[r]
        start = indptr[v]
        d = indptr[v + 1] - start
        lo = row_ptr[r]
        k = row_ptr[r + 1] - lo
        if k == d:
            for q in range(d):
                out[lo + q] = indices[start + q] if indices.size else start + q
            continue
        h = _mix(base ^ np.uint64(keys[r]))
        if k <= 48:
            _floyd_small(h, d, k, out, lo)
            _sort_small(out, lo, lo + k)
        else:
            _floyd_hashed(h, d, k, out, lo)
            out[lo:lo + k].sort()
        for q in range(lo, lo + k):
            out[q] = indices[start + out[q]] if indices.size else start + out[q]


@nb.njit(cache=True)
def _check_range(nodes, num_nodes):
    for i in range(nodes.size):
        if nodes[i] < 0 or nodes[i] >= num_nodes:
            return i
    return -1


@nb.njit(cache=True)
def _relabel_direct(dst, global_src, num_nodes, src_ids):
    """``_relabel_kernel`` through a dense ``[num_nodes]`` map (small graphs)."""
    pos = np.full(num_nodes, -1, dtype=np.int64)
    n = 0
    for i in range(dst.size):
        v = dst[i]
        if pos[v] != -1:
            return 0, np.empty(0, dtype=np.int64), i
        pos[v] = n
        src_ids[n] = v
        n += 1
    local = np.empty(global_src.size, dtype=np.int64)
    for e in range(global_src.size):
        u = global_src[e]
        if pos[u] == -1:
            pos[u] = n
            src_ids[n] = u
            n += 1
        local[e] = pos[u]
    return n, local, -1


@nb.njit(cache=True)
def _relabel_hashed(dst, global_src, cap, src_ids):
    """``_relabel_kernel`` through an open-addressing table of ``cap`` (a power of two) slots."""
    bits = np.uint64(0)
    while (np.int64(1) << np.int64(bits)) < cap:
        bits += np.uint64(1)
    shift = np.uint64(64) - bits
    mask = cap - 1
    golden = np.uint64(0x9E3779B97F4A7C15)
    keys = np.full(cap, -1, dtype=np.int64)
    vals = np.empty(cap, dtype=np.int64)
    n = 0
    for i in range(dst.size):
        v = dst[i]
        slot = np.int64((np.uint64(v) * golden) >> shift)
        while keys[slot] != -1 and keys[slot] != v:
            slot = (slot + 1) & mask
        if keys[slot] == v:
            return 0, np.empty(0, dtype=np.int64), i
        keys[slot] = v
        vals[slot] = n
        src_ids[n] = v
        n += 1
    local = np.empty(global_src.size, dtype=np.int64)
    for e in range(global_src.size):
        u = global_src[e]
        slot = np.int64((np.uint64(u) * golden) >> shift)
        while keys[slot] != -1 and keys[slot] != u:
            slot = (slot + 1) & mask
        if keys[slot] == -1:
            keys[slot] = u
            vals[slot] = n
            src_ids[n] = u
            n += 1
        local[e] = vals[slot]
    return n, local, -1


@nb.njit(cache=True)
def _relabel_kernel(dst, global_src, num_nodes):
    """Local ids: destinations first (given order), then new sources in first-appearance order.

    Uses a dense map when the graph is no larger than the hash table would be, else a
    hash table sized by the batch (so memory stays O(batch) on huge graphs). Returns
    ``(src_ids, local_src, dup)`` where ``dup`` is the position of the first repeated
    destination, or -1.
    """
    bound = min(num_nodes, dst.size + global_src.size)
    src_ids = np.empty(bound, dtype=np.int64)
    cap = 16
    while cap < 2 * bound:
        cap *= 2
    if num_nodes <= 2 * cap:
        n, local, dup = _relabel_direct(dst, global_src, num_nodes, src_ids)
    else:
        n, local, dup = _relabel_hashed(dst, global_src, cap, src_ids)
    return src_ids[:n].copy(), local, dup


# ------------------------------------------------------------------ helpers
def _u64(value: int, name: str) -> np.uint64:
    try:
        return np.uint64(operator.index(value) & _MASK64)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def check_fanout(fanout, name: str = "fanout") -> int:
    """``fanout`` as an int when it is a positive integer or ``-1`` (all neighbours); else ``ValueError``."""
    if isinstance(fanout, bool) or not isinstance(fanout, (int, np.integer)) or (fanout != -1 and fanout < 1):
        raise ValueError(f"{name} must be a positive integer or -1 (all neighbours), got {fanout!r}")
    return int(fanout)


def _csr_arrays(graph_or_csr) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(graph_or_csr, Graph):
        indptr, indices = graph_or_csr.indptr, graph_or_csr.indices
    elif isinstance(graph_or_csr, (tuple, list)) and len(graph_or_csr) == 2:
        indptr, indices = graph_or_csr
    else:
        raise ValueError("graph_or_csr must be a Graph or an (indptr, indices) pair, "
                         f"got {type(graph_or_csr).__name__}")
    indptr, indices = _as_int64(indptr, "indptr"), _as_int64(indices, "indices")
    if indptr.size < 1 or indptr[0] != 0 or indptr[-1] != indices.size:
        raise ValueError(f"indptr must have length num_nodes + 1 >= 1, start at 0 and end at "
                         f"len(indices) = {indices.size}")
    return indptr, indices


def _as_int64(array, name: str) -> np.ndarray:
    if isinstance(array, torch.Tensor):
        array = array.detach().cpu().numpy()
    array = np.asarray(array)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _check_nodes(nodes: np.ndarray, num_nodes: int, name: str) -> None:
    bad = _check_range(nodes, num_nodes)
    if bad >= 0:
        raise ValueError(f"{name} must be vertex ids in [0, {num_nodes}); {name}[{bad}] = {int(nodes[bad])}")


# ------------------------------------------------------------------ public API
def sample_neighbors(graph_or_csr, nodes, fanout: int, seed: int, batch_key: int,
                     layer: int, keys=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``min(fanout, deg(v))`` in-neighbours of every ``v`` in ``nodes``, uniformly without replacement.

    The draw for ``v`` is a pure function of ``(seed, batch_key, layer, v)`` (see the
    module docstring), so any subset or permutation of ``nodes`` yields the same rows.

    Args:
        graph_or_csr: a :class:`Graph` or an ``(indptr, indices)`` destination-major CSR pair.
        nodes: int global ids of the destinations, shape ``[n]`` (repeats allowed: they get equal rows).
        fanout: neighbours per destination, ``>= 1``, or ``-1`` for all.
        seed: the sampler's seed.
        batch_key: identifies the mini-batch (e.g. ``epoch * batches_per_epoch + i``).
        layer: block index the rows are for.
        keys: the vertex ids the draws are keyed on (default ``nodes``); a process holding some rows of a
            larger graph renumbered (e.g. a partition serving its home vertices' rows, sorted as the global
            CSR sorts them) passes their global ids here to draw exactly what the whole graph would.

    Returns:
        ``(indptr [n+1], global_src [nnz])``, int64: row ``r`` holds the sampled in-neighbours
        of ``nodes[r]`` as global ids, in ascending CSR position.

    Raises:
        ValueError: on a bad fanout, non-integer keys, a malformed CSR pair, or ids outside
            ``[0, num_nodes)``.
    """
    fanout = check_fanout(fanout)
    indptr, indices = _csr_arrays(graph_or_csr)
    nodes_np = _as_int64(nodes, "nodes")
    _check_nodes(nodes_np, indptr.size - 1, "nodes")
    base = np.uint64(_stream_base(_u64(seed, "seed"), _u64(batch_key, "batch_key"), _u64(layer, "layer")))
    row_ptr = _row_sizes(indptr, nodes_np, fanout)
    out = np.empty(int(row_ptr[-1]), dtype=np.int64)
    keys_np = nodes_np if keys is None else _as_int64(keys, "keys")
    if keys_np.shape != nodes_np.shape:
        raise ValueError(f"keys must have one id per node, got {keys_np.size} for {nodes_np.size} nodes")
    _sample_kernel(indptr, indices, nodes_np, keys_np, fanout, base, row_ptr, out)
    return torch.from_numpy(row_ptr), torch.from_numpy(out)


def relabel(dst, global_src, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Number a block's source rows: ``dst`` first (given order), then new sources by first appearance.

    Args:
        dst: int64 unique global ids of the destinations ``[n_dst]``.
        global_src: int64 global id of every sampled edge's source ``[nnz]``.
        num_nodes: vertices of the graph (bounds the number of distinct sources).

    Returns:
        ``(src_ids [num_src], local_src [nnz])`` with ``src_ids[local_src] == global_src``
        and ``src_ids[:n_dst] == dst``.

    Raises:
        ValueError: if ``dst`` holds a repeated id or any id lies outside ``[0, num_nodes)``.
    """
    dst_np, src_np = _as_int64(dst, "dst"), _as_int64(global_src, "global_src")
    _check_nodes(dst_np, int(num_nodes), "dst")
    _check_nodes(src_np, int(num_nodes), "global_src")
    src_ids, local, dup = _relabel_kernel(dst_np, src_np, int(num_nodes))
    if dup >= 0:
        raise ValueError(f"destinations must be distinct; id {int(dst_np[dup])} repeats at position {dup}")
    return torch.from_numpy(src_ids), torch.from_numpy(local)


class NeighborSampler:
    """Uniform ``L``-layer neighbour sampler producing one :class:`Block` per layer.

    Args:
        graph: the whole graph (in-neighbours are sampled).
        fanouts: neighbours per destination for each layer, input layer first; ``-1`` = all.
        seed: the seed of every draw (see the module docstring).
        degrees: global in-degrees ``[N]`` carried into ``Block.src_deg``;
            defaults to :meth:`Graph.gcn_degrees` (in-degrees; weighted for a weighted graph), computed once here.
            A weighted graph's blocks carry their sampled edges' weights (``Block.edge_weight``).

    Raises:
        TypeError: if ``graph`` is not a :class:`Graph`.
        ValueError: on empty fanouts, a fanout that is neither ``>= 1`` nor ``-1``, or a bad ``degrees`` shape.

    Example:
        >>> sampler = NeighborSampler(graph, [15, 10, 5], seed=0)
        >>> blocks = sampler.sample(targets, batch_key=0)   # blocks[-1].dst_ids == targets
    """

    def __init__(self, graph: Graph, fanouts: Sequence[int], seed: int = 0,
                 degrees: torch.Tensor | None = None) -> None:
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be a graphscale Graph, got {type(graph).__name__}")
        if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence) or len(fanouts) == 0:
            raise ValueError(f"fanouts must be a non-empty list of ints (one per layer), got {fanouts!r}")
        self.fanouts = [check_fanout(f, f"fanouts[{i}]") for i, f in enumerate(fanouts)]
        _u64(seed, "seed")
        self.seed = int(seed)
        self.graph = graph
        self._indptr, self._indices = _csr_arrays(graph)
        degrees = graph.gcn_degrees() if degrees is None else torch.as_tensor(degrees)
        if degrees.shape != (graph.num_nodes,):
            raise ValueError(f"degrees must have shape ({graph.num_nodes},), got {tuple(degrees.shape)}")
        self.degrees = degrees
        self._degrees = degrees.numpy() if degrees.is_floating_point() else _as_int64(degrees, "degrees")
        self._weights = None if graph.edge_weight is None else graph.edge_weight.numpy()

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def sample(self, targets: torch.Tensor, batch_key: int) -> list[Block]:
        """Sample the blocks of one mini-batch.

        Args:
            targets: int64 distinct global ids of the output vertices ``[B]``.
            batch_key: identifies the mini-batch; with the seed it fixes every draw.

        Returns:
            ``L`` blocks, input layer first: ``blocks[-1].dst_ids == targets`` and, for
            ``l < L-1``, ``blocks[l].dst_ids == blocks[l+1].src_ids``.

        Raises:
            ValueError: on ids outside ``[0, num_nodes)`` or repeated targets.
        """
        dst = _as_int64(targets, "targets")
        num_nodes = self.graph.num_nodes
        _check_nodes(dst, num_nodes, "targets")
        key = _u64(batch_key, "batch_key")
        seed = np.uint64(self.seed & _MASK64)
        blocks: list[Block] = []
        for layer in range(self.num_layers - 1, -1, -1):
            base = np.uint64(_stream_base(seed, key, np.uint64(layer)))
            row_ptr = _row_sizes(self._indptr, dst, self.fanouts[layer])
            global_src = np.empty(int(row_ptr[-1]), dtype=np.int64)
            weight = None
            if self._weights is None:
                _sample_kernel(self._indptr, self._indices, dst, dst, self.fanouts[layer], base, row_ptr, global_src)
            else:  # the sampled edges' positions (an empty indices array asks for them), then sources and weights
                _sample_kernel(self._indptr, _NO_INDICES, dst, dst, self.fanouts[layer], base, row_ptr, global_src)
                weight = torch.from_numpy(np.take(self._weights, global_src))
                global_src = np.take(self._indices, global_src)
            src_ids, local, dup = _relabel_kernel(dst, global_src, num_nodes)
            if dup >= 0:
                raise ValueError(f"targets must be distinct; id {int(dst[dup])} repeats at position {dup}")
            src_deg = torch.from_numpy(np.take(self._degrees, src_ids))  # numpy's gather beats torch's here
            blocks.append(Block(torch.from_numpy(row_ptr), torch.from_numpy(local), torch.from_numpy(src_ids), src_deg,
                                weight))
            dst = src_ids
        blocks.reverse()
        return blocks


class MiniBatchLoader:
    """Cuts the training vertices into mini-batches, reshuffled per epoch, deterministically.

    The permutation of epoch ``e`` is a function of ``(seed, e)`` only, so every process
    that builds the loader with the same arguments sees the same batches.

    Args:
        train_ids: distinct int64 global ids of the training vertices ``[T]``, or a bool mask ``[N]``.
        batch_size: targets per mini-batch, ``>= 1``.
        seed: shuffling seed.
        shuffle: permute the ids every epoch; otherwise keep the given order.
        drop_last: drop the final batch when it is smaller than ``batch_size``.
    """

    def __init__(self, train_ids: torch.Tensor, batch_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False) -> None:
        ids = torch.as_tensor(train_ids)
        if ids.dtype == torch.bool:
            ids = torch.nonzero(ids, as_tuple=False).flatten()
        if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"train_ids must be a 1-D integer id tensor or a bool mask, "
                             f"got dtype {ids.dtype} and shape {tuple(ids.shape)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        _u64(seed, "seed")
        ids = ids.to(torch.int64).contiguous()
        if ids.numel() and (int(ids.min()) < 0 or torch.unique(ids).numel() != ids.numel()):
            raise ValueError("train_ids must be distinct non-negative vertex ids")
        self.train_ids = ids
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)

    def __len__(self) -> int:
        n = self.train_ids.numel()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_key(self, epoch: int, index: int) -> int:
        """A key unique to batch ``index`` of ``epoch``: ``epoch * len(self) + index``."""
        return int(epoch) * len(self) + int(index)

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """The mini-batches of ``epoch``, each an int64 tensor of target ids."""
        ids = self.train_ids
        if self.shuffle:
            mixed = int(_stream_base(_u64(self.seed, "seed"), _u64(epoch, "epoch"), np.uint64(0xB47C4)))
            gen = torch.Generator().manual_seed(mixed & ((1 << 63) - 1))
            ids = ids[torch.randperm(ids.numel(), generator=gen)]
        return [ids[i * self.batch_size:(i + 1) * self.batch_size] for i in range(len(self))]

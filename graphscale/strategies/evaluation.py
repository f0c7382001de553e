"""Distributed evaluation: every worker evaluates the vertices it owns, layer by layer, in bounded batches.

Used by the mini-batch strategies (``data-parallel``, ``split-parallel``; see
:class:`~graphscale.strategies.minibatch_common.MiniBatchStrategy`; and ``single --minibatch`` on a mapped graph
directory, one worker owning every vertex) in place of exact full-graph
inference on every worker. It computes exactly what ``single`` computes (``model(Block.full(graph), x)``
followed by :func:`~graphscale.strategies.base.split_counts`), but no worker ever holds the whole graph.

**Ownership.** Worker ``r`` owns a set ``O_r`` of vertices (ascending ids); the sets cover ``[0, N)``
once. By default ``O_r`` is the ``r``-th of ``W`` near-equal contiguous ranges (as
``torch.tensor_split(torch.arange(N), W)``); given a vertex partition ``owner[N]`` (split-parallel's, or
data-parallel's with ``--cache pagraph``) it is the worker's part, which usually has far fewer halo rows.

**Setup** (a collective; every rank constructs its evaluator together). The worker finds its halo
``B_r`` (the in-neighbours of ``O_r`` owned elsewhere, ascending) by reading the CSR rows of ``O_r`` one
batch at a time, and agrees a :class:`~graphscale.distributed.functional.HaloExchange` plan for it with
the owners (its id exchange under ``control``). It keeps no block: each evaluation batch reads its rows
from the (host-shared, memory-mapped) graph again, so a worker holds ``O_r``, ``B_r``, the plan and the
labels and split masks of ``O_r``, never a copy of its part of the topology.

**Evaluation** (DGL's layer-wise ``inference``, distributed)::

    h  = input_map(x[O_r], O_r);  h0 = h                          # GCNII's initial residual
    for l in 0 .. L-1:
        halo = halo_rows(h)       # [|B_r|, d_l] from their owners; at l = 0 with an identity input map
                                  # each batch reads its raw source rows from the host-shared x instead
        for each batch [a, b) of at most batch_rows owned rows:    # one bounded block at a time
            h_next[a:b] = step(l, batch_block, [h; halo][rows], h0[a:b])  # rows read from h and halo
        h = h_next                                                 # [|O_r|, d_{l+1}]
    counts = split_counts(output_map(h, O_r), y[O_r], masks[O_r]); all_reduce(counts)  (control)

A PyG model with its own forward (:class:`~graphscale.nn.pyg_forward.ForwardGNN`) runs that forward on the owned
rows ``x[O_r]``, each conv call being the loop body above (halo rows, then the batches).

A batch block has the batch's destination rows first, then their other in-neighbours (any local source
row), with *global* ids (``src_ids``: dropout keys, GCNII / ResGCN input maps) and *global* in-degrees
(``src_deg``: GCN normalisation). Every destination keeps its full in-neighbourhood in CSR order, so the
sparse part of every row is bit for bit the full-graph row; dense row-wise maps agree to float rounding,
and the all-reduced float64 loss sums to float reassociation. On the device a worker holds one layer's
``|O_r|`` input rows, its ``|B_r|`` halo rows (as received: never copied into one ``[O_r; B_r]`` buffer), its
``|O_r|`` output rows (and ``h0``) and one batch: never the whole graph. Finding ``B_r`` takes an ``N``-byte
mask and one batch of CSR rows at a time.

**Tables on disk.** The per-layer tables (``h``, ``h_next``, ``h0``: one row per owned vertex) are allocated by a
:class:`~graphscale.data.spill.TableMemory`: over its limit (the strategies give it a share of ``--host-memory``)
a table is a temporary memory-mapped file instead of anonymous memory, and a learned input map then runs batch by
batch into such a table, so a worker never holds an ``[|O_r|, d]`` table the budget does not.

Every worker issues the same collectives in the same order (plan, one halo exchange per layer, the count
all-reduce), also when it owns no vertices (it then runs empty batches).

**Ledger.** The halo rows sent per layer are recorded under ``eval_halo`` (:data:`EVAL_HALO`, forward
only: no gradients), the plan's id exchange and the summed counts (``COUNTS_PER_SPLIT * len(SPLITS)`` float64, ring
model) under ``control``. Strategies snapshot the Ledger around ``train_epoch`` only, so evaluation bytes
are recorded but never part of an epoch's statistics. Summed over workers, one evaluation sends
``eval_halo = sum_{l >= l0} (sum_r |B_r|) * d_l * b`` bytes (``d_l = model.layer_widths()[l]``;
``l0 = 1`` when the input map is the identity, since layer 0 then reads raw rows, else ``0``).
"""

from __future__ import annotations

import torch

from graphscale.data.block import Block, csr_rows
from graphscale.data.graph import Graph
from graphscale.data.spill import TableMemory
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.functional import HaloExchange
from graphscale.strategies.base import SPLITS, counts_to_metrics, split_counts

#: Ledger category of the halo rows exchanged during evaluation.
EVAL_HALO = "eval_halo"
#: Default bound on the destination rows of one evaluation batch.
DEFAULT_BATCH_ROWS = 8192
#: Default bound on the source rows of one evaluation batch, in bytes (destinations + in-edges x row width).
DEFAULT_BATCH_BYTES = 16 << 20


def contiguous_bounds(num_nodes: int, world_size: int) -> torch.Tensor:
    """``[W+1]`` range starts: worker ``r`` owns ``[bounds[r], bounds[r+1])``, as ``torch.tensor_split``."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    base, extra = divmod(int(num_nodes), int(world_size))
    ranks = torch.arange(world_size + 1)
    return ranks * base + torch.clamp(ranks, max=extra)


def halo_of(graph: Graph, owned: torch.Tensor, batch_rows: int = DEFAULT_BATCH_ROWS) -> torch.Tensor:
    """Ascending global ids of the in-neighbours of ``owned`` that are not owned.

    The CSR rows of ``owned`` are read ``batch_rows`` at a time and marked in a ``[N]`` byte mask, so memory is
    ``N`` bytes, the halo and one batch (never a list of every batch's in-neighbours).
    """
    seen = torch.zeros(graph.num_nodes, dtype=torch.bool)
    for start in range(0, owned.numel(), batch_rows):
        _, src = csr_rows(graph, owned[start: start + batch_rows])
        seen[src] = True
    seen[owned] = False
    return torch.nonzero(seen).flatten()


def source_rows(owned: torch.Tensor, halo: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
    """Rows of global ``ids`` in the layout ``[owned; halo]`` (both ascending); ``-1`` for a non-owned id when
    ``halo`` is ``None``."""
    if owned.numel():
        pos = torch.searchsorted(owned, ids).clamp_(max=owned.numel() - 1)
        mine = owned[pos] == ids
    else:
        pos, mine = torch.zeros_like(ids), torch.zeros(ids.shape, dtype=torch.bool)
    other = torch.full_like(ids, -1) if halo is None else owned.numel() + torch.searchsorted(halo, ids)
    return torch.where(mine, pos, other)


def batch_block(graph: Graph, owned: torch.Tensor, halo: torch.Tensor, start: int,
                stop: int) -> tuple[Block, torch.Tensor]:
    """The block of owned rows ``[start, stop)`` with their in-neighbours (:meth:`Block.from_nodes`), and the
    rows of ``[owned; halo]`` behind its source rows (``h_sub = h_src[rows]``).

    Edges keep the graph's CSR order, so every destination's sum is the full-graph row bit for bit; sources
    carry global ids and global in-degrees. Allocations are O(the batch's rows and edges), never O(N).
    """
    block = Block.from_nodes(graph, owned[start:stop])
    return block, source_rows(owned, halo, block.src_ids)


class LayerwiseEvaluator:
    """Distributed layer-wise evaluation of a model over the vertices this worker owns (module docstring).

    Constructing it is a collective (the halo plan); so is :meth:`evaluate`.

    Args:
        comm: the worker's Comm.
        graph: the whole graph (only the rows of owned vertices and the ``indptr`` of their halo are read).
        model: the model (a :class:`~graphscale.nn.models.GNN`); its parameters' dtype is the features' dtype.
        owner: optional int64 ``[N]`` vertex partition (part ``r`` is worker ``r``'s); default: contiguous ranges.
        batch_rows: at most this many destination rows per batch block.
        batch_bytes: at most this many bytes of source rows per batch block (counted as destinations plus
            in-edges times the layer's input width; a row with more in-edges is a batch of its own).
        category: Ledger category of the halo exchange.
        tables: where the ``[num_owned, d]`` tables of every layer (and the input-mapped rows) are allocated
            (:class:`~graphscale.data.spill.TableMemory`): a table over its limit goes to a temporary file, and the
            input map then runs over row batches; default: every table in memory.

    Attributes:
        owned: int64 ascending global ids of the vertices this worker evaluates.
        halo_ids: int64 ascending global ids of the in-neighbours of ``owned`` owned elsewhere.
        halo: the :class:`HaloExchange` plan.
        max_batch_dst: the most destination rows any batch block held in the last evaluation.
    """

    def __init__(self, comm: Comm, graph: Graph, model: torch.nn.Module, owner: torch.Tensor | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS, category: str = EVAL_HALO,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, tables: TableMemory | None = None) -> None:
        if int(batch_rows) < 1:
            raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
        if graph.x is None or graph.y is None:
            raise ValueError("distributed evaluation needs node features and labels")
        self.comm, self.graph, self.model = comm, graph, model
        self.batch_rows = int(batch_rows)
        self.tables = TableMemory() if tables is None else tables
        self.device = comm.env.device
        rank, world, n = comm.rank, comm.world_size, graph.num_nodes
        if owner is None:
            bounds = contiguous_bounds(n, world)
            self.owned = torch.arange(int(bounds[rank]), int(bounds[rank + 1]), dtype=torch.int64)
            self.halo_ids = halo_of(graph, self.owned, self.batch_rows)
            halo_owner = torch.searchsorted(bounds[1:], self.halo_ids, right=True)
        else:
            owner = torch.as_tensor(owner, dtype=torch.int64).cpu()
            if owner.shape != (n,):
                raise ValueError(f"owner must have one entry per vertex ({n}), got shape {tuple(owner.shape)}")
            if n and (int(owner.min()) < 0 or int(owner.max()) >= world):
                raise ValueError(f"owner values must lie in [0, {world}) for {world} workers")
            self.owned = torch.nonzero(owner == rank).flatten()
            self.halo_ids = halo_of(graph, self.owned, self.batch_rows)
            halo_owner = owner[self.halo_ids]
        self.halo = HaloExchange.build(comm, self.owned, self.halo_ids, halo_owner, category)
        self.owned_dev = self.owned.to(self.device)
        self.y = graph.y[self.owned].to(self.device)
        self.masks = {}
        for split in SPLITS:
            mask = getattr(graph, f"{split}_mask")
            self.masks[split] = (torch.zeros(self.owned.numel(), dtype=torch.bool) if mask is None
                                 else mask[self.owned]).to(self.device)
        self.max_batch_dst = 0
        self.batch_bytes = int(batch_bytes)
        degrees = graph.indptr[self.owned + 1] - graph.indptr[self.owned]
        self._cost = torch.cumsum(degrees + 1, 0)  # source rows a batch may read, cumulated over owned rows
        # With an identity input map, layer 0 reads raw rows: each batch takes its source rows straight from
        # the host-shared features instead of exchanging them (no [owned + halo, F] buffer, no bytes moved).
        from graphscale.nn.models import GNN

        self.raw_first_layer = type(model).input_map is GNN.input_map and not model.needs_h0

    @property
    def num_owned(self) -> int:
        return self.owned.numel()

    def batches(self, width: int = 0) -> list[tuple[int, int]]:
        """``[a, b)`` ranges of owned rows (one empty batch when nothing is owned): at most ``batch_rows`` rows,
        and, for source rows ``width`` wide, at most ``batch_bytes`` of them (bounded by the batch's
        destinations plus in-edges), so wide raw features do not make a batch read most of the graph."""
        n = self.num_owned
        if n == 0:
            return [(0, 0)]
        elem = next(self.model.parameters()).element_size()
        cap = max(1, self.batch_bytes // max(1, width * elem)) if width else None
        out, a = [], 0
        while a < n:
            b = min(a + self.batch_rows, n)
            if cap is not None:  # the largest b whose rows + in-edges fit the cap (at least one row)
                base = int(self._cost[a - 1]) if a else 0
                b = max(a + 1, min(b, int(torch.searchsorted(self._cost, base + cap, right=True))))
            out.append((a, b))
            a = b
        return out

    def _feature_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Raw feature rows of vertices ``ids`` (ascending global ids) from the (host-shared) graph, in the
        model's dtype, on the device (a contiguous range is read as a view)."""
        dtype = next(self.model.parameters()).dtype
        x = self.graph.x
        if ids.numel() and int(ids[-1]) - int(ids[0]) + 1 == ids.numel():
            rows = x[int(ids[0]): int(ids[-1]) + 1]
        else:
            rows = x[ids]
        return rows.to(device=self.device, dtype=dtype)

    @torch.no_grad()
    def logits(self) -> torch.Tensor:
        """Logits of the owned vertices, ``[num_owned, C]`` in :attr:`owned` order (a collective)."""
        model = self.model
        model.eval()
        self.max_batch_dst = 0
        if not getattr(model, "layer_sequential", True):  # a PyG model with its own forward, on the owned rows
            return model.run(self._feature_rows(self.owned), self.owned_dev, self._layer)
        h = None if self.raw_first_layer else self._input_rows()
        h0 = h if model.needs_h0 else None
        for l in range(model.num_layers):
            h = self._layer(l, h, h0)
        return model.output_map(h, self.owned_dev)

    def _input_rows(self) -> torch.Tensor:
        """``input_map`` of the owned rows: in one call, or, when the feature rows or the mapped rows would not fit
        :attr:`tables`' limit, batch by batch into a (file-backed) table (row-wise maps: equal to float rounding)."""
        model, n = self.model, self.num_owned
        elem = next(model.parameters()).element_size()
        if self.tables.fits(n * max(self.graph.x.shape[1], max(model.layer_widths())) * elem):
            return model.input_map(self._feature_rows(self.owned), self.owned_dev)
        h = None
        for a in range(0, n, self.batch_rows):
            b = min(a + self.batch_rows, n)
            y = model.input_map(self._feature_rows(self.owned[a:b]), self.owned_dev[a:b])
            if h is None:
                h = self.tables.empty((n, *y.shape[1:]), y.dtype, self.device)
            h[a:b] = y
        return h

    def _layer(self, l: int, h: torch.Tensor | None, h0: torch.Tensor | None = None) -> torch.Tensor:
        """Step ``l`` of the owned rows from their inputs ``h`` (``None``: layer 0 reads raw rows), batch by batch."""
        model = self.model
        direct = h is None
        halo = None if direct else self.halo.halo_rows(h)  # [|B_r|, d_l], received order
        out = None
        for a, b in self.batches(model.layer_widths()[l]):
            sub, rows = batch_block(self.graph, self.owned, self.halo_ids, a, b)
            self.max_batch_dst = max(self.max_batch_dst, sub.num_dst)
            x_src = self._feature_rows(sub.src_ids) if direct else self._source_rows(h, halo, rows)
            y = model.step(l, sub.to(self.device), x_src, None if h0 is None else h0[a:b])
            if out is None:  # in memory, or in a temporary file when over the tables' limit
                out = self.tables.empty((self.num_owned, *y.shape[1:]), y.dtype, y.device)
            out[a:b] = y
        return out

    def _source_rows(self, h: torch.Tensor, halo: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``rows`` of the layout ``[owned; halo]``, read from the owned rows ``h`` and the halo rows as
        received (:meth:`HaloExchange.halo_rows`), without building that layout."""
        rows = rows.to(self.device)
        n = self.num_owned
        remote = rows >= n
        mine, theirs = torch.nonzero(~remote).flatten(), torch.nonzero(remote).flatten()
        x = h.new_empty((rows.numel(), *h.shape[1:]))
        x[mine] = h.index_select(0, rows[mine])
        j = rows[theirs] - n
        x[theirs] = halo.index_select(0, j if self.halo.halo_index is None else self.halo.halo_index[j])
        return x

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """``{split}_acc`` / ``{split}_loss`` over the whole graph, the same on every worker (a collective)."""
        counts = split_counts(self.logits(), self.y, self.masks).to(self.device)
        return counts_to_metrics(self.comm.all_reduce(counts, CONTROL).cpu())

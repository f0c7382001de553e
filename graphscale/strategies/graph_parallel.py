"""Full-graph graph parallelism: one partition per worker, a halo exchange per layer.

The NeutronStar / DistGNN-style baseline (GNNPipe's "graph parallelism").

**Setup.** Worker ``i`` memory-maps ``part-i`` of a partition store (the
partition-local view of :mod:`graphscale.data.handle`, written by ``graphscale
partition`` or by the run before the workers start) and nothing else: it never
sees the global graph. It owns the store's inner vertices ``P_i`` (ascending
original ids); its block is the inner rows of the part's local CSR: destinations
``P_i``, sources ``P_i`` followed by the halo ``B_i`` (in-neighbours of ``P_i``
owned elsewhere, in the store's global-id order), with the stored *global*
in-degrees and original ids (the dropout keys). Only the inner rows of the
features, labels and masks are read (row-normalised here when the run asks for
it, since a store holds raw features); from a store that references its graph directory's rows, the inner
feature rows are gathered once into a private file under the cache directory's ``tmp`` and mapped
(:mod:`~graphscale.partition.store_rows_file`), so they are file pages as a copying store's are. The
:class:`~graphscale.distributed.functional.HaloExchange` plan comes from the
store's ``halo_owner`` and ids, agreed with the owners (category ``"control"``);
the global training count is one all-reduce (category ``"setup"``).

**Epoch.** ``h = input_map(x_i)``; for every layer ``l`` that exchanges projected rows (below):
``z, local = model.project(l, h, ids)`` (``pre``, keyed by the owned rows' ids, fused into the projection where
the layer fuses it), ``h = model.step_projected(l, block, halo.gather(z), local)``; for every other layer: where the
model fuses ``pre`` (the row-wise,
id-keyed dropout) into the layer's first product (:meth:`GNN.fuses_pre`), ``h = model.step(l, block,
halo.gather(h), h0_dst)``: raw rows cross and the step drops them as it reads them, so no dropped copy exists;
otherwise ``h = model.step(l, block, halo.gather(model.pre(l, h)), h0_dst, pre_applied=True)``: ``pre`` runs on
the worker's own rows before the exchange (one dropped copy of its inner rows rather than of all its source
rows; the rows are the same). ``logits = output_map(h)``. A PyG model with its own forward
(:class:`~graphscale.nn.pyg_forward.ForwardGNN`) runs that forward on the owned rows, each conv call being
``step(l, block, halo.gather(h))`` (not with ``overlap``).

**Overlap.** With ``GraphParallel(overlap=True)`` each layer's exchange runs while the worker computes:
the rows are cut once at setup (:class:`OverlapPlan`) into *interior* rows, whose in-neighbours are all local,
and *boundary* rows, which read at least one halo row. Per layer the worker starts the exchange
(:meth:`HaloExchange.start`: the rows peers need are sent and the halo rows received by the backend's thread),
runs the step on the interior block (its sources: the interior rows and the boundary rows they read, gathered),
then waits for the halo (:meth:`HaloExchange.finish`) and runs the step on the boundary block (sources: the
boundary rows, the interior rows they read, the halo), and puts the rows back in local order. Every row keeps its
in-edges in stored order, so every aggregated row is summed exactly as unsplit; the bytes are the same. Only the
forward exchange overlaps; the backward exchange of the halo gradients is blocking. ``overlap=False`` (the
default) exchanges first and runs the unsplit block. ``graphscale bench scaling`` times both: on CPU workers over
loopback gloo the exchange is about a tenth of a 2-worker epoch, less than the gathers the overlap adds (the
interior block's sources and the boundary block's local sources are copies, and the rows both blocks read are
copied twice), so it is off by default; it pays where communication is slower than the copies (between nodes).

The loss is the sum of cross-entropy over the
worker's training vertices divided by the *global* number of training vertices,
so summing the workers' parameter gradients gives the single-process gradient
exactly: the backward of each gather returns halo gradients to their owners,
which sum them into their rows, and the parameter gradients are then summed
with one all-reduce over a flat buffer (category ``"allreduce"``) before the
identical optimiser step on every worker (parameters stay identical).

**Projected exchange.** A step that is a projection then an aggregation (:mod:`graphscale.nn.projected`: GCN's
``A_hat (h W)``; GraphSAGE's neighbour term ``mean(h_u) W_l = mean(h_u W_l)``, its root term ``h_v W_r`` a term of
the owned rows; GAT's projection ``z = h W``, from which the scores and the attention follow) runs split at the
projection where a projected row has fewer bytes than an input row (:func:`projected_exchanges`: ``p_l * b <
d_l * b_l``): each worker drops and projects its own rows, exchanges the projected halo rows (the projection
needs their gradients back: the weight does) and aggregates. The worker then never gathers its layer inputs'
``[inner + halo, d_l]`` table, only ``[inner + halo, p_l]``; at layer 0 its feature rows stay the mapped store's.
``single`` may run the other order, ``(A_hat h) W`` (the layer picks the cheaper one), which differs only by float
rounding (the tests hold both to the project's tolerance).

**Closed forms** (bytes per training epoch, summed over workers; ``b`` = bytes
per element, ``d_l = model.layer_widths()[l]`` = width of the rows entering
step ``l``, ``p_l`` the width of its projected rows)::

    halo      = sum_l  k_l * (sum_i |B_i|) * e_l * b,   e_l = p_l where layer l exchanges projected rows, else d_l;
                k_l = 2 (forward + backward), except k_0 = 1 when step 0 exchanges its input rows and they do not
                require grad
    allreduce = 2 * (W - 1) * P * b                      (ring model, P = parameter elements)
    control   = 2 * (W - 1) * 8                          (the all-reduced float64 loss sum, ring model)

For GCN, GraphSAGE and GAT ``input_map`` is the identity, so where step 0 exchanges
raw feature rows autograd never asks for their gradient: the backward exchange
of layer 0 is skipped (``k_0 = 1``). With ``--feature-dtype bfloat16`` the worker
holds its feature rows in bfloat16 and step 0 exchanges them as stored (``b_0 =
2``; the step upcasts its source rows and applies its dropout after the exchange,
keyed by the same ids, so the rows are those of ``single``) unless it exchanges projected rows (float32, so where
``4 p_0 < 2 d_0``); a learned
``input_map`` reads its upcast rows locally and exchanges float32 rows as usual. A PyG model with its own
forward exchanges the stored rows where its first conv call reads the forward's ``x`` itself (the conv's step
upcasts them); where the forward computes on ``x`` first (a dropout, a linear map), layer 0 exchanges that
float32 result (:func:`exchanges_stored_input`); it never exchanges projected rows (each conv call runs whole).
GCNII's ``input_map`` is a learned projection and its layers aggregate first, so its layer-0 exchange runs in both
directions with ``d_0`` columns. With ``rho = sum_i |B_i| / N`` and all exchanged widths ``H`` this is GNNPipe's
``V_g = 2 rho L N H b`` (minus the skipped backward).

With ``--features learnable:D`` the input is a trainable table of the worker's inner rows
(:meth:`Strategy.learnable_table`, rows keyed by original id): step 0's input requires grad, so its halo
exchange runs in both directions (``k_0 = 2``) and each owner receives the gradients of its rows read
elsewhere; the table is not all-reduced (each row has one owner) and Adam updates it row-wise, exactly as
``single`` updates the same rows of its whole table.

**Memory.** Under an explicit ``--host-memory`` the worker runs its CPU kernels without the buffer pool
(:mod:`graphscale.nn.buffers`: its idle buffers, the backward's outputs through the forward and the forward's through
the backward, measured at about 170 bytes per local row at hidden 16), and restores the pool at teardown; the
projected rows of a layer are freed once gathered. The numbers are the same either way.

Evaluation runs the same forward pass without gradients (its halo bytes are
recorded but are not part of an epoch's statistics) and all-reduces the
per-split counts.

**Link prediction** (``--task link``): the store partitions the split's message-passing graph and the parent writes
each part's pairs next to it (:mod:`graphscale.tasks.link_store`); the forward's rows are embeddings, and each pair
is scored on the worker owning its source (:mod:`graphscale.strategies.link_scoring`: destination rows fetched from
their owners in category ``"link"``, the loss over the global pair count, metrics over every worker's scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from graphscale.config import RunConfig
from graphscale.data.block import Block
from graphscale.data.cache import resolve_cache_dir
from graphscale.data.datasets import row_normalize
from graphscale.data.features import learnable_dim
from graphscale.data.handle import PARTITION_LOCAL, DataHandle
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.distributed.functional import HaloExchange
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.nn import buffers
from graphscale.nn.ops import topology
from graphscale.options import option_names
from graphscale.options.shared import GraphParallelOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    SPLITS,
    Strategy,
    allreduce_gradients,
    counts_to_metrics,
    masked_loss_sum,
    optimizer_tensors,
    split_counts,
    unused_feature_options,
)
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.link_scoring import LinkScorer, RowFetch, predict_head
from graphscale.strategies.optimizers import moment_count
from graphscale.strategies.overlap_plan import OverlapPlan
from graphscale.tasks.link_store import link_folder, read_link_part, store_owner

HALO = "halo"
SETUP = "setup"


def halo_bytes_per_epoch(halo_sizes: Sequence[int], widths: Sequence[int], element_size: int,
                         first_backward: bool, input_element_size: int | None = None,
                         projected: Sequence[int | None] | None = None) -> int:
    """The closed-form halo volume of one training epoch, summed over workers (module docstring).

    Args:
        halo_sizes: ``|B_i|`` for every part.
        widths: ``d_l`` for every layer (``model.layer_widths()``).
        element_size: bytes per element.
        first_backward: whether the input of step 0 requires grad (then layer 0 exchanges gradients too).
        input_element_size: bytes per element of step 0's exchange when it moves the stored feature rows in
            another dtype (``--feature-dtype bfloat16``: 2); default ``element_size``.
        projected: per layer, the width ``p_l`` of the projected rows it exchanges instead of its inputs, or
            ``None`` where it exchanges its inputs (:func:`projected_exchanges`); default: inputs everywhere.
    """
    rows = int(sum(int(s) for s in halo_sizes))
    first = element_size if input_element_size is None else input_element_size
    total = 0
    for layer, d in enumerate(widths):
        p = None if projected is None else projected[layer]
        if p is not None:  # projected rows require grad (the weight does): both directions
            total += 2 * rows * int(p) * element_size
        else:
            total += ((2 if (layer > 0 or first_backward) else 1) * rows * int(d)
                      * (first if layer == 0 else element_size))
    return total


def projected_exchanges(model: torch.nn.Module, element_size: int,
                        input_element_size: int | None = None) -> list[int | None]:
    """Per layer, the width of the projected rows that layer's halo exchange moves, or ``None`` where it moves the
    layer's inputs: a step that runs split at its projection (:meth:`GNN.projected_width`) exchanges projected rows
    where a projected row has fewer bytes than an input row (``p_l * b < d_l * b_l``; ``b_0`` is
    ``input_element_size`` when step 0 exchanges stored rows in another dtype). Read by :class:`GraphParallel`'s
    setup and by :func:`epoch_bytes` alike."""
    width_of = getattr(model, "projected_width", None)
    if width_of is None or not getattr(model, "layer_sequential", True):
        return [None] * len(model.layer_widths())
    out = []
    for l, d in enumerate(model.layer_widths()):
        b = input_element_size if l == 0 and input_element_size is not None else element_size
        p = width_of(l)
        out.append(p if p is not None and p * element_size < d * b else None)
    return out


def exchanges_stored_input(model: torch.nn.Module) -> bool:
    """Whether step 0 reads the stored feature rows themselves, so that with ``--feature-dtype bfloat16`` layer 0
    exchanges them as stored (``b_0 = 2``): a model without a learned ``input_map``; for a PyG model with its own
    forward, one whose first conv call reads the forward's ``x`` itself
    (:attr:`~graphscale.nn.pyg_forward.ForwardGNN.reads_stored_input`)."""
    return getattr(model, "reads_stored_input", not model.learned_input_map)


def first_backward(model: torch.nn.Module, config: RunConfig) -> bool:
    """Whether step 0's input requires grad, so that layer 0's exchange of its inputs runs backward too: a learned
    ``input_map``, or a learnable input table (``--features learnable:D``)."""
    return bool(model.learned_input_map or learnable_dim(config.data.features))


def allreduce_bytes_per_epoch(num_params: int, world_size: int, element_size: int) -> int:
    """The closed-form gradient all-reduce volume of one epoch, summed over workers (ring model)."""
    return 2 * (world_size - 1) * num_params * element_size


def inner_block(part) -> tuple[Block, torch.Tensor]:
    """The block of a stored partition's inner rows, and the local ids of the halo rows it reads.

    Destinations are the inner vertices; sources are the inner vertices, then the halo vertices that
    an inner row references (all of them for a vertex partition; a vertex-cut store may hold more), in
    local-id order. ``src_ids`` are original ids (dropout keys, input maps), ``src_deg`` global in-degrees (weighted
    in a weighted store, whose inner rows' edge weights the block carries).
    The CSR arrays are views of the memory-mapped store unless halo rows need renumbering.

    Args:
        part: a :class:`~graphscale.partition.store.LocalPartition`.
    """
    n_inner = part.num_inner
    indptr = part.graph.indptr[: n_inner + 1]
    indices = part.graph.indices[: int(indptr[-1])]
    halo_local = torch.unique(indices[indices >= n_inner])
    if halo_local.numel() != part.num_halo:
        lut = torch.full((part.graph.num_nodes,), -1, dtype=torch.int64)
        lut[:n_inner] = torch.arange(n_inner)
        lut[halo_local] = torch.arange(n_inner, n_inner + halo_local.numel())
        indices = lut[indices]
    rows = torch.cat([torch.arange(n_inner), halo_local])
    weight = None if part.graph.edge_weight is None else part.graph.edge_weight[: indices.numel()]
    return Block(indptr, indices, part.orig_ids[rows], part.degree[rows], weight), halo_local


def _element_size(model: torch.nn.Module) -> int:
    return next(model.parameters()).element_size()


def _rows(t: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.index_select(0, rows)


@dataclass
class _Step:
    """Step ``layer`` on a block of the overlap plan (``h0``: the owned rows' initial features, or ``None``)."""

    model: torch.nn.Module
    layer: int
    h0: torch.Tensor | None
    pre_applied: bool

    def __call__(self, block: Block, src: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return self.model.step(self.layer, block, src, _rows(self.h0, rows), pre_applied=self.pre_applied)


@dataclass
class _ProjectedStep:
    """The aggregation of step ``layer`` on a block of the overlap plan from projected rows (``local``: the owned
    rows' own term, or ``None``)."""

    model: torch.nn.Module
    layer: int
    local: torch.Tensor | None

    def __call__(self, block: Block, src: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return self.model.step_projected(self.layer, block, src, _rows(self.local, rows))


@STRATEGIES.register("graph-parallel")
class GraphParallel(Strategy):
    """Graph-parallel full-graph training (see the module docstring)."""

    link_given_negatives = False  # its pairs are scored against the keyed candidates (strategies.link_scoring)

    exact = True
    predict_refusal = ""

    data_view = PARTITION_LOCAL
    learnable_input = True
    edge_weights = True
    options = option_names(GraphParallelOptions)

    def __init__(self, overlap: bool = False) -> None:
        #: overlap each layer's halo exchange with the interior rows' step (:class:`OverlapPlan`); off by default:
        #: on CPU workers with loopback gloo its extra gathers cost more than the hidden communication
        #: (``graphscale bench scaling`` times both)
        self.overlap = overlap

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        if config.strategy.partitions:
            return ("partitions the split's message-passing graph itself (the held-out edges removed), which a "
                    "given store does not hold (drop --partitions)")
        return ""

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        unused = unused_feature_options(config)
        if not config.strategy.partitions:
            return unused
        why = "with --partitions (the store is partitioned already)"
        return {**unused, "partitioner": why, "balance": why}

    def setup(self, data: DataHandle, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        #: under an explicit --host-memory the worker keeps no idle kernel output buffers between products
        #: (:mod:`graphscale.nn.buffers`): the pool holds the backward's buffers through the forward and the forward's
        #: through the backward, about 170 bytes per local row at hidden 16 (module docstring, **Memory**)
        self._pool_before = buffers.set_enabled(False) if config.host_memory not in ("", "auto") else None
        self.comm = Comm(env)
        device, rank = env.device, env.rank
        part = self.data.open_partition(rank, gather=False)  # node rows: the inner ones alone (inner_rows)
        if part.num_parts != env.world_size:
            raise ValueError(f"partition store {self.data.path} has {part.num_parts} parts but there are "
                             f"{env.world_size} workers")
        learnable = bool(learnable_dim(config.data.features))
        link = config.task == "link"  # pairs scored instead of labelled vertices: no labels needed
        # referenced feature rows: a private mapped file, not anonymous memory (store_rows_file)
        rows_dir = resolve_cache_dir(config) / "tmp" if "x" in part.referenced and not learnable else None
        inner = {name: None if learnable and name == "x" else part.inner_rows(name, rows_dir if name == "x" else None)
                 for name in ("x", "y", *(f"{split}_mask" for split in SPLITS))}
        if (inner["x"] is None and not learnable) or (not link and (inner["y"] is None or inner["train_mask"] is None)):
            raise ValueError(f"strategy 'graph-parallel' needs node features, labels and a training mask; "
                             f"partition {rank} of {self.data.path} lacks some")
        n_inner = part.num_inner
        if n_inner == 0:
            raise ValueError(f"partition {rank} of {self.data.path} owns no vertices; use fewer workers")
        block, halo_local = inner_block(part)
        self.halo = HaloExchange.build(self.comm, block.dst_ids, block.halo_ids,
                                       part.halo_owner[halo_local - n_inner].to(torch.int64), HALO)
        # the interior and boundary blocks (the unsplit block stays a view of the store); not on one worker (no
        # halo) nor where no row is interior (nothing to overlap): the plain exchange is the same collective
        if self.overlap and not getattr(model, "layer_sequential", True):
            raise ValueError("graph-parallel overlap=True splits each layer's step into interior and boundary blocks; "
                             "a PyG model with its own forward runs each conv whole: use overlap=False")
        if self.overlap and block.edge_weight is not None:
            raise ValueError("graph-parallel overlap=True cuts each partition into interior and boundary blocks, "
                             "which carry no edge weights (edge_weight); use overlap=False on a weighted graph")
        plan = OverlapPlan.build(block) if self.overlap and env.world_size > 1 else None
        if plan is not None and plan.num_interior > 0:
            self.plan, self.block = plan.to(device), None
        else:
            self.plan, self.block = None, block.to(device)
        del plan
        self.inner_ids = block.dst_ids.to(device)
        if learnable:  # the rows of the learnable input this worker owns; halo rows come through the exchange
            self.x = self.learnable_table(self.inner_ids.cpu())
        else:
            x = inner["x"]
            if self.data.feature_norm == "row":
                x = row_normalize(x)
            self.x = x.to(device=device, dtype=self.feature_dtype())
        #: step 0 exchanges the stored feature rows (bfloat16 bytes), upcast in the step, instead of their dropout
        self.raw_exchange = self.x.dtype == torch.bfloat16 and exchanges_stored_input(model)
        #: per layer, the width of the projected rows its exchange moves (None: the layer's inputs)
        self.projected = projected_exchanges(model, _element_size(model), 2 if self.raw_exchange else None)
        self.y = torch.zeros(n_inner, dtype=torch.int64, device=device) if inner["y"] is None else inner["y"].to(device)
        self.masks = {}
        for split in SPLITS:
            mask = inner[f"{split}_mask"]
            self.masks[split] = (torch.zeros(n_inner, dtype=torch.bool) if mask is None else mask).to(device)
        count = torch.tensor([float(self.masks["train"].sum())], dtype=torch.float64, device=device)
        self.num_train = int(self.comm.all_reduce(count, SETUP).item())
        #: ``--task link``: the pairs this worker scores (:mod:`graphscale.strategies.link_scoring`)
        self.link = self._link_scorer(part) if link else None
        if self.link is None and self.num_train == 0:
            raise ValueError("strategy 'graph-parallel': the graph has no training vertices")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tracker = MemoryTracker(env)
        self.halo.tracker = self.tracker
        arrays = []
        edge_weighted = any(getattr(layer, "edge_weighted", False) for layer in model.layers)
        for b in self.blocks:
            topo = topology(b)
            topo.transpose()  # the backward's CSC, built once and kept with the block
            model.prepare_block(b)  # what the model keeps with the block's topology (a PyG model's adjacency)
            if edge_weighted:
                topo.transpose_perm()
            arrays += [b.src_ids, b.src_deg, *topo.tensors()]
        if self.plan is not None:
            arrays += [self.plan.interior_src, self.plan.boundary_src, self.plan.inverse]
        self.tracker.track("partition", self.x, self.y, *self.masks.values(), *arrays, self.halo.send_index,
                           self.halo.halo_index)
        self.tracker.track_module("model", model)

    def _link_scorer(self, part) -> LinkScorer:
        """The scorer of the pairs whose source this worker owns, from the link folder next to the store."""
        owner = store_owner(self.data.path)
        pairs = read_link_part(self.data.shared or link_folder(self.data.path), part.part)
        return LinkScorer(pairs, RowFetch(self.comm, self.inner_ids, owner), self.model.link_decoder,
                          self.config.seed, self.config.hits_k)

    @property
    def blocks(self) -> list[Block]:
        """The blocks this worker computes on: the interior and boundary blocks, or the whole partition's."""
        return [self.plan.interior, self.plan.boundary] if self.plan is not None else [self.block]

    # ---------------------------------------------------------------- steps
    def forward(self) -> torch.Tensor:
        """This worker's logits, ``[|P_i|, C]`` in the order of :attr:`inner_ids` (a collective)."""
        model = self.model
        if not getattr(model, "layer_sequential", True):  # a PyG model with its own forward, on the owned rows
            return model.run(self.x, self.inner_ids, lambda l, h: model.step(l, self.block, self.halo.gather(h)),
                             stored_input=self.raw_exchange)
        h = self.x if self.raw_exchange else model.input_map(model.upcast(self.x), self.inner_ids)
        h0 = h if model.needs_h0 else None
        for layer in range(model.num_layers):
            if self.projected[layer] is not None:
                # project the owned rows (pre, keyed by global ids, fused into the projection), exchange the
                # projected rows, aggregate them
                z, local = model.project(layer, h, self.inner_ids)
                if self.plan is not None:
                    h = self._overlapped_step(z, _ProjectedStep(model, layer, local))
                else:
                    src = self.halo.gather(z)
                    del z  # its rows are in src, which the aggregation reads: one [rows, p_l] table less at the peak
                    h = model.step_projected(layer, self.block, src, local)
                    del src
                continue
            # pre (keyed dropout, keyed by global ids) is row-wise: where the step fuses it into the layer's first
            # product, the raw rows cross and no dropped copy is made; otherwise apply it to the owned rows, then
            # exchange (fewer rows than after the exchange). Stored bfloat16 rows cross as they are and the step
            # applies pre after upcasting them.
            raw = (self.raw_exchange and layer == 0) or model.fuses_pre(layer)
            z = h if raw else model.pre(layer, h, self.inner_ids)
            if self.plan is not None:
                h = self._overlapped_step(z, _Step(model, layer, h0, not raw))
            else:
                h = model.step(layer, self.block, self.halo.gather(z), h0, pre_applied=not raw)
        return model.output_map(h, self.inner_ids)

    def _overlapped_step(self, z: torch.Tensor, step) -> torch.Tensor:
        """One layer's step with its halo exchange in flight while the interior rows are computed: ``z`` the rows
        exchanged, ``step(block, sources, dst_rows)`` the step on a block of the plan (``dst_rows``: the local rows
        of its destinations)."""
        plan = self.plan
        pending = self.halo.start(z, plan.boundary_src)  # the boundary block's sources: local part, then the halo
        z_i = z.index_select(0, plan.interior_src)  # the interior block's sources (a copy while it runs)
        self.tracker.track("interior sources", z_i)
        out_i = step(plan.interior, z_i, plan.interior_src[: plan.num_interior])
        self.tracker.untrack("interior sources")
        del z_i
        src = self.halo.finish(z, pending, plan.boundary_src)
        out_b = step(plan.boundary, src, plan.boundary_src[: plan.boundary.num_dst])
        return torch.cat([out_i, out_b]).index_select(0, plan.inverse)

    def train_epoch(self, epoch: int) -> EpochStats:
        run = Epoch(self.model, epoch, self.env, self.tracker)
        with self.tracker.epoch():
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.forward()
            if self.link is not None:  # the pairs whose source this worker owns, over the global pair count
                loss_sum, normaliser = self.link.loss_sum(logits, epoch), self.link.normaliser
            else:
                loss_sum, normaliser = masked_loss_sum(logits, self.y, self.masks["train"]), self.num_train
            (loss_sum / normaliser).backward()
            allreduce_gradients(self.comm, self.params, self.tracker)
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
            self.tracker.untrack("gradients")
        total = self.comm.all_reduce(loss_sum.detach().reshape(1).double(), CONTROL)
        return run.stats(float(total) / normaliser,
                         {"local_nodes": self.inner_ids.numel(), "halo_nodes": self.halo.num_halo,
                          "interior_nodes": self.plan.num_interior if self.plan is not None else None})

    @torch.no_grad()
    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The owned rows' logits: the training forward with the halo exchange, in eval mode."""
        self.model.eval()
        return self.inner_ids, self.forward()

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        logits = self.forward()
        if self.link is not None:
            return self.link.evaluate(logits)
        counts = split_counts(logits, self.y, self.masks).to(self.env.device)
        return counts_to_metrics(self.comm.all_reduce(counts, CONTROL).cpu())

    def teardown(self) -> None:
        for name in ("partition", "model", "optimizer", "gradients"):
            self.tracker.untrack(name)
        if getattr(self, "_pool_before", None) is not None:
            buffers.set_enabled(self._pool_before)


def epoch_bytes(parts: list[dict], model: torch.nn.Module, config: RunConfig, element_size: int,
                num_params: int) -> dict[str, int]:
    """The bytes per training epoch :func:`predict` predicts, by category (zero categories left out), from the
    store's per-part counts (``parts``: ``meta.json``'s list, ``num_halo`` read)."""
    workers = len(parts)
    halo = [int(p["num_halo"]) for p in parts]
    first = 2 if config.data.feature_dtype == "bfloat16" and exchanges_stored_input(model) else None
    out = {HALO: halo_bytes_per_epoch(halo, model.layer_widths(), element_size, first_backward(model, config), first,
                                      projected_exchanges(model, element_size, first))}
    if workers > 1:
        out["allreduce"] = allreduce_bytes_per_epoch(num_params, workers, element_size)
        out[CONTROL] = allreduce_bytes_per_epoch(1, workers, 8)
    return {k: v for k, v in out.items() if v}


def predict(data, model, config, machine):
    """The prediction of a ``graph-parallel`` run (:mod:`graphscale.cost.prediction`) from its partition store's
    per-part counts (``meta.json``: inner, halo and edge counts; nothing else is read): bytes from
    :func:`halo_bytes_per_epoch` and :func:`allreduce_bytes_per_epoch` (the closed forms the tests hold the Ledger
    to), the slowest part's rows and edges priced on the machine profile."""
    from graphscale.cost.dims import dims
    from graphscale.cost.prediction import Prediction
    from graphscale.cost.pricing import (
        activation_bytes,
        element_size,
        layer_seconds,
        node_data_bytes,
        num_params,
        prediction_time,
        state_bytes,
    )
    from graphscale.partition.store import read_store_meta

    parts = read_store_meta(data.path)["parts"]
    workers, elem, params = len(parts), element_size(model), num_params(model)
    d = dims(model, config, data)
    out = epoch_bytes(parts, model, config, elem, params)
    # the halo exchanges of an epoch: the closed form's terms (one row of width 1, one byte each), then the gradient
    # and loss all-reduces
    first = 2 if config.data.feature_dtype == "bfloat16" and exchanges_stored_input(model) else None
    projected = projected_exchanges(model, elem, first)
    exchanges = (halo_bytes_per_epoch([1], [1] * len(d.widths), 1, first_backward(model, config),
                                      projected=[None if w is None else 1 for w in projected]) if workers > 1 else 0)
    collectives = exchanges + (2 if workers > 1 else 0)
    # the rows each layer gathers (owned and halo): its inputs, or its projected rows
    gathered = [d_l if w is None else w for d_l, w in zip(d.widths, projected)]
    head = predict_head(data, model, config, workers) if config.task == "link" else None
    if head is not None:
        out, collectives = {**out, **head["bytes"]}, collectives + head["collectives"]
    peaks, seconds = [], []
    for i, p in enumerate(parts):
        inner, local, edges = int(p["num_inner"]), int(p["num_inner"]) + int(p["num_halo"]), int(p["num_edges"])
        peaks.append(node_data_bytes(inner, data.num_features, elem) + 8 * (local + 1 + edges)
                     + activation_bytes(local, gathered, list(d.out), elem)
                     + state_bytes(params, elem, moment_count(config.optim))
                     + (head["memory"][i] if head else 0))
        sent = sum(out.values()) / workers
        compute = layer_seconds(machine, inner, edges, list(d.widths), list(d.out), workers=workers)
        seconds.append(prediction_time(machine, compute + (head["seconds"](machine, i) if head else 0.0), sent,
                                       collectives))
    notes = ["bytes: halo_bytes_per_epoch + allreduce_bytes_per_epoch over the store's halo counts"]
    return Prediction("graph-parallel", workers, {}, max(peaks), peaks, out, max(seconds),
                      notes=notes + (head["notes"] if head else []), collectives=collectives,
                      bytes_epoch=head["epoch"] if head else None)


r"""HongTu: full-graph training with the vertex data offloaded to host memory (``--strategy offload``).

Every layer's representations ``H^0..H^L``, their gradients ``G^l`` and (for
the recomputation-caching hybrid) the cached aggregates ``A^l`` live in host
memory (:mod:`graphscale.strategies.offload.host`); the workers stream chunks
of the graph through their devices. Training is exact full-graph, full-neighbour
gradient descent: the same losses, representations and gradients as ``single``.

**Partitioning and schedule** (:mod:`~graphscale.strategies.offload.plan`).
Before the workers start, the parent (:mod:`graphscale.prepare`, through
:meth:`OffloadStrategy.prepare_shared`) partitions the graph into ``M`` parts (one
per worker), cuts each part into
``K`` chunks (destination sets with all their in-edges; ``K``: ``--chunks``, else the fewest that fit
``--memory-budget``'s device model or ``--host-memory``, :mod:`~graphscale.strategies.offload.chunk_budget`),
optionally reorganises the schedule (``--dedup reorg``, :mod:`~graphscale.strategies.offload.reorg`), and writes
the chunk sets and every worker's plan, one chunk and one batch at a time
(:mod:`~graphscale.strategies.offload.layout`) (its chunk blocks and slot plans,
:class:`~graphscale.strategies.offload.plan.WorkerPlan`) into the cache directory, which every worker
memory-maps (one copy per host, in the page cache); an in-memory graph is prepared the same way
(:func:`graphscale.prepare.prepare_graph`). Only a test's ``order_seed`` (a random schedule) has rank 0 schedule
the parent's partition and broadcast ``owner`` and ``batch`` (category ``"setup"``). Batch ``j`` = chunk ``(i, j)``
on every worker ``i``.

**What a worker holds.** The graph directory, the chunk sets and its plan are memory-mapped (file pages the
workers share); its anonymous memory is the model and optimiser, one chunk pass at a time (the transition and
receive buffers, the chunk's rows, the topology a layer caches on the pass's block, which goes with it: see
:mod:`~graphscale.strategies.offload.resident`) and two staging slots of at most
:data:`~graphscale.strategies.offload.transfer.STAGING_BYTES` each. The chunk terms grow with ``|V| / (M K)``
and the replication factor, so ``K`` (``--chunks``, or ``--memory-budget``) bounds them.

**Epoch** (the spec's Algorithm 1). Layer by layer, batch by batch, with a
barrier between layers:

* forward of layer ``l``, batch ``j``: load the chunk's source rows
  ``H^l[N_{i,j}]`` (deduplicated, below), compute ``agg = aggregate`` and
  ``out = update`` *without* autograd, write ``H^{l+1}[V_{i,j}]`` (and
  ``A^l[V_{i,j}]`` for a hybrid layer) to the host. The last layer fuses the
  loss: ``output_map`` and the cross-entropy of the chunk's training rows
  (normalised by the *global* training count) are differentiated at once, and
  ``G^L[V_{i,j}]`` goes to the host;
* backward of layer ``l`` (``L-1 .. 0``), batch ``j``: load ``G^{l+1}[V_{i,j}]``;
  then, per the layer's intermediate-data mode (``--recompute``):

  - ``recompute`` (GAT and other edge-parametrised layers): reload
    ``H^l[N_{i,j}]``, rerun the layer with autograd, backpropagate;
  - ``hybrid`` (linear aggregates: GCN, SAGE, GCNII): load ``A^l[V_{i,j}]``
    (own rows) and rerun only ``update``; the source gradients are the
    aggregate's vector-Jacobian product, which needs only the topology and
    the ids (it is evaluated at zero input): no neighbour traffic;
  - ``none``: the forward kept every chunk's autograd graph on the device
    (HongTu-IM-like, for comparison); backpropagate through it;
  - ``auto`` (default) takes ``hybrid`` for a layer with a linear aggregate
    when the cost model prices caching ``A^l`` below the extra neighbour-load
    pass of recomputation, else ``recompute``
    (:func:`~graphscale.strategies.offload.cost.layer_modes`);

  parameter gradients accumulate; when ``l > 0`` (or the input map is
  learned) the source-row gradients go to their owners (below);
* all-reduce the parameter gradients (category ``"allreduce"``), Adam step.

Dropout masks are keyed by global ids and the epoch, so recomputed chunks see
the same masks. Host rows ``H^{l+1}[v]`` and ``G^l[v]`` are written only by
``v``'s owner (except by the deliberately naive baseline, whose host-gradient
writes are serialised rank by rank).

**Deduplicated communication** (``--dedup``):

* ``baseline``: every chunk reads its whole source set from the host
  (``h2d_local`` / ``h2d_remote`` by owner) and adds its source gradients to
  the host rows (``d2h_grad`` / ``d2h_grad_remote``);
* ``inter``: worker ``i`` loads ``T_{i,j}`` from the host into its transition
  buffer; peers read the rows they need from it (one ``all_to_all_v``,
  category ``"p2p"``, recorded by the owner that sends); gradients of remote
  source rows are pushed back to their owners (``"p2p_grad"``), who add them
  into a gradient transition buffer and flush it to the host (``"d2h_grad"``);
* ``intra``: rows shared with the previous batch stay in the buffer
  (``"reuse"``: bytes *not* moved, recorded for the cost model), gradient rows
  shared with the next batch keep accumulating on the device;
* ``reorg``: ``intra`` on the cost-model-guided reorganised schedule.

**Link prediction** (``--task link``, :mod:`~graphscale.strategies.offload.link`): the run's graph directory is the
split's message-passing graph; the last layer's forward writes ``H^L`` without a loss, then each worker scores the
pairs whose source it owns on its own rows of ``H^L`` and writes their gradients to ``G^L``.

Other categories: ``d2h`` (``H^{l+1}``), ``d2h_cache`` / ``h2d_cache``
(``A^l``), ``h2d_grad`` (``G^{l+1}`` rows of the destinations), ``h2d_dst``
(own destination rows outside the neighbour path: GCNII's ``H^0``, the
hybrid update's ``H^l`` rows when it reads them, raw rows of a learned input
map), ``h2d_topo`` (chunk topology and plan indices, which stay on the host
between uses), ``allreduce``, ``control``. The bytes of one training epoch
equal :func:`~graphscale.strategies.offload.cost.epoch_bytes` exactly.

**Departures from the paper's engine.** Peer reads and pushes are one
``all_to_all_v`` per batch (gloo / NCCL) rather than GPUDirect kernels with
the ``(i+s) mod M`` interleaving; remote rows are pulled in every batch (the
§3.5 ``V_P``), i.e. the §3.7 reuse of remote rows already held from the
previous batch is not implemented; the chunk's source matrix is a device-local
gather of the merged buffer (the layers need the block layout, destinations
first), which costs ``|N_{i,j}| d_l`` more device memory than kernels reading
the buffer in place; host rows are not placed per NUMA node.

**Transfers and devices** (:mod:`~graphscale.strategies.offload.transfer`,
:mod:`~graphscale.strategies.offload.resident`, :mod:`~graphscale.strategies.offload.device`). The passes
(:mod:`~graphscale.strategies.offload.passes`) submit batch ``j+1``'s host reads before computing batch ``j``:
``staged`` transfers fill two preallocated staging buffers of a fixed size (page-locked on an accelerator;
``STAGING_BYTES`` each at most, a larger batch is staged in pieces) from a worker thread
and copy them on a copy stream with events; ``uva`` transfers (CUDA, behind a capability probe, with the
resident plan) gather and scatter host rows in place by GPU kernels. Writes go out asynchronously (``staged``:
device-to-host into page-locked memory on the copy stream, scattered by the worker thread; ``uva``: in place);
every barrier is preceded by a flush. The host arrays are page-locked once (``cudaHostRegister``). The chunk
topology and plan indices are *streamed* per chunk pass by default (``h2d_topo`` in every epoch, as the closed
form counts, on every device: CPU and CUDA runs record the same bytes) or, with ``resident_topology=True``, moved
once at setup and kept on the device, each device block keeping its cached transpose (epochs then record no
``h2d_topo``; ``uva`` needs it, ``transfer="auto"`` takes ``uva`` only then). ``OffloadStrategy(transfer=...,
resident_topology=...)`` overrides the choices. On CPU workers host and device memory are the same RAM; the
staging thread, the double buffering, the buffers, the schedule and the byte counts are the real ones. The
accelerator paths have not been run here (no GPU was available). Peak memory counts device-resident tensors only (buffers, the current chunk,
the resident plan, parameters, optimiser state, autograd's saved tensors), never host arrays.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from graphscale import allocator
from graphscale.config import RunConfig, model_dict
from graphscale.cost.dims import probe_dims
from graphscale.data.graph import Graph
from graphscale.data.handle import DataHandle
from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.metrics.units import parse_bytes
from graphscale.nn.models import build_model
from graphscale.options import option_names
from graphscale.options.offload import OffloadOptions
from graphscale.registry import PARTITIONERS, STRATEGIES
from graphscale.strategies.base import (
    COUNTS_PER_SPLIT,
    SPLITS,
    Strategy,
    allreduce_gradients,
    counts_to_metrics,
    optimizer_tensors,
)
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.offload.chunk_budget import plan_chunks
from graphscale.strategies.offload.cost import (
    CONTROL,
    H2D_TOPO,
    Bandwidths,
    check_recompute,
    layer_modes,
    layer_pass_rows,
    modelled_seconds,
)
from graphscale.strategies.offload.host import HostArrays, host_array_specs, input_array, shares_input
from graphscale.strategies.offload.layout import write_layout
from graphscale.strategies.offload.link import link_evaluate, link_scorer, link_step
from graphscale.strategies.offload.memory import choose_chunks
from graphscale.strategies.offload.passes import OffloadPasses
from graphscale.strategies.offload.plan import (
    ChunkSets,
    WorkerPlan,
    build_worker_plan,
    check_dedup,
    plan_folder,
    two_level_partition,
)
from graphscale.strategies.offload.reorg import random_schedule, reorganize
from graphscale.strategies.offload.resident import DevicePlan
from graphscale.strategies.offload.transfer import Transfers, check_mode
from graphscale.strategies.optimizers import moment_count

SETUP = "setup"


def offload_chunks(config: RunConfig) -> int:
    """``K`` chunks per partition: ``--chunks``, 1 when not given."""
    return 1 if config.strategy.chunks is None else config.strategy.chunks


def plan_layout(graph: Graph, owner: torch.Tensor, world: int, config: RunConfig, model: torch.nn.Module,
                dims, bandwidths: Bandwidths, order_seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(owner, batch, K)``: ``K`` (``--chunks``, or the smallest that fits ``--memory-budget``), the chunks of
    every part (:func:`two_level_partition`) and the batch schedule (reorganised for ``--dedup reorg``)."""
    sc = config.strategy
    budget = parse_bytes(sc.memory_budget) if sc.memory_budget else None
    chunks = offload_chunks(config)
    if budget is None and chunks < 1:
        raise ValueError(f"--chunks must be >= 1, got {chunks}")
    elem = next(model.parameters()).element_size()
    chunks = chunks if budget is None else choose_chunks(graph, model, owner, world, budget, config, dims,
                                                         bandwidths)
    owner, batch = two_level_partition(graph, world, chunks, sc.partitioner, config.seed, owner=owner,
                                       host_memory=config.host_memory)
    if check_dedup(sc.dedup) == "reorg":
        batch = reorganize(graph, owner, batch, world, chunks, dims.widths[0], elem, bandwidths)
    if order_seed is not None:
        batch = random_schedule(owner, batch, world, chunks, order_seed)
    return owner, batch, chunks


@STRATEGIES.register("offload")
class OffloadStrategy(OffloadPasses, Strategy):
    """HongTu-style offloaded full-graph training (see the module docstring).

    Args:
        order_seed: when given, the batch order and the pairing of chunks into
            batches are additionally permuted at random with this seed (for
            testing that results do not depend on the schedule).
        bandwidths: link speeds of the cost model (``auto`` modes, modelled time; with ``order_seed``, the
            reorganisation and chunk count too). The parent plans a run's layout (:meth:`prepare_shared`) with
            the default :class:`Bandwidths`, which ``--dedup reorg`` and ``--memory-budget`` read.
        transfer: ``auto`` (``uva`` where available with a resident topology, else ``staged``), ``staged`` or
            ``uva`` (:mod:`~graphscale.strategies.offload.transfer`).
        resident_topology: move the chunk topology and plan indices to the device once (not with
            ``--memory-budget``); epochs then record no ``h2d_topo`` (:mod:`~graphscale.strategies.offload.resident`).
        trace: a list the transfer pipeline appends ordering events to (tests).
    """

    pyg_forward_refusal = "streams the graph through the device layer by layer, one layer's chunks at a time"

    exact = True
    predict_refusal = ""
    edge_weights = True  # chunk blocks are Block.from_nodes: they carry a weighted graph's edge weights
    options = option_names(OffloadOptions)
    single_host = True  # every worker reads and writes the same host arrays (shared-memory files on one host)
    link_message_graph = True  # --task link: the pairs scored after the chunks (offload/link.py)
    link_given_negatives = False  # ... against the keyed candidates, as graph-parallel's

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        return ""

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        return {"chunks": "with --memory-budget (which picks the chunks)"} if config.strategy.memory_budget else {}

    def __init__(self, order_seed: int | None = None, bandwidths: Bandwidths | None = None,
                 transfer: str = "auto", resident_topology: bool = False, trace: list | None = None) -> None:
        self.order_seed = order_seed
        self.bandwidths = bandwidths or Bandwidths()
        self.transfer_mode = check_mode(transfer)  # auto: --offload-transfer decides
        self.resident_topology = resident_topology  # False: --offload-topology decides
        self.trace = trace
        self.host: HostArrays | None = None
        self.transfers: Transfers | None = None

    # ------------------------------------------------------------------ setup
    @classmethod
    def needs_vertex_partition(cls, config: RunConfig) -> bool:
        return True

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        sc = config.strategy
        chosen = sc.chunks is None and not sc.memory_budget  # K from --host-memory (chunk_budget)
        return {"chunks": sc.chunks, "memory_budget": sc.memory_budget,
                "host_memory": config.host_memory if chosen else None,
                "moments": moment_count(config.optim) if chosen else None,
                "dedup": sc.dedup, "recompute": sc.recompute,  # (memory model's K)
                "model": model_dict(config.model), "dtype": config.dtype,
                "worker_plans": True}  # folders written before the plans were shared lack them: a new key

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        """The parent plans the layout and writes the chunk sets and every worker's plan (:class:`WorkerPlan`:
        chunk blocks, slot plans) into ``folder``, which the workers memory-map: no worker waits while rank 0
        chunks, and the plans live once per host, in the page cache, not in each worker's heap. ``K`` comes from
        :func:`~graphscale.strategies.offload.chunk_budget.plan_chunks` (``--chunks``, ``--memory-budget``, else
        ``--host-memory``; ``chunks.json`` in the folder says which and why); the layout is written in bounded
        memory, one chunk's sets and one batch's plan at a time (:func:`~graphscale.strategies.offload.layout.write_layout`),
        equal to :func:`plan_layout`'s."""
        dtype = getattr(torch, config.dtype)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=config.seed, dtype=dtype)
        dims = probe_dims(model, graph.num_features, dtype)
        sc = config.strategy
        world = sc.workers
        if owner is None:
            owner = torch.zeros(graph.num_nodes, dtype=torch.int64) if world == 1 else \
                PARTITIONERS.get(sc.partitioner)().partition(graph, world, seed=config.seed)
        chunks, why = plan_chunks(graph, owner, world, config, model, dims, scratch=folder)
        write_layout(graph, owner, world, chunks, sc.partitioner, config.seed, check_dedup(sc.dedup), dims.widths[0],
                     next(model.parameters()).element_size(), folder, Bandwidths(), host_memory=config.host_memory)
        (Path(folder) / "chunks.json").write_text(json.dumps({"chunks": chunks, "why": why}))

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        graph = self.data.open_graph()
        link = config.task == "link"  # pairs scored instead of labelled vertices: no labels needed
        if graph.x is None or (not link and (graph.y is None or graph.train_mask is None)):
            raise ValueError("strategy 'offload' needs node features, labels and a training mask")
        self.num_train = 0 if graph.train_mask is None else int(graph.train_mask.sum())
        self.link = None
        if not link and self.num_train == 0:
            raise ValueError("strategy 'offload': the graph has no training vertices")
        sc = config.strategy
        self.dedup = check_dedup(sc.dedup)
        check_recompute(sc.recompute)
        self.resident_topology = self.resident_topology or sc.offload_topology == "resident"
        if self.transfer_mode == "auto":
            self.transfer_mode = check_mode(sc.offload_transfer)
        if self.resident_topology and sc.memory_budget:
            raise ValueError("offload: a resident topology is not covered by --memory-budget's memory model; "
                             "leave resident_topology off with --memory-budget")
        self.comm = Comm(env)
        # chunks of varying size pass through a fixed working set: large blocks go back to the OS when freed,
        # so the heap does not grow by freed chunks between passes (allocator.bound_heap; undone at teardown)
        self._bounded_heap = allocator.bound_heap()
        self.device = env.device
        self.dtype = next(model.parameters()).dtype
        self.elem = torch.empty(0, dtype=self.dtype).element_size()
        self.dims = probe_dims(model, graph.num_features, self.dtype)
        self.num_layers = model.num_layers
        shared = self.data.require_shared(config.strategy.name)
        if self.order_seed is None:  # the parent planned the layout: map its sets and plan
            self.sets = ChunkSets.load(shared)
            if self.sets.num_parts != env.world_size:
                raise ValueError(f"{shared}: an offload layout for {self.sets.num_parts} workers, not {env.world_size}")
            self.plan: WorkerPlan = WorkerPlan.load(plan_folder(shared, env.rank))
            if self.plan.dedup != self.dedup:
                raise ValueError(f"{shared}: a plan for --dedup {self.plan.dedup}, not {self.dedup}")
        else:  # a test's random batch order (not a run option): the parent's partition, scheduled here
            owner, batch, chunks = self._layout(graph, config)
            self.sets = ChunkSets.build(graph, owner, batch, env.world_size, chunks)
            self.plan = build_worker_plan(graph, self.sets, env.rank, self.dedup)
        self.num_chunks = self.sets.num_chunks
        self.rows = layer_pass_rows(self.sets, self.dedup)
        self.modes = layer_modes(sc.recompute, self.dims, self.rows, graph.num_nodes, self.elem, self.bandwidths)
        self.owned = self.plan.owned
        self.y = graph.y
        self.masks = {}
        for split in SPLITS:
            mask = getattr(graph, f"{split}_mask")
            self.masks[split] = torch.zeros(graph.num_nodes, dtype=torch.bool) if mask is None else mask
        self._allocate_host(graph)
        self.link = link_scorer(self) if link else None
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tracker = MemoryTracker(env)
        self.tracker.track_module("model", model)
        self._setup_transfers()
        self.retained: list[list[tuple]] = [[] for _ in range(self.num_layers)]

    def _layout(self, graph: Graph, config: RunConfig) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Rank 0 plans the layout (:func:`plan_layout`); everyone receives ``(owner, batch, K)``.

        Runs only with ``order_seed`` (a schedule the parent's preparation does not know), on the parent's
        vertex partition."""
        n = graph.num_nodes
        header = torch.zeros(1, dtype=torch.int64, device=self.device)
        layout = torch.empty(2, n, dtype=torch.int64, device=self.device)
        if self.env.rank == 0:
            owner, batch, chunks = plan_layout(graph, self.vertex_owner(), self.env.world_size, config,
                                               self.model, self.dims, self.bandwidths, self.order_seed)
            header[0] = chunks
            layout[0], layout[1] = owner.to(self.device), batch.to(self.device)
        self.comm.broadcast(header, 0, SETUP)
        self.comm.broadcast(layout, 0, SETUP)
        layout = layout.cpu()
        return layout[0].clone(), layout[1].clone(), int(header[0])

    def _allocate_host(self, graph: Graph) -> None:
        """Host arrays ``H^0..H^L``, ``G^1..G^L`` (``G^0`` if the input map learns), ``A^l``, raw ``X``."""
        dims = self.dims
        from graphscale.data.cache import resolve_cache_dir
        from graphscale.metrics.host_memory import resolve_host_memory

        specs = host_array_specs(graph.num_nodes, dims, self.modes)
        first = input_array(dims)
        shared_input = shares_input(graph.x, self.dtype, self.device)  # the graph's mapped features, not a copy
        self.host = HostArrays(self.comm, specs, self.dtype, self.device, self.config.strategy.shm_dir,
                               external={first: graph.x} if shared_input else None,
                               budget=resolve_host_memory(self.config.host_memory),
                               spill_dir=str(resolve_cache_dir(self.config) / "offload"))
        if not shared_input:  # the owner writes its own rows of the input (a host-side copy, no transfer)
            self.host[first][self.owned] = graph.x[self.owned].to(self.dtype)
        self.comm.barrier()  # peers may read these rows as soon as setup returns

    def _setup_transfers(self) -> None:
        """The device side of the plan (streamed unless ``resident_topology``) and the transfer pipeline
        (:mod:`~graphscale.strategies.offload.transfer`), staging slots preallocated."""
        resident = bool(self.resident_topology)
        self.dplan = DevicePlan(self.plan, self.device, resident)
        if resident:
            self._record(H2D_TOPO, self.dplan.setup_bytes)  # once, outside any epoch
            self.tracker.track("topology", *self.dplan.tensors())
        self.transfers = Transfers(self.host.arrays, self.device, self.transfer_mode, device_ids=resident,
                                   trace=self.trace, disk=self.host.advised)
        widest = max(t.shape[1] for t in self.host.arrays.values())
        self.transfers.reserve(max((bp.block.num_src + 4 * bp.num_dst for bp in self.plan.batches), default=0)
                               * widest, widest)

    # ------------------------------------------------------------------- epoch
    def _zero_host_gradients(self) -> None:
        for name in self.host.arrays:
            if name.startswith("G"):
                self.host.zero_rows(name, self.owned)

    def train_epoch(self, epoch: int) -> EpochStats:
        run = Epoch(self.model, epoch, self.env, self.tracker)
        losses: list = []
        with self.tracker.epoch():
            self.optimizer.zero_grad(set_to_none=True)
            self._zero_host_gradients()
            if self.dims.learned_input:
                self._input_pass(backward=False)
                self._barrier()
            for layer in range(self.num_layers):
                self._forward_layer(layer, True, losses)
            if self.link is not None:
                losses.append(link_step(self, epoch))
            for layer in reversed(range(self.num_layers)):
                self._backward_layer(layer)
            if self.dims.learned_input:
                self._input_pass(backward=True)
            self.transfers.flush()
            allreduce_gradients(self.comm, self.params, self.tracker)
            self.optimizer.step()
            self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
            self.tracker.untrack("gradients")
        local = torch.tensor([sum(losses)], dtype=torch.float64, device=self.device)
        total = self.comm.all_reduce(local, CONTROL)
        volumes = run.bytes()
        return run.stats(float(total) / (self.num_train if self.link is None else self.link.normaliser),
                         {"chunks": self.num_chunks, "dedup": self.dedup, "modes": list(self.modes),
                          "alpha": self.sets.alpha(), "buffer_rows": self.plan.buffer_rows,
                          "modelled_transfer_seconds": modelled_seconds(volumes, self.bandwidths)}, bytes=volumes)

    @torch.no_grad()
    def _inference(self, counts: list) -> None:
        """Chunked full-graph inference (dropout off), every chunk's counts (or outputs) into ``counts``; overwrites
        the host ``H`` arrays."""
        self.model.eval()
        if self.dims.learned_input:
            self._input_pass(backward=False)
            self._barrier()
        for layer in range(self.num_layers):
            self._forward_layer(layer, False, counts)

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits of this worker's chunks: the evaluation's chunked inference, each chunk's output rows kept."""
        self.keep_outputs, chunks = True, []
        try:
            self._inference(chunks)
        finally:
            self.keep_outputs = False
        if not chunks:
            return torch.zeros(0, dtype=torch.long), torch.zeros(0, 0)
        return torch.cat([ids for ids, _ in chunks]), torch.cat([logits for _, logits in chunks])

    def evaluate(self) -> dict[str, float]:
        """Chunked full-graph inference (dropout off); overwrites the host ``H`` arrays."""
        counts: list = []
        self._inference(counts)
        if self.link is not None:
            return link_evaluate(self)
        total = torch.stack(counts).sum(0) if counts else torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64)
        return counts_to_metrics(self.comm.all_reduce(total.to(self.device), CONTROL).cpu())

    def teardown(self) -> None:
        if getattr(self, "_bounded_heap", False):
            allocator.unbound_heap()
            self._bounded_heap = False
        for name in ("model", "optimizer", "gradients", "buffers", "chunk", "chunk_grad", "retained", "topology"):
            self.tracker.untrack(name)
        self.retained = [[] for _ in range(self.num_layers)]
        if getattr(self, "transfers", None) is not None:
            self.transfers.close()
            self.transfers = None
        if self.host is not None:
            self.host.close()
            self.host = None

"""Pieces shared by the multi-worker mini-batch strategies (``data-parallel``, ``split-parallel``).

Ledger categories (bytes are recorded by the sender, see :mod:`graphscale.metrics.ledger`):

* ``h2d``: feature rows copied from host memory to a worker's device (misses of its cache);
* ``h2d_struct``: the integer arrays of the sampled (or split) mini-batch a worker receives;
* ``p2p``: feature rows a worker serves from its cache to a peer (Quiver-like caches);
* ``shuffle``: hidden rows exchanged by split-parallel training, forward and backward;
* ``allreduce``: the gradient all-reduce (ring model);
* ``control``: request ids, counts and the epoch's loss sum (and evaluation's plan ids and split counts);
* ``eval_halo``: hidden rows exchanged by the distributed evaluation (:mod:`graphscale.strategies.evaluation`;
  outside every epoch's statistics).

On CPU, host and device memory are the same RAM: the copies are real tensor
gathers and the bytes are those a GPU run would move.

**Host rows.** A worker reads its host rows through a
:class:`~graphscale.data.row_cache.HotRowCache` over the graph's feature table (:func:`host_row_cache`): with a
memory-mapped graph directory it keeps the hottest rows that :data:`~graphscale.data.row_cache.FEATURE_CACHE_SHARE`
of ``--host-memory`` holds and reads the others from the file, a superbatch of batches at a time
(:func:`~graphscale.data.superbatch.superbatched`); the batches' sampling and host-row gathers run one batch ahead
in a background thread (:func:`~graphscale.data.row_cache.prefetched`). Evaluation allocates its
per-layer tables through :func:`evaluation_tables`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from graphscale.config import RunConfig
from graphscale.data.cache import resolve_cache_dir
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.data.row_cache import FEATURE_CACHE_SHARE, HotRowCache, advise_random, cache_capacity
from graphscale.data.row_file import RowFile
from graphscale.data.sampler import NeighborSampler
from graphscale.data.spill import TableMemory
from graphscale.data.superbatch import SUPERBATCH_SHARE, superbatch_bytes
from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.host_memory import resolve_host_memory
from graphscale.metrics.ledger import HOST
from graphscale.metrics.memory import MemoryTracker
from graphscale.strategies.base import Strategy
from graphscale.strategies.evaluation import DEFAULT_BATCH_ROWS, LayerwiseEvaluator
from graphscale.strategies.link_minibatch import evaluate_link, setup_link
from graphscale.strategies.sampled_evaluation import SampledEvaluator

H2D = "h2d"
H2D_STRUCT = "h2d_struct"
P2P = "p2p"
SHUFFLE = "shuffle"
SETUP = "setup"
#: share of ``--host-memory`` one evaluation table (a layer's rows of the vertices a worker evaluates) may take in
#: memory; a larger one goes to a temporary file in the cache directory (:class:`~graphscale.data.spill.TableMemory`)
EVAL_TABLE_SHARE = 0.125


def check_minibatch_data(graph: Graph, strategy: str, task: str = "node") -> None:
    """Check the graph holds what every mini-batch strategy needs (the options were checked in the parent by
    :func:`graphscale.validation.validate`); ``--task link`` trains on edges, not on a training mask."""
    if task == "link":
        if graph.x is None or graph.y is None:
            raise ValueError(f"strategy {strategy!r} needs node features (and labels, which its evaluation reads)")
        return
    if graph.x is None or graph.y is None or graph.train_mask is None:
        raise ValueError(f"strategy {strategy!r} needs node features, labels and a training mask")
    if int(graph.train_mask.sum()) == 0:
        raise ValueError(f"strategy {strategy!r}: the graph has no training vertices")


def host_row_cache(data: DataHandle, graph: Graph, dtype: torch.dtype, config: RunConfig,
                   reads: Callable[[], torch.Tensor] | None = None) -> HotRowCache:
    """The worker's host rows of ``graph.x`` in ``dtype``: with a memory-mapped graph directory (``host-shared``),
    a :class:`HotRowCache` of the rows :func:`~graphscale.data.row_cache.cache_capacity` fits in ``--host-memory``;
    with an in-memory graph the rows are read from it directly (no cache). A table larger than the cache's share
    is read by rows from its file (``x.npy``, a :class:`~graphscale.data.row_file.RowFile`): the cache's misses are
    positioned reads, not page faults on the mapping, read a superbatch at a time
    (:data:`~graphscale.data.superbatch.SUPERBATCH_SHARE` of ``--host-memory`` over the superbatches held at once,
    :func:`~graphscale.data.superbatch.superbatch_bytes`, :mod:`graphscale.data.superbatch`);
    the mapping, read only by the cache's fill (in ascending id
    order), is advised random after it (:func:`~graphscale.data.row_cache.advise_random`). ``reads``: called, only
    when the misses go to disk and there is a cache, for the rows' read counts over the run's replayed first epoch
    (:func:`~graphscale.data.row_cache.count_reads`): the cache then holds the most-read rows."""
    capacity, fits, file, stage = 0, True, None, 0
    if data.view == HOST_SHARED:
        row_bytes = graph.x.shape[1] * torch.empty(0, dtype=dtype).element_size()
        budget = resolve_host_memory(config.host_memory)
        capacity = cache_capacity(budget, row_bytes, graph.num_nodes)
        fits = graph.num_nodes * row_bytes <= budget * FEATURE_CACHE_SHARE
        if not fits:
            file = RowFile(Path(data.path) / "x.npy", tuple(graph.x.shape), graph.x.dtype)
            stage = superbatch_bytes(budget, SUPERBATCH_SHARE)
    counts = reads() if reads is not None and capacity and not fits else None
    cache = HotRowCache(graph.x, capacity, graph.out_degrees() if capacity else None, dtype, file, stage, counts)
    if not fits:  # the table does not fit the cache's share: after the fill (in ascending id order, which
        advise_random(graph.x)  # read-around helps), its misses are random reads
    return cache


def evaluation_tables(config: RunConfig) -> TableMemory:
    """Where evaluation allocates its per-layer tables: in memory up to :data:`EVAL_TABLE_SHARE` of
    ``--host-memory`` each, else in a temporary file under the cache directory's ``tmp``."""
    limit = int(resolve_host_memory(config.host_memory) * EVAL_TABLE_SHARE)
    return TableMemory(limit, resolve_cache_dir(config) / "tmp")


def load_host_rows(comm: Comm, host: HotRowCache, ids: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy host rows ``x[ids]`` to ``device``; the bytes are recorded under ``h2d``."""
    return to_device_rows(comm, host.gather(ids), device)


def to_device_rows(comm: Comm, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy host rows already gathered (e.g. by a prefetch) to ``device``; the bytes are recorded under ``h2d``."""
    comm.record(H2D, rows.numel() * rows.element_size(), HOST)
    return rows.to(device)


def record_structure(comm: Comm, tensors: list[torch.Tensor | None]) -> int:
    """Record the index arrays a worker receives for one mini-batch under ``h2d_struct``; returns the bytes."""
    total = sum(t.numel() * t.element_size() for t in tensors if t is not None)
    comm.record(H2D_STRUCT, total, HOST)
    return total


class MiniBatchStrategy(Strategy):
    """Setup, evaluation and teardown shared by the multi-worker mini-batch strategies.

    :meth:`setup` checks the graph (:func:`check_minibatch_data`; the options were checked in the parent) and
    builds what both strategies hold: ``comm``, the host rows ``host_rows`` (:func:`host_row_cache`), labels ``y``, ``train_ids`` /
    ``num_train`` (``--task link``: the training positives' edge ids and the epoch's pair count, with ``link``, the
    :class:`~graphscale.tasks.link.LinkTask`, and ``edge_loader``, and ``graph`` the split's message-passing graph:
    :mod:`graphscale.strategies.link_minibatch`), the rank-agnostic ``sampler``, ``params`` and the memory ``tracker`` (with the model
    tracked). Subclasses add their caches, tracked as ``"cache"``.

    :meth:`evaluate` with ``--eval-fanouts`` is the sampled evaluation of
    :mod:`~graphscale.strategies.sampled_evaluation`, each worker a share of its batches (their host rows recorded
    under ``h2d``). Without, it is distributed layer-wise inference over the vertices each worker owns
    (:class:`~graphscale.strategies.evaluation.LayerwiseEvaluator`): the worker's part of the run's vertex
    partition (``self.owner`` where the subclass trains with one, else :meth:`Strategy.vertex_owner`,
    prepared by the parent), which keeps the halo rows of every layer few. The evaluator is built at the
    first :meth:`evaluate` (a collective, like every evaluation), after the subclass's setup has set ``owner``.
    """

    #: registry name, used in error messages
    name = ""
    #: destination rows per evaluation batch
    eval_batch_rows = DEFAULT_BATCH_ROWS

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        graph = self.graph = self.data.open_graph()
        check_minibatch_data(graph, self.name, config.task)
        self.comm = Comm(env)
        self.host_rows = host_row_cache(self.data, graph, next(model.parameters()).dtype, config)
        self.y = graph.y
        self.link = self.edge_loader = None
        if config.task == "link":  # edge batches over the split's message-passing graph
            graph, self.link, self.edge_loader = setup_link(graph, model, config, env.device)
            self.graph = graph
            self.train_ids = self.edge_loader.loader.train_ids  # the training positives' edge ids
            self.num_train = 2 * self.train_ids.numel()  # the pairs of an epoch: the loss's normaliser
        else:
            self.train_ids = torch.nonzero(graph.train_mask).flatten()
            self.num_train = self.train_ids.numel()
        self.sampler = NeighborSampler(graph, config.strategy.fanouts, seed=config.seed)
        self.evaluator: LayerwiseEvaluator | None = None  # built at the first evaluate(), once owner is known
        self.sampled: SampledEvaluator | None = None  # --eval-fanouts: built at the first evaluate()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tracker = MemoryTracker(env)
        self.tracker.track_module("model", model)
        self.tracker.track("host_cache", self.host_rows.rows, self.host_rows.slot, category="cache")
        self.host_rows.on_stage = lambda *staged: self.tracker.track("host_stage", *staged, category="cache")

    def evaluate(self) -> dict[str, float]:
        if self.config.strategy.eval_fanouts and self.link is None:  # each worker a share of the sampled batches
            if self.sampled is None:
                graph, device = self.graph, self.env.device
                masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
                self.sampled = SampledEvaluator(graph, self.config.strategy.eval_fanouts,
                                                self.config.strategy.batch_size, self.config.seed,
                                                self.sampler.degrees, self.y, masks, self.host_rows.gather,
                                                lambda ids, rows: to_device_rows(self.comm, rows, device))
            return self.sampled.evaluate(self.model, self.env.device, self.comm)
        if self.evaluator is None:  # each worker evaluates its part of the run's vertex partition (few halo rows)
            owner = getattr(self, "owner", None)
            owner = self.vertex_owner() if owner is None else owner
            self.evaluator = LayerwiseEvaluator(self.comm, self.graph, self.model, owner,
                                                batch_rows=self.eval_batch_rows,
                                                tables=evaluation_tables(self.config))
        if self.link is not None:
            return evaluate_link(self.comm, self.evaluator, self.link)
        return self.evaluator.evaluate()

    def teardown(self) -> None:
        for name in ("cache", "host_cache", "host_stage", "model", "optimizer", "gradients"):
            self.tracker.untrack(name)

"""The prediction interface every strategy implements next to its code.

``predict(data, model, config, machine) -> Prediction`` (one function per strategy, listed in
:data:`graphscale.registry.PREDICTORS`):

* ``data`` is the :class:`~graphscale.data.handle.DataHandle` the run's workers would get
  (:func:`graphscale.prepare.prepare_data`): the graph's counts, a store's per-part halo counts, a host-shared graph
  directory's memory-mapped structure and the strategy's shared plan (offload's chunk sets, pipeline's and
  task-parallel's chunks). The features are never read.
* ``model`` is the run's model (built as :func:`graphscale.run.train_worker` builds it: widths, parameter counts).
* ``bytes`` per epoch by Ledger category, summed over workers, come from the closed forms the strategies' tests
  hold the Ledger to (``halo_bytes_per_epoch``, offload's ``epoch_bytes``, ``pipeline_bytes_per_epoch``,
  task-parallel's ``epoch_bytes``, ...); nothing here restates them.
* ``seconds`` per epoch and ``memory`` (the largest worker's tracked peak) are models over the
  :class:`~graphscale.cost.machine.Machine` profile, priced with :mod:`graphscale.cost.pricing`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Prediction:
    """What one configuration is predicted to cost.

    Attributes:
        strategy: the strategy's name.
        workers: workers it runs on.
        options: the key options of the configuration (``--chunks``, ``--t-workers``, ...), as ``train`` flags.
        memory: the largest worker's peak memory in bytes (tracked figure: resident data, parameters, optimiser
            state, autograd's saved tensors).
        os_memory: ``memory`` (on CPU; on CUDA the GPU holds it) plus ``host_memory`` and
            ``worker_host_memory`` plus the profile's
            per-worker process baseline (``process_rss``): the predicted peak resident set the OS measures (set by
            :func:`graphscale.advise.configs.predict_config`; plus the calibration's figure of what the model
            leaves out, for a multi-worker strategy where the profile has one: :attr:`modelled_os_memory` keeps the
            model's).
        host_memory: bytes besides ``memory`` that the largest worker holds resident in host memory and the OS
            counts in its resident set (offload: the host arrays, shared-memory files every worker maps and touches
            whole: ``RssShmem``); one copy per host: a CUDA budget does not hold it, a CPU budget holds each
            worker's share (:meth:`need`).
        bytes_epoch: the epoch whose bytes ``bytes`` are, where they vary with the epoch (the sampled
            strategies); ``None``: every epoch after the first.
        memory_per_worker: every worker's peak.
        bytes: bytes moved per training epoch by Ledger category, summed over workers (closed forms).
        seconds: predicted epoch time: :attr:`modelled_seconds` on the profile's calibration line of the strategy
            (:mod:`graphscale.advise.calibrate`) where it has one.
        modelled_seconds: the strategy's model's epoch time (set by
            :func:`graphscale.advise.configs.predict_config`).
        modelled_os_memory: the model's ``os_memory``, to which the profile's calibration of a multi-worker
            strategy adds what it measured the model to leave out at :attr:`graph_bytes`.
        graph_bytes: the graph's feature rows and CSR structure in bytes
            (:func:`graphscale.advise.configs.graph_bytes`).
        worker_host_memory: bytes each worker holds resident in host memory besides ``memory`` and
            ``host_memory``, its own (not shared): a mini-batch worker's per-vertex arrays, and on CUDA its hot-row
            cache (:mod:`graphscale.cost.host_rows`).
        host_cache: a mini-batch worker's hot-row cache: its ``rows`` and ``bytes``, the ``hit_rate`` over the
            epoch's host reads, the ``misses`` and whether they are read ``from_disk``
            (:meth:`graphscale.cost.host_rows.HostRowPrice.summary`; empty for the other strategies).
        exact: whether it reproduces ``single`` (full-graph) training.
        semantics: one sentence: exact, or the approximation.
        fits: whether :meth:`need` fits the device-memory budget (set by :func:`check_fit`).
        reason: why it does not fit (empty when it does).
        notes: how the figures were obtained (which closed forms, which model).
        collectives: synchronising collectives (``Comm`` collectives and barriers) one worker issues in a training
            epoch, counted from the strategy's plan.
        waits: blocking point-to-point receives (``Comm.recv``, counted in ``DistEnv.receives``) of each worker in
            a training epoch, by rank, counted from the strategy's plan (empty: none).
        events: host-side work ``seconds`` prices per event, counted from the strategy's plan for the busiest
            worker of a training epoch (task-parallel: ``blocks`` built and their ``block_edges``; split-parallel:
            ``samples`` and ``sampled_edges``); the tests hold them to a run's.

    ``seconds`` prices :attr:`messages` (``collectives`` plus the most ``waits`` of a worker), each at the
    profile's ``sync_s``; the tests hold both counts to a real run's.
    """

    strategy: str
    workers: int
    options: dict = field(default_factory=dict)
    memory: int = 0
    memory_per_worker: list[int] = field(default_factory=list)
    bytes: dict = field(default_factory=dict)
    seconds: float = 0.0
    exact: bool = True
    semantics: str = "exact (reproduces single-process full-graph training)"
    fits: bool = True
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    os_memory: int = 0
    bytes_epoch: int | None = None
    collectives: int = 0
    waits: list[int] = field(default_factory=list)
    events: dict = field(default_factory=dict)
    host_memory: int = 0
    modelled_seconds: float = 0.0
    modelled_os_memory: int = 0
    graph_bytes: int = 0
    worker_host_memory: int = 0
    host_cache: dict = field(default_factory=dict)

    @property
    def messages(self) -> int:
        """The synchronising waits :attr:`seconds` prices: :func:`synchronising_waits` of the two counts."""
        return synchronising_waits(self.collectives, self.waits)

    @property
    def moved(self) -> int:
        """Bytes per epoch that cross a link (the Ledger's ``moved_bytes``: ``reuse`` left out)."""
        from graphscale.metrics.ledger import moved_bytes

        return moved_bytes(self.bytes)

    def need(self, device: str = "cpu") -> int:
        """Bytes per worker the budget must hold: :attr:`memory`, and on CPU, where the budget is host memory, each
        worker's share of :attr:`host_memory` (one copy per host, which its workers map), its own
        :attr:`worker_host_memory` and what the profile's calibration measured the resident-set model to leave out
        (``os_memory - modelled_os_memory``, where positive)."""
        if device == "cuda":
            return self.memory
        left_out = max(self.os_memory - self.modelled_os_memory, 0) if self.modelled_os_memory else 0
        return self.memory + -(-self.host_memory // max(self.workers, 1)) + self.worker_host_memory + left_out

    def check_fit(self, budget: int | None, device: str = "cpu") -> Prediction:
        """Set :attr:`fits` / :attr:`reason` against a per-worker budget in bytes (``None``: no budget) of
        ``device``'s memory (:meth:`need`)."""
        need = self.need(device)
        if budget is not None and need > budget:
            from graphscale.metrics.units import format_bytes

            self.fits = False
            self.reason = f"needs {format_bytes(need)} per worker, more than the {format_bytes(budget)} budget"
        return self

    def to_dict(self) -> dict:
        out = asdict(self)
        out["moved_bytes"] = self.moved
        return out


def synchronising_waits(collectives: int, waits: list[int]) -> int:
    """The waits one epoch's time prices: every worker's ``collectives`` plus the receives of the worker with the
    most (``waits`` by rank)."""
    return collectives + max(waits, default=0)

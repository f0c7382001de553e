"""The Strategy interface: one training strategy owns its whole step.

The trainer calls ``setup`` once, then ``train_epoch`` / ``evaluate`` per epoch,
then ``teardown``, identically on every worker and for every strategy; it never
branches on which strategy it runs. Shared pieces used by several strategies
(optimiser construction, the globally normalised loss, accuracy counting) live
here so each strategy module holds only what is specific to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import torch
import torch.nn.functional as F

from graphscale.config import OptimConfig, RunConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import ALLREDUCE, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats

SPLITS = ("train", "val", "test")


class Strategy(ABC):
    """A way of training a model on a graph across ``env.world_size`` workers."""

    #: True when the strategy reproduces the ``single`` reference exactly.
    exact: bool = True
    #: The view of the data its workers get (:mod:`graphscale.data.handle`): ``memory``, ``host-shared``
    #: (one graph directory per host, memory-mapped by every worker) or ``partition-local`` (worker ``r``
    #: opens ``part-r`` of a partition store).
    data_view: str = HOST_SHARED
    #: The ``[strategy]`` options it reads (:class:`~graphscale.config.StrategyConfig` fields besides ``name`` and
    #: ``workers``, which every strategy reads). An option the user gives that the chosen strategy does not read
    #: is an error naming the strategies that do (:func:`graphscale.validation.check_given`); the parent checks
    #: the values of the options read (:func:`graphscale.validation.validate`).
    options: frozenset[str] = frozenset()

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        """Options of :attr:`options` that ``config``'s other settings leave unread, each with the reason
        (e.g. ``{"fanouts": "without --minibatch"}``)."""
        return {}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Checks of ``config`` specific to the strategy, in the parent before any worker starts
        (:func:`graphscale.validation.validate`); raise ``ValueError`` naming the option."""

    @classmethod
    def needs_vertex_partition(cls, config: RunConfig) -> bool:
        """Whether a host-shared run needs the parent to partition the vertices (``--partitioner``)."""
        return False

    @classmethod
    def shared_data_key(cls, config: RunConfig) -> dict | None:
        """What a host-shared run's :meth:`prepare_shared` output depends on (its cache key), or ``None`` when
        the strategy prepares nothing."""
        return None

    @classmethod
    def prepare_shared(cls, graph: Graph, owner: torch.Tensor, config: RunConfig, folder: Path) -> None:
        """Write strategy-specific data every worker of a host-shared run maps, into the new ``folder``
        (in the parent, before any worker starts; ``owner`` is the run's vertex partition). Workers find the
        folder as ``data.extras["shared"]``."""

    @classmethod
    def store_parts(cls, config: RunConfig) -> int:
        """Partitions of the store a partition-local run writes into the cache (one per worker by default)."""
        return config.strategy.workers

    @classmethod
    def prepare_partitions(cls, config: RunConfig, handle: DataHandle) -> None:
        """Check (in the parent) that a partition-local run's store fits the run, and add to ``handle.extras``
        what the workers need. By default a store must have one part per worker."""
        parts, workers = int(handle.summary["parts"]), config.strategy.workers
        if parts != workers:
            raise ValueError(f"partition store {handle.path} has {parts} parts but --workers is {workers}; "
                             f"strategy {config.strategy.name!r} trains one part per worker (use --workers {parts} "
                             "or partition again with --parts)")

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        """Prepare partitions, buffers and the optimiser. Called once per worker.

        Args:
            data: the worker's data handle (a bare :class:`Graph` is taken as an in-memory handle).
            model: the model, on ``env.device``.
            env: this worker's DistEnv.
            config: the run configuration.
        """
        self.data = DataHandle.of(data)
        self.model, self.env, self.config = model, env, config
        self.optimizer = make_optimizer(model, config.optim)

    def vertex_owner(self, graph: Graph) -> torch.Tensor:
        """The run's vertex partition into ``world_size`` parts (prepared by the parent where it can be)."""
        sc = self.config.strategy
        return self.data.vertex_owner(graph, self.env.world_size, sc.partitioner, self.config.seed, sc.balance)

    @abstractmethod
    def train_epoch(self, epoch: int) -> EpochStats:
        """Run one epoch of training and return what it did."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Accuracy (and loss) on every split: keys ``{split}_acc`` and ``{split}_loss``; same on every worker."""

    def teardown(self) -> None:
        """Release buffers and process-level resources."""

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def make_optimizer(model: torch.nn.Module, optim: OptimConfig) -> torch.optim.Optimizer:
    """Adam with the configured learning rate and weight decay."""
    return torch.optim.Adam(model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay)


def allreduce_gradients(comm: Comm, params: list[torch.nn.Parameter], tracker: MemoryTracker | None = None) -> None:
    """Sum every parameter gradient over workers with one all-reduce of a flat buffer (category ``allreduce``).

    Missing gradients count as zeros, so every worker issues the same collective even when it
    computed nothing; afterwards every ``p.grad`` is a view into the reduced buffer (tracked as
    ``"gradients"`` while it lives).
    """
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0)
    for p in params:
        p.grad = None
    if tracker is not None:
        tracker.track("gradients", flat)
    comm.all_reduce(flat, ALLREDUCE)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset: offset + n].view_as(p)
        offset += n


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimiser's state tensors (for memory tracking)."""
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


def masked_loss_sum(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of cross-entropy over the masked rows (divide by the *global* count to normalise)."""
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], labels[mask], reduction="sum")


def split_counts(logits: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per split: (correct, count, loss sum), flattened to a float64 vector of length 3*len(SPLITS)."""
    out = []
    pred = logits.argmax(dim=-1)
    for split in SPLITS:
        mask = masks[split]
        correct = (pred[mask] == labels[mask]).sum().item() if mask.any() else 0
        loss = masked_loss_sum(logits.detach().double(), labels, mask).item()
        out += [float(correct), float(mask.sum()), loss]
    return torch.tensor(out, dtype=torch.float64)


def counts_to_metrics(counts: torch.Tensor) -> dict[str, float]:
    """Turn summed :func:`split_counts` vectors into ``{split}_acc`` / ``{split}_loss``."""
    metrics = {}
    for i, split in enumerate(SPLITS):
        correct, count, loss = counts[3 * i: 3 * i + 3].tolist()
        metrics[f"{split}_acc"] = correct / count if count else float("nan")
        metrics[f"{split}_loss"] = loss / count if count else float("nan")
    return metrics

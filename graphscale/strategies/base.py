"""The Strategy interface: one training strategy owns its whole step.

The trainer calls ``setup`` once, then ``train_epoch`` / ``evaluate`` per epoch,
then ``teardown``, identically on every worker and for every strategy; it never
branches on which strategy it runs. Shared pieces used by several strategies
(the globally normalised loss, accuracy counting) live
here so each strategy module holds only what is specific to it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from graphscale.config import RunConfig
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, DataHandle
from graphscale.distributed.comm import ALLREDUCE, Comm
from graphscale.distributed.env import DistEnv
from graphscale.errors import RunError
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.options.shared import SPLITS
from graphscale.strategies.optimizers import make_optimizer, set_lr


class Strategy(ABC):
    """A way of training a model on a graph across ``env.world_size`` workers."""

    #: True when the strategy reproduces the ``single`` reference exactly.
    exact: bool = True
    #: The view of the data its workers get (:mod:`graphscale.data.handle`): ``memory``, ``host-shared``
    #: (one graph directory per host, memory-mapped by every worker) or ``partition-local`` (worker ``r``
    #: opens ``part-r`` of a partition store).
    data_view: str = HOST_SHARED
    #: The ``[strategy]`` options it reads (:class:`~graphscale.config.StrategyConfig` fields besides ``name`` and
    #: ``workers``, which every strategy reads), and the ``[data]`` options only some strategies read
    #: (``feature_dtype``: the strategy stores and moves its input features in ``--feature-dtype``). An option
    #: the user gives that the chosen strategy does not read is an error naming the strategies that do
    #: (:func:`graphscale.config.check_given`); the parent checks the values of the options read
    #: (:func:`graphscale.validation.validate`).
    options: frozenset[str] = frozenset()
    #: Whether it trains a learnable input table (``--features learnable:D``, :meth:`learnable_table`); the
    #: parent refuses that option for a strategy without it.
    learnable_input: bool = False
    #: the learnable input table (:class:`~graphscale.nn.embedding.LearnableInput`) when the run has one
    input_table = None
    #: True when its workers must share one host (memory shared between processes): a torchrun group spanning
    #: several nodes is refused before anything starts (:func:`graphscale.validation.validate`).
    single_host: bool = False
    #: Whether it trains decoupled models (``--decoupled``, :mod:`graphscale.nn.decoupled`); the parent refuses
    #: them for a strategy without it.
    decoupled_models: bool = False
    #: Whether ``--decoupled auto`` means on (task-parallel: NeutronTask decouples by default).
    decoupled_default: bool = False
    #: Why it cannot train a user's PyG model (:mod:`graphscale.nn.pyg`); empty: it can. The parent refuses such a
    #: model with this reason (:func:`graphscale.nn.pyg.check_model`).
    pyg_refusal: str = ""
    #: Why :meth:`outputs` (:func:`graphscale.api.predict`'s full-graph inference) does not run under it, completing
    #: "it ..."; empty: it does.
    predict_refusal: str = "keeps no full-graph outputs: its evaluation counts correct predictions only"
    #: Why it trains only layer-sequential PyG models (it splits the model by layer); empty: it also trains a model
    #: with its own forward (:mod:`graphscale.nn.pyg_forward`). Quoted in the refusal (:func:`graphscale.nn.pyg.
    #: check_model`), completing "it ...".
    pyg_forward_refusal: str = ""
    #: Whether its blocks carry a weighted graph's edge weights (``Block.edge_weight``) to the convs; the parent
    #: refuses a weighted graph for a strategy without it (:func:`graphscale.validation.check_edge_weights`).
    edge_weights: bool = False

    @classmethod
    def data_view_for(cls, config: RunConfig) -> str:
        """The view of the data a run of ``config`` gets (:func:`graphscale.prepare.prepare_data`); by default
        :attr:`data_view`, whatever the options."""
        return cls.data_view

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        """Options of :attr:`options` that ``config``'s other settings leave unread, each with the reason
        (e.g. ``{"fanouts": "without --minibatch"}``)."""
        return {}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        """Checks of ``config`` specific to the strategy, in the parent before any worker starts
        (:func:`graphscale.validation.validate`); raise ``ValueError`` naming the option."""

    #: ``--task link`` on the host-shared view: the parent writes the split's message-passing graph as the run's
    #: graph directory, all the pairs in the link folder beside it (:mod:`graphscale.tasks.link_store`)
    link_message_graph: bool = False
    #: ``--task link``: whether it scores a given split's own negatives (``ogbl:``, a ``RandomLinkSplit`` triple);
    #: a strategy that scores only the keyed candidates it draws refuses such a split in the parent
    link_given_negatives: bool = True

    @classmethod
    def edge_weight_refusal(cls, config: RunConfig, halo_hops: int) -> str:
        """Why a strategy with :attr:`edge_weights` cannot give ``config``'s convs a weighted graph's edge weights
        (a part of it that carries none, with the option that avoids it), completing "it ..."; empty: it can.
        ``halo_hops``: the partition store's. The parent refuses the run with this reason before any worker starts."""
        return ""

    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        """Why it cannot run ``config`` with ``--task link`` (:mod:`graphscale.tasks`), completing "it ..."; empty:
        it can. The parent refuses the run with this reason before any worker starts."""
        return "does not train link prediction"

    @classmethod
    def resume_identity(cls, config: RunConfig) -> dict:
        """The strategy's options that change what training computes, keyed by option name: recorded in a checkpoint
        with the run's identity (:func:`graphscale.checkpoint.identity`) and compared on ``--resume``. None here:
        an exact strategy computes the same whatever its options."""
        return {}

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
        (in the parent, before any worker starts, for every run of the strategy, one worker included; ``owner`` is
        the run's vertex partition when :meth:`needs_vertex_partition`, else ``None``). Workers find the folder as
        ``data.shared`` (:meth:`~graphscale.data.handle.DataHandle.require_shared`)."""

    @classmethod
    def store_parts(cls, config: RunConfig, data_bytes: Callable[[], int]) -> int:
        """Partitions of the store a partition-local run writes into the cache (one per worker by default);
        ``data_bytes()`` gives the dataset's size ``S`` (loading it once) for strategies that choose from it."""
        return config.strategy.workers

    @classmethod
    def prepare_partitions(cls, config: RunConfig, handle: DataHandle, cache: Path | None = None) -> dict:
        """Check (in the parent) that a partition-local run's store fits the run, and return the handle's fields the
        strategy prepares for its workers (``state_dir``, in ``cache``: the run's cache directory when ``None``).
        By default a store must have one part per worker, and nothing is prepared."""
        parts, workers = int(handle.summary["parts"]), config.strategy.workers
        if handle.summary.get("halo_hops", 1) != 1:
            raise ValueError(f"partition store {handle.path} holds a {handle.summary['halo_hops']}-hop halo "
                             "(--halo-hops), which only strategy 'model-averaging' reads; partition again with "
                             "--halo-hops 1")
        if parts != workers:
            raise ValueError(f"partition store {handle.path} has {parts} parts but --workers is {workers}; "
                             f"strategy {config.strategy.name!r} trains one part per worker (use --workers {parts} "
                             "or partition again with --parts)")
        return {}

    def setup(self, data: DataHandle | Graph, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        """Prepare partitions, buffers and the optimiser. Called once per worker.

        Args:
            data: the worker's data handle, prepared by the parent (:func:`graphscale.prepare.prepare_data`, or
                :func:`graphscale.prepare.prepare_graph` for an in-memory graph); a bare :class:`Graph` is taken as
                an in-memory handle with nothing prepared, which only strategies that need nothing prepared accept.
            model: the model, on ``env.device``.
            env: this worker's DistEnv.
            config: the run configuration.
        """
        self.data = DataHandle.of(data)
        self.model, self.env, self.config = model, env, config
        self.optimizer = make_optimizer(model, config.optim)

    def set_lr(self, lr: float) -> None:
        """Train the next epoch at learning rate ``lr`` (the trainer sets every epoch's, from ``--lr-schedule``:
        :class:`~graphscale.strategies.optimizers.LRSchedule`)."""
        set_lr(self.optimizer, lr)

    def feature_dtype(self) -> torch.dtype:
        """The dtype this worker stores its input features in: bfloat16 with ``--feature-dtype bfloat16`` (the
        model upcasts the rows it reads, :meth:`~graphscale.nn.models.GNN.upcast`), else the parameters'."""
        if self.config.data.feature_dtype == "bfloat16":
            return torch.bfloat16
        return next(self.model.parameters()).dtype

    def learnable_table(self, ids: torch.Tensor) -> torch.nn.Parameter:
        """The learnable input rows of vertices ``ids`` (``--features learnable:D``): a table built from the ids
        (:class:`~graphscale.nn.embedding.LearnableInput`), added to the optimiser as a parameter group of its own
        (outside the model, so the model's gradient all-reduce leaves it out: each row has one owner)."""
        from graphscale.data.features import learnable_dim
        from graphscale.nn.embedding import LearnableInput

        dtype = next(self.model.parameters()).dtype
        self.input_table = LearnableInput(ids, learnable_dim(self.config.data.features), self.config.seed, dtype,
                                          self.env.device)
        self.optimizer.add_param_group({"params": [self.input_table.weight]})
        return self.input_table.weight

    def vertex_owner(self) -> torch.Tensor:
        """The run's vertex partition into ``world_size`` parts, prepared by the parent."""
        return self.data.vertex_owner(self.env.world_size)

    @abstractmethod
    def train_epoch(self, epoch: int) -> EpochStats:
        """Run one epoch of training and return what it did."""

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact full-graph outputs (logits) of the rows this worker computes, in eval mode with dropout off, as
        ``(global ids, outputs)`` (empty on a worker that computes none); a collective. :func:`graphscale.api.predict`
        runs it where :attr:`predict_refusal` is empty."""
        raise NotImplementedError(f"strategy {type(self).__name__} {self.predict_refusal}")

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Accuracy (and loss) on every split: keys ``{split}_acc`` and ``{split}_loss``; same on every worker."""

    def teardown(self) -> None:
        """Release buffers and process-level resources."""

    def state_dict(self) -> dict:
        """What a checkpoint records of the strategy (called on every worker; worker 0's is written)."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.input_table is not None:
            state["input_table"] = self.input_table.state_dict()
        return state

    def full_model_state(self, state: dict | None) -> dict | None:
        """The whole model's state from this worker's copy ``state`` (a ``model.state_dict()``), on worker 0 (called
        on every worker with the same kind of argument). The model is whole on every worker here; a strategy that
        spreads it over the workers gathers it."""
        return state

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        if self.input_table is not None:
            self.input_table.load_state_dict(state["input_table"])
        self.optimizer.load_state_dict(state["optimizer"])


def unused_feature_options(config: RunConfig) -> dict[str, str]:
    """``feature_dtype`` is unread with a learnable input table (``--features learnable:D``: no stored features);
    for the ``unused_options`` of the strategies that read it."""
    from graphscale.data.features import learnable_dim

    if learnable_dim(config.data.features):
        return {"feature_dtype": f"with --features {config.data.features} (a trainable table in the parameters' "
                                 "dtype, no stored features)"}
    return {}


def allreduce_gradients(comm: Comm, params: list[torch.nn.Parameter], tracker: MemoryTracker | None = None) -> None:
    """Sum every parameter gradient over workers with one all-reduce of a flat buffer (category ``allreduce``).

    Missing gradients count as zeros, so every worker issues the same collective even when it
    computed nothing; afterwards every ``p.grad`` is a view into the reduced buffer (tracked as
    ``"gradients"`` while it lives). A non-finite sum raises :class:`NonFiniteGradient` on every worker before
    the caller's optimiser step (one fused ``isfinite`` over the flat buffer).
    """
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0)
    for p in params:
        p.grad = None
    if tracker is not None:
        tracker.track("gradients", flat)
    comm.all_reduce(flat, ALLREDUCE)
    check_gradients([flat])  # every worker holds the same sum, so every worker stops (or none does)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset: offset + n].view_as(p)
        offset += n


class NonFiniteGradient(RunError):
    """A gradient is NaN or infinite; raised before the optimiser step, so the parameters are still those of the
    last finite step. :class:`~graphscale.trainer.Trainer` turns it into its one-line divergence error.

    Attributes:
        loss: the loss the gradient came from, where the raiser knew it (``None`` otherwise).
    """

    def __init__(self, loss: float | None = None) -> None:
        super().__init__("a gradient is non-finite (NaN or infinite)" if loss is None or math.isfinite(loss)
                         else f"the training loss is {loss}")
        self.loss = loss


def check_gradients(grads: list[torch.Tensor], loss: torch.Tensor | None = None) -> None:
    """Raise :class:`NonFiniteGradient` when any of ``grads`` (``None`` entries skipped) holds a NaN or an
    infinity; one host synchronisation.

    Adam (:func:`~graphscale.strategies.optimizers.make_optimizer`) would otherwise carry the non-finite value into
    its moments and every parameter
    it touches, for good; the trainer's after-epoch parameter check would catch that one epoch later, with the
    parameters already lost.
    """
    grads = [g for g in grads if g is not None]
    if grads and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()):
        raise NonFiniteGradient(None if loss is None else float(loss.detach()))


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimiser's state tensors (for memory tracking)."""
    return [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


#: float64 entries per split in a :func:`split_counts` vector: hits, misses, count, loss sum
COUNTS_PER_SPLIT = 4


def metric_name(multilabel: bool) -> str:
    """The metric reported under the ``{split}_acc`` keys: ``micro-f1`` for multi-label labels, else ``accuracy``."""
    return "micro-f1" if multilabel else "accuracy"


def masked_loss_sum(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of the per-vertex loss over the masked rows (divide by the *global* count to normalise).

    The one loss of every strategy: for class ids ``labels [R]`` the cross-entropy of the softmax; for a
    multi-label 0/1 matrix ``labels [R, C]`` binary cross-entropy with logits (a sigmoid per class) summed over
    the ``C`` classes, so a vertex's loss is that of its ``C`` independent yes/no decisions (the normalised loss is
    ``BCEWithLogitsLoss``'s mean times ``C``).

    Summed, not averaged over the classes: averaged, the gradient shrinks with ``C`` while weight decay does not,
    and on many rare classes the decay wins. BlogCatalog (39 classes, 1.4 per vertex; ``spectral:64``, the model
    defaults: hidden 16, dropout 0.5, weight decay 5e-4, 200 epochs, seed 0) reached test micro-F1 0.163 averaged,
    the label-frequency predictor's 0.164 (the model learnt the frequencies through its biases, training loss
    0.18 per class, their entropy), and 0.19 summed in a plain-torch copy of the model.

    Multi-label BCE is unweighted on purpose. A per-class ``pos_weight`` (negatives / positives of the training
    labels, computed once) was measured with ``single`` and seeded runs (the loss then averaged over the classes),
    test micro-F1 at the best validation epoch: the 12-class SBM of ``tests/test_cli.py`` (``learnable:32``, 60
    epochs) 0.692 unweighted, 0.562 weighted; a BlogCatalog-shaped SBM (3,000 vertices, 39 Zipf-skewed classes,
    1.37 labels per vertex, mean degree 19, 100 epochs) 0.132 / 0.073 with ``degree`` features and 0.132 / 0.171
    with ``learnable:64``. It helped one case of three, so the collapse to all-negative logits is handled by the
    prediction instead (:func:`multilabel_prediction`).
    """
    if not bool(mask.any()):
        return logits.sum() * 0.0
    if labels.dim() == 2:
        target = labels[mask].to(logits.dtype)
        return F.binary_cross_entropy_with_logits(logits[mask], target, reduction="sum")
    return F.cross_entropy(logits[mask], labels[mask], reduction="sum")


def multilabel_prediction(logits: torch.Tensor) -> torch.Tensor:
    """The classes predicted from multi-label logits ``[R, C]``: those with a positive logit (sigmoid > 0.5) and,
    in every row, its highest-scoring class. Every vertex has at least one label, so a model whose logits are all
    negative (what BCE drifts to when each class is rare: BlogCatalog's 39 classes, 1.4 labels per vertex) still
    predicts by its ranking instead of predicting nothing (micro-F1 0)."""
    if logits.numel() == 0:
        return logits > 0
    top = torch.zeros_like(logits, dtype=torch.bool)
    top.scatter_(1, logits.argmax(dim=1, keepdim=True), True)
    return (logits > 0) | top


def split_counts(logits: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per split ``(hits, misses, count, loss sum)``, flattened to float64 ``[COUNTS_PER_SPLIT * len(SPLITS)]``;
    vectors of several workers (or chunks) add up, and :func:`counts_to_metrics` turns the sum into metrics.

    Hits and misses are micro-F1's ``tp`` and ``fp + fn``. Multi-label (``labels [R, C]``): a class is predicted
    where its logit is positive (sigmoid > 0.5), and each row's top class always
    (:func:`multilabel_prediction`), summed over the masked rows' ``C`` entries. Class ids
    (``labels [R]``): the arg-max is the prediction, a hit when right; a wrong one is a false positive of the
    predicted class and a false negative of the true one (two misses), so micro-F1 ``2 tp / (2 tp + fp + fn)``
    is exactly the accuracy.
    """
    out = []
    multilabel = labels.dim() == 2
    pred = multilabel_prediction(logits) if multilabel else logits.argmax(dim=-1)
    for split in SPLITS:
        mask = masks[split]
        hits = misses = 0
        if mask.any():
            if multilabel:
                p, t = pred[mask], labels[mask].bool()
                hits = int((p & t).sum())
                misses = int((p ^ t).sum())
            else:
                hits = int((pred[mask] == labels[mask]).sum())
                misses = 2 * (int(mask.sum()) - hits)
        loss = masked_loss_sum(logits.detach().double(), labels, mask).item()
        out += [float(hits), float(misses), float(mask.sum()), loss]
    return torch.tensor(out, dtype=torch.float64)


def counts_to_metrics(counts: torch.Tensor) -> dict[str, float]:
    """Turn summed :func:`split_counts` vectors into ``{split}_acc`` (micro-F1 ``2 hits / (2 hits + misses)``:
    the accuracy for class ids; 0 for a multi-label split with no positive label or prediction) and
    ``{split}_loss`` (the mean loss)."""
    metrics = {}
    k = COUNTS_PER_SPLIT
    for i, split in enumerate(SPLITS):
        hits, misses, count, loss = counts[k * i: k * i + k].tolist()
        metrics[f"{split}_acc"] = ((2 * hits / (2 * hits + misses) if 2 * hits + misses else 0.0) if count
                                   else float("nan"))
        metrics[f"{split}_loss"] = loss / count if count else float("nan")
    return metrics

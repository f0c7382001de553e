"""Options several strategies read, each declared once (one meaning per name), and the three single-module
strategies' declarations (``single``, ``graph-parallel``, ``data-parallel``), with the constants the layers
below the strategies read with them (:data:`SPLITS`, :data:`BALANCE_CHOICES`, :data:`CACHE_POLICIES`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from graphscale.options import SWITCH, int_list, meta, option

#: the vertex splits a run reports on (``train_acc``, ``val_acc``, ``test_acc``)
SPLITS = ("train", "val", "test")
#: ``--balance``: what a METIS partition balances (empty: ``edges+train``; SPRING: ``vertices`` or ``edges``)
BALANCE_CHOICES = ("vertices", "edges", "edges+train")
#: ``--cache``: the feature-cache policies of data-parallel (:mod:`graphscale.data.feature_cache`)
CACHE_POLICIES = ("none", "pagraph", "quiver")


@dataclass
class Partitioning:
    """The vertex partition of the strategies that partition the graph (their stores, chunks or plans)."""

    partitioner: str = option("metis", "vertex partitioner of the partitioned strategies, with its options (e.g. "
                              "metis:ufactor=10)", metavar="NAME[:key=value,...]")
    balance: str = option("", "metis: what the parts balance: vertex counts, in-edges (computation), or in-edges and "
                          "training vertices as a second constraint (empty: edges+train); spring: vertices (the "
                          "paper's LPT) or edges (empty: edges, for a store built for training); restream: vertices "
                          "or edges (empty: edges)",
                          choices=BALANCE_CHOICES)


@dataclass
class Stored:
    """Training from a partition store written by ``graphscale partition``."""

    partitions: str = option("", "train from this partition store (written by `graphscale partition`; its part "
                             "count must equal --workers); empty: partition into the cache directory",
                             metavar="DIR")


@dataclass
class MiniBatch:
    minibatch: bool = option(False, "sampled mini-batch training instead of full-graph", bool_form=SWITCH)


@dataclass
class Sampling:
    """Sampled mini-batches."""

    fanouts: list[int] = field(default_factory=lambda: [10, 10], metadata=meta(
        "sampled neighbours per layer, input layer first, -1 = all (e.g. 10,10 or -1,5); one per model layer",
        parse=int_list, metavar="F,F,..."))
    batch_size: int = option(512, "training vertices per mini-batch, over all workers (--task link: training edges)")


@dataclass
class CacheFraction:
    cache_fraction: float = option(0.0, "feature rows cached per worker, as a fraction of all vertices, in [0, 1]")


@dataclass
class ChunkOrder:
    shuffle: bool = option(True, "a new chunk order every epoch, the same on every worker (--no-shuffle: a fixed "
                           "order)")


@dataclass
class SampledEvaluation:
    """The evaluation of the mini-batch strategies (:mod:`graphscale.strategies.sampled_evaluation`)."""

    eval_fanouts: list[int] = field(default_factory=list, metadata=meta(
        "mini-batch training (single: with --minibatch): evaluate the train, val and test vertices on "
        "neighbourhoods sampled with these fanouts (as --fanouts; seeded, the same every epoch), --batch-size at a "
        "time, the batches shared among the workers, instead of exact layer-wise inference over every vertex "
        "(empty: exact)", parse=int_list, metavar="F,F,..."))


@dataclass
class SingleOptions(MiniBatch, Sampling, SampledEvaluation):
    """``single``: the single-process reference, full-graph or (``--minibatch``) sampled."""

    DATA_OPTIONS: ClassVar[frozenset[str]] = frozenset({"feature_dtype"})


@dataclass
class GraphParallelOptions(Partitioning, Stored):
    """``graph-parallel``: one part of a partition store per worker."""

    DATA_OPTIONS: ClassVar[frozenset[str]] = frozenset({"feature_dtype"})


@dataclass
class DataParallelOptions(Partitioning, Sampling, SampledEvaluation, CacheFraction):
    """``data-parallel``: mini-batches split between the workers, with a feature cache."""

    cache: str = option("none", "feature cache: none (DGL-like), pagraph, quiver", choices=CACHE_POLICIES)

"""Data handles: what a strategy's ``setup`` receives instead of the global graph.

A handle says which *view* of the data a worker gets (see "Where data lives" in
``docs/architecture.md``):

* ``memory``: an in-memory :class:`~graphscale.data.graph.Graph` (``single``, and
  tests or Python callers that hand a strategy a graph object);
* ``host-shared``: a graph directory (:mod:`graphscale.data.formats`) written once
  before the workers start; every worker on the host memory-maps the same files,
  so the page cache holds one copy of the graph per host;
* ``partition-local``: a partition store (:mod:`graphscale.partition.store`);
  worker ``r`` memory-maps only ``part-r`` (and the O(|V|) book if it asks).

What a strategy prepares for its workers is typed and written by the parent,
before any worker starts, by the one preparation path
(:func:`graphscale.prepare.prepare_data` for a run's dataset,
:func:`graphscale.prepare.prepare_graph` for an in-memory graph: tests and
Python callers): the run's vertex partition (``owner_path``, an ``.npy`` of the
part of every vertex), the strategy's shared folder (``shared``:
``Strategy.prepare_shared``) and model-averaging's state directory
(``state_dir``). A handle is frozen: no worker changes what it was given, and
no worker computes what the parent should have prepared (a strategy given a
handle without its prepared data raises, naming the function that prepares it).

Handles are small and picklable (paths and a summary, or the in-memory graph);
:attr:`DataHandle.opened` logs every array a worker opened through the handle
with its row count, so tests can check that a worker read only its own part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from graphscale.data.graph import Graph

MEMORY = "memory"
HOST_SHARED = "host-shared"
PARTITION_LOCAL = "partition-local"
VIEWS = (MEMORY, HOST_SHARED, PARTITION_LOCAL)
#: the arrays of a graph directory / a partition's local graph, as logged in :attr:`DataHandle.opened`
GRAPH_ARRAYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True)
class DataHandle:
    """Where a worker finds its data.

    Attributes:
        view: ``memory``, ``host-shared`` or ``partition-local``.
        summary: the whole graph's counts (``Graph.summary()`` keys: name, nodes, edges, features, classes,
            train, val, test), known without opening the data; a store's also has ``parts`` and ``part_train``
            (the training vertices each part owns).
        graph: the graph (``memory`` view).
        path: the graph directory (``host-shared``) or partition store (``partition-local``).
        owner_path: ``host-shared``: ``.npy`` file with the part of every vertex (``owner_parts`` parts).
        owner_parts: number of parts of ``owner_path``.
        feature_norm: ``partition-local``: ``row`` when a worker must row-normalise its feature rows (the store
            holds raw features), else ``none``; graph directories and in-memory graphs are already normalised.
        dtype: feature dtype the worker stores its features in (``float32`` / ``float64``, or ``bfloat16`` with
            ``--feature-dtype bfloat16``: the model upcasts the rows it reads).
        shared: the folder the parent wrote with ``Strategy.prepare_shared`` (split plan, chunk assignment,
            offload layout, task plan); for a ``partition-local`` ``--task link`` run, the link folder next to
            the store (:mod:`graphscale.tasks.link_store`); ``None`` for a run that prepares none.
        state_dir: ``model-averaging``: the directory of its partition states (several parts per worker, a
            checkpoint, or ``--state-dir``), else ``None``.
    """

    view: str
    summary: dict
    graph: Graph | None = None
    path: str | None = None
    owner_path: str | None = None
    owner_parts: int = 0
    feature_norm: str = "none"
    dtype: str = "float32"
    shared: str | None = None
    state_dir: str | None = None
    opened: list[tuple[str, int]] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"DataHandle.view must be one of {', '.join(VIEWS)}, got {self.view!r}")

    # ------------------------------------------------------------ builders
    @classmethod
    def in_memory(cls, graph: Graph, dtype: str | None = None) -> DataHandle:
        """A handle on an in-memory graph (features used as they are; ``dtype`` defaults to theirs)."""
        if dtype is None:
            dtype = "float32" if graph.x is None else str(graph.x.dtype).removeprefix("torch.")
        return cls(MEMORY, graph.summary(), graph=graph, dtype=dtype)

    @classmethod
    def of(cls, data: DataHandle | Graph) -> DataHandle:
        """``data`` itself when it is a handle, else an in-memory handle on the graph with nothing prepared (what
        ``single`` needs; other strategies need :func:`graphscale.prepare.prepare_graph`'s handle)."""
        if isinstance(data, DataHandle):
            return data
        if isinstance(data, Graph):
            return cls.in_memory(data)
        raise TypeError(f"a strategy's setup expects a DataHandle or a Graph, got {type(data).__name__}")

    # ---------------------------------------------------------- properties
    @property
    def num_nodes(self) -> int:
        return int(self.summary["nodes"])

    @property
    def num_features(self) -> int:
        return int(self.summary["features"])

    @property
    def num_classes(self) -> int:
        return int(self.summary["classes"])

    @property
    def num_train(self) -> int:
        return int(self.summary["train"])

    # ------------------------------------------------------------- opening
    def open_graph(self) -> Graph:
        """The whole graph: the in-memory one, or the host-shared graph directory memory-mapped.

        Raises:
            ValueError: a partition-local handle (its workers never see the whole graph).
        """
        if self.view == MEMORY:
            return self.graph
        if self.view != HOST_SHARED:
            raise ValueError(f"a {self.view} data handle has no whole graph to open; open a partition instead")
        from graphscale.data.formats import load_graph_dir

        graph = load_graph_dir(self.path)
        self._log(Path(self.path), graph, GRAPH_ARRAYS)
        return graph

    def open_partition(self, part: int, gather: bool = True, rows_dir: str | Path | None = None):
        """Partition ``part`` of the store, memory-mapped (a :class:`~graphscale.partition.store.LocalPartition`).

        Only the store's ``meta.json`` and ``part``'s directory are read, and, for a store that references its base
        graph directory's node rows, this part's rows of those arrays (all local rows with ``gather``; without,
        none until :meth:`~graphscale.partition.store.LocalPartition.inner_rows` reads the inner ones); with
        ``rows_dir`` the gathered feature rows are a private file there, memory-mapped, not anonymous memory.
        """
        if self.view != PARTITION_LOCAL:
            raise ValueError(f"a {self.view} data handle has no partitions; this strategy needs a partition store "
                             "(graphscale train --partitions DIR, or let the run write one)")
        from graphscale.partition.store import load_partition, part_dir

        local = load_partition(self.path, part, gather=gather, rows_dir=rows_dir)
        folder = part_dir(self.path, part)
        self._log(folder, local.graph, tuple(name for name in GRAPH_ARRAYS if name not in local.referenced))
        if gather:  # the rows gathered from the base directory, logged under its files
            self._log(local.base, local.graph, local.referenced)
        self._log(folder, local, ("orig_ids", "global_ids", "degree", "halo_owner"))
        return local

    def _log(self, folder: Path, owner_object, names: tuple[str, ...]) -> None:
        """Record the ``.npy`` files behind ``owner_object``'s arrays ``names`` (the present ones) with their rows."""
        for name in names:
            value = getattr(owner_object, name)
            if value is not None:
                self.opened.append((str(folder / f"{name}.npy"), int(value.shape[0])))

    def vertex_owner(self, num_parts: int) -> torch.Tensor:
        """The part of every vertex (int64 ``[N]``): all zeros for one part, else the parent's partition.

        Raises:
            ValueError: the handle carries no partition into ``num_parts`` parts (names how to prepare one).
        """
        if num_parts == 1:
            return torch.zeros(self.num_nodes, dtype=torch.int64)
        if self.owner_path is None or self.owner_parts != num_parts:
            have = f"one into {self.owner_parts} parts" if self.owner_path else "none"
            raise ValueError(f"the data handle carries no vertex partition into {num_parts} parts ({have}); "
                             f"prepare it for --workers {num_parts} with graphscale.prepare.prepare_data(config) "
                             "or prepare_graph(graph, config) before the workers start")
        owner = np.load(self.owner_path, mmap_mode="c")
        self.opened.append((str(self.owner_path), int(owner.shape[0])))
        return torch.from_numpy(np.asarray(owner, dtype=np.int64))

    def require_shared(self, strategy: str) -> Path:
        """The folder of ``strategy``'s ``prepare_shared``.

        Raises:
            ValueError: the handle was not prepared for ``strategy`` (names how to prepare it).
        """
        if self.shared is None:
            raise ValueError(f"strategy {strategy!r} reads the plan its parent prepares, which this data handle "
                             "lacks; prepare the data with graphscale.prepare.prepare_data(config) or "
                             "prepare_graph(graph, config) before the workers start")
        return Path(self.shared)

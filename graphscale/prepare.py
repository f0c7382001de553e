"""Preparing a run's data in the parent process, before any worker starts.

:func:`prepare_data` turns a run configuration into the
:class:`~graphscale.data.handle.DataHandle` every worker receives, writing what
the strategy's view needs exactly once:

* ``memory`` (``single`` full-graph; ``single --minibatch`` takes the host-shared view below,
  ``Strategy.data_view_for``): the dataset is loaded, checked (features finite,
  labels in ``[0, C)`` or ``-1``: :func:`~graphscale.data.datasets.untrainable_reason`),
  its features normalised and cast to the run's dtype (``--feature-dtype
  bfloat16``: stored in bfloat16), in this process (the worker runs in it too);
  every dataset a run loads is checked so;
* ``partition-local`` (``graph-parallel``): the store given by ``--partitions``
  is validated (format, every part's arrays, its part count against
  ``--workers``, its dataset against ``--dataset``, its inner rows' features
  finite and labels in range); without ``--partitions``
  the run partitions the dataset with ``--partitioner`` / ``--balance`` and
  writes a store into the cache directory, or reuses the one a previous run
  wrote. Stores hold raw features: workers row-normalise their own rows when
  ``--feature-norm`` asks for it (``auto`` is decided here, by scanning the
  stored inner rows once) and keep them in the run's dtype, or in bfloat16
  with ``--feature-dtype bfloat16``;
* ``host-shared`` (``offload``, ``data-parallel``, ``split-parallel``): the
  normalised, cast graph is written once as a graph directory in the cache
  directory, which every worker memory-maps; a strategy that needs a vertex
  partition (``Strategy.needs_vertex_partition``) gets it computed here and
  saved next to it, and a strategy with shared data (``Strategy.shared_data_key``:
  split plan, chunk assignment, offload layout, task plan) gets its folder written
  here (``Strategy.prepare_shared``), for any number of workers.

``--task link`` on a partitioned strategy: the parent draws the split as ``single`` does
(:func:`~graphscale.tasks.split.split_edges`) and prepares its message-passing graph instead of the whole graph
(graph-parallel: the store partitions it, each part's pairs written beside the store; a host-shared strategy with
``Strategy.link_message_graph``: its graph directory, all the pairs beside it; :mod:`graphscale.tasks.link_store`),
under cache keys that hold the split.

:func:`prepare_graph` prepares an in-memory graph the same way (tests, benches and
Python callers that hand a strategy a ``Graph``): the handle keeps the graph in
memory and carries the partition and shared folder written into the cache, keyed
by the graph's content hash (a partition-local strategy gets a store of it). The
strategies compute none of this in a worker: a handle without it is an error.

Cache entries live under ``--cache-dir`` (default ``$GRAPHSCALE_CACHE_DIR``,
else ``$XDG_CACHE_HOME/graphscale``, else ``~/.cache/graphscale``), one
directory per key (dataset spec and the size and modification time of its files,
the format version, and what was derived from it: normalisation and dtype, or
partitioner, balance, parts and seed). Writers take a per-key file lock, write to
a temporary sibling and rename, so concurrent runs (torchrun ranks on one host)
write an entry once and a crashed run leaves nothing half-written; a run then holds
the entry's shared in-use lock until it exits, which ``graphscale cache clear``
respects (:mod:`graphscale.data.cache_use`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig, resolve_hidden, stored_feature_dtype
from graphscale.data.cache import resolve_cache_dir
from graphscale.data.cache_use import writing
from graphscale.data.graph import Graph
from graphscale.data.handle import HOST_SHARED, MEMORY, PARTITION_LOCAL, DataHandle
from graphscale.data.specs import canonical_spec
from graphscale.partition.build import build_vertex_partitioner
from graphscale.tasks.link_store import is_link_folder, link_folder, store_owner, write_link_parts
from graphscale.training_store import check_store_node_data, store_handle, write_training_store

#: bumped when what the cache holds for a key changes meaning
CACHE_VERSION = 1
DEFAULT_DATASET = "cora"


# ------------------------------------------------------------ cache directory
# ------------------------------------------------------------ setup progress
def setup_step(config: RunConfig, what: str, stream=None):
    """Progress of a slow setup step on stderr (``--progress``, the process that prints: partitioning a 200k-vertex
    graph takes seconds that would otherwise pass in silence): a bar on a terminal, else a line when it starts and
    one with its time when it ends (:func:`graphscale.progress.setup_progress`)."""
    from graphscale.distributed.launch import is_main_process
    from graphscale.progress import setup_progress

    return setup_progress(what, enabled=config.progress and is_main_process(), stream=stream)


# ------------------------------------------------------------ dataset identity
def _fingerprint(spec: str) -> list:
    """Size and modification time of every file a path-based spec names (so edited files miss the cache)."""
    out = []
    _, sep, arg = spec.partition(":")
    for part in arg.split(":") if sep else []:
        path = Path(part)
        if not part or not path.exists():
            continue
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            stat = f.stat()
            out.append([str(f), stat.st_size, stat.st_mtime_ns])
    return out


def _key(fields: dict) -> tuple[str, str]:
    """``(hash, directory name)`` of a cache entry described by ``fields``."""
    text = json.dumps({"cache_version": CACHE_VERSION, **fields}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    slug = re.sub(r"[^A-Za-z0-9_.=,-]+", "_", Path(fields["dataset"]).name if "/" in fields["dataset"]
                  else fields["dataset"])[:48]
    return digest, f"{slug}-{digest}"


# ------------------------------------------------------------ loading
def training_graph(spec: str, features: str = "", seed: int = 0) -> Graph:
    """The dataset with what training adds to it, checked trainable: ``--features`` (computed here, or the
    dataset's own dropped for ``learnable:D``; :mod:`graphscale.data.features`) and, for a multi-label graph
    without a split, the seeded split of :func:`~graphscale.data.readers.labels.multilabel_split`."""
    from graphscale.data.datasets import load_dataset, untrainable_reason, with_training_split
    from graphscale.data.features import apply_features

    graph = with_training_split(apply_features(load_dataset(spec), features, seed))
    reason = untrainable_reason(spec, graph, features)
    if reason:
        raise ValueError(reason)
    return graph


def load_training_graph(spec: str, feature_norm: str, dtype: str, features: str = "", seed: int = 0) -> Graph:
    """The dataset as training uses it: loaded, ``--features`` applied, checked trainable, features normalised
    (``auto`` leaves generated features alone) and cast."""
    from graphscale.data.datasets import normalize_features
    from graphscale.data.features import effective_norm

    graph = normalize_features(training_graph(spec, features, seed), effective_norm(features, feature_norm))
    if graph.x is not None:
        graph.x = graph.x.to(getattr(torch, dtype))
    return graph


def dataset_dir(config: RunConfig, cache: Path, spec: str) -> Path:
    """The graph directory of dataset ``spec``: ``DIR`` itself for ``graphdir:DIR``, else the cache's copy
    (``CACHE/sources/NAME-KEY``), written once per spec and file fingerprint by
    :func:`graphscale.data.ingest.ingest` (edge lists, OGB directories, npz files and synthetic graphs in bounded
    memory, as ``graphscale convert`` does). Every run that trains on workers reads its data from here,
    memory-mapped."""
    from graphscale.data.formats import is_graph_dir
    from graphscale.data.ingest import ingest

    kind, _, arg = spec.partition(":")
    if kind.lower() == "graphdir":
        return Path(arg)
    digest, name = _key({"kind": "source", "dataset": spec, "files": _fingerprint(spec)})
    path = cache / "sources" / name
    with writing(cache, digest):
        if not is_graph_dir(path):
            with setup_step(config, f"writing {spec} as a graph directory"):
                path.parent.mkdir(parents=True, exist_ok=True)
                ingest(spec, path)
    return path


def _training_dir(config: RunConfig, cache: Path, spec: str, feature_norm: str, dtype: str | None,
                  fields: dict) -> Path:
    """The graph directory a run trains on (:func:`graphscale.data.training_dir.write_training_dir`: the dataset's
    directory with ``--features``, normalisation and ``dtype`` applied in row chunks), under the cache key
    ``fields``, written once."""
    from graphscale.data.formats import is_graph_dir
    from graphscale.data.training_dir import write_training_dir

    digest, name = _key(fields)
    path = cache / "graphs" / name
    source = dataset_dir(config, cache, spec)
    with writing(cache, digest):
        if not is_graph_dir(path):
            with setup_step(config, f"writing {spec}'s training graph directory (features prepared)"):
                path.parent.mkdir(parents=True, exist_ok=True)
                write_training_dir(source, path, features=config.data.features, seed=config.seed,
                                   feature_norm=feature_norm, dtype=dtype, spec=spec, task=config.task)
    return path


def _feature_fields(config: RunConfig) -> dict:
    """What ``--features`` adds to a cache key (nothing without it, so existing entries keep their keys)."""
    from graphscale.data.features import parse_features

    mode, _ = parse_features(config.data.features)
    if not mode:
        return {}
    seeded = mode in ("random", "fastrp")
    return {"features": config.data.features, **({"feature_seed": config.seed} if seeded else {})}


# ------------------------------------------------------------ the views
def _partition_local(config: RunConfig, cache: Path | None, strategy) -> DataHandle:
    from graphscale.partition.store import check_partition_store

    sc = config.strategy
    if sc.partitions:
        path = Path(sc.partitions)
        meta = check_partition_store(path)
        stored = meta.get("dataset")
        if config.data.dataset and stored and canonical_spec(config.data.dataset) != stored:
            raise ValueError(f"--partitions {path} holds a partition of dataset {stored!r}, but --dataset is "
                             f"{config.data.dataset!r}; drop --dataset or pass the store's dataset")
        config.data.dataset = config.data.dataset or stored or str(path)
    else:
        path, meta = _cached_store(config, cache, strategy.store_parts(config, lambda: _dataset_bytes(config, cache)))
    from graphscale.data.features import effective_norm, learnable_dim

    handle = store_handle(path, effective_norm(config.data.features, config.data.feature_norm),
                          stored_feature_dtype(config), meta,
                          learnable=bool(learnable_dim(config.data.features)), task=config.task)
    resolve_hidden(config, handle.num_classes)
    if config.task == "link":  # the pairs each worker scores, written next to the store
        handle = dataclasses.replace(handle, shared=str(link_folder(path)))
    handle = dataclasses.replace(handle, **strategy.prepare_partitions(config, handle, cache))
    if sc.partitions:  # a store the user gave; the cache's stores were written from checked graphs
        check_store_node_data(path, meta)
    return handle


def _cached_store(config: RunConfig, cache: Path, parts: int) -> tuple[Path, dict]:
    """The cache's store for the run's dataset, partitioner, balance, parts and seed; written when missing."""
    from graphscale.partition.store import check_partition_store

    sc = config.strategy
    spec = canonical_spec(config.data.dataset)
    fields = {"kind": "store", "dataset": spec, "files": _fingerprint(spec), "partitioner": sc.partitioner,
              "balance": sc.balance, "parts": parts, "seed": config.seed, **_feature_fields(config),
              **({"halo_hops": sc.halo_hops} if sc.halo_hops != 1 else {}), **_link_fields(config)}
    digest, name = _key(fields)
    path = cache / "stores" / name
    with writing(cache, digest):
        with contextlib.suppress(FileNotFoundError, ValueError):
            meta = check_partition_store(path)
            if config.task != "link" or is_link_folder(link_folder(path)):
                return path, meta
        build_vertex_partitioner(sc.partitioner, sc.balance)  # a bad name fails before the dataset loads
        from graphscale.data.formats import read_graph_meta

        raw = {"kind": "graph", "dataset": spec, "files": fields["files"], "feature_norm": "none", "dtype": None,
               **_feature_fields(config)}  # stores hold the raw features: workers normalise their rows
        folder = _training_dir(config, cache, spec, "none", None, raw)
        nodes = read_graph_meta(folder)["num_nodes"]
        split = _link_split(config, folder)
        with setup_step(config, f"partitioning {nodes:,} vertices into {parts} parts ({sc.partitioner}) "
                                f"and writing the partition store"):
            meta = write_training_store(folder if split is None else split.message_graph, path, parts,
                                        sc.partitioner, config.seed, sc.balance, spec, extra={"cache_key": fields},
                                        halo_hops=sc.halo_hops, host_memory=config.host_memory)
            if split is not None:  # the one on-disk split: graph-parallel reads its part, model-averaging all
                write_link_parts(split, store_owner(path), parts, link_folder(path))
        return path, meta


def _link_fields(config: RunConfig) -> dict:
    """What ``--task link`` adds to a store's cache key: the split (its seed is the key's ``seed``)."""
    return {"task": "link", "link_split": list(config.link_split)} if config.task == "link" else {}


def _link_split(config: RunConfig, graph: Graph | Path):
    """``--task link``: the split of ``graph`` (a graph directory is memory-mapped) that ``single`` draws, whose
    message-passing graph the run partitions (:mod:`graphscale.tasks.link_store`); ``None`` otherwise."""
    if config.task != "link":
        return None
    from graphscale.data.formats import load_graph_dir
    from graphscale.registry import STRATEGIES
    from graphscale.tasks.split import split_edges

    split = split_edges(graph if isinstance(graph, Graph) else load_graph_dir(graph), config.link_split, config.seed)
    if (split.neg_pairs or split.neg_tails) and not STRATEGIES.get(config.strategy.name).link_given_negatives:
        able = [n for n in STRATEGIES.names() if STRATEGIES.get(n).link_given_negatives
                and not STRATEGIES.get(n).link_refusal(config)]
        raise ValueError(f"--task link: strategy {config.strategy.name!r} scores every split against the keyed "
                         f"candidates it draws, not the given split's own negatives of {config.data.dataset!r}; "
                         f"strategies that score them: {', '.join(able)}")
    return split


def _dataset_bytes(config: RunConfig, cache: Path) -> int:
    """``S`` of the run's dataset (:func:`graphscale.partition.allocation.data_bytes`), kept in the cache so the
    dataset is loaded at most once for it."""
    from graphscale.data.formats import write_json_atomic
    from graphscale.partition.allocation import data_bytes

    spec = canonical_spec(config.data.dataset)
    digest, name = _key({"kind": "size", "dataset": spec, "files": _fingerprint(spec), **_feature_fields(config)})
    path = cache / "sizes" / f"{name}.json"
    with writing(cache, digest):
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
            return int(json.loads(path.read_text())["data_bytes"])
        from graphscale.data.formats import read_graph_meta
        from graphscale.data.training_dir import feature_width

        meta = read_graph_meta(dataset_dir(config, cache, spec))
        features = feature_width(config.data.features, meta["num_features"], meta["num_nodes"])
        size = data_bytes(meta["num_nodes"], meta["num_edges"], features, getattr(torch, config.dtype).itemsize)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"dataset": spec, "data_bytes": size})
        return size


def _host_shared(config: RunConfig, cache: Path, strategy) -> DataHandle:
    from graphscale.data.formats import load_graph_dir

    spec = canonical_spec(config.data.dataset)
    fields = {"kind": "graph", "dataset": spec, "files": _fingerprint(spec),
              "feature_norm": config.data.feature_norm, "dtype": config.dtype, **_feature_fields(config)}
    path = _training_dir(config, cache, spec, config.data.feature_norm, config.dtype, fields)
    if config.task == "link" and strategy.link_message_graph:  # the split's message graph, its pairs beside it
        fields = {**fields, **_link_fields(config)}
        path = _link_graph_dir(config, cache, path, fields)
    graph = load_graph_dir(path)
    summary = {**graph.summary(), "name": graph.name}
    resolve_hidden(config, int(summary["classes"]))  # before the shared plan, which may read the width
    return DataHandle(HOST_SHARED, summary, path=str(path), dtype=config.dtype,
                      **_strategy_data(graph, fields, config, cache, strategy, folder=path))


def _link_graph_dir(config: RunConfig, cache: Path, source: Path, fields: dict) -> Path:
    """``--task link`` on a host-shared strategy that reads the split's message graph
    (``Strategy.link_message_graph``): the graph directory of that graph, drawn from the training graph directory
    ``source`` as ``single`` draws it, with all the pairs in one part of the link folder beside it
    (:mod:`graphscale.tasks.link_store`), written once under the key ``fields``."""
    from graphscale.data.formats import is_graph_dir, save_graph_dir

    digest, name = _key({**fields, "kind": "link-graph"})
    path = cache / "graphs" / name
    with writing(cache, digest):
        if not (is_graph_dir(path) and is_link_folder(link_folder(path))):
            split = _link_split(config, source)
            with setup_step(config, "writing the link split's message-passing graph directory"):
                save_graph_dir(split.message_graph, path, overwrite=True)
                write_link_parts(split, torch.zeros(split.num_nodes, dtype=torch.int64), 1, link_folder(path))
    return path


def _strategy_data(graph: Graph, fields: dict, config: RunConfig, cache: Path, strategy,
                   folder: Path | None = None) -> dict:
    """What ``strategy`` prepares for the workers of a host-shared run (or of an in-memory graph's run) on
    ``graph``, whose cache key is ``fields``: the vertex partition into ``--workers`` parts
    (``Strategy.needs_vertex_partition``, more than one worker) and the shared folder of
    ``Strategy.prepare_shared`` (``Strategy.shared_data_key``), written into ``cache`` once per key. ``folder``:
    the graph directory ``graph`` was mapped from, which a vertex partition reads in chunks.

    Returns:
        the handle's fields: ``owner_path``, ``owner_parts`` and ``shared`` (those prepared).
    """
    from graphscale.data.formats import replace_dir, temp_sibling

    sc = config.strategy
    out: dict = {}
    owner, owner_fields = None, fields
    if strategy.needs_vertex_partition(config) and sc.workers > 1:
        owner_fields = {**fields, "kind": "owner", "partitioner": sc.partitioner, "balance": sc.balance,
                        "parts": sc.workers, "seed": config.seed}
        owner_digest, owner_name = _key(owner_fields)
        owner_path = cache / "owners" / f"{owner_name}.npy"
        with writing(cache, owner_digest):
            if not owner_path.is_file():
                with setup_step(config, f"partitioning {graph.num_nodes:,} vertices into {sc.workers} parts "
                                        f"({sc.partitioner})"):
                    if folder is not None:  # read in chunks: O(|V|) memory (METIS checks --host-memory first)
                        from graphscale.partition.build import partition_graph_dir

                        owner = torch.from_numpy(partition_graph_dir(folder, sc.partitioner, sc.workers,
                                                                     seed=config.seed, balance=sc.balance,
                                                                     host_memory=config.host_memory or None))
                    else:
                        owner = build_vertex_partitioner(sc.partitioner, sc.balance).partition(graph, sc.workers,
                                                                                              seed=config.seed)
                owner_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = owner_path.with_name(f".{owner_path.name}.tmp-{os.getpid()}.npy")
                np.save(tmp, owner.numpy().astype(np.int64))
                os.replace(tmp, owner_path)
        out.update(owner_path=str(owner_path), owner_parts=sc.workers)
    shared_key = strategy.shared_data_key(config)
    if shared_key is None:
        return out
    # every prepare_shared may read the partitioner, its balance, the worker count and the seed (pipeline's chunks,
    # offload's one-worker layout), whatever the worker count: all four are in the key ("key": 2 retires the
    # folders of the keys that lacked them)
    shared_fields = {**owner_fields, "kind": f"shared:{sc.name}", "partitioner": sc.partitioner,
                     "balance": sc.balance, "workers": sc.workers, "seed": config.seed, "key": 2, **shared_key}
    digest, name = _key(shared_fields)
    folder = cache / "shared" / name
    with writing(cache, digest):
        if not (folder / ".complete").is_file():
            if owner is None and "owner_path" in out:
                owner = torch.from_numpy(np.load(out["owner_path"]).astype(np.int64))
            elif owner is None and strategy.needs_vertex_partition(config):  # one worker: one part
                owner = torch.zeros(graph.num_nodes, dtype=torch.int64)
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_sibling(folder, "tmp")
            tmp.mkdir()
            try:
                strategy.prepare_shared(graph, owner, config, tmp)
                (tmp / ".complete").write_text(json.dumps(shared_fields))
                replace_dir(tmp, folder)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    out["shared"] = str(folder)
    return out


def prepare_graph(graph: Graph, config: RunConfig, cache_dir: str | Path | None = None) -> DataHandle:
    """The handle a run of ``config`` on the in-memory ``graph`` gives its workers, prepared here, before any worker
    starts, by the path :func:`prepare_data` takes for a dataset: tests and Python callers that hand a strategy a
    graph object use it. (A worker that builds its graph itself may call it too: every worker computes the same key,
    one prepares under the cache's file lock, the others wait for it and read the same folder.)

    The graph is used as it is (no normalisation, features in their dtype). ``memory`` and ``host-shared``
    strategies get an in-memory handle on it carrying what the strategy prepares (:func:`_strategy_data`: the vertex
    partition, the shared folder), written into ``cache_dir`` (default: the run's cache directory) under a key that
    holds a content hash of the graph; ``partition-local`` strategies get a partition store of it written there
    (raw features as given: ``feature_norm`` ``none``), checked by the strategy as :func:`prepare_data` checks it.

    Raises:
        ValueError: an unwritable cache directory, a partition the strategy cannot use (as :func:`prepare_data`).
    """
    from graphscale.data.convert import graph_digest
    from graphscale.registry import STRATEGIES

    cls = STRATEGIES.get(config.strategy.name)
    handle = DataHandle.in_memory(graph)
    if cls.data_view == MEMORY:
        return handle
    cache = Path(cache_dir) if cache_dir is not None else resolve_cache_dir(config)
    cache.mkdir(parents=True, exist_ok=True)
    fields = {"kind": "graph", "dataset": f"memory:{graph.name}", "digest": graph_digest(graph)}
    if cls.data_view == HOST_SHARED:
        return dataclasses.replace(handle, **_strategy_data(graph, fields, config, cache, cls))
    sc = config.strategy
    parts = cls.store_parts(config, lambda: _graph_bytes(graph))
    fields = {**fields, "kind": "store", "partitioner": sc.partitioner, "balance": sc.balance, "parts": parts,
              "seed": config.seed, **({"halo_hops": sc.halo_hops} if sc.halo_hops != 1 else {}),
              **_link_fields(config)}
    digest, name = _key(fields)
    path = cache / "stores" / name
    with writing(cache, digest):
        from graphscale.partition.store import check_partition_store

        try:
            meta = check_partition_store(path)
            if config.task == "link" and not is_link_folder(link_folder(path)):
                raise FileNotFoundError(link_folder(path))
        except (FileNotFoundError, ValueError):
            split = _link_split(config, graph)
            meta = write_training_store(graph if split is None else split.message_graph, path, parts,
                                        sc.partitioner, config.seed, sc.balance, extra={"cache_key": fields},
                                        halo_hops=sc.halo_hops)
            if split is not None:
                write_link_parts(split, store_owner(path), parts, link_folder(path))
    store = store_handle(path, "none", handle.dtype, meta)
    if config.task == "link":
        store = dataclasses.replace(store, shared=str(link_folder(path)))
    return dataclasses.replace(store, **cls.prepare_partitions(config, store, cache))


def _graph_bytes(graph: Graph) -> int:
    """``S`` of an in-memory graph (:func:`graphscale.partition.allocation.data_bytes`)."""
    from graphscale.partition.allocation import data_bytes

    features = 0 if graph.x is None else graph.x.shape[1]
    itemsize = 4 if graph.x is None else graph.x.element_size()
    return data_bytes(graph.num_nodes, graph.num_edges, features, itemsize)


def input_dataset(graph: Graph, config: RunConfig) -> str:
    """The dataset spec of an in-memory graph (the Python API's ``data``: a ``Graph``, a PyG ``Data``, an OGB
    dataset, converted by :mod:`graphscale.data.convert`): ``graphdir:CACHE/inputs/NAME-DIGEST``, the graph written
    there once as a graph directory (file-locked, atomic), keyed by a hash of its content.

    The run then reads it as ``--dataset graphdir:DIR`` does, whatever its strategy: ``single`` loads it, the
    host-shared strategies derive their graph directory from it and the partition-local ones their store, and a
    later run with the same data reuses all of them (the directory, hence its files' size and modification time,
    never changes).
    """
    from graphscale.data.convert import graph_digest
    from graphscale.data.formats import is_graph_dir, save_graph_dir
    from graphscale.data.link_pairs import PAIRS_KEY, REFERENCE_KEY, pairs_digest, save_pairs

    cache = resolve_cache_dir(config)
    digest = graph_digest(graph)[:20]
    pairs = graph.meta.get(PAIRS_KEY)
    if pairs is not None:  # a given link split: in a file next to the directory, which names it in its meta
        digest = hashlib.sha256(f"{digest}\0{pairs_digest(pairs)}".encode()).hexdigest()[:20]
    path = cache / "inputs" / f"{re.sub(r'[^A-Za-z0-9_.=,-]+', '_', graph.name)[:48]}-{digest}"
    with writing(cache, f"input-{digest}"):
        if not is_graph_dir(path):
            with setup_step(config, f"writing {graph.name} ({graph.num_nodes:,} nodes) to {path}"):
                path.parent.mkdir(parents=True, exist_ok=True)
                if pairs is not None:
                    file = save_pairs(pairs, path.with_name(path.name + ".link-split.npz"))
                    meta = {k: v for k, v in graph.meta.items() if k != PAIRS_KEY}
                    graph = dataclasses.replace(graph, meta={**meta, REFERENCE_KEY: f"npz:{file}"})
                save_graph_dir(graph, path, overwrite=True)
    return f"graphdir:{path}"


def prepare_data(config: RunConfig) -> DataHandle:
    """Write (or find) what the run's strategy reads and return the handle its workers get (module docstring).

    Resolves an empty ``config.data.dataset`` in place (the store's dataset, else ``cora``), and an unset
    ``--hidden`` from the dataset's class count (:func:`~graphscale.config.resolve_hidden`), before anything that
    reads the width is prepared.

    Raises:
        ValueError: a bad store, a store that does not fit ``--workers`` or ``--dataset``, an untrainable
            dataset (also non-finite features, labels out of range), an unwritable cache directory.
    """
    from graphscale.registry import STRATEGIES

    cls = STRATEGIES.get(config.strategy.name)
    view = cls.data_view_for(config)
    if view == PARTITION_LOCAL and config.strategy.partitions:
        return _partition_local(config, None, cls)
    config.data.dataset = config.data.dataset or DEFAULT_DATASET
    if view == MEMORY:
        dtype = stored_feature_dtype(config)  # --feature-dtype bfloat16: the graph holds its features so
        handle = DataHandle.in_memory(load_training_graph(config.data.dataset, config.data.feature_norm,
                                                          dtype, config.data.features, config.seed), dtype=dtype)
        resolve_hidden(config, handle.num_classes)
        return handle
    cache = resolve_cache_dir(config)
    if view == PARTITION_LOCAL:
        return _partition_local(config, cache, cls)
    return _host_shared(config, cache, cls)


def host_shared_data(config: RunConfig, strategy=None) -> DataHandle:
    """The host-shared handle of ``config``'s dataset (the cache's graph directory, structure memory-mapped, and
    ``strategy``'s shared plan; default: the run's strategy), whatever view the strategy trains on: how
    ``graphscale advise`` prices a ``single`` run without loading the graph into memory."""
    from graphscale.registry import STRATEGIES

    cls = strategy if strategy is not None else STRATEGIES.get(config.strategy.name)
    return _host_shared(config, resolve_cache_dir(config), cls)

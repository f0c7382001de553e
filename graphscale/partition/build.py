"""Partitioners built from their command-line form, ``NAME[:key=value,...]`` (``--method``, ``--partitioner``),
and the node arrays a partition store copies: what ``graphscale partition``, the run's preparation and the
strategies that partition their chunks share; a graph directory partitioned and stored in bounded memory
(:func:`partition_graph_dir`, :func:`write_graph_dir_store`)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import numpy as np

#: modules whose import registers the streaming partitioners (besides registry's built-ins)
PARTITIONER_MODULES = ("graphscale.partition.vertex_stream", "graphscale.partition.edge_stream",
                       "graphscale.partition.twops", "graphscale.partition.spring")


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_method(text: str) -> tuple[str, dict]:
    """``"NAME[:key=value,...]"`` -> ``(name, options)``; values become bool / int / float / str."""
    name, _, rest = text.strip().partition(":")
    options: dict = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ValueError(f"--method {text!r}: malformed option {item!r}; expected key=value")
        options[key.strip()] = _parse_value(value.strip())
    return name.strip().lower(), options


def build_partitioner(text: str, option: str = "--method", training: bool = False, **extra):
    """A partitioner instance from a ``--method`` string (see :func:`parse_method`).

    Args:
        text: ``NAME[:key=value,...]``.
        option: the command-line option ``text`` came from (for messages).
        training: the partition is for training (a store, a strategy's chunks): the class's
            ``training_defaults`` fill the options not given (under their own name or an ``aliases`` name).
        **extra: more constructor options (e.g. ``balance`` from ``--balance``), checked like the others.

    Raises:
        KeyError: unknown name (the message lists the registered ones).
        ValueError: an option the partitioner does not take (the message lists those it does) or a bad value.
    """
    from graphscale.registry import PARTITIONERS

    for module in PARTITIONER_MODULES:
        importlib.import_module(module)
    name, options = parse_method(text)
    options.update(extra)
    cls = PARTITIONERS.get(name)
    if training:
        given = set(options) | {getattr(cls, "aliases", {}).get(k, k) for k in options}
        options = {**{k: v for k, v in getattr(cls, "training_defaults", {}).items() if k not in given}, **options}
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"{option} {text!r}: {name} has no option {', '.join(unknown)}; "
                         f"it accepts {', '.join(accepted) or 'no options'}")
    parameters = inspect.signature(cls.__init__).parameters
    for key, value in options.items():
        _check_option_type(text, option, name, key, value, parameters[key])
    return cls(**options), name, options


def _check_option_type(text: str, option: str, name: str, key: str, value, parameter: inspect.Parameter) -> None:
    """A partitioner option's value has the type its constructor declares (``int``, ``float``, ``bool``, ``str``):
    ``metis:ufactor=abc`` is refused here, naming the option, not later by a bare ``int()``."""
    hint = parameter.annotation if isinstance(parameter.annotation, str) else getattr(parameter.annotation,
                                                                                      "__name__", "")
    kinds = {part.strip() for part in str(hint).split("|")} - {"None"}
    if not kinds or "str" in kinds or kinds - {"int", "float", "bool"}:
        return  # a string, or a type this check does not know
    ok = (isinstance(value, bool) if kinds == {"bool"} else
          (isinstance(value, int) and not isinstance(value, bool)) if kinds == {"int"} else
          isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        expected = {"bool": "true or false", "int": "an integer"}.get(next(iter(kinds)) if len(kinds) == 1 else "",
                                                                      "a number")
        raise ValueError(f"{option} {text!r}: {name} option {key} must be {expected}, got {value!r}")


def build_vertex_partitioner(text: str, balance: str = ""):
    """A vertex partitioner from ``--partitioner`` (``NAME[:key=value,...]``) and ``--balance``.

    Raises:
        ValueError: ``--balance`` given for a partitioner that does not balance by weights, or a bad option.
        KeyError: unknown partitioner name (the message lists them).
    """
    return build_partitioner(text, "--partitioner", training=True, **({"balance": balance} if balance else {}))[0]


def node_data_of(graph, no_features: bool = False, folder: str | Path | None = None) -> dict:
    """The node arrays to copy into the store: ``.npy`` paths when the graph was read from the graph directory
    ``folder`` (each chunk of rows is then read through a fresh memory map, so memory stays bounded), else the
    graph's tensors (multi-label labels as their ``[N, C]`` matrix)."""
    if graph is None:
        return {}
    out = {}
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        if getattr(graph, key) is None or (key == "x" and no_features):
            continue
        file = None if folder is None else Path(folder) / f"{key}.npy"
        out[key] = file if file is not None and file.is_file() else getattr(graph, key)
    return out


def partition_graph_dir(folder: str | Path, partitioner: str, num_parts: int, *, seed: int = 0, balance: str = "",
                        host_memory: int | str | None = None, chunk_edges: int | None = None) -> np.ndarray:
    """Owner array (int64 ``[N]``) of the graph directory ``folder`` by ``partitioner`` (``NAME[:key=value,...]``,
    training defaults, ``--balance``), reading its CSR in chunks of about ``chunk_edges`` records: O(|V|) memory
    plus one chunk for the streaming partitioners (``None``: the edge stream's default chunk);
    METIS checks its estimate against ``host_memory`` (``None``: what the machine can spare) first.

    Raises:
        ValueError / KeyError: as :func:`build_vertex_partitioner`; METIS that will not fit (one line).
    """
    from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
    from graphscale.partition.csr_source import GraphEdges

    chunk_edges = DEFAULT_CHUNK_EDGES if chunk_edges is None else chunk_edges
    vertex_partitioner = build_vertex_partitioner(partitioner, balance)
    vertex_partitioner.host_memory = host_memory
    csr = GraphEdges.from_dir(folder)
    if vertex_partitioner.name != "metis":  # METIS holds the graph in memory and checks its own estimate
        chunk_edges = _budget_chunk(csr, chunk_edges, host_memory, vertex_partitioner.name)
    return vertex_partitioner.partition_csr(csr, num_parts, seed, chunk_edges).numpy()


def _budget_chunk(csr, chunk_edges: int, host_memory: int | str | None, method: str,
                  feature_chunk_bytes: int | None = None) -> int:
    """The record chunk that keeps a streaming pass over ``csr`` within ``host_memory``, the smallest where none
    does (a training run's partition: :func:`~graphscale.partition.stream_memory.plan_chunk_edges`)."""
    from graphscale.metrics.host_memory import resolve_host_memory
    from graphscale.partition.store_writer import DEFAULT_FEATURE_CHUNK_BYTES
    from graphscale.partition.stream_memory import plan_chunk_edges

    feature_chunk_bytes = DEFAULT_FEATURE_CHUNK_BYTES if feature_chunk_bytes is None else feature_chunk_bytes
    return plan_chunk_edges(csr.num_vertices, csr.num_edges, chunk_edges, resolve_host_memory(host_memory),
                            feature_chunk_bytes, method, refuse=False)


def write_graph_dir_store(folder: str | Path, out: str | Path, owner, num_parts: int, *, no_features: bool = False,
                          host_memory: int | str | None = None, node_data: str = "copy", **options):
    """Write the partition store of the graph directory ``folder`` under ``owner``, reading its records and node
    rows from the files in chunks (O(|V|) memory plus ``chunk_edges`` / ``feature_chunk_bytes`` buffers; the
    record chunk shrunk to keep within ``host_memory``, ``None``: what the machine can spare).

    ``node_data``: ``copy`` (every part holds copies of its rows, the default) or ``reference`` (the store records
    ``folder`` and its parts read their rows from it: :mod:`graphscale.partition.store_base`).

    ``options`` go to :func:`~graphscale.partition.store_writer.write_partition_store` (``halo_hops``, ``method``,
    ``params``, ``chunk_edges``, ...); returns its :class:`~graphscale.partition.store_writer.StoreSummary`.
    """
    from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
    from graphscale.partition.csr_source import GraphEdges
    from graphscale.partition.store_base import NODE_DATA_MODES
    from graphscale.partition.store_writer import write_partition_store

    if node_data not in NODE_DATA_MODES:
        raise ValueError(f"node_data must be one of {', '.join(NODE_DATA_MODES)}, got {node_data!r}")
    csr = GraphEdges.from_dir(folder)
    graph = csr.graph
    options["chunk_edges"] = _budget_chunk(csr, options.get("chunk_edges", DEFAULT_CHUNK_EDGES), host_memory,
                                           options.get("method", "the store writer"),
                                           options.get("feature_chunk_bytes"))
    arrays = node_data_of(graph, no_features, folder)
    options.setdefault("num_classes", graph.num_classes if "y" in arrays else None)
    return write_partition_store(out, csr, owner, num_parts, node_data=arrays,
                                 node_base=folder if node_data == "reference" else None, **options)

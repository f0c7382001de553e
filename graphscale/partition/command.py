"""``graphscale partition``: partition a dataset or a bare edge stream into a partition store.

Example::

    graphscale partition --dataset cora --method spring --parts 4 --out runs/cora-spring-4
    graphscale partition --dataset graph.e32 --method hdrf --parts 8 --out runs/g-hdrf-8
    graphscale partition --dataset sbm:nodes=100000 --method spring:merge=code,beta=1.1 --parts 16 --out DIR

``--method`` is a registered partitioner name, optionally followed by
``:key=value,...`` constructor options (``spring:merge=code``,
``2ps-l:remaining=hash``, ``hdrf:lam=1.1``, ``fennel:order=random``). Edge
partitioners stream the records in chunks; vertex partitioners (``random``,
``metis``, ``ldg``, ``fennel``, ``restream``) read the graph's CSR (a bare stream
is turned into a CSR in memory first). A ``graphdir:DIR`` dataset is never loaded
whole: the streaming partitioners read its CSR files in chunks, the store writer
its records and node rows; METIS, which holds the graph in memory, first checks
its estimate against ``--host-memory``; the others keep within it by shrinking their record chunks
(:mod:`graphscale.partition.stream_memory`; a budget below their minimum is refused in one line). Its store
may reference the directory's node rows instead of copying them (``--node-data reference``:
:mod:`graphscale.partition.store_base`). The store format is in :mod:`graphscale.partition.store`;
the summary's metrics are defined in :mod:`graphscale.partition.metrics`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

from graphscale.partition.build import build_partitioner, node_data_of, parse_method


def resolve_input(dataset: str, num_vertices: int | None = None, edge_dtype: str | None = None,
                  edges: str | None = None):
    """``(graph or None, edge source, label)`` for ``--dataset`` (an edge-stream file or a dataset spec).

    With ``edges`` (an edge-stream file) the records come from that stream and the node data from the dataset,
    whose vertex count the stream must have.
    """
    from graphscale.data.datasets import load_dataset, with_training_split
    from graphscale.data.edge_stream import EdgeStream
    from graphscale.partition.streaming import GraphEdges

    if Path(dataset).is_file():
        if edges is not None:
            raise ValueError("--edges needs a dataset spec as --dataset (for the node data), not an edge-stream file")
        stream = EdgeStream(dataset, dtype=edge_dtype, num_vertices=num_vertices)
        return None, stream, f"edgestream:{dataset}"
    if num_vertices is not None:
        raise ValueError("--num-vertices applies to a bare edge-stream --dataset only")
    graph = with_training_split(load_dataset(dataset))  # a multi-label graph gets training's split
    label = graph.meta.get("source", dataset)
    if edges is None:  # a graph directory's CSR is read from its files, a chunk at a time
        return graph, GraphEdges(graph, graph_dir_of(dataset)), label
    stream = EdgeStream(edges, dtype=edge_dtype, num_vertices=graph.num_nodes)
    return graph, stream, f"{label} with records from edgestream:{edges}"


class ProgressBars:
    """Progress of every step, driven by the ``(step, done, total)`` callbacks of the partitioners and the store: a
    tqdm bar per step on a terminal; redirected (a log file), one line when a step starts and one at every tenth of
    it (as ``train``'s epochs)."""

    def __init__(self, enabled: bool = True, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled, self.tty = enabled, self.stream.isatty()
        self._bar, self._name, self._tenth = None, None, -1

    def __call__(self, name: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if not self.tty:
            if name != self._name:
                self._name, self._tenth = name, 0
                print(f"graphscale partition: {name}: started ({total:,})", file=self.stream, flush=True)
            tenth = 10 * done // total if total > 0 else 10
            if tenth > self._tenth:
                self._tenth = tenth
                print(f"graphscale partition: {name}: {done:,} / {total:,} ({100 * done / max(total, 1):.0f}%)",
                      file=self.stream, flush=True)
            return
        from tqdm import tqdm

        if name != self._name:
            self.close()
            unit = "part" if name == "write partitions" else "rec"
            self._bar = tqdm(total=total, desc=name, unit=unit, unit_scale=unit == "rec", leave=False,
                             dynamic_ncols=True)
            self._name = name
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._name = None, None


def graph_dir_of(dataset: str) -> Path | None:
    """The directory of a ``graphdir:DIR`` dataset spec, else ``None``."""
    kind, sep, arg = dataset.strip().partition(":")
    return Path(arg) if sep and kind.lower() == "graphdir" else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``graphscale partition``'s options on ``parser`` (those of a run from their declarations:
    :mod:`graphscale.flags`)."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", required=True, note="here also a bare edge-stream file")
    parser.add_argument("--method", required=True, metavar="NAME[:key=value,...]",
                        help="partitioner and its options (e.g. spring:merge=code)")
    add_declared(parser, "parts", default=None, note="here: the store this command writes, at least 1",
                 why="--workers chooses it")
    add_own(parser, "--workers", type=int,
            help="choose the number of partitions for this many workers from --device-memory (SDT-GNN's workload "
                 "allocation: one per worker when the data fits in a third of the memory, else ceil(data / (M / "
                 "3)))", differs="workers the store is sized for; no processes start")
    add_declared(parser, "device_memory", note="here: read with --workers; measured: free GPU memory, or the "
                                               "host's available memory shared by the workers")
    add_declared(parser, "halo_hops")
    parser.add_argument("--out", required=True, help="partition store directory to write")
    add_declared(parser, "seed")
    add_declared(parser, "host_memory", note="here: what METIS's memory estimate is checked against; the other "
                                             "methods shrink --chunk-edges to stay within it")
    parser.add_argument("--chunk-edges", type=int, default=1 << 22, help="records per streamed chunk (default 2^22)")
    parser.add_argument("--edges", default=None,
                        help="read the records from this edge-stream file (node data still from --dataset)")
    parser.add_argument("--num-vertices", type=int, default=None,
                        help="vertex count of a bare edge stream without sidecar (default max id + 1)")
    parser.add_argument("--edge-dtype", choices=["int32", "int64"], default=None,
                        help="dtype of a bare edge stream without sidecar or .e32/.e64 extension")
    parser.add_argument("--home-only", action="store_true",
                        help="edge partitioners: store only the home in-neighbourhoods, not the vertex-cut records")
    parser.add_argument("--no-features", action="store_true", help="do not copy x into the store")
    parser.add_argument("--node-data", choices=["copy", "reference"], default=None,
                        help="copy every part's node rows (x, y, masks) into the store, or reference them: the store "
                             "records the graph directory (a graphdir: --dataset on this machine) and its parts read "
                             "their rows from its files, saving their size on disk; the store is then refused once "
                             "that directory is moved or changed, and a worker writes the feature rows it trains on "
                             "to a private file in the cache directory while it runs (default: copy)")
    parser.add_argument("--feature-chunk-mb", type=int, default=64, help="bound on one feature copy step (MiB)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing partition store")
    add_declared(parser, "json", note="here: the summary")
    add_declared(parser, "progress", note="here: a bar per step, or a line per tenth of a step when redirected")


def partition_dataset(args: argparse.Namespace) -> dict:
    """Partition ``args.dataset`` and write the store; returns the summary (see :func:`run`).

    ``partition_seconds`` covers the partitioner alone (after the input is opened), ``store_seconds`` the store,
    ``metrics.seconds`` everything including loading the dataset.
    """
    from graphscale.data.edge_stream import edge_stream_to_graph
    from graphscale.data.specs import canonical_spec
    from graphscale.metrics.host_memory import resolve_host_memory
    from graphscale.partition.base import validate_num_parts
    from graphscale.partition.metrics import peak_rss_bytes, validate_assignment
    from graphscale.partition.store import check_store_target
    from graphscale.partition.store_writer import write_partition_store
    from graphscale.partition.stream_memory import plan_chunk_edges
    from graphscale.partition.streaming import GraphEdges

    start = time.perf_counter()
    partitioner, name, options = build_partitioner(args.method, training=True)
    partitioner.host_memory = resolve_host_memory(args.host_memory)
    if args.chunk_edges < 1 or args.feature_chunk_mb < 1:
        raise ValueError(f"--chunk-edges and --feature-chunk-mb must be >= 1, got {args.chunk_edges} and "
                         f"{args.feature_chunk_mb}")
    if args.halo_hops < 1:
        raise ValueError(f"--halo-hops must be >= 1, got {args.halo_hops}")
    if (args.parts is None) == (args.workers is None):
        raise ValueError("give --parts, or --workers (with --device-memory) to choose the partition count")
    if args.device_memory and args.workers is None:
        raise ValueError("--device-memory chooses the partition count for --workers; give --workers, not --parts")
    node_base = _node_base(args)
    graph, source, label = resolve_input(args.dataset, args.num_vertices, args.edge_dtype, args.edges)
    n = source.num_vertices
    allocation = None
    if args.workers is not None:
        allocation = allocate(args, graph, source)
        args.parts = allocation.parts
        if args.progress:
            print(f"graphscale partition: {allocation.why()}", file=sys.stderr)
    validate_num_parts(args.parts, n)
    if name != "metis":  # METIS holds the graph in memory and checks its own estimate
        args.chunk_edges = plan_chunk_edges(n, source.num_edges, args.chunk_edges, partitioner.host_memory,
                                            args.feature_chunk_mb << 20, name)
    out = Path(args.out)
    try:
        check_store_target(out, args.overwrite)
    except FileExistsError as err:
        raise ValueError(str(err)) from None
    bars = ProgressBars(args.progress)
    partition_start = time.perf_counter()
    edge_part_file = out.with_name(f".{out.name}.edge-part-{os.getpid()}.npy")
    info: dict = {}
    try:
        edge_part = None
        if getattr(partitioner, "kind", "vertex") == "edge":
            keep = not args.home_only and not partitioner.vertex_cut_is_home
            result = partitioner.run(source, args.parts, chunk_edges=args.chunk_edges, seed=args.seed,
                                     out=edge_part_file if keep else None, keep_edge_part=False, progress=bars)
            owner, edge_part, info = result.owner, result.edge_part, result.info
            info = {**info, "stream_replication_factor": result.replication_factor,
                    "passes": [{"name": s.name, "edges": s.edges, "seconds": s.seconds,
                                "edges_per_s": s.edges_per_s} for s in result.passes]}
        else:
            if graph is None:
                graph = edge_stream_to_graph(source, chunk_edges=args.chunk_edges)
            csr = source if isinstance(source, GraphEdges) else GraphEdges(graph)
            owner = partitioner.partition_csr(csr, args.parts, seed=args.seed, chunk_edges=args.chunk_edges).numpy()
        # the owners in the narrowest type (2 bytes per vertex up to 32,767 parts); the partitioner's int64 array
        # (also held by an edge partitioner's result) is not kept while the store is written
        owner, result = validate_assignment(owner, n, args.parts, "owner"), None
        partition_seconds = time.perf_counter() - partition_start
        node_data = node_data_of(graph, args.no_features, graph_dir_of(args.dataset))
        summary = write_partition_store(
            out, source, owner, args.parts, edge_part=edge_part, node_data=node_data, num_vertices=n,
            method=name, params=options, num_classes=graph.num_classes if "y" in node_data else None,
            source_name=label, chunk_edges=args.chunk_edges,
            feature_chunk_bytes=args.feature_chunk_mb << 20, overwrite=args.overwrite, progress=bars,
            halo_hops=args.halo_hops, node_base=node_base,
            extra_meta={"partitioner_info": info, "seed": args.seed, "dataset": canonical_spec(args.dataset),
                        "name": graph.name if graph is not None else Path(args.dataset).name})
    finally:
        bars.close()
        with contextlib.suppress(FileNotFoundError):
            edge_part_file.unlink()
    metrics = summary.metrics
    metrics.seconds = time.perf_counter() - start
    metrics.peak_rss_bytes = peak_rss_bytes()
    defaults = {k: v for k, v in options.items() if k not in parse_method(args.method)[1]}  # training defaults
    method = args.method + (f" ({', '.join(f'{k}={v}' for k, v in defaults.items())})" if defaults else "")
    return {"method": method, "options": options, "parts": args.parts, "dataset": label, "out": str(out),
            "partition_seconds": partition_seconds, "store_seconds": summary.seconds,
            "metrics": metrics.to_dict(), "info": info, "halo_hops": args.halo_hops,
            "node_data": "copy" if node_base is None else "reference",
            **({"allocation": {**dataclasses.asdict(allocation), "why": allocation.why()}} if allocation else {})}


def _node_base(args: argparse.Namespace) -> Path | None:
    """The graph directory whose node rows the store references (``--node-data``), or ``None`` to copy them."""
    folder = graph_dir_of(args.dataset)
    mode = getattr(args, "node_data", None) or "copy"
    if mode == "reference" and folder is None:
        raise ValueError(f"--node-data reference needs a graph directory as --dataset (graphdir:DIR, written by "
                         f"graphscale convert), got {args.dataset!r}; use --node-data copy")
    return folder if mode == "reference" else None


def allocate(args: argparse.Namespace, graph, source):
    """The partition count for ``--workers`` and ``--device-memory`` (SDT-GNN §2.5) from the input's size."""
    from graphscale.metrics.units import parse_bytes
    from graphscale.partition.allocation import choose_parts, data_bytes

    memory = parse_bytes(args.device_memory, "--device-memory") if args.device_memory else None
    x = None if graph is None or args.no_features else graph.x
    features = 0 if x is None else (x.shape[1] if x.dim() > 1 else 1)
    size = data_bytes(source.num_vertices, source.num_edges, features, 4 if x is None else x.element_size())
    return choose_parts(size, args.workers, memory)


def run(args: argparse.Namespace) -> dict:
    """Partition, write the store, print the summary (and write ``--json``, checked writable first, with ``null``
    for undefined metrics such as the training balance of a graph without a split); returns the summary."""
    from graphscale.data.output_lock import output_locks
    from graphscale.data.outputs import check_output_dir, check_output_path

    check_output_dir(args.out, "--out", through_sibling=True)  # before any work: the store is renamed into place
    if args.json:
        check_output_path(args.json, "--json")  # before the store is written, so a bad path leaves nothing
    with output_locks([("--out", args.out), ("--json", args.json)]):  # a second run naming them stops here
        return _partition_and_report(args)


def _partition_and_report(args: argparse.Namespace) -> dict:
    """:func:`run` once its outputs are checked and locked."""
    from graphscale.metrics.table import format_table
    from graphscale.metrics.units import format_bytes
    from graphscale.partition.store import read_store_meta

    summary = partition_dataset(args)
    m = summary["metrics"]
    row = {"method": summary["method"], "parts": summary["parts"], "RF": m["replication_factor"],
           "edge cut %": 100.0 * m["edge_cut_fraction"], "vertex bal": m["vertex_balance"],
           "edge bal": m["edge_balance"], "train bal": m["train_balance"],
           "partition s": summary["partition_seconds"], "store s": summary["store_seconds"],
           "total s": m["seconds"], "peak RSS": format_bytes(m["peak_rss_bytes"])}
    print(format_table([row], title=f"partitioned {summary['dataset']} "
                                    f"({m['num_vertices']:,} vertices, {m['num_edges']:,} records) -> {summary['out']}"))
    stored = read_store_meta(summary["out"])["parts"] if summary["halo_hops"] > 1 else None
    parts = [{"part": s, "inner": m["inner"][s], "halo": m["halo"][s], "records": m["records"][s],
              **({"train": m["train"][s]} if m["train"] is not None else {}),
              **({f"{summary['halo_hops']}-hop halo": stored[s]["num_halo"], "stored edges": stored[s]["num_edges"]}
                 if stored else {})} for s in range(m["num_parts"])]
    print(format_table(parts))
    if "allocation" in summary:
        print(f"partitions chosen for --workers {args.workers}: {summary['allocation']['why']}")
    if args.json:
        from graphscale.data.formats import write_json_atomic

        write_json_atomic(args.json, summary, option="--json")
    return summary

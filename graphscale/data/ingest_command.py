"""``graphscale convert``: a dataset spec written as a graph directory in bounded memory (see :mod:`.ingest`).

Example::

    graphscale convert --dataset edgelist:friendster.txt --out data/friendster
    graphscale convert --dataset ogb:downloads/ogbn_papers100M --out data/papers100M --chunk-edges 8388608
    graphscale convert --dataset graphdir:data/g20m --out data/g20m-1pct --split train=0.01,val=0.005,test=0.005

The directory is what every later step reads (``--dataset graphdir:DIR``). ``--split`` gives an existing graph
directory a new split without copying its other arrays (:mod:`graphscale.data.resplit`). A progress display shows each step (a bar
on a terminal, lines when stderr is redirected); the last line sums it up: vertices, edges, features, bytes written,
seconds and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

#: --chunk-edges' default: :data:`graphscale.data.edge_stream.DEFAULT_CHUNK_EDGES` (not imported: building the
#: parser must not import torch; a test checks the two agree)
DEFAULT_CHUNK_EDGES = 1 << 22


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``graphscale convert``'s options on ``parser``."""
    from graphscale.flags import add_declared

    add_declared(parser, "dataset", required=True, note="here: the one written as a graph directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="graph directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing graph directory at --out")
    parser.add_argument("--chunk-edges", type=int, default=DEFAULT_CHUNK_EDGES, metavar="N",
                        help="records held in memory at a time (text, feature and node rows in proportion; "
                             f"default {DEFAULT_CHUNK_EDGES})")
    parser.add_argument("--split", default="", metavar="train=F,val=F[,test=F][,seed=S]",
                        help="with --dataset graphdir:DIR: write DIR's graph with a new seeded random split (fractions "
                             "of the vertices; test defaults to the rest), its CSR, features and labels hard-linked "
                             "from DIR, not copied")
    add_declared(parser, "progress", note="here: a bar per step")


def run(args: argparse.Namespace) -> int:
    """Write ``args.dataset`` into ``args.out`` and print the one-line summary on stdout; returns 0."""
    from graphscale.data.ingest import ingest
    from graphscale.data.output_lock import output_locks
    from graphscale.data.resplit import parse_split
    from graphscale.metrics.units import format_bytes
    from graphscale.progress import StepProgress

    if args.chunk_edges < 1:
        raise ValueError(f"--chunk-edges must be a positive integer, got {args.chunk_edges}")
    split = parse_split(args.split) if args.split else None
    start = time.perf_counter()
    bars = StepProgress("convert", args.progress)
    try:
        with output_locks([("--out", args.out)]):  # a second convert naming it stops here
            out = ingest(args.dataset, Path(args.out), chunk_edges=args.chunk_edges, progress=bars,
                         overwrite=args.overwrite, split=split)
    finally:
        bars.close()
    seconds = time.perf_counter() - start
    meta = json.loads((out / "meta.json").read_text())
    files = [f.stat() for f in out.iterdir() if f.is_file()]
    written = sum(f.st_size for f in files if f.st_nlink == 1 or split is None)
    linked = sum(f.st_size for f in files) - written  # a split's files shared with the source directory
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    print(f"graphscale: converted {args.dataset} into {out}: {meta['num_nodes']:,} vertices, {meta['num_edges']:,} "
          f"edges, {meta['num_features']} features, {format_bytes(written)} written ({written} bytes)"
          f"{f', {format_bytes(linked)} linked' if linked else ''} in "
          f"{seconds:.1f} s, peak RSS {format_bytes(peak)}", flush=True)
    return 0

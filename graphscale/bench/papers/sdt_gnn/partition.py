"""``graphscale bench partition``: replication factor, peak memory, per-pass throughput and time ratios.

Suites (``--suite``, comma-separated; default ``quality,throughput``):

* **quality** (the paper's Fig. 6 analogue): replication factor ``sum_s |V_s| / |V|``
  for every ``--method`` and ``p`` in ``--parts`` on every ``--dataset``.
  Edge partitioners read the dataset's records from an edge-stream file
  (``--order natural``: CSR/destination order, ``shuffled``: a seeded random
  order); vertex partitioners (``random``, ``metis``, ``ldg``, ``fennel``) get
  the in-memory graph, and their RF applies the same 1-hop halo rule. Prints the
  RF table, vertex balance (``max/mean`` home vertices), edge balance
  (``max/mean`` in-edges of home vertices: a partition's aggregation work),
  partitioning seconds, each method's RF relative to SPRING and time relative
  to SPRING, all measured in this one run. An edge-balance table marks every
  case above ``EDGE_IMBALANCED`` (1.5: the slowest partition does over 1.5x the
  mean work, and it sets the pace of an averaging round) with ``!``, and a line
  per method flags such cases. SPRING runs with each LPT load
  (``spring:lpt=edges``, ``spring:lpt=mix``; ``spring`` alone balances vertex
  counts, as the paper does) and as a store built for training runs it
  (``spring(train)``: ``lpt=edges``, ``refine=2``), and a table puts their RF and
  balances side by side with HDRF's, with a goal line for ``spring(train)``
  against HDRF (RF at least 20% lower at HDRF's edge balance or better). The default datasets are Cora and
  four 1M-vertex power-law SBMs: two flat ones (an edge leaving its class lands
  anywhere) and two with nested communities (``levels``, see
  :mod:`graphscale.data.synthetic`), the structure real networks have.
* **throughput**: records per second of every streaming pass of every edge
  partitioner (SPRING's LPT variants share ``spring``'s passes and are skipped) on the largest quality dataset (after one warm-up read of its
  file; the fastest of ``--throughput-repeat`` runs, since other processes
  sharing the cores only ever slow a pass down).
* **memory** (Table I / Fig. 9 analogue): peak RSS of child processes (``VmHWM``
  of the child's own address space: on Linux ``ru_maxrss`` survives ``execve``
  and would report the parent's size at the fork) on ``--memory-graph``, generated once into ``--workdir`` (graph
  directory + edge stream): an import-only baseline, SPRING streaming the
  records from disk, SPRING plus writing the whole partition store (features
  split through memory maps), pymetis on the CSR loaded in memory, and pymetis
  with the features loaded too (the DistDGL / PyG analogue). METIS children run
  under ``RLIMIT_AS = --metis-limit-gb``; one that exceeds it is reported as OOM.

Example::

    graphscale bench partition --suite quality --dataset cora --dataset "sbm:nodes=100000,degree=20,features=0"
    graphscale bench partition --suite memory --memory-graph "sbm:nodes=10000000,degree=12,features=64"
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graphscale.options import int_list

DEFAULT_DATASETS = [
    "cora",
    "sbm:nodes=1000000,degree=20,features=0",
    "sbm:nodes=1000000,degree=20,classes=10000,homophily=0.9,features=0",
    "sbm:nodes=1000000,degree=20,classes=10000,levels=4,features=0",
    "sbm:nodes=1000000,degree=20,classes=1000,levels=3,homophily=0.7,features=0",
]
DEFAULT_METHODS = ["random", "metis", "ldg", "fennel", "hash", "dbh", "greedy", "hdrf", "2ps-l",
                   "2ps-l:remaining=hash", "spring", "spring:merge=code", "spring:merge=none", "spring:lpt=edges",
                   "spring:lpt=mix", "spring:lpt=edges+refine=2"]
#: SPRING as a store built for training runs it (``SpringPartitioner.training_defaults``), and its label
TRAINING_SPRING, TRAINING_LABEL = "spring:lpt=edges+refine=2", "spring(train)"
DEFAULT_MEMORY_GRAPH = "sbm:nodes=10000000,degree=12,features=64"
SUITES = ("quality", "throughput", "memory")
BASELINES = {"hdrf": "HDRF", "dbh": "DBH", "greedy": "Greedy", "2ps-l": "2PS-L"}
LOPSIDED = 1.5  # vertex balance (max / mean homes) above which a partition is flagged as lopsided
EDGE_IMBALANCED = 1.5  # edge balance (max / mean in-edges of homes: aggregation work) above which it is flagged


def _positive_int_list(text: str) -> list[int]:
    values = int_list(text)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register this benchmark's options on ``parser``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--suite", default="quality,throughput",
                        help=f"comma-separated suites out of {', '.join(SUITES)} (default quality,throughput)")
    add_declared(parser, "dataset", grid=True, default=None, note="here: of the quality suite",
                 why="cora and three 1M-vertex SBM community graphs")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help="comma-separated partitioners; options after ':' joined by '+', e.g. "
                             "spring:merge=code or 2ps-l:remaining=hash+cluster_passes=1")
    add_own(parser, "--parts", type=_positive_int_list, default=[4, 8, 16], help="partition counts (default 4,8,16)",
            differs="partition counts each partitioner is scored at (no store is written), not a store's")
    parser.add_argument("--order", choices=["natural", "shuffled"], default="natural",
                        help="record order of the streams (default natural = CSR order)")
    parser.add_argument("--chunk-edges", type=int, default=1 << 22, help="records per chunk (default 2^22)")
    add_declared(parser, "seed")
    parser.add_argument("--throughput-parts", type=int, default=8, help="p of the throughput suite (default 8)")
    parser.add_argument("--throughput-repeat", type=int, default=3,
                        help="runs per method in the throughput suite; the fastest pass times are kept (default 3)")
    parser.add_argument("--memory-graph", default=DEFAULT_MEMORY_GRAPH,
                        help=f"synthetic spec of the memory suite's graph (default {DEFAULT_MEMORY_GRAPH})")
    parser.add_argument("--memory-parts", type=int, default=4, help="p of the memory suite (default 4)")
    parser.add_argument("--metis-limit-gb", type=float, default=16.0, help="RLIMIT_AS of METIS children (GiB)")
    parser.add_argument("--child-timeout", type=int, default=3600, help="seconds per memory child (default 3600)")
    parser.add_argument("--workdir", default=None,
                        help="where streams and the memory graph go (kept, and reused when the spec matches); "
                             "default a temporary directory removed at the end")
    parser.add_argument("--plot", default=None, metavar="DIR", help="also write bar plots (PNG) into DIR")
    add_declared(parser, "json", note="here: every measured row")


def _method_spec(text: str) -> str:
    """``spring:merge=code+beta=1.1`` (bench syntax) -> ``spring:merge=code,beta=1.1`` (command syntax)."""
    return text.replace("+", ",")


def _label(method: str) -> str:
    if method == TRAINING_SPRING:
        return TRAINING_LABEL
    method = re.sub(r"^spring:lpt=(\w+)$", r"spring(lpt=\1)", method).replace("spring(lpt=vertices)", "spring")
    return method.replace("2ps-l:remaining=hash", "2ps-l(code)").replace("spring:merge=code", "spring(code)") \
        .replace("spring:merge=none", "clustering").replace("spring:merge=paper", "spring")


# ------------------------------------------------------------------- quality
def _write_stream(graph, path: Path, order: str, seed: int):
    import numpy as np

    from graphscale.data.edge_stream import graph_to_edge_stream, write_edge_stream

    if order == "natural":
        return graph_to_edge_stream(graph, path)
    src, dst = graph.indices.numpy(), graph.dst_of_edges().numpy()
    perm = np.random.default_rng(seed).permutation(src.size)
    return write_edge_stream(path, src[perm], dst[perm], num_vertices=graph.num_nodes)


def run_quality(datasets: list[str], methods: list[str], parts: list[int], workdir: Path, *, order: str,
                chunk_edges: int, seed: int) -> tuple[list[dict], dict[str, str]]:
    """One row per (dataset, p, method): RF, vertex balance, seconds; also returns dataset -> stream path."""
    import numpy as np

    from graphscale.data.datasets import load_dataset
    from graphscale.partition.build import build_partitioner
    from graphscale.partition.metrics import balance, stream_metrics
    from graphscale.testing.graphs import random_graph

    warm = random_graph(64, 4.0, seed=0)  # load every method's compiled kernels before anything is timed
    for method in methods:
        build_partitioner(_method_spec(method))[0].partition(warm, min(max(parts), 4), seed=seed)
    rows, streams = [], {}
    for index, spec in enumerate(datasets):
        graph = load_dataset(spec)
        graph.x = None
        stream = _write_stream(graph, workdir / f"quality-{index}.e32", order, seed)
        streams[spec] = str(stream.path)
        name = f"{graph.name} ({graph.num_nodes:,} v, {graph.num_edges:,} rec)"
        for p in parts:
            for method in methods:
                partitioner, _, _ = build_partitioner(_method_spec(method))
                start = time.perf_counter()
                if getattr(partitioner, "kind", "vertex") == "edge":
                    result = partitioner.run(stream, p, chunk_edges=chunk_edges, seed=seed, keep_edge_part=False)
                    seconds = time.perf_counter() - start
                    owner, rf, home_edges = result.owner, result.replication_factor, result.records_per_part
                else:
                    owner = partitioner.partition(graph, p, seed=seed).numpy()
                    seconds = time.perf_counter() - start
                    scores = stream_metrics(stream, owner, p, chunk_edges=chunk_edges)
                    rf, home_edges = scores.replication_factor, scores.records
                rows.append({"dataset": name, "p": p, "method": _label(method), "rf": rf,
                             "vertex_balance": balance(np.bincount(owner, minlength=p)),
                             "edge_balance": balance(np.asarray(home_edges)), "seconds": seconds})
                print(f"  {name} p={p} {_label(method):>15}: RF {rf:.3f}  vertex bal {rows[-1]['vertex_balance']:.2f}"
                      f"  edge bal {rows[-1]['edge_balance']:.2f}  {seconds:.2f}s", file=sys.stderr, flush=True)
        del graph
    return rows, streams


def quality_tables(rows: list[dict]) -> tuple[str, str, dict]:
    """The RF pivot table, the per-method summary and the goal numbers."""
    from graphscale.metrics.table import format_table

    methods = list(dict.fromkeys(r["method"] for r in rows))
    cases = list(dict.fromkeys((r["dataset"], r["p"]) for r in rows))
    by = {(r["dataset"], r["p"], r["method"]): r for r in rows}
    pivot = [{"dataset": d, "p": p, **{m: by[(d, p, m)]["rf"] for m in methods if (d, p, m) in by}}
             for d, p in cases]
    summary, goals = [], {}
    for m in methods:
        mine = [by[(d, p, m)] for d, p in cases if (d, p, m) in by]
        ratio = [by[(d, p, "spring")]["rf"] / r["rf"] for (d, p), r in zip(cases, mine) if (d, p, "spring") in by]
        time_ratio = [r["seconds"] / by[(d, p, "spring")]["seconds"] for (d, p), r in zip(cases, mine)
                      if (d, p, "spring") in by]
        below = sum(1 for x in ratio if x < 1)
        summary.append({"method": m, "mean RF": sum(r["rf"] for r in mine) / len(mine),
                        "spring RF below it %": 100 * (1 - sum(ratio) / len(ratio)) if ratio else float("nan"),
                        "spring lower in": f"{below}/{len(ratio)}",
                        "mean vertex bal": sum(r["vertex_balance"] for r in mine) / len(mine),
                        "worst edge bal": max(r["edge_balance"] for r in mine),
                        f"edge bal > {EDGE_IMBALANCED:g}": f"{sum(_edge_imbalanced(r) for r in mine)}/{len(mine)}",
                        "mean s": sum(r["seconds"] for r in mine) / len(mine),
                        "time / spring": sum(time_ratio) / len(time_ratio) if time_ratio else float("nan")})
        if m in BASELINES:
            lopsided = sum(1 for r in mine if r["vertex_balance"] > LOPSIDED)
            goals[BASELINES[m]] = {**summary[-1], "lopsided": f"{lopsided}/{len(mine)}"}
    return (format_table(pivot, title="replication factor sum_s |V_s| / |V| (lower is better)"),
            format_table(summary, title="per method, averaged over datasets and p (ratios against spring)"), goals)


def _edge_imbalanced(row: dict) -> bool:
    return row["edge_balance"] > EDGE_IMBALANCED


def balance_tables(rows: list[dict]) -> tuple[str, list[str]]:
    """The edge-balance pivot (``!`` after a case above ``EDGE_IMBALANCED``) and one flag line per method with one."""
    from graphscale.metrics.table import format_table

    methods = list(dict.fromkeys(r["method"] for r in rows))
    cases = list(dict.fromkeys((r["dataset"], r["p"]) for r in rows))
    by = {(r["dataset"], r["p"], r["method"]): r for r in rows}
    pivot = [{"dataset": d, "p": p, **{m: f"{by[(d, p, m)]['edge_balance']:.2f}" +
                                      ("!" if _edge_imbalanced(by[(d, p, m)]) else "")
                                      for m in methods if (d, p, m) in by}} for d, p in cases]
    flags = []
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        bad = [r for r in mine if _edge_imbalanced(r)]
        if bad:
            worst = max(bad, key=lambda r: r["edge_balance"])
            flags.append(f"EDGE IMBALANCE: {m}'s edge balance exceeds {EDGE_IMBALANCED:g} in {len(bad)}/{len(mine)} "
                         f"cases (worst {worst['edge_balance']:.2f}: {worst['dataset']}, p = {worst['p']}); its "
                         "slowest partition does that many times the mean aggregation work")
    title = (f"edge balance max / mean in-edges of home vertices (lower is better; '!' above {EDGE_IMBALANCED:g})")
    return format_table(pivot, title=title), flags


def lpt_table(rows: list[dict]) -> str | None:
    """SPRING's LPT loads side by side (RF, vertex and edge balance), with HDRF's; ``None`` with one SPRING load."""
    from graphscale.metrics.table import format_table

    spring = [m for m in dict.fromkeys(r["method"] for r in rows)
              if m in ("spring", TRAINING_LABEL) or m.startswith("spring(lpt=")]
    if len(spring) < 2:
        return None
    keep = [*spring, "hdrf"]
    cases = list(dict.fromkeys((r["dataset"], r["p"]) for r in rows))
    by = {(r["dataset"], r["p"], r["method"]): r for r in rows}
    table = []
    for d, p in cases:
        for m in keep:
            if (d, p, m) in by:
                r = by[(d, p, m)]
                table.append({"dataset": d, "p": p, "method": m, "RF": r["rf"], "vertex bal": r["vertex_balance"],
                              "edge bal": r["edge_balance"], "flag": "edge!" if _edge_imbalanced(r) else ""})
    return format_table(table, title="SPRING's LPT load: vertices (the paper), edges (cluster volume), mix "
                                     f"(|C|/|V| + vol(C)/M); {TRAINING_LABEL}: a training store's (lpt=edges, "
                                     "refine=2); HDRF for reference")


def training_goal(rows: list[dict]) -> str | None:
    """The goal line of a training store's SPRING against HDRF: mean RF below HDRF's over the cases both ran, and
    the worst edge balance of each; ``None`` without both."""
    by = {(r["dataset"], r["p"], r["method"]): r for r in rows}
    cases = [(d, p) for d, p, m in by if m == TRAINING_LABEL and (d, p, "hdrf") in by]
    if not cases:
        return None
    below = [100 * (1 - by[(d, p, TRAINING_LABEL)]["rf"] / by[(d, p, "hdrf")]["rf"]) for d, p in cases]
    mine = max(by[(d, p, TRAINING_LABEL)]["edge_balance"] for d, p in cases)
    theirs = max(by[(d, p, "hdrf")]["edge_balance"] for d, p in cases)
    return (f"a training store's SPRING ({TRAINING_LABEL}: lpt=edges, refine=2): RF {sum(below) / len(below):.1f}% "
            f"below HDRF's on average over {len(cases)} cases (per case {', '.join(f'{b:.1f}' for b in below)}); "
            f"worst edge balance {mine:.2f} against HDRF's {theirs:.2f} (goal: at least 20% at HDRF's edge "
            "balance or better)")


# ---------------------------------------------------------------- throughput
def run_throughput(stream_path: str, methods: list[str], p: int, chunk_edges: int, seed: int,
                   repeat: int = 1) -> list[dict]:
    """Records per second of every pass of every edge partitioner on one stream (best of ``repeat`` runs)."""
    from graphscale.data.edge_stream import EdgeStream
    from graphscale.partition.build import build_partitioner

    stream = EdgeStream(stream_path)
    for _ in stream.chunks(chunk_edges):  # warm the page cache: measure the passes, not the disk
        pass
    rows = []
    for method in methods:
        partitioner, _, options = build_partitioner(_method_spec(method))
        if getattr(partitioner, "kind", "vertex") != "edge":
            continue
        if options.get("lpt", "vertices") != "vertices" and "spring" in methods:
            continue  # the LPT load changes no streaming pass: spring's rows time them
        best: dict[str, float] = {}
        for _ in range(max(1, repeat)):
            result = partitioner.run(stream, p, chunk_edges=chunk_edges, seed=seed, keep_edge_part=False)
            for s in result.passes:
                best[s.name] = min(best.get(s.name, float("inf")), s.seconds)
        for name, seconds in best.items():
            rows.append({"method": _label(method), "pass": name, "records": stream.num_edges, "seconds": seconds,
                         "M records/s": stream.num_edges / seconds / 1e6})
    return rows


# -------------------------------------------------------------------- memory
CHILD = "from graphscale.bench.papers.sdt_gnn.partition import child_main; child_main()"


def _vm_hwm() -> int:
    """``VmHWM`` (peak RSS of this address space; unlike ``ru_maxrss`` it does not inherit the parent's size)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("/proc/self/status has no VmHWM line")


def child_main() -> None:
    """Entry point of a memory-suite child: ``python -c CHILD JSON``; prints one JSON line."""
    job = json.loads(sys.argv[1])
    kind, start = job["kind"], time.perf_counter()
    out: dict = {}
    if kind.startswith("metis"):
        limit = int(job["limit_gb"] * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        import numpy as np
        import pymetis

        if kind != "metis-baseline":
            folder = Path(job["graph_dir"])
            xadj, adjncy = np.load(folder / "indptr.npy"), np.load(folder / "indices.npy")
            node_data = []  # held for the whole run, as DistDGL / PyG hold the features while partitioning
            if kind == "metis-features":
                node_data = [np.load(folder / f"{k}.npy") for k in ("x", "y", "train_mask", "val_mask", "test_mask")
                             if (folder / f"{k}.npy").exists()]
            out["feature_bytes"] = int(sum(a.nbytes for a in node_data))
            held = xadj.nbytes + adjncy.nbytes + out["feature_bytes"]
            print(f"LOADED {held} bytes", file=sys.stderr, flush=True)
            result = pymetis.part_graph(job["parts"], xadj=xadj, adjncy=adjncy,
                                        options=pymetis.Options(seed=job["seed"]))
            parts = result[1] if isinstance(result, tuple) else result.vertex_part
            np.save(job["owner_out"], np.asarray(parts, dtype=np.int32))
            out["node_data_arrays"] = len(node_data)
    else:
        from graphscale.data.edge_stream import EdgeStream
        from graphscale.partition import command, metrics, spring  # noqa: F401 - the baseline imports these

        if kind == "baseline":  # load the compiled kernels too: what remains of a run is its data
            spring.SpringPartitioner().run(job["tiny_stream"], 1)
        elif kind == "spring":
            result = spring.SpringPartitioner(merge=job["merge"]).run(
                EdgeStream(job["stream"]), job["parts"], chunk_edges=job["chunk_edges"], keep_edge_part=False)
            out.update(rf=result.replication_factor, passes=[(s.name, s.edges, s.seconds) for s in result.passes],
                       clusters=result.info["clusters_merged"])
        elif kind == "spring-store":
            parser = argparse.ArgumentParser()
            command.add_arguments(parser)
            args = parser.parse_args(["--dataset", f"graphdir:{job['graph_dir']}", "--edges", job["stream"],
                                      "--method", "spring", "--parts", str(job["parts"]), "--out", job["store_out"],
                                      "--chunk-edges", str(job["chunk_edges"]), "--overwrite", "--no-progress"])
            summary = command.partition_dataset(args)
            out.update(rf=summary["metrics"]["replication_factor"], store_seconds=summary["store_seconds"])
    out.update(peak_rss=_vm_hwm(), ru_maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               seconds=time.perf_counter() - start)
    print(json.dumps(out))


def _run_child(job: dict, timeout: int) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True, text=True, check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode != 0:
        err = proc.stderr or ""
        tail = err.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        oom = any(s in err for s in ("MemoryError", "bad_alloc", "Memory allocation failed")) \
            or proc.returncode in (-9, 137)
        out: dict = {"error": ("OOM" if oom else "failed: " + tail[0])}
        used = re.search(r"Current memory used:\s+(\d+) bytes", err)
        loaded = re.search(r"LOADED (\d+) bytes", err)
        if used:  # METIS's own count of what it held when an allocation failed, plus the arrays loaded before
            held, before = int(used.group(1)), int(loaded.group(1)) if loaded else 0
            out["error"] += (f" (METIS held {held / (1 << 30):.2f} GiB when an allocation failed, on top of "
                             f"{before / (1 << 30):.2f} GiB of loaded arrays)")
            out["lower_bound"] = held + before
        return out
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _memory_graph(spec: str, workdir: Path) -> tuple[Path, Path]:
    from graphscale.data.synthetic import generate_to_dir

    folder, stream = workdir / "memory-graph", workdir / "memory-graph.e32"
    marker = workdir / "memory-graph.spec"
    if not (marker.exists() and marker.read_text() == spec and folder.is_dir() and stream.is_file()):
        print(f"  generating {spec} into {workdir} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        generate_to_dir(spec, folder, edge_stream=stream)
        marker.write_text(spec)
        print(f"  generated in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return folder, stream


def run_memory(spec: str, workdir: Path, *, parts: int, chunk_edges: int, seed: int, limit_gb: float,
               timeout: int) -> tuple[list[dict], dict]:
    """Peak RSS of each child on the memory graph; returns the rows and the graph's sizes."""
    import numpy as np

    from graphscale.data.edge_stream import EdgeStream, write_edge_stream
    from graphscale.partition.metrics import stream_metrics

    folder, stream = _memory_graph(spec, workdir)
    meta = json.loads((folder / "meta.json").read_text())
    sizes = {"nodes": meta["num_nodes"], "records": meta["num_edges"], "stream_bytes": stream.stat().st_size,
             "csr_bytes": sum((folder / f).stat().st_size for f in ("indptr.npy", "indices.npy")),
             "node_data_bytes": sum(f.stat().st_size for f in folder.glob("*.npy")
                                    if f.name not in ("indptr.npy", "indices.npy"))}
    tiny = write_edge_stream(workdir / "tiny.e32", [0, 1], [1, 0], num_vertices=2)
    common = {"parts": parts, "seed": seed, "chunk_edges": chunk_edges, "stream": str(stream),
              "tiny_stream": str(tiny.path),
              "graph_dir": str(folder), "limit_gb": limit_gb, "owner_out": str(workdir / "metis-owner.npy"),
              "store_out": str(workdir / "spring-store")}
    jobs = [("baseline: imports + compiled kernels loaded", {"kind": "baseline"}),
            ("spring (paper merge), stream from disk", {"kind": "spring", "merge": "paper"}),
            ("spring (code merge), stream from disk", {"kind": "spring", "merge": "code"}),
            ("spring + whole partition store with features", {"kind": "spring-store"}),
            ("baseline: python + numpy + pymetis imports", {"kind": "metis-baseline"}),
            ("pymetis on the in-memory CSR", {"kind": "metis"}),
            ("pymetis + features loaded (DistDGL/PyG analogue)", {"kind": "metis-features"})]
    rows = []
    for label, job in jobs:
        print(f"  memory child: {label} ...", file=sys.stderr, flush=True)
        out = _run_child({**common, **job}, timeout)
        if "lower_bound" in out:
            label += f" [limit {limit_gb:g} GiB]"
        row = {"run": label, "peak RSS GiB": out.get("peak_rss", float("nan")) / (1 << 30),
               "seconds": out.get("seconds", float("nan")), "RF": out.get("rf", float("nan")),
               "status": out.get("error", "ok"), "kind": job["kind"],
               "lower bound GiB": out.get("lower_bound", float("nan")) / (1 << 30)}
        if job["kind"] == "metis" and "error" not in out:
            owner = np.load(common["owner_out"])
            row["RF"] = stream_metrics(EdgeStream(stream), owner, parts).replication_factor
        rows.append(row)
        print(f"    {row}", file=sys.stderr, flush=True)
    shutil.rmtree(workdir / "spring-store", ignore_errors=True)
    base = {r["kind"]: r["peak RSS GiB"] for r in rows if r["kind"] in ("baseline", "metis-baseline")}
    metis_peak = {r["kind"]: r["peak RSS GiB"] for r in rows if r["kind"].startswith("metis") and r["status"] == "ok"}
    for r in rows:  # a METIS run that hit the address-space cap: its peak is at least what METIS held then
        if r["kind"] in ("metis", "metis-features") and r["lower bound GiB"] == r["lower bound GiB"]:
            metis_peak.setdefault(r["kind"], r["lower bound GiB"])
    for r in rows:
        own_base = base.get("metis-baseline" if r["kind"].startswith("metis") else "baseline", float("nan"))
        r["net GiB"] = r["peak RSS GiB"] - own_base if not r["kind"].endswith("baseline") else 0.0
        for ref in ("metis", "metis-features"):
            r[f"% of {ref} peak"] = 100 * r["peak RSS GiB"] / metis_peak[ref] if ref in metis_peak else float("nan")
    return rows, sizes


# ----------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> dict:
    """Run the chosen suites, print their tables (and write plots / JSON); returns every row."""
    from graphscale.bench.table import save_bar_plot
    from graphscale.metrics.table import format_table

    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(SUITES))
    if unknown or not suites:
        raise ValueError(f"--suite: unknown suite(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(SUITES)}")
    if args.chunk_edges < 1:
        raise ValueError(f"--chunk-edges must be >= 1, got {args.chunk_edges}")
    if args.json:
        from graphscale.data.outputs import check_output_path

        check_output_path(args.json, "--json")  # before the benchmarks, not after
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    datasets = args.dataset or DEFAULT_DATASETS
    temporary = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="graphscale-bench-")) if temporary else Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    plot_dir = Path(args.plot) if args.plot else None
    if plot_dir:
        plot_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"suites": suites}
    try:
        streams: dict[str, str] = {}
        if "quality" in suites or "throughput" in suites:
            q_datasets = datasets if "quality" in suites else datasets[-1:]
            q_parts = args.parts if "quality" in suites else [args.throughput_parts]
            q_methods = methods if "quality" in suites else ["spring"]
            rows, streams = run_quality(q_datasets, q_methods, q_parts, workdir, order=args.order,
                                        chunk_edges=args.chunk_edges, seed=args.seed)
            if "quality" in suites:
                report["quality"] = rows
                pivot, summary, goals = quality_tables(rows)
                edge_pivot, flags = balance_tables(rows)
                lpt = lpt_table(rows)
                print(pivot, edge_pivot, *([lpt] if lpt else []), summary, sep="\n\n")
                if "HDRF" in goals and goals["HDRF"]["spring lower in"] != "0/0":  # the paper's spring ran
                    print(f"\nSPRING's RF is {goals['HDRF']['spring RF below it %']:.1f}% below HDRF's on average "
                          "(goal: at least 20%)")
                goal = training_goal(rows)
                if goal:
                    print(goal)
                for name, row in goals.items():
                    if row["spring lower in"] == "0/0":
                        continue
                    print(f"SPRING's RF is lower than {name}'s in {row['spring lower in']} cases "
                          f"({row['spring RF below it %']:.1f}% lower on average); {name}'s vertex balance "
                          f"exceeds {LOPSIDED:g} (a lopsided partition, whose RF is not comparable) in "
                          f"{row['lopsided']} cases")
                for line in flags:
                    print(line)
                if plot_dir:
                    for d in dict.fromkeys(r["dataset"] for r in rows):
                        mine = [r for r in rows if r["dataset"] == d]
                        labels = list(dict.fromkeys(r["method"] for r in mine))
                        series = {f"p={p}": [next(r["rf"] for r in mine if r["p"] == p and r["method"] == m)
                                             for m in labels] for p in dict.fromkeys(r["p"] for r in mine)}
                        safe = "".join(c if c.isalnum() else "_" for c in d)[:60]
                        save_bar_plot(plot_dir / f"rf_{safe}.png", labels, series, "replication factor", d)
        if "throughput" in suites:
            sizes = {spec: Path(path).stat().st_size for spec, path in streams.items()}
            largest = max(sizes, key=sizes.get)
            rows = run_throughput(streams[largest], methods, args.throughput_parts, args.chunk_edges, args.seed,
                                  args.throughput_repeat)
            report["throughput"] = rows
            print("\n" + format_table(rows, title=f"streaming passes on {largest}, p = {args.throughput_parts}, "
                                                  f"fastest of {args.throughput_repeat} runs (one core; goal "
                                                  ">= 10M records/s per pass)"))
            if plot_dir:
                save_bar_plot(plot_dir / "throughput.png", [f"{r['method']}\n{r['pass']}" for r in rows],
                              {"M records/s": [r["M records/s"] for r in rows]}, "M records / s", "pass throughput")
        if "memory" in suites:
            rows, sizes = run_memory(args.memory_graph, workdir, parts=args.memory_parts,
                                     chunk_edges=args.chunk_edges, seed=args.seed, limit_gb=args.metis_limit_gb,
                                     timeout=args.child_timeout)
            report["memory"], report["memory_graph"] = rows, {"spec": args.memory_graph, **sizes}
            gib = 1 << 30
            print("\n" + format_table(
                [{k: v for k, v in r.items() if k != "kind"} for r in rows],
                title=f"peak RSS on {args.memory_graph}: {sizes['nodes']:,} vertices, {sizes['records']:,} records; "
                      f"on disk: stream {sizes['stream_bytes'] / gib:.2f} GiB, CSR {sizes['csr_bytes'] / gib:.2f} "
                      f"GiB, node data {sizes['node_data_bytes'] / gib:.2f} GiB; p = {args.memory_parts}; "
                      "net = peak minus its baseline; where METIS ran out of memory the percentages are against "
                      "what METIS held when it failed (so they are upper bounds)"))
            if plot_dir:
                ok = [r for r in rows if r["status"] == "ok"]
                save_bar_plot(plot_dir / "memory.png", [r["kind"] for r in ok],
                              {"peak RSS GiB": [r["peak RSS GiB"] for r in ok]}, "GiB", "peak partitioning memory")
    finally:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        from graphscale.data.formats import write_json_atomic

        write_json_atomic(args.json, report, option="--json")
    return report

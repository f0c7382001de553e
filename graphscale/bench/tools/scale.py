"""``graphscale bench scale``: every step from a graph's spec to a trained epoch, at growing sizes, as the OS
measures it, optionally under a memory limit.

For every size ``N`` (``--sizes``, vertices; degree and feature width from ``--degree`` / ``--features``) the
bench writes a synthetic SBM graph and runs, each as its own ``graphscale`` command in a subprocess measured by
:func:`graphscale.bench.tools.cgroup.run_measured`:

* ``convert``: the spec to a graph directory (``graphscale convert``);
* ``partition``: a partition store of ``--workers`` parts (``graphscale partition --method``
  ``--partition-method``) from the graph directory;
* ``minibatch``: one epoch of mini-batch GraphSAGE under ``single`` (``--minibatch --model sage``, one layer per
  ``--fanouts`` value), evaluated on neighbourhoods sampled with the training fanouts (``--eval-fanouts`` equal to
  ``--fanouts``: exact evaluation reads every edge once per layer, many times the epoch at scale);
* ``graph-parallel``: one epoch of full-graph GCN under ``graph-parallel`` on ``--workers`` workers, from the store;
* ``offload``: one epoch of full-graph GCN under ``offload`` on ``--workers`` workers (``--offload-chunks`` chunks
  per worker; 0: the run chooses them from ``--host-memory``).

Per step the table gives the wall time, the largest process's peak resident set, the memory cgroup's peak charge
(anonymous, shared memory and page cache: under ``--memory-limit`` every step runs in a fresh cgroup with that
limit, which the kernel enforces by reclaiming page cache and killing a process whose anonymous memory does not
fit), the bytes read from and written to storage, the disk the step left behind, and the epoch's loss. Training
steps get ``--host-memory`` (default: the limit). Below the table, per step, the slope of a least-squares line
through the sizes, of the peak RSS and of the anonymous + shared peak: bytes per vertex (and, when the sizes vary
degree or width through ``--graphs``, per edge record and per feature byte). The resident set counts the pages of
mapped files a step reads, which the kernel reclaims under a limit; the anonymous + shared peak is what it cannot.

Example (the sizes of the docs' Large graphs page; hours on 2 cores)::

    graphscale bench scale --sizes 1000000,4000000,16000000 --memory-limit 4GiB --workdir /data/scale
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from graphscale.bench.tools.cgroup import run_measured
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes, parse_bytes

STEPS = ("convert", "partition", "minibatch", "graph-parallel", "offload")
DEFAULT_SIZES = "20000,80000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench scale``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"comma-separated vertex counts (default {DEFAULT_SIZES}: a quick check; the docs' "
                             "figures use 1000000,4000000,16000000)")
    parser.add_argument("--degree", type=int, default=10, help="average degree of the SBM graphs (default 10)")
    add_own(parser, "--features", type=int, default=128, help="float32 features per vertex of the SBM graphs "
            "(default 128)", differs="a feature width, not a feature mode")
    parser.add_argument("--graphs", default="",
                        help="semicolon-separated dataset specs to run instead of --sizes (e.g. SBMs that vary "
                             "degree and width, so that the per-edge and per-feature-byte slopes can be fitted)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated steps (default {','.join(STEPS)})")
    add_declared(parser, "workers", default=2, note="here: of the partition and the distributed steps",
                 why="the fewest the distributed strategies run on")
    parser.add_argument("--memory-limit", default="", metavar="SIZE",
                        help="run every step in a memory cgroup with this limit (e.g. 4GiB; needs root and the "
                             "memory controller) and pass it to training as --host-memory")
    add_declared(parser, "host_memory", note="here: of the training steps (default: --memory-limit when given); a "
                                              "tiny one runs every bounded path: cache, spill, disk-backed host arrays")
    parser.add_argument("--partition-method", default="restream",
                        help="partitioner of the partition and offload steps (default restream: O(|V|) memory, a "
                             "cut close to METIS's)")
    parser.add_argument("--chunk-edges", type=int, default=0, metavar="N",
                        help="--chunk-edges of the convert and partition steps (default 0: theirs, 2^22 records); "
                             "their buffers grow with the graph until it has that many records, so a per-vertex "
                             "slope fitted below that size counts the buffers too: a small one (e.g. 262144) "
                             "fits the per-vertex term at small sizes")
    parser.add_argument("--offload-chunks", type=int, default=8, help="--chunks of the offload step (default 8; 0: "
                        "none given, the run takes the fewest that fit --host-memory)")
    add_declared(parser, "batch_size", default=1024, note="here: of the minibatch step",
                 why="a batch size for millions of vertices")
    add_declared(parser, "fanouts", note="here: of the minibatch step, which also evaluates with them "
                                          "(--eval-fanouts)")
    parser.add_argument("--workdir", default=None, metavar="DIR",
                        help="where the graphs, stores and caches go (default: a temporary directory, removed)")
    parser.add_argument("--keep", action="store_true", help="keep each size's files (default: removed after it)")
    add_own(parser, "--timeout", type=float, default=7200, help="seconds per step before it is stopped (default 7200)",
            differs="a whole step's time limit, not the collective timeout")
    add_declared(parser, "json", note="here: the rows")


def _graphscale(*argv: str) -> list[str]:
    return [sys.executable, "-m", "graphscale", *argv]


def step_argv(step: str, spec: str, work: Path, args) -> list[str]:
    """The ``graphscale`` command of one step on the graph ``spec`` in ``work``."""
    graph, store, cache = work / "graph", work / "store", work / "cache"
    data = f"graphdir:{graph}"
    train = ["train", "--epochs", "1", "--no-progress", "--cache-dir", str(cache), "--json",
             str(work / f"{step}.json"), "--oversubscribe"]
    if args.host_memory or args.memory_limit:
        train += ["--host-memory", args.host_memory or args.memory_limit]
    chunk = ["--chunk-edges", str(args.chunk_edges)] if args.chunk_edges else []
    if step == "convert":
        return _graphscale("convert", "--dataset", spec, "--out", str(graph), "--overwrite", "--no-progress", *chunk)
    if step == "partition":
        return _graphscale("partition", "--dataset", data, "--method", args.partition_method, "--parts",
                           str(args.workers), "--out", str(store), "--overwrite", *chunk)
    if step == "minibatch":
        fanouts = ",".join(str(f) for f in args.fanouts)
        return _graphscale(*train, "--dataset", data, "--minibatch", "--model", "sage", "--layers",
                           str(len(args.fanouts)), "--fanouts", fanouts, "--eval-fanouts", fanouts, "--batch-size",
                           str(args.batch_size))
    if step == "graph-parallel":
        return _graphscale(*train, "--strategy", "graph-parallel", "--workers", str(args.workers), "--partitions",
                           str(store))
    if step == "offload":
        chunks = ["--chunks", str(args.offload_chunks)] if args.offload_chunks else []
        return _graphscale(*train, "--dataset", data, "--strategy", "offload", "--workers", str(args.workers),
                           *chunks, "--partitioner", args.partition_method)
    raise ValueError(f"--steps: unknown step {step!r}; expected {', '.join(STEPS)}")


def disk_bytes(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (allocated blocks; hard links counted once)."""
    seen, total = set(), 0
    for file in path.rglob("*") if path.exists() else ():
        if file.is_file() and not file.is_symlink():
            st = file.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _loss(work: Path, step: str) -> float | None:
    report = work / f"{step}.json"
    if not report.exists():
        return None
    epochs = json.loads(report.read_text()).get("epochs") or []
    return epochs[-1]["loss"] if epochs else None


def _error(stderr: str, code: int, oom: bool) -> str:
    if oom:
        return "killed: out of memory under the limit"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return f"exit {code}: {lines[-1][:120] if lines else ''}"


def run(args) -> int:
    """Run the steps at every size and print the table and the slopes."""
    from graphscale.data.formats import read_graph_meta

    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    for step in steps:
        if step not in STEPS:
            raise ValueError(f"--steps: unknown step {step!r}; expected {', '.join(STEPS)}")
    if args.chunk_edges < 0:
        raise ValueError(f"--chunk-edges must be a positive number of records (or 0: the steps' default), got "
                         f"{args.chunk_edges}")
    limit = parse_bytes(args.memory_limit, "--memory-limit") if args.memory_limit else None
    specs = [s.strip() for s in args.graphs.split(";") if s.strip()] or [
        f"sbm:nodes={int(n)},degree={args.degree},features={args.features}" for n in args.sizes.split(",") if n.strip()]
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="graphscale-bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for i, spec in enumerate(specs):
            work = root / f"graph{i}"
            work.mkdir(exist_ok=True)
            shape = None
            for step in steps:
                measured = run_measured(step_argv(step, spec, work, args), limit=limit, timeout=args.timeout)
                if shape is None and (work / "graph" / "meta.json").exists():
                    meta = read_graph_meta(work / "graph")
                    shape = (meta["num_nodes"], meta["num_edges"],
                             meta["num_nodes"] * meta["num_features"] * np.dtype(meta["x_dtype"] or "f4").itemsize)
                ok = measured.returncode == 0
                rows.append({"graph": spec, "step": step, "ok": ok,
                             "error": None if ok else _error(measured.stderr, measured.returncode,
                                                             measured.oom_killed),
                             "vertices": shape[0] if shape else None, "edges": shape[1] if shape else None,
                             "feature_bytes": shape[2] if shape else None, "seconds": measured.seconds,
                             "max_rss": measured.max_rss, "cgroup_peak": measured.cgroup_peak,
                             "anon_peak": measured.anon_peak,
                             "read_bytes": measured.read_bytes, "written_bytes": measured.written_bytes,
                             "disk": disk_bytes(work), "loss": _loss(work, step), "limit": limit,
                             "cgroup": measured.cgroup})
                print(_row_line(rows[-1]), file=sys.stderr, flush=True)
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print(format_table([{"graph": r["graph"], "step": r["step"], "s": r["seconds"], "peak RSS": format_bytes(r["max_rss"]),
                         "cgroup peak": format_bytes(r["cgroup_peak"]) if r["cgroup_peak"] is not None else "-",
                         "anon peak": format_bytes(r["anon_peak"]) if r["anon_peak"] is not None else "-",
                         "read": format_bytes(r["read_bytes"]), "written": format_bytes(r["written_bytes"]),
                         "disk": format_bytes(r["disk"]), "loss": r["loss"] if r["loss"] is not None else "-",
                         "result": "ok" if r["ok"] else r["error"]} for r in rows]))
    for key, what in (("max_rss", "peak RSS"), ("anon_peak", "anonymous + shared peak")):
        fits = {step: fit_slopes([r for r in rows if r["step"] == step and r["ok"] and r["vertices"]
                                  and r[key] is not None], key) for step in steps}
        if any(fit["points"] for fit in fits.values()):
            print()
            print(format_table([{"step": step, **slope_cells(fit)} for step, fit in fits.items()],
                               title=f"{what}: least-squares bytes per vertex (edge record, feature byte) + fixed"))
    if limit is not None:
        print(f"every step ran under a memory cgroup limit of {format_bytes(limit)} ({rows[0]['cgroup'] if rows else ''})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


def _row_line(row: dict) -> str:
    return (f"[bench scale] {row['graph']} {row['step']}: {'ok' if row['ok'] else row['error']}, "
            f"{row['seconds']:.1f} s, peak RSS {format_bytes(row['max_rss'])}")


def fit_slopes(rows: list[dict], key: str = "max_rss") -> dict:
    """Least-squares ``rows[key] = fixed + a * vertices (+ b * edges + c * feature bytes)``; the edge and feature
    terms only where the rows vary them independently of the vertex count (full column rank)."""
    if len(rows) < 2:
        return {"points": len(rows)}
    y = np.array([r[key] for r in rows], dtype=float)
    columns = {"vertex": [r["vertices"] for r in rows], "edge": [r["edges"] for r in rows],
               "feature_byte": [r["feature_bytes"] for r in rows]}
    names = ["vertex"]
    for extra in ("edge", "feature_byte"):
        design = np.column_stack([np.ones(len(rows))] + [columns[n] for n in names + [extra]]).astype(float)
        if len(rows) > design.shape[1] - 1 and np.linalg.matrix_rank(design) == design.shape[1]:
            names.append(extra)
    design = np.column_stack([np.ones(len(rows))] + [columns[n] for n in names]).astype(float)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return {"fixed": coef[0], **{n: c for n, c in zip(names, coef[1:], strict=True)}, "points": len(rows)}


def slope_cells(fit: dict) -> dict:
    """The slope table's cells of one step's :func:`fit_slopes`."""
    def cell(name):
        return f"{fit[name]:.1f}" if name in fit else "-"
    return {"bytes/vertex": cell("vertex"), "per edge": cell("edge"), "per feature byte": cell("feature_byte"),
            "fixed": format_bytes(fit["fixed"]) if "fixed" in fit else "-", "points": fit["points"]}

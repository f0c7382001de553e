"""``graphscale bench memory``: what each worker holds, as the OS measures it, for single and the distributed
strategies side by side.

Every (dataset, strategy) pair is one ``graphscale train ... --json`` run in a
subprocess (``single`` on one worker, the others on ``--workers``), so each run
starts from a fresh interpreter and a failing strategy only fails its own row.
Per worker the table shows, from the report's ``final.os_memory_per_worker``
(:class:`graphscale.metrics.memory.EpochMemory`, maximum over the epochs):

* ``anon``: peak anonymous resident memory (heap, tensors), *sampled* every
  few milliseconds over the epochs' training and evaluation; ``train anon``
  over the training steps alone (what ``tracked`` covers);
* ``file``: peak file-backed resident memory (mapped files and shared memory;
  a page shared by several workers counts in each), sampled;
* ``RSS peak``: the kernel's exact peak resident set (``VmHWM``, reset every
  epoch where allowed);
* ``tracked``: the strategy's own count of what it holds (the
  :class:`~graphscale.metrics.memory.MemoryTracker` peak: the design's figure);
* ``single anon`` and ``anon/single``: the ``single`` run's anonymous peak next
  to every worker, and the worker's share of it. Before graph partitioning
  reached the data path, every worker held what ``single`` holds (ratio ~1);
* ``tracked/single``: the same ratio as the design predicts it (tracked bytes of
  the worker over tracked bytes of ``single``), to read against ``anon/single``.

``offload`` runs with ``--memory-budget`` (``--offload-budget``, default
:data:`DEFAULT_OFFLOAD_BUDGET`): HongTu places a chunk's working set and its
transition buffers on the GPU and the vertex data in host memory. On CPU those
device buffers are anonymous host memory too, so without a budget (one chunk
per worker: buffers as wide as the input features for every owned and halo
row) the table would count as host memory what a GPU holds; the budget keeps
the device set as small as a GPU's memory would. The summary line says which
budget and how many chunks the run used, and the host part: the workers'
anonymous memory above their baselines less their tracked device sets (peak
minus peak, summed).

Every worker process also holds the interpreter and the torch runtime (a few
hundred MiB of anonymous memory), which ``single`` holds once: the
``anon/single`` of a small graph is therefore close to 1 whatever the strategy;
the data dominates on large graphs. ``base anon`` is the worker's anonymous
memory where its report read the baseline (``baseline_at``): at worker start,
before the data (then ``anon +base`` shows the growth above it), or at the
trainer's start, after the strategy's setup (data included).

Example (the large graph; the default is a smaller one that runs in a couple of
minutes on a 2-core machine)::

    graphscale bench memory --datasets sbm:nodes=2000000,degree=10,features=128 --workers 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from graphscale.bench.table import split_specs
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes

STRATEGIES = ("single", "graph-parallel", "offload", "data-parallel", "split-parallel")
DEFAULT_DATASET = "sbm:nodes=200000,degree=10,features=128"
#: offload's device budget per worker (module docstring): its device set stays small, as on a GPU
DEFAULT_OFFLOAD_BUDGET = "128MiB"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench memory``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--datasets", default=DEFAULT_DATASET,
                        help=f"comma-separated dataset specs (commas inside a spec are kept); default {DEFAULT_DATASET}"
                             "; docs/benchmarks.md's large graph is sbm:nodes=2000000,degree=10,features=128")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated strategies (default {','.join(STRATEGIES)}); single is the reference "
                             "of the ratios and runs on one worker")
    add_declared(parser, "workers", default=4, note="here: of the distributed strategies",
                 why="a multi-worker split on a small machine")
    add_declared(parser, "epochs", default=2, note="here: per run", why="the first epoch and one steady one")
    add_declared(parser, "model")
    add_declared(parser, "hidden", default=None, why="the model's preset, as train")
    add_declared(parser, "device", default=None, note="here: of the runs", why="not passed: train's own")
    parser.add_argument("--train-args", default="",
                        help="extra `graphscale train` options passed to every run, e.g. '--chunks 4'")
    parser.add_argument("--offload-budget", default=DEFAULT_OFFLOAD_BUDGET, metavar="SIZE",
                        help="--memory-budget of the offload runs (default %(default)s; 'none': no budget, one chunk "
                             "per worker unless --train-args says otherwise). On CPU offload's device buffers are "
                             "anonymous host memory; on a GPU they are device memory, which the budget stands for")
    add_own(parser, "--timeout", type=float, default=900, help="seconds per run before it is stopped (default 900)",
            differs="a whole run's time limit, not the collective timeout")
    add_declared(parser, "json", note="here: the rows and reports")
    parser.add_argument("--plot", default=None, metavar="PATH",
                        help="also write a bar plot (PNG/PDF) of anonymous, file-backed and tracked MiB per worker")


def node_data_bytes(graph: dict, dtype: str = "float32") -> int:
    """Bytes of one copy of the node data of a report's ``graph`` summary: features, int64 labels, three masks."""
    elem = 8 if dtype == "float64" else 4
    return int(graph["nodes"]) * (int(graph["features"]) * elem + 8 + 3)


def train_argv(dataset: str, strategy: str, workers: int, epochs: int, model: str, hidden: int | None,
               device: str | None, extra: list[str] | None, out: Path) -> list[str]:
    """The ``graphscale`` arguments of a bench's train run writing its JSON report to ``out``."""
    argv = ["train", "--dataset", dataset, "--strategy", strategy, "--workers", str(workers), "--epochs", str(epochs),
            "--model", model, "--json", str(out),
            "--no-progress", "--oversubscribe"]  # memory per worker is measured at any worker count
    if hidden is not None:
        argv += ["--hidden", str(hidden)]
    if device is not None:
        argv += ["--device", device]
    return argv + list(extra or [])


def train_once(dataset: str, strategy: str, workers: int, epochs: int, model: str = "gcn", hidden: int | None = None,
               device: str | None = None, extra: list[str] | None = None, timeout: float = 900) -> dict:
    """One ``graphscale train`` run in a subprocess; its JSON report, or ``{"error": message}``."""
    with tempfile.TemporaryDirectory(prefix="graphscale-bench-memory-") as tmp:
        out = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "graphscale", *train_argv(dataset, strategy, workers, epochs, model, hidden,
                                                                device, extra, out)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:g} s"}
        if proc.returncode != 0 or not out.exists():
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            message = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1] if lines else "")
            return {"error": f"exit {proc.returncode}: {message[:160]}"}
        return json.loads(out.read_text())


def worker_rows(dataset: str, strategy: str, report: dict) -> list[dict]:
    """The per-worker rows of one run (bytes as integers; ``None`` where the OS did not say)."""
    if "error" in report:
        return [{"dataset": dataset, "strategy": strategy, "worker": None, "error": report["error"]}]
    final = report["final"]
    tracked = final.get("peak_memory_per_worker") or []
    osm = final.get("os_memory_per_worker") or [None] * len(tracked)
    rows = []
    for rank, (t, m) in enumerate(zip(tracked, osm)):
        m = m or {}
        anon, base = m.get("peak_anon"), m.get("baseline_anon")
        rows.append({"dataset": dataset, "strategy": strategy, "worker": rank, "tracked": t,
                     "train_anon": m.get("train_peak_anon"), "anon": anon,
                     "baseline_anon": base, "baseline_at": m.get("baseline_at"),
                     "anon_above_baseline": anon - base if anon is not None and base is not None
                     and m.get("baseline_at") == "worker start" else None,
                     "file": m.get("peak_file"), "shmem": m.get("peak_shmem"), "rss_peak": m.get("peak_rss"),
                     "rss_peak_since": m.get("peak_rss_since"), "s_per_epoch": final.get("mean_epoch_seconds"),
                     "error": None})
    return rows


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def add_ratios(rows: list[dict]) -> list[dict]:
    """Per dataset: ``single``'s anonymous peak and tracked bytes next to every row, and the two ratios."""
    single = {r["dataset"]: r for r in rows if r["strategy"] == "single" and r["worker"] == 0}
    for r in rows:
        ref = single.get(r["dataset"])
        if ref is None or r.get("error"):
            continue
        r["single_anon"] = ref["anon"]
        r["anon_per_single"] = _ratio(r["anon"], ref["anon"])
        r["tracked_per_single"] = _ratio(r["tracked"], ref["tracked"])
    return rows


def offload_options(budget: str | None) -> list[str]:
    """The ``graphscale train`` options of the offload runs: ``--memory-budget`` unless ``budget`` is ``none``.

    Raises:
        ValueError: not a size (names ``--offload-budget``).
    """
    from graphscale.metrics.units import parse_bytes

    if budget is None or str(budget).strip().lower() == "none":
        return []
    parse_bytes(budget, "--offload-budget")
    return ["--memory-budget", str(budget)]


def measure(datasets: list[str], strategies: list[str], workers: int, epochs: int, model: str = "gcn",
            hidden: int | None = None, device: str | None = None, extra: list[str] | None = None,
            timeout: float = 900, offload_budget: str | None = None) -> tuple[list[dict], dict]:
    """Run every (dataset, strategy) once; returns the per-worker rows and the reports by ``dataset/strategy``.
    The offload runs add :func:`offload_options` of ``offload_budget``."""
    if workers < 1 or epochs < 1:
        raise ValueError(f"--workers and --epochs must be >= 1, got {workers} and {epochs}")
    if not datasets or not strategies:
        raise ValueError("--datasets and --strategies must each name at least one")
    offload = offload_options(offload_budget)
    rows, reports = [], {}
    for dataset in datasets:
        for strategy in strategies:
            report = train_once(dataset, strategy, 1 if strategy == "single" else workers, epochs, model, hidden,
                                device, list(extra or []) + (offload if strategy == "offload" else []), timeout)
            reports[f"{dataset}/{strategy}"] = report
            rows += worker_rows(dataset, strategy, report)
    return add_ratios(rows), reports


def _fmt(n) -> str:
    return "-" if n is None else format_bytes(n)


def display_rows(rows: list[dict]) -> list[dict]:
    """The rows as printed: bytes in binary units, ratios as numbers, a failed run's error in its row."""
    out = []
    for r in rows:
        if r.get("error"):
            out.append({"strategy": r["strategy"], "worker": "-", "tracked": r["error"]})
            continue
        row = {"strategy": r["strategy"], "worker": str(r["worker"]), "tracked": _fmt(r["tracked"]),
               "train anon": _fmt(r["train_anon"]), "anon": _fmt(r["anon"]), "file": _fmt(r["file"]),
               "RSS peak": _fmt(r["rss_peak"])}
        row["base anon"] = _fmt(r["baseline_anon"])
        if any(x.get("anon_above_baseline") is not None for x in rows):
            row["anon +base"] = _fmt(r["anon_above_baseline"])
        if "single_anon" in r:
            row["single anon"] = _fmt(r["single_anon"])
            row["anon/single"] = "-" if r["anon_per_single"] is None else f"{r['anon_per_single']:.2f}"
            row["tracked/single"] = "-" if r["tracked_per_single"] is None else f"{r['tracked_per_single']:.2f}"
        row["s/epoch"] = "-" if r["s_per_epoch"] is None else f"{r['s_per_epoch']:.2f}"
        out.append(row)
    return out


def run(args: argparse.Namespace) -> list[dict]:
    """Measure, print one table per dataset and a summary line per strategy (and write JSON / the plot)."""
    import shlex

    from graphscale.bench.table import save_bar_plot
    from graphscale.data.formats import write_json_atomic
    from graphscale.data.outputs import check_output_path

    if args.json:
        check_output_path(args.json, "--json")  # before the runs, not after
    datasets = split_specs(args.datasets)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    rows, reports = measure(datasets, strategies, args.workers, args.epochs, args.model, args.hidden, args.device,
                            shlex.split(args.train_args), args.timeout, args.offload_budget)
    columns = ["strategy", "worker", "tracked", "train anon", "anon", "file", "RSS peak", "base anon", "anon +base",
               "single anon", "anon/single", "tracked/single", "s/epoch"]
    for dataset in datasets:
        mine = [r for r in rows if r["dataset"] == dataset]
        shown = display_rows(mine)
        present = [c for c in columns if any(c in r for r in shown)]
        graph = next((rep["graph"] for key, rep in reports.items() if key.startswith(dataset + "/") and "graph" in rep),
                     None)
        what = f"{graph['nodes']:,} nodes, {graph['edges']:,} edges, {graph['features']} features" if graph else ""
        base_at = sorted({r["baseline_at"] for r in mine if r.get("baseline_at")})
        print(format_table(shown, present, title=(
            f"memory per worker on {dataset} ({what}): {args.model}, {args.epochs} epochs, {args.workers} workers\n"
            "tracked: the strategy's design figure (training step); anon / file: sampled peaks of anonymous / "
            "file-backed (incl. shared) resident memory over training and evaluation, train anon: over training "
            "alone; RSS peak: VmHWM; base anon: anonymous memory at "
            f"{' / '.join(base_at) or '-'}")))
        dtype = next((rep["config"]["dtype"] for key, rep in reports.items()
                      if key.startswith(dataset + "/") and "config" in rep), "float32")
        node_bytes = node_data_bytes(graph, dtype) if graph else 0
        for strategy in strategies:
            ws = [r for r in mine if r["strategy"] == strategy and not r.get("error") and r["anon"] is not None]
            if strategy == "single" or not ws:
                continue
            top = max(ws, key=lambda r: r["anon"])
            parts = []
            if top.get("anon_per_single") is not None:
                parts.append(f"largest worker holds {top['anon_per_single']:.2f}x single's anonymous peak "
                             f"(design: {top['tracked_per_single']:.2f}x single's tracked bytes)")
            if top.get("baseline_anon") is not None:
                design = top["baseline_anon"] + top["tracked"]
                parts.append(f"its anonymous peak is {top['anon'] / design:.2f}x its design (base anon + tracked)")
                above = sum(r["anon"] - r["baseline_anon"] for r in ws if r.get("baseline_anon") is not None)
                if node_bytes:
                    parts.append(f"workers' anon above base, summed: {format_bytes(above)} = "
                                 f"{above / node_bytes:.2f}x one copy of the node data ({format_bytes(node_bytes)})")
            if strategy == "offload" and node_bytes and all(r.get("baseline_anon") is not None for r in ws):
                host = sum(r["anon"] - r["baseline_anon"] - r["tracked"] for r in ws)
                parts.append(f"less each worker's tracked device set (a GPU's memory): {format_bytes(host)} = "
                             f"{host / node_bytes:.2f}x")
            if strategy == "offload":
                report = reports.get(f"{dataset}/offload", {})
                chunks = ((report.get("epochs") or [{}])[-1].get("extra_per_worker") or [{}])[0].get("chunks")
                budget = offload_options(args.offload_budget)
                parts.append(f"ran with --memory-budget {budget[1]} ({chunks} chunks per worker): its device "
                             "buffers, anonymous host memory on CPU, stay within the budget a GPU's memory sets"
                             if budget else f"ran without --memory-budget ({chunks} chunks per worker): on CPU its "
                             "device buffers are anonymous host memory, which a GPU would hold")
            print(f"{strategy}: " + "; ".join(parts))
        print()
    if args.json:
        write_json_atomic(args.json, {"datasets": datasets, "strategies": strategies, "workers": args.workers,
                                      "epochs": args.epochs, "model": args.model,
                                      "offload_budget": args.offload_budget, "rows": rows, "reports": reports},
                          option="--json")
        print(f"JSON written to {args.json}")
    if args.plot:
        ok = [r for r in rows if not r.get("error") and r["anon"] is not None]
        if ok:
            mib = 2.0**20
            labels = [(f"{r['strategy']}/w{r['worker']}" if len(datasets) == 1
                       else f"{r['dataset'][:12]} {r['strategy']}/w{r['worker']}") for r in ok]
            path = save_bar_plot(args.plot, labels, {
                "anonymous (OS)": [r["anon"] / mib for r in ok],
                "file-backed (OS)": [(r["file"] or 0) / mib for r in ok],
                "tracked (design)": [r["tracked"] / mib for r in ok],
            }, "MiB per worker", "peak memory per worker: OS-measured vs tracked")
            print(f"plot written to {path}")
    return rows

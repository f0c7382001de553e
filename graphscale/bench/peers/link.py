"""``graphscale bench link``: link prediction under every strategy, next to PyG's own loop, in one run.

Every strategy is one ``gs.train(..., task="link")`` run in a fresh process (:func:`train_fresh`; a failing
strategy fails its own row only): ``single``
(full-graph), ``single-minibatch`` (``single --minibatch``: edge mini-batches), and ``graph-parallel``,
``offload``, ``split-parallel``, ``data-parallel``, ``model-averaging`` on ``--workers``. All train the same model:
a 2-layer GCN encoder (``features -> hidden -> hidden``), the dot decoder, Adam, no dropout, no weight decay, on the
split ``--link-split`` and ``--seed`` draw. PyG's loop (:mod:`graphscale.bench.peers.pyg_link`: ``GCNConv``, the
dot decoder, ``negative_sampling``) trains the same model on the same split in its own process, evaluated against
the same candidates.

The one-worker runs (``single``, ``single-minibatch``) and PyG's loop each run in a fresh process after a short
warm-up run on a toy graph in that process (:func:`train_fresh`; :mod:`~graphscale.bench.peers.pyg_link`), so the
resident set they read before loading the data, their *baseline*, already holds the imported libraries and the
compiled kernels, and their growth above it is what the data and the training need. The distributed strategies' workers
are spawned fresh by their run and read their baselines at their start, so their growth also holds their kernels'
compilation.

Per run the table shows:

* ``s/epoch``: the median training-step time of the epochs after the first (the first compiles kernels and
  builds caches), evaluation excluded; ``time/PyG``: that over PyG's;
* ``bytes/epoch``: the bytes moved per training epoch by Ledger category (the mean over the epochs);
* ``tracked``: each worker's tracked peak (the strategy's own count of what it holds); ``RSS peak``: each worker's
  OS-measured peak resident set (``VmHWM``, over the epochs' training and evaluation); ``above base``: the largest
  worker's peak less its resident set before its data was loaded (PyG's likewise), and ``memory/PyG`` the ratio
  of the two;
* the final ``AUC``, ``Hits@K`` and ``MRR`` on the test pairs at the best validation epoch.

Example::

    graphscale bench link --dataset sbm:nodes=200000,degree=10,features=128 --strategies single --epochs 5
"""

from __future__ import annotations

import argparse
import statistics

from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes

#: the rows: their strategy and its extra options
STRATEGIES = {
    "single": ("single", {}),
    "single-minibatch": ("single", {"minibatch": True}),
    "graph-parallel": ("graph-parallel", {}),
    "offload": ("offload", {}),
    "split-parallel": ("split-parallel", {}),
    "data-parallel": ("data-parallel", {}),
    "model-averaging": ("model-averaging", {}),
}
#: the rows that run on one worker
ONE_WORKER = ("single", "single-minibatch")
PYG = "pyg"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench link``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default="cora", why="a graph every strategy trains in seconds")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated runs among {', '.join(STRATEGIES)} (default all); PyG's loop always "
                             "runs and is the reference of the ratios")
    add_declared(parser, "workers", default=2, note="here: of the distributed strategies",
                 why="a multi-worker split on a small machine")
    add_declared(parser, "epochs", default=20, note="here: per run, PyG's included", why="a short comparison")
    add_declared(parser, "hidden", default=64, note="here: the encoder's width (features -> hidden -> hidden)",
                 why="the width of docs/link-prediction.md's measured runs")
    add_declared(parser, "lr")
    add_declared(parser, "seed", note="here: of every run, PyG's split and initialisation included")
    add_declared(parser, "link_split")
    add_declared(parser, "hits_k")
    add_own(parser, "--timeout", type=float, default=900, help="seconds per run before it is stopped (default 900)",
            differs="a whole run's time limit, not the collective timeout")
    add_declared(parser, "json", note="here: the rows and the reports")


def check_strategies(text: str) -> list[str]:
    """The ``--strategies`` list.

    Raises:
        ValueError: an unknown or empty list (one line naming ``--strategies``).
    """
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown or not names:
        raise ValueError(f"--strategies: unknown {', '.join(unknown) or 'empty list'}; choose from "
                         f"{', '.join(STRATEGIES)}")
    return names


#: the graph of the warm-up run before a one-worker run (:func:`train_fresh`)
TOY_DATASET = "sbm:nodes=300,degree=4,features=8"


def _train_child(dataset: str, options: dict, warm: bool) -> dict:
    """Body of :func:`train_fresh`'s process (module level so that spawn can import it)."""
    import contextlib
    import io

    from graphscale.api.training import train

    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            if warm:
                train("gcn", TOY_DATASET, **{**options, "epochs": 2})
            return train("gcn", dataset, **options).raw
    except (ValueError, TypeError, KeyError, OSError, RuntimeError) as err:  # a worker's too; the row shows it
        line = err.one_line() if hasattr(err, "one_line") else f"{type(err).__name__}: {err}"
        return {"error": line.splitlines()[0][:200] if line else type(err).__name__}


def train_fresh(dataset: str, options: dict, warm: bool, timeout: float = 900) -> dict:
    """``gs.train("gcn", dataset, **options)`` in a fresh process, after a 2-epoch run of the same options on
    :data:`TOY_DATASET` in that process when ``warm`` (module docstring); its report as a dictionary, or
    ``{"error": message}``."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        try:
            return pool.apply_async(_train_child, (dataset, options, warm)).get(timeout)
        except mp.TimeoutError:
            return {"error": f"timed out after {timeout:g} s"}


def train_options(args: argparse.Namespace, name: str) -> dict:
    """The ``gs.train`` options of the run ``name``: its strategy and workers, the task, the model, the split."""
    strategy, extra = STRATEGIES[name]
    return {"strategy": strategy, **extra, "workers": 1 if name in ONE_WORKER else args.workers,
            "oversubscribe": True, "progress": False, "epochs": args.epochs, "hidden": args.hidden, "lr": args.lr,
            "seed": args.seed, "task": "link", "decoder": "dot", "dropout": 0.0, "weight_decay": 0.0,
            "link_split": list(args.link_split), "hits_k": list(args.hits_k)}


def mean_bytes(report: dict) -> dict[str, float]:
    """The bytes per training epoch by Ledger category, averaged over a report's epochs."""
    epochs = report["epochs"]
    categories = sorted({c for e in epochs for c in (e.get("bytes") or {})})
    return {c: sum((e.get("bytes") or {}).get(c, 0) for e in epochs) / len(epochs) for c in categories}


def epoch_seconds(times: list[float]) -> float:
    """The median of the epoch times after the first (the first alone when there is one)."""
    return statistics.median(times[1:] if len(times) > 1 else times)


def scores(final: dict, hits_k) -> dict:
    """The test scores of a report's ``final`` (or PyG's): ``auc``, ``hits@K`` per K, ``mrr``."""
    out = {"auc": final.get("test_auc")}
    out.update({f"hits@{k}": final.get(f"test_hits@{k}") for k in hits_k})
    out["mrr"] = final.get("test_mrr")
    return out


def strategy_row(name: str, workers: int, report: dict, hits_k) -> dict:
    """One strategy's row (numbers; ``error`` set when its run failed)."""
    if "error" in report:
        return {"strategy": name, "workers": workers, "error": report["error"]}
    final = report["final"]
    osm = [m or {} for m in final.get("os_memory_per_worker") or []]
    above = [m["peak_rss"] - m["baseline_rss"] for m in osm if m.get("peak_rss") is not None
             and m.get("baseline_rss") is not None]
    return {"strategy": name, "workers": workers, "s_per_epoch": epoch_seconds([e["seconds"] for e in
                                                                                report["epochs"]]),
            "bytes": mean_bytes(report), "tracked": list(final.get("peak_memory_per_worker") or []),
            "rss_peak": [m.get("peak_rss") for m in osm], "above_base": max(above) if above else None,
            **scores(final, hits_k), "error": None}


def pyg_row(result: dict, hits_k) -> dict:
    """PyG's row from :func:`graphscale.bench.peers.pyg_link.measure_pyg`'s result."""
    return {"strategy": PYG, "workers": 1, "s_per_epoch": epoch_seconds(result["times"]), "bytes": {},
            "tracked": [], "rss_peak": [result["peak_rss"]],
            "above_base": result["peak_rss"] - result["baseline_rss"], **scores(result["final"], hits_k),
            "error": None}


def add_ratios(rows: list[dict]) -> list[dict]:
    """``time_per_pyg`` and ``memory_per_pyg`` on every row: its epoch time and its largest worker's peak above
    its baseline over PyG's."""
    ref = next(r for r in rows if r["strategy"] == PYG)
    for r in rows:
        if r.get("error"):
            continue
        r["time_per_pyg"] = r["s_per_epoch"] / ref["s_per_epoch"] if ref["s_per_epoch"] else None
        r["memory_per_pyg"] = (r["above_base"] / ref["above_base"] if r["above_base"] is not None
                               and ref["above_base"] else None)
    return rows


def measure(args: argparse.Namespace, names: list[str]) -> tuple[list[dict], dict]:
    """Run PyG's loop, then every strategy of ``names``; the rows (with ratios) and the reports by strategy."""
    from graphscale.bench.peers.pyg_link import measure_pyg

    if args.workers < 1 or args.epochs < 1:
        raise ValueError(f"--workers and --epochs must be >= 1, got {args.workers} and {args.epochs}")
    pyg = measure_pyg(args.dataset, args.link_split, args.seed, args.hidden, args.epochs, args.lr, args.hits_k)
    rows, reports = [pyg_row(pyg, args.hits_k)], {PYG: pyg}
    for name in names:
        options = train_options(args, name)
        report = train_fresh(args.dataset, options, options["workers"] == 1, args.timeout)
        reports[name] = report
        rows.append(strategy_row(name, options["workers"], report, args.hits_k))
    return add_ratios(rows), reports


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _score(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def display_rows(rows: list[dict], hits_k) -> list[dict]:
    """The rows as printed: times in seconds, bytes in binary units, per-worker figures joined by ``/``."""
    out = []
    for r in rows:
        if r.get("error"):
            out.append({"strategy": r["strategy"], "workers": str(r["workers"]), "s/epoch": r["error"]})
            continue
        moved = ", ".join(f"{c} {format_bytes(b)}" for c, b in r["bytes"].items() if b) or "0 B"
        row = {"strategy": r["strategy"], "workers": str(r["workers"]), "s/epoch": f"{r['s_per_epoch']:.4f}",
               "time/PyG": _ratio(r.get("time_per_pyg")), "bytes/epoch": moved,
               "tracked": " / ".join(format_bytes(t) for t in r["tracked"]) or "-",
               "RSS peak": " / ".join("-" if p is None else format_bytes(p) for p in r["rss_peak"]),
               "above base": "-" if r["above_base"] is None else format_bytes(r["above_base"]),
               "memory/PyG": _ratio(r.get("memory_per_pyg")), "test AUC": _score(r["auc"])}
        row.update({f"Hits@{k}": _score(r[f"hits@{k}"]) for k in hits_k})
        row["MRR"] = _score(r["mrr"])
        out.append(row)
    return out


def run(args: argparse.Namespace) -> list[dict]:
    """Measure, print the table (and write the JSON)."""
    from graphscale.data.formats import write_json_atomic
    from graphscale.data.outputs import check_output_path

    names = check_strategies(args.strategies)
    if args.json:
        check_output_path(args.json, "--json")  # before the runs, not after
    rows, reports = measure(args, names)
    graph = next((rep["graph"] for rep in reports.values() if "graph" in rep), None)
    what = f" ({graph['nodes']:,} nodes, {graph['edges']:,} edges, {graph['features']} features)" if graph else ""
    columns = ["strategy", "workers", "s/epoch", "time/PyG", "bytes/epoch", "tracked", "RSS peak", "above base",
               "memory/PyG", "test AUC", *(f"Hits@{k}" for k in args.hits_k), "MRR"]
    print(format_table(display_rows(rows, args.hits_k), columns, title=(
        f"link prediction on {args.dataset}{what}: 2-layer GCN {args.hidden} -> {args.hidden}, dot decoder, "
        f"{args.epochs} epochs, split {','.join(f'{f:g}' for f in args.link_split)}, seed {args.seed}\n"
        "s/epoch: median training step after the first epoch; tracked / RSS peak: per worker; above base: the largest "
        "worker's RSS peak less its RSS before its data was loaded; ratios against PyG's loop (GCNConv, "
        "negative_sampling) on the same split")))
    if args.json:
        write_json_atomic(args.json, {"dataset": args.dataset, "strategies": names, "workers": args.workers,
                                      "epochs": args.epochs, "hidden": args.hidden, "seed": args.seed,
                                      "rows": rows, "reports": reports}, option="--json")
        print(f"JSON written to {args.json}")
    return rows

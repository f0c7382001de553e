"""``graphscale bench averaging``: SDT-GNN model averaging against centralised training (Fig. 8 / Fig. 10
analogue), its bytes against graph parallelism, and its memory per worker against the partition count.

Every run is one ``graphscale train ... --json`` subprocess (a fresh interpreter, so the OS-measured peaks
are the run's own). For each dataset, model and seed the bench runs ``single``; then ``model-averaging`` for
every partitioner, partition count ``p`` and worker count ``q <= p`` (the run writes a ``p``-part store into
the cache), with and without ``--correction-steps``; and ``graph-parallel`` on ``p`` workers for two epochs,
for its halo bytes per epoch on the same graph and partition count. Tables:

* **accuracy**: test accuracy at the best validation epoch (mean over seeds), the gap to ``single`` in points,
  and the epoch at which the run first reached 95% of ``single``'s best validation accuracy (slower start);
* **bytes per epoch**: model averaging's (one model per averaging round, plus the correction's sampling and
  rows when enabled) against ``graph-parallel``'s on ``p`` workers, and their ratio;
* **memory**: peak resident set (OS) per worker against ``p`` at fixed ``q``: a worker holds one partition at a
  time, so it follows the largest partition, not ``p / q``; next to it ``graph-parallel``'s on ``p`` workers.

``--plot PNG`` draws test accuracy per epoch, ``single`` against every model-averaging run (first seed).
``--optimizer-states`` compares Adam's moments averaged (the default) with SDT-GNN's local ones.

**Grids.** The default (Cora, GCN, SPRING, p = 2 and 4 on q = 2, with and without one correction step, one seed,
averaged optimiser state: 7 runs) took 315 s on the 2 shared cores (21.6 minutes at a load average of 19-36,
with the refined stores and the layer-wise evaluation). ``--full`` is the SDT-GNN paper's grid, which takes
days on 2 cores (about 2,400 runs of 200 epochs): p in {2, 4, 8, 16}, q in {1, 2, 4} (q <= p), Cora, the MUSAE
Facebook graph (``--musae DIR``) and a nested SBM (:data:`NESTED_SBM`), GraphSAGE, GCN and GAT, 3 seeds, SPRING,
HDRF, METIS and random, with and without ``--correction-steps 1``; ``--datasets`` given with ``--full`` replaces
its datasets.

Example::

    graphscale bench averaging --datasets cora --parts 2,4,8 --workers 2 --correction-steps 0,1 --plot acc.png
    graphscale bench averaging --full --musae ../shared/data/musae_facebook --plot full.png
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from graphscale.bench.table import save_figure, split_specs
from graphscale.bench.tools.memory import train_once
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes
from graphscale.run import largest_peak_rss

#: the nested (hierarchical-community) SBM of the full grid: 20k vertices, 3 levels of communities, 8 classes
NESTED_SBM = "sbm:nodes=20000,degree=10,classes=8,levels=3,homophily=0.9,features=64"
#: ``--full``: the SDT-GNN paper's grid (every axis; the datasets less MUSAE, which ``--musae`` adds)
FULL = {"models": "sage,gcn,gat", "partitioners": "spring,hdrf,metis,random", "parts": [2, 4, 8, 16],
        "workers": [1, 2, 4], "correction_steps": [0, 1], "seeds": 3}


def full_grid(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--full``'s grid applied (``--datasets`` kept when given)."""
    if not args.full:
        return args
    grid = argparse.Namespace(**{**vars(args), **FULL})
    if args.datasets is None:
        grid.datasets = ",".join(["cora", *([f"musae:{args.musae}"] if args.musae else []), NESTED_SBM])
    return grid


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench averaging``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--full", action="store_true",
                        help="the SDT-GNN paper's whole grid (p 2,4,8,16; q 1,2,4; Cora, MUSAE Facebook with --musae, "
                             "a nested SBM; sage,gcn,gat; 3 seeds; spring,hdrf,metis,random; with and without a correction "
                             "step): days on 2 cores")
    parser.add_argument("--musae", default=None, metavar="DIR",
                        help="the MUSAE Facebook directory for --full (e.g. ../shared/data/musae_facebook)")
    parser.add_argument("--optimizer-states", default="averaged",
                        help="comma-separated --optimizer-state values to compare (default averaged; e.g. "
                             "averaged,local)")
    parser.add_argument("--datasets", default=None,
                        help="comma-separated dataset specs (default cora; e.g. cora,musae:DIR,"
                             "sbm:nodes=20000,degree=10,features=64)")
    parser.add_argument("--models", default="gcn", help="comma-separated models (default gcn; e.g. gcn,sage,gat)")
    parser.add_argument("--partitioners", default="spring",
                        help="comma-separated partitioners of the stores (default spring; e.g. spring,hdrf,metis,random)")
    add_declared(parser, "parts", grid=True, default=[2, 4], note="here: p",
                 why="the smallest counts that average, on 2 cores")
    add_declared(parser, "workers", grid=True, default=[2], note="here: q, each run with q <= p",
                 why="a 2-core machine")
    add_declared(parser, "correction_steps", grid=True, default=[0, 1], why="without and with a correction step")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per configuration (default 1)")
    add_declared(parser, "epochs", note="here: per run")
    parser.add_argument("--train-args", default="", help="extra arguments for every train run (quoted)")
    add_own(parser, "--timeout", type=float, default=900, help="seconds per run (default 900)",
            differs="a whole run's time limit, not the collective timeout")
    parser.add_argument("--plot", default=None, metavar="PNG", help="write test accuracy per epoch here")


def _first_epoch(report: dict, target: float) -> int | None:
    return next((e["epoch"] for e in report["epochs"] if e["val_acc"] >= target), None)


def _extra(args, seed: int, *more: str) -> list[str]:
    return ["--seed", str(seed), *more, *args.train_args.split()]


def measure(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Every run of the grid; returns the accuracy/bytes/memory rows and the curves (first seed)."""
    rows, curves = [], []
    args = full_grid(args)
    for dataset in split_specs(args.datasets or "cora"):
        for model in [m for m in args.models.split(",") if m]:
            singles = [train_once(dataset, "single", 1, args.epochs, model, extra=_extra(args, s), timeout=args.timeout)
                       for s in range(args.seeds)]
            if any("error" in r for r in singles):
                rows.append({"dataset": dataset, "model": model, "run": "single", "error": singles[0].get("error")})
                continue
            base = statistics.mean(r["final"]["test_acc"] for r in singles)
            target = 0.95 * statistics.mean(r["final"]["val_acc"] for r in singles)
            rows.append({"dataset": dataset, "model": model, "run": "single", "partitioner": "", "p": 1, "q": 1,
                         "correction": 0, "test_acc": base, "gap_points": 0.0,
                         "reach_epoch": statistics.mean(_first_epoch(r, target) or 0 for r in singles),
                         "bytes_per_epoch": 0, "rss_peak": largest_peak_rss(singles[0])})
            curves.append({"label": f"{dataset} {model} single", "report": singles[0]})
            for partitioner in [p for p in args.partitioners.split(",") if p]:
                for p in args.parts:
                    gp = train_once(dataset, "graph-parallel", p, 2, model, extra=["--partitioner", partitioner],
                                    timeout=args.timeout)
                    gp_bytes = None if "error" in gp else _total(gp["final"]["bytes_per_epoch"])
                    gp_rss = None if "error" in gp else largest_peak_rss(gp)
                    for q in [q for q in args.workers if q <= p]:
                        for steps, state in [(c, o) for c in args.correction_steps
                                             for o in args.optimizer_states.split(",") if o]:
                            more = ["--partitioner", partitioner, "--parts", str(p), "--optimizer-state", state]
                            more += ["--correction-steps", str(steps)] if steps else []
                            reports = [train_once(dataset, "model-averaging", q, args.epochs, model, extra=_extra(args, s, *more),
                                                  timeout=args.timeout) for s in range(args.seeds)]
                            row = {"dataset": dataset, "model": model, "run": "model-averaging",
                                   "partitioner": partitioner, "p": p, "q": q, "correction": steps,
                                   "optimizer_state": state}
                            if any("error" in r for r in reports):
                                rows.append({**row, "error": next(r["error"] for r in reports if "error" in r)})
                                continue
                            acc = statistics.mean(r["final"]["test_acc"] for r in reports)
                            reach = [_first_epoch(r, target) for r in reports]
                            rows.append({**row, "test_acc": acc, "gap_points": 100 * (acc - base),
                                         "reach_epoch": statistics.mean(reach) if None not in reach else None,
                                         "bytes_per_epoch": _total(reports[0]["final"]["bytes_per_epoch"]),
                                         "graph_parallel_bytes": gp_bytes, "rss_peak": largest_peak_rss(reports[0]),
                                         "graph_parallel_rss": gp_rss})
                            curves.append({"label": f"{dataset} {model} {partitioner} p={p} q={q}"
                                                    + (f" +{steps} corr" if steps else "")
                                                    + (f" {state} Adam" if state != "averaged" else ""),
                                           "report": reports[0]})
    return rows, curves


def _total(bytes_per_epoch) -> int:
    """Bytes per epoch of a report (summed over the Ledger's categories)."""
    return int(sum(bytes_per_epoch.values())) if isinstance(bytes_per_epoch, dict) else int(bytes_per_epoch or 0)


def _display(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r.get("error"):  # listed under the table (a table's columns come from its first row)
            continue
        gp = r.get("graph_parallel_bytes")
        out.append({"dataset": r["dataset"], "model": r["model"], "run": r["run"], "partitioner": r["partitioner"],
                    "p": r["p"], "q": r["q"], "corr": r["correction"], "Adam": r.get("optimizer_state", ""),
                    "test acc": r["test_acc"],
                    "gap (points)": r["gap_points"], "epoch to 95%": r["reach_epoch"],
                    "bytes/epoch": format_bytes(r["bytes_per_epoch"]),
                    "graph-parallel bytes": format_bytes(gp) if gp is not None else "",
                    "gp / averaging": gp / r["bytes_per_epoch"] if gp and r["bytes_per_epoch"] else None,
                    "RSS peak/worker": format_bytes(r["rss_peak"]) if r["rss_peak"] else "",
                    "graph-parallel RSS": format_bytes(r["graph_parallel_rss"]) if r.get("graph_parallel_rss") else ""})
    return out


def plot(curves: list[dict], path: str) -> Path:
    """Test accuracy per epoch of every run (written atomically)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for c in curves:
        epochs = c["report"]["epochs"]
        ax.plot([e["epoch"] for e in epochs], [e["test_acc"] for e in epochs], label=c["label"],
                linewidth=2.2 if c["label"].endswith("single") else 1.2)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.set_title("model averaging against centralised training", wrap=True)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def run(args: argparse.Namespace) -> list[dict]:
    """Run the grid and print the table (and write ``--plot``)."""
    if args.seeds < 1 or args.epochs < 1 or any(p < 1 for p in args.parts) or any(q < 1 for q in args.workers):
        raise ValueError("--seeds, --epochs, --parts and --workers must be >= 1")
    rows, curves = measure(args)
    print(format_table(_display(rows), title="model averaging against single (accuracy) and graph-parallel (bytes)"))
    for r in rows:
        if r.get("error"):
            where = " ".join(f"{k}={r[k]}" for k in ("partitioner", "p", "q", "correction", "optimizer_state")
                             if k in r)
            print(f"failed: {r['dataset']} {r['model']} {r['run']} {where}: {r['error']}")
    if args.plot:
        print(f"wrote {plot(curves, args.plot)}")
    return rows

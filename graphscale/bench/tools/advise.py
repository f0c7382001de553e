"""``graphscale bench advise``: every strategy ``graphscale advise`` predicts, run, and its predicted figures
against the measured ones, per graph.

For each dataset the bench predicts every configuration (:func:`graphscale.advise.command.advise`, on the cached
machine profile) and runs each one that fits as a ``graphscale train ... --json`` subprocess
(:func:`graphscale.bench.tools.memory.train_once`: a fresh interpreter, so the OS figures are the run's own;
``single`` twice, full-graph and ``single --minibatch``, both selected by ``--strategies single``). Per
strategy it prints:

* ``bytes pred`` / ``bytes meas``: bytes moved per epoch (predicted; the Ledger of the run's last epoch, or of
  the epoch the prediction replayed for the sampled strategies);
* ``mem pred`` / ``mem meas``: the largest worker's peak resident set (predicted: ``Prediction.os_memory``, the
  tracked model, host arrays and the profile's per-worker process baseline, plus what the profile's calibration
  measured the model to leave out; measured: the kernel's ``VmHWM`` of the largest worker);
* ``s model`` / ``s pred`` / ``s meas``: epoch time (the strategy's model; predicted: the model on the profile's
  calibration line of the strategy, :mod:`graphscale.advise.calibrate`, measured on other graphs; measured: the median of the epochs after ``--warmup`` warm-up ones; every
  strategy's epoch is the span of its ``train_epoch`` the report's ``seconds`` measure, evaluation outside it);
* ``time err``: ``pred / meas - 1``.

and per dataset the Spearman rank correlation of the predicted and measured epoch times over the strategies that
ran, with the load average (1 minute) before and after the dataset's runs: the machine may be shared, so judge
predicted against measured by ratios and ranks within one table. The default graphs are Cora, a 200k-vertex SBM and a 200k-vertex R-MAT (``--datasets`` takes smaller
ones: ``--nodes`` resizes the two synthetic defaults).

Example (the default graphs take about 7 minutes on 2 cores with ``--epochs 10``; ``--profile`` adds the machine's
profile and calibration, about 1.5 minutes)::

    graphscale bench advise --profile --epochs 10 --warmup 2
"""

from __future__ import annotations

import argparse
import os
import statistics

from graphscale.bench.table import split_specs
from graphscale.bench.tools.memory import train_once
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes

#: the three default graphs (Cora, an SBM, an R-MAT); ``{n}`` is ``--nodes``
DEFAULT_DATASETS = "cora,sbm:nodes={n},degree=10,features=64,seed=0,rmat:nodes={n},degree=10,features=64,seed=0"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench advise``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--datasets", default="", help="comma-separated dataset specs (default: cora, an SBM and "
                                                       "an R-MAT of --nodes vertices)")
    parser.add_argument("--nodes", type=int, default=200_000, help="vertices of the default SBM and R-MAT "
                                                                   "(default 200000)")
    add_declared(parser, "model")
    add_declared(parser, "hidden", default=None, why="the model's preset, as train")
    add_declared(parser, "layers", default=None, why="the model's preset, as train")
    add_declared(parser, "workers", default=2, note="here: of the distributed strategies",
                 why="graphscale advise's default")
    parser.add_argument("--strategies", default="", help="comma-separated strategies to run (default: all predicted)")
    add_declared(parser, "epochs", default=6, note="here: per run", why="--warmup 2, then a median of 4")
    parser.add_argument("--warmup", type=int, default=2, help="first epochs left out of the measured median "
                                                              "(default 2)")
    add_declared(parser, "cache_dir", note="here also the machine profile")
    add_own(parser, "--timeout", type=float, default=1800, help="seconds per run (default 1800)",
            differs="a whole run's time limit, not the collective timeout")
    parser.add_argument("--profile", action="store_true", help="measure this machine again first")
    parser.add_argument("--synthetic-profile", action="store_true", help=argparse.SUPPRESS)


def _advise_args(args: argparse.Namespace, dataset: str) -> argparse.Namespace:
    return argparse.Namespace(dataset=dataset, partitions="", model=args.model, hidden=args.hidden,
                              layers=args.layers, optimizer="adam", workers=args.workers, device_memory="",
                              device="cpu", cache_dir=args.cache_dir, json="", profile=args.profile,
                              synthetic_profile=args.synthetic_profile)


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); ``None`` below two points or for a constant side."""
    if len(xs) < 2:
        return None

    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else None


def measure_dataset(args: argparse.Namespace, dataset: str) -> tuple[list[dict], float | None]:
    """The rows of one dataset and its Spearman of predicted against measured epoch times."""
    from graphscale.advise.command import advise, option_words
    from graphscale.advise.configs import candidate_name

    ns = _advise_args(args, dataset)
    result = advise(ns)
    m = result["machine"]
    print(f"profile ({m.host}, {m.cores} cores): {m.gemm_flops / 1e9:.1f} GFLOP/s per thread, threads x"
          f"{m.thread_speedup:.2f} with {m.cores}, {m.sync_s * 1e3:.2f} ms per synchronising collective "
          f"(latency {m.collective_latency_s * 1e3:.2f} ms), co-run x{m.corun_slowdown:.2f} (without "
          f"synchronising x{m.corun_free:.2f})", flush=True)
    wanted = {s for s in args.strategies.split(",") if s}
    rows = []
    for prediction, config in zip(result["predictions"], result["configs"]):
        if not prediction.fits or (wanted and prediction.strategy not in wanted):
            continue
        extra = option_words(config, ns) + (["--cache-dir", args.cache_dir] if args.cache_dir else [])
        report = train_once(dataset, prediction.strategy, prediction.workers, args.epochs, args.model,
                            extra=extra, timeout=args.timeout)
        row = {"dataset": dataset, "strategy": candidate_name(config), "workers": prediction.workers,
               "bytes_pred": prediction.moved, "mem_pred": prediction.os_memory, "s_pred": prediction.seconds,
               "s_model": prediction.modelled_seconds}
        if "error" in report:
            rows.append(dict(row, error=report["error"]))
            continue
        from graphscale.metrics.ledger import moved_bytes
        from graphscale.run import largest_peak_rss, median_epoch_seconds

        epoch = -1 if prediction.bytes_epoch is None else prediction.bytes_epoch
        row.update(bytes_meas=moved_bytes(report["epochs"][epoch]["bytes"]), mem_meas=largest_peak_rss(report),
                   s_meas=median_epoch_seconds(report, args.warmup), error=None)
        rows.append(row)
    ok = [r for r in rows if not r.get("error")]
    return rows, spearman([r["s_pred"] for r in ok], [r["s_meas"] for r in ok])


def _ratio(a, b) -> str:
    return f"{a / b - 1:+.0%}" if a is not None and b else "-"


def display(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if r.get("error"):
            out.append({"strategy": r["strategy"], "workers": r["workers"], "bytes pred": format_bytes(r["bytes_pred"]),
                        "error": r["error"]})
            continue
        out.append({"strategy": r["strategy"], "workers": r["workers"],
                    "bytes pred": format_bytes(r["bytes_pred"]), "bytes meas": format_bytes(r["bytes_meas"]),
                    "bytes equal": "yes" if r["bytes_pred"] == r["bytes_meas"] else "no",
                    "mem pred": format_bytes(r["mem_pred"]),
                    "mem meas": format_bytes(r["mem_meas"]) if r["mem_meas"] else "-",
                    "mem err": _ratio(r["mem_pred"], r["mem_meas"]),
                    "s model": f"{r['s_model']:.4f}", "s pred": f"{r['s_pred']:.4f}", "s meas": f"{r['s_meas']:.4f}",
                    "time err": _ratio(r["s_pred"], r["s_meas"])})
    return out


def run(args: argparse.Namespace) -> list[dict]:
    """Measure every dataset and print a table per dataset with its Spearman."""
    if args.epochs < 1 or args.workers < 1 or args.nodes < 1:
        raise ValueError("--epochs, --workers and --nodes must be >= 1")
    if not 0 <= args.warmup < args.epochs:
        raise ValueError(f"--warmup must be >= 0 and below --epochs ({args.epochs}), got {args.warmup}")
    datasets = split_specs(args.datasets or DEFAULT_DATASETS.format(n=args.nodes))
    everything = []
    for dataset in datasets:
        load = os.getloadavg()[0]
        rows, rho = measure_dataset(args, dataset)
        load = (load, os.getloadavg()[0])
        args.profile = False  # --profile measures once: every graph is priced on the same profile
        everything += rows
        within = [r for r in rows if not r.get("error")]
        hits = sum(1 for r in within if abs(r["s_pred"] / r["s_meas"] - 1) <= 0.35)
        mem_hits = sum(1 for r in within if r["mem_meas"] and abs(r["mem_pred"] / r["mem_meas"] - 1) <= 0.25)
        print(format_table(display(rows), title=f"advise: predicted against measured on {dataset}"))
        print(f"{dataset}: Spearman of epoch times {rho:.2f}" if rho is not None else f"{dataset}: Spearman -",
              f"over {len(within)} strategies; time within 35%: {hits}/{len(within)}; "
              f"memory within 25%: {mem_hits}/{len(within)}; load average {load[0]:.1f} before, {load[1]:.1f} after; "
              f"epochs: median of {args.epochs - args.warmup} after {args.warmup} warm-up")
    return everything

"""The ``graphscale`` command: train, datasets, info, bench."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import re
import shutil
import statistics
import sys
from pathlib import Path

from graphscale.config import StrategyConfig, declared_options
from graphscale.flags import NOT_GIVEN, add_declared, add_own, show
from graphscale.metrics.ledger import moved_bytes
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes
from graphscale.options import declared, flag_of, int_list, integer

#: ``graphscale bench NAME`` -> module with ``add_arguments(parser)`` and ``run(args)``.
BENCHES = {
    "peers": ("graphscale.bench.peers.peers", "2-layer GCN epoch: graphscale against PyG (time and peak memory)"),
    "link": ("graphscale.bench.peers.link", ("link prediction under every strategy against PyG's loop on the same "
             "split: epoch time, bytes by category, peak memory per worker (tracked and OS), AUC / Hits@K / MRR")),
    "device": ("graphscale.bench.peers.device", ("2-layer GCN epoch on one device (GPU, or the device path on CPU): "
               "graphscale against PyG-CSR and PyG edge_index (time, peak memory, ops and kernels per epoch)")),
    "sampler": ("graphscale.bench.tools.sampler", "neighbour-sampler throughput in sampled edges per second"),
    "partition": ("graphscale.bench.papers.sdt_gnn.partition",
                  "partitioner replication factor, peak memory, pass throughput, time ratios"),
    "minibatch": ("graphscale.bench.papers.gsplit", ("mini-batch data vs split parallelism: feature bytes, redundant "
                  "edges, split time and quality (GSplit Tables 1, 2, 4, 5)")),
    "offload": ("graphscale.bench.papers.hongtu",
                "HongTu offload: replication factor, host traffic by dedup mode, memory vs K (Tables 3/8, Fig. 10)"),
    "pipeline": ("graphscale.bench.papers.gnnpipe", ("GNNPipe: bytes per epoch graph vs pipeline vs hybrid (Table 5/7/8 "
                 "analogues), bubble / transfer / memory per stage (GPipe vs 1F1B), accuracy and ablation on Cora")),
    "memory": ("graphscale.bench.tools.memory", ("OS-measured memory per worker (anonymous / file-backed / RSS peak) "
               "next to the tracked design figure, single against the distributed strategies")),
    "averaging": ("graphscale.bench.papers.sdt_gnn.averaging", ("model averaging against single (accuracy per epoch, gap) and "
                  "graph-parallel (bytes), memory per worker against the partition count")),
    "scaling": ("graphscale.bench.tools.scaling", ("epoch time of single (W threads) against each distributed strategy "
                "(W workers x 1 thread), communication / waiting / compute per worker, parallel efficiency")),
    "advise": ("graphscale.bench.tools.advise", ("graphscale advise checked: every predicted strategy run on Cora, an SBM "
               "and an R-MAT; predicted against measured bytes, memory and epoch time, Spearman of the ranking")),
    "scale": ("graphscale.bench.tools.scale", ("from a graph's spec to a trained epoch at growing sizes: convert, "
              "partition, mini-batch, graph-parallel and offload steps, wall time, peak RSS and cgroup peak, bytes "
              "read and written, disk, fitted bytes per vertex; optionally under a memory cgroup limit")),
    "task": ("graphscale.bench.papers.neutrontask.task", ("NeutronTask task parallelism: bytes graph-parallel vs TP vs TP+TD, memory "
             "parts per worker, replication vs partitions, accuracy, subgraphs, modelled pipeline, ablation")),
}

#: command-line flag (argparse dest) -> (config section or None for top level, field), from the declarations
#: (:func:`graphscale.config.declared_options`)
TRAIN_OPTIONS = {dest: (path[0] if len(path) > 1 else None, path[-1])
                 for dest, (path, _) in declared_options().items()}

#: option (argparse dest) -> the registry whose names it takes (listed in --help, so a new entry shows by itself)
REGISTRY_OPTIONS = {"model": "MODELS", "strategy": "STRATEGIES", "partitioner": "PARTITIONERS",
                    "method": "PARTITIONERS"}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose :func:`int_list` options also take a value starting with ``-``, and whose errors are
    one line (no usage dump: ``--help`` prints it).

    argparse reads ``--fanouts -1,5`` as ``--fanouts`` without a value followed by an unknown option ``-1,5``
    (a lone ``-1`` it takes as a number); this parser passes such a value on as ``--fanouts=-1,5``, which argparse
    reads as meant.
    """

    def __init__(self, *args, **kwargs) -> None:
        self.list_options: set[str] = set()  # before the base class adds --help
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if kwargs.get("type") is int_list:
            self.list_options.update(action.option_strings)
        return action

    def error(self, message: str):
        """One line, ``graphscale train: error: ...`` (and where to read the options), without the usage dump."""
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        joined: list[str] = []
        for arg in args:
            if joined and joined[-1] in self.list_options and re.match(r"-\d", arg):
                joined[-1] = f"{joined[-1]}={arg}"
            else:
                joined.append(arg)
        return super().parse_known_args(joined, namespace)


def _registry_names(dest: str) -> list[str]:
    from graphscale import registry

    return getattr(registry, REGISTRY_OPTIONS[dest]).names() if dest in REGISTRY_OPTIONS else []


def _readers(dest: str) -> str:
    """``read by offload`` for an option only some strategies (models) read, from their declared ``options``."""
    from graphscale import registry

    section, field = TRAIN_OPTIONS.get(dest, (None, ""))
    table = {"strategy": registry.STRATEGIES, "data": registry.STRATEGIES, "model": registry.MODELS}.get(section)
    readers = [name for name in table.names() if field in table.get(name).options] if table else []
    return f"read by {', '.join(readers)}" if readers else ""


def _default(action: argparse.Action) -> str:
    """``default: X`` from the config dataclasses (and the model presets that change it); else argparse's."""
    if action.dest not in TRAIN_OPTIONS:
        shown = "" if action.default is argparse.SUPPRESS else show(action.default)
        return f"default: {shown}" if shown else ""
    from graphscale.config import PRESETS, RunConfig

    section, field = TRAIN_OPTIONS[action.dest]
    value = getattr(getattr(RunConfig(), section) if section else RunConfig(), field)
    presets = [f"{model} {show(p[section][field])}" for model, p in PRESETS.items()
               if field in p.get(section, {}) and p[section][field] != value]
    shown = show(value) + (f" ({', '.join(presets)})" if presets else "")
    return f"default: {shown}" if shown else ""


class ChoicesHelpFormatter(argparse.HelpFormatter):
    """Help that appends the registry names an option takes, looked up only when help is printed (the registries
    import every strategy, model and partitioner, which other commands should not pay for)."""

    def notes(self, action: argparse.Action) -> list[str]:
        names = _registry_names(action.dest)
        return [f"one of: {', '.join(names)}"] if names else []

    def _get_help_string(self, action: argparse.Action) -> str:
        notes = [n for n in self.notes(action) if n]
        text = action.help or ""
        return text + (f" ({'; '.join(notes)})".replace("%", "%%") if notes else "")


class TrainHelpFormatter(ChoicesHelpFormatter):
    """``train --help``: also the strategies (models) that read an option, and its default."""

    def notes(self, action: argparse.Action) -> list[str]:
        return [_readers(action.dest), *super().notes(action), _default(action)]


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every option defaults to None so that only what the user gave overrides the preset / TOML file; the defaults
    live in :mod:`graphscale.config` (``--help`` shows them, :class:`TrainHelpFormatter`). The ``[data]``,
    ``[model]``, ``[optim]`` and run options are generated from their declarations (:func:`graphscale.flags.add_declared`), in
    declaration order, then the ``[strategy]`` groups (:func:`add_strategy_arguments`)."""
    p.add_argument("--config", metavar="FILE",
                   help="TOML file with [data], [model], [optim], [strategy] tables and top-level run fields; "
                        "flags override it")
    for dest, (path, _spec) in declared_options().items():
        if path[0] == "strategy":
            continue
        add_declared(p, dest, default=NOT_GIVEN)
        if path == ("seed",):  # not a configuration field: the runs of one command
            p.add_argument("--repeat", type=integer, default=1,
                           help="train N times with seeds seed..seed+N-1 and report mean/std")
    add_strategy_arguments(p)


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    """The ``[strategy]`` options, generated from their declarations (:mod:`graphscale.options.by_strategy`): one
    group for the options of every strategy, one for those several share, then one per strategy."""
    from graphscale.options.by_strategy import BY_STRATEGY

    own = {f.name for f in declared(StrategyConfig)} | {f.name for cls in BY_STRATEGY.values() for f in declared(cls)}
    groups = [("strategy", "read by every strategy", declared(StrategyConfig)),
              ("shared strategy options", "read by several strategies",
               [f for f in dataclasses.fields(StrategyConfig) if f.name not in own])]
    groups += [(f"{name} options", (cls.__doc__ or "").strip().replace("``", ""), declared(cls))
               for name, cls in sorted(BY_STRATEGY.items())]
    for title, text, fields in groups:
        if fields:
            group = p.add_argument_group(title, text)
            for f in fields:
                add_declared(p, flag_of(f)[2:].replace("-", "_"), default=NOT_GIVEN, group=group)


def overrides_from_args(args: argparse.Namespace) -> dict:
    out: dict = {}
    for flag, (section, field) in TRAIN_OPTIONS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        (out.setdefault(section, {}) if section else out)[field] = value
    return out


def cmd_train(args: argparse.Namespace) -> int:
    from graphscale.checkpoint import check_resume, read_checkpoint, seed_path
    from graphscale.config import build_config
    from graphscale.validation import announce_default_features, check_path_conflicts, validate

    overrides, advice = overrides_from_args(args), None
    if overrides.get("strategy", {}).get("name") == "auto":  # graphscale advise's recommendation
        from graphscale.advise.auto import resolve

        overrides, advice = resolve(overrides, args.config)
    base = build_config(overrides, args.config)
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    if args.repeat > 1 and base.checkpoint:
        base.checkpoint = seed_path(base.checkpoint, base.seed)
    given = base.data.features
    validate(base)  # before the first run: also the --json path of a combined report
    announce_default_features(base, given)
    configs = []
    for i in range(args.repeat):
        config = build_config({**overrides, "seed": base.seed + i}, args.config)
        if args.repeat > 1:
            config.json = None  # one combined report below
            if config.checkpoint:  # one checkpoint per seed
                config.checkpoint = seed_path(config.checkpoint, config.seed)
        validate(config)  # every seed's checkpoint before the first run
        if config.resume:
            saved = read_checkpoint(config.checkpoint)
            check_resume(config, saved)
            done = int(saved["epoch"]) + 1
            if done >= config.optim.epochs:
                print(f"graphscale: notice: checkpoint {config.checkpoint} has trained {done} epoch(s) and --epochs "
                      f"is {config.optim.epochs} (the total, not more epochs): nothing to train; reporting the "
                      "checkpoint's run (a larger --epochs continues it)", file=sys.stderr)
        configs.append(config)
    outputs = [("--checkpoint", c.checkpoint) for c in configs] + [("--json", base.json)]
    check_path_conflicts(base, outputs, args.config)  # every seed's checkpoint, the report, the TOML file
    from graphscale.data.output_lock import output_locks
    from graphscale.distributed.launch import is_main_process

    locked = outputs + [("--tensorboard", base.tensorboard)] if is_main_process() else []
    with output_locks(locked):  # held until every output is written: a second run naming one stops at once
        return _train_runs(configs, base, advice)


def _train_runs(configs: list, base, advice) -> int:
    """Run every seed, print the results table, then write the outputs (a failed write loses no result)."""
    from graphscale.distributed.launch import is_main_process
    from graphscale.run import run, write_json, write_outputs
    from graphscale.strategies.optimizers import describe

    rows, reports = [], []
    for config in configs:
        report = run(config, write=False)
        if advice is not None:  # the prediction next to the measurement
            from graphscale.advise.auto import record, summary

            print(summary(record(report, advice)))
        reports.append(report)
        final = report["final"]
        os_mem = max((m for m in final.get("os_memory_per_worker") or [] if m), default=None,
                     key=lambda m: m["peak_rss"])  # the OS figures of the worker with the largest resident set
        rows.append({"seed": config.seed, "best epoch": "-" if final["best_epoch"] is None else final["best_epoch"],
                     "final loss": report["epochs"][-1]["loss"] if report["epochs"] else float("nan"),
                     "val acc": final["val_acc"], "trivial val": _trivial_cell(report),
                     "test acc": final["test_acc"], **_link_cells(final), "s/epoch": final["mean_epoch_seconds"],
                     "bytes/epoch": format_bytes(moved_bytes(final["bytes_per_epoch"])),
                     "peak mem/worker": format_bytes(max(final["peak_memory_per_worker"] or [0])),
                     "RSS peak/worker": format_bytes(os_mem["peak_rss"]) if os_mem else "-",
                     "anon/file": (f"{format_bytes(os_mem['peak_anon'])} / {format_bytes(os_mem['peak_file'])}"
                                   if os_mem and os_mem.get("peak_anon") is not None else "-")})
    if not is_main_process():  # torchrun: rank 0 prints and writes the combined report
        for config, report in zip(configs, reports):
            write_outputs(report, config)  # every rank's --tensorboard, as before
        return 0
    graph = reports[0]["graph"]
    metric = reports[0].get("metric", "accuracy")  # reported under the acc columns (micro-f1 for multi-label)
    form = " (decoupled)" if reports[0].get("model_form") == "decoupled" else ""
    title = (f"{base.model.name}{form} on {graph['name']} ({graph['nodes']:,} nodes, {graph['edges']:,} edges), "
             f"strategy {base.strategy.name}, {base.strategy.workers} worker(s), "
             f"{_epochs_trained(reports, base.optim.epochs)}, {describe(base.optim)}, metric: {metric}")
    print(format_table(rows, title=title))
    for warning in dict.fromkeys(w for r in reports for w in r.get("warnings", [])):
        print(f"graphscale: warning: {warning}", file=sys.stderr)
    tests = [r["final"]["test_acc"] for r in reports]
    scored = not any(math.isnan(t) for t in tests)
    if not scored:
        print(f"no test {metric}: the test split is empty")
    elif len(tests) > 1:
        print(f"test {metric} over {len(tests)} seeds: {statistics.mean(tests):.4f} +- {statistics.stdev(tests):.4f}")
    else:
        print(f"test {metric} at best validation: {tests[0]:.4f}")
    sys.stdout.flush()  # the results are out before any write can fail
    for config, report in zip(configs, reports):
        write_outputs(report, config)
    if len(tests) > 1 and base.json:  # null mean and std (strict JSON) when a split is empty
        write_json({"runs": reports, "metric": metric,
                    "test_acc_mean": statistics.mean(tests) if scored else float("nan"),
                    "test_acc_std": statistics.stdev(tests) if scored else float("nan")}, base.json)
    return 0


def _link_cells(final: dict) -> dict:
    """A link-prediction run's test Hits@K and MRR (its AUC is the acc columns' metric); none for node
    classification."""
    return {k.removeprefix("test_").replace("hits@", "test hits@").replace("mrr", "test mrr"): v
            for k, v in final.items() if k.startswith(("test_hits@", "test_mrr"))}


def _trivial_cell(report: dict) -> str:
    """The trivial predictor's validation score (:func:`graphscale.run.trivial_baseline`), and ``not beaten`` when
    the run's best is not above it (the run did not learn)."""
    from graphscale.run import beats_trivial

    baseline = report.get("baseline")
    if baseline is None or math.isnan(baseline["val_acc"]):
        return "-"
    return f"{baseline['val_acc']:.3f}" + (" NOT BEATEN" if beats_trivial(report["final"], baseline) is False else "")


def _epochs_trained(reports: list[dict], epochs: int) -> str:
    """``200 epochs``; what a resumed run's reports hold when it is not ``--epochs`` (a checkpoint past it)."""
    held = {len(r["epochs"]) for r in reports}
    if held == {epochs}:
        return f"{epochs} epochs"
    return f"{'/'.join(map(str, sorted(held)))} epochs (the checkpoint's; --epochs {epochs})"


def terminal_width() -> int:
    """The terminal's width in characters; 100 when the output is not a terminal (``$COLUMNS`` overrides)."""
    return shutil.get_terminal_size((100, 24)).columns


def cmd_datasets(args: argparse.Namespace) -> int:
    from graphscale.data.datasets import DATASET_HELP
    print(format_table([{"spec": spec, "description": text} for spec, text in DATASET_HELP], title="datasets",
                       width=terminal_width()))
    return 0


#: the distributions whose versions `graphscale info` prints (read from their metadata: importing is slow)
INFO_PACKAGES = ("numpy", "scipy", "numba", "pymetis", "torch_geometric", "ogb")


def torch_build() -> dict[str, str | None]:
    """The installed torch's version and GPU backends, read from ``torch/version.py`` without importing torch
    (importing it takes a second or more): ``{"version": ..., "cuda": ..., "hip": ..., "xpu": ...}``."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("torch is not installed (bash scripts/setup.sh installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    version_spec = importlib.util.spec_from_file_location("_graphscale_torch_version", path)
    module = importlib.util.module_from_spec(version_spec)
    version_spec.loader.exec_module(module)
    return {"version": module.__version__, **{name: getattr(module, name, None) for name in ("cuda", "hip", "xpu")}}


def cmd_info(args: argparse.Namespace) -> int:
    if args.dataset:
        from graphscale.data.datasets import describe_dataset
        summary = describe_dataset(args.dataset)
        print(format_table([{"item": k, "value": f"{v:,}" if isinstance(v, int) else str(v)}
                            for k, v in summary.items()], title=f"dataset {args.dataset}"))
        return 0
    import os
    import platform
    from importlib import metadata

    from graphscale import __version__
    build = torch_build()
    gpu_backends = [f"{name} {build[name]}" for name in ("cuda", "hip", "xpu") if build[name]]
    rows = [{"item": "graphscale", "value": __version__}, {"item": "torch", "value": build["version"]},
            {"item": "torch build", "value": ", ".join(gpu_backends) or "CPU only"},
            {"item": "python", "value": platform.python_version()}, {"item": "host", "value": platform.node()},
            {"item": "cpu cores", "value": str(len(os.sched_getaffinity(0)))}]
    if args.devices or gpu_backends:  # a GPU build: its devices are what its user wants to see
        import torch
        import torch.distributed as dist

        rows.append({"item": "cuda", "value": str(torch.cuda.is_available())})
        rows.append({"item": "torch threads", "value": str(torch.get_num_threads())})
        rows.append({"item": "gloo available", "value": str(dist.is_available() and dist.is_gloo_available())})
        rows.append({"item": "nccl available", "value": str(dist.is_available() and dist.is_nccl_available())})
        for i in range(torch.cuda.device_count()):
            rows.append({"item": f"cuda:{i}", "value": torch.cuda.get_device_name(i)})
    for name in INFO_PACKAGES:
        try:
            rows.append({"item": name, "value": metadata.version(name)})
        except metadata.PackageNotFoundError:
            rows.append({"item": name, "value": "not installed"})
    from graphscale.registry import MODELS, STRATEGIES
    rows.append({"item": "strategies", "value": ", ".join(STRATEGIES.names())})
    rows.append({"item": "models", "value": ", ".join(MODELS.names())})
    rows += cache_rows(args.cache_dir)
    print(format_table(rows, title="graphscale info"))
    if not (args.devices or gpu_backends):
        print("(a CPU-only torch build: `graphscale info --devices` also asks torch for its threads and backends)")
    return 0


def cache_rows(cache_dir: str | None) -> list[dict]:
    """``graphscale info``'s rows on the cache directory: where it is and its size on disk (`graphscale cache`)."""
    from graphscale.data.cache import default_cache_dir
    from graphscale.data.cache_entries import total_size

    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    size = (f"{format_bytes(total_size(cache))} (`graphscale cache` lists it)" if cache.is_dir()
            else "not created yet")
    return [{"item": "cache directory", "value": str(cache)}, {"item": "cache size", "value": size}]


def cmd_plot(args: argparse.Namespace) -> int:
    from graphscale.plot import plot_reports

    print(f"wrote {plot_reports(args.reports, args.out)}")
    return 0


def bench_named(argv: list[str]) -> str | None:
    """The bench ``graphscale ARGV`` runs (``bench NAME ...``), else ``None``."""
    words = [word for word in argv if not word.startswith("-")]
    return words[1] if len(words) > 1 and words[0] == "bench" else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``graphscale`` parser. With ``argv``, only the bench that ``argv`` runs imports its module to declare
    its options (every bench module imports torch: `graphscale info` would pay for that); without, all do."""
    from graphscale import __version__

    parser = Parser(prog="graphscale", description="Scalable GNN training on torch.distributed")
    parser.add_argument("--version", action="version", version=f"graphscale {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an unexpected error (or a worker's), print its whole traceback instead of one line "
                             "and the path of a log file holding it")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a model", description="Train a GNN with a chosen strategy. Options a "
                           "strategy or model does not read are refused.", formatter_class=TrainHelpFormatter)
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    sub.add_parser("datasets", help="list dataset specs").set_defaults(func=cmd_datasets)
    plot = sub.add_parser("plot", help="draw training curves from run reports (train --json) into a PNG",
                          description="Draw loss, train/val/test accuracy (micro-F1 for multi-label runs), epoch "
                                      "time and bytes moved per epoch from the per-epoch history of run reports "
                                      "(`graphscale train --json`); several reports are overlaid, one legend entry "
                                      "per run (strategy, workers, model)")
    plot.add_argument("reports", nargs="+", metavar="REPORT.json", help="run reports written by train --json")
    plot.add_argument("--out", metavar="PNG",
                      help="image to write (its directory must exist; default: the first report with .png)")
    plot.set_defaults(func=cmd_plot)
    info = sub.add_parser("info", help="versions, devices and backends; or a dataset's counts with --dataset",
                          description="Versions, devices and backends; with --dataset, a dataset's counts instead")
    add_own(info, "--dataset", help="load this dataset spec (see `graphscale datasets`) and print its counts",
            differs="what info prints: this dataset's counts instead of the versions (no default dataset)")
    add_declared(info, "cache_dir", default=NOT_GIVEN, note="here: the cache whose location and size info shows")
    info.add_argument("--devices", action="store_true",
                      help="also import torch to list its devices, threads and distributed backends (a GPU build "
                           "always does; without this a CPU build's info is read from package metadata only)")
    info.set_defaults(func=cmd_info)
    cache = sub.add_parser("cache", help="list the cache directory's entries and sizes; `cache clear` removes them",
                           description="List the cache directory's entries (kind, size on disk, last use) and "
                                       "their total; `graphscale cache clear` removes those no running process "
                                       "holds", formatter_class=ChoicesHelpFormatter)
    importlib.import_module("graphscale.data.cache_command").add_arguments(cache)
    cache.set_defaults(func=lambda a: importlib.import_module("graphscale.data.cache_command").run(a))
    part = sub.add_parser("partition", help="partition a dataset or an edge stream into a partition store",
                          description="Partition a dataset (or a bare edge-stream file) into a partition store",
                          formatter_class=ChoicesHelpFormatter)
    importlib.import_module("graphscale.partition.command").add_arguments(part)
    part.set_defaults(func=lambda a: importlib.import_module("graphscale.partition.command").run(a) and 0)
    convert = sub.add_parser("convert", help="write a dataset as a graph directory in bounded memory",
                             description="Write a dataset spec as a graph directory (memory-mapped CSR, features, "
                                         "labels, split) holding only per-vertex arrays and fixed-size chunks in "
                                         "memory; later steps read it as --dataset graphdir:DIR",
                             formatter_class=ChoicesHelpFormatter)
    importlib.import_module("graphscale.data.ingest_command").add_arguments(convert)
    convert.set_defaults(func=lambda a: importlib.import_module("graphscale.data.ingest_command").run(a))
    advise = sub.add_parser("advise", help="predict every strategy's time, memory and bytes; recommend one",
                            description=importlib.import_module("graphscale.advise.command").__doc__.splitlines()[0],
                            formatter_class=ChoicesHelpFormatter)
    importlib.import_module("graphscale.advise.command").add_arguments(advise)
    advise.set_defaults(func=lambda a: importlib.import_module("graphscale.advise.command").run(a))
    bench = sub.add_parser("bench", help="benchmarks that print tables (and can write plots)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for name, (module, text) in BENCHES.items():
        p = bench_sub.add_parser(name, help=text, description=text, formatter_class=ChoicesHelpFormatter)
        if argv is None or bench_named(argv) == name:
            importlib.import_module(module).add_arguments(p)
        p.set_defaults(func=lambda a, m=module: importlib.import_module(m).run(a) and 0)
    return parser


#: error logs kept in the cache directory's ``errors/`` (the oldest beyond it are removed when one is written)
MAX_ERROR_LOGS = 20


def write_error_log(text: str, cache_dir: str | None = None) -> Path:
    """Keep a traceback the user was shown one line of: ``CACHE/errors/graphscale-error-PID.log`` (``--cache-dir``,
    else the default cache directory), keeping the :data:`MAX_ERROR_LOGS` newest; ``$TMPDIR`` when the cache
    directory cannot be written."""
    import contextlib
    import os
    import tempfile

    from graphscale.data.cache import default_cache_dir

    name = f"graphscale-error-{os.getpid()}.log"
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    try:
        (folder / "errors").mkdir(parents=True, exist_ok=True)
        path = folder / "errors" / name
        path.write_text(text)
    except OSError:
        path = Path(tempfile.gettempdir()) / name
        path.write_text(text)
        return path
    logs = sorted(path.parent.glob("graphscale-error-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[MAX_ERROR_LOGS:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return path


def _one_line_with_log(line: str, traceback_text: str, debug: bool, cache_dir: str | None = None) -> str:
    """``line`` and where its traceback is (a log file; with ``--debug`` the traceback itself, printed before)."""
    if debug:
        print(traceback_text.rstrip(), file=sys.stderr)
        return line
    try:
        return f"{line} (traceback in {write_error_log(traceback_text, cache_dir)}; --debug prints it)"
    except OSError:
        return f"{line} (--debug prints the traceback)"


def main(argv: list[str] | None = None) -> int:
    """Run ``graphscale ARGV``; a bad option or input prints one line ``graphscale: error: ...`` on stderr and
    returns 2; a failed run (a worker's error, a diverged loss, an environment problem) prints one line too and
    returns 1, its traceback kept in a log file whose path the line names (``--debug``: printed instead)."""
    import traceback

    from graphscale.errors import RunError

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    try:
        return args.func(args) or 0
    except (ValueError, KeyError, FileNotFoundError, FileExistsError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        if debug:
            traceback.print_exc()
        print(f"graphscale: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphscale: interrupted", file=sys.stderr)
        return 130
    except RunError as err:  # its message is complete (graphscale.errors)
        if debug:
            traceback.print_exc()
        print(f"graphscale: error: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - one line for the user, the traceback kept (module docstring)
        launch = sys.modules.get("graphscale.distributed.launch")  # not imported: nothing could raise WorkerError
        if launch is not None and isinstance(err, launch.WorkerError):
            if not err.worker_traceback:  # killed or crashed: its exit status is all there is, no log to keep
                print(f"graphscale: error: {err.one_line()}", file=sys.stderr)
                return 1
            line, text = err.one_line(), str(err)
        else:
            from graphscale.distributed.launch import summarize_exception

            line, text = summarize_exception(err)[0], traceback.format_exc()
        cache_dir = getattr(args, "cache_dir", None)
        print(f"graphscale: error: {_one_line_with_log(line, text, debug, cache_dir)}", file=sys.stderr)
        return 1


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM: unwind (every writer's cleanup runs, its temporary removed) and exit 143 (128 + SIGTERM)."""
    raise SystemExit(128 + signum)


def console_entry() -> None:
    """The ``graphscale`` command and ``python -m graphscale``: :func:`main`, then exit with its code; SIGTERM
    unwinds the command as Ctrl-C does (:func:`_terminated`: the temporaries of partition stores, graph directories
    and outputs being written are removed) and exits 143. A torchrun
    rank exits without interpreter teardown (:func:`~graphscale.distributed.launch.exit_without_teardown`): a rank
    hung there would keep every torchrun agent of the job waiting after the results are written."""
    import signal

    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # SIGTERM unwinds like Ctrl-C: temporaries are removed
        signal.signal(signal.SIGTERM, _terminated)
    code = main()
    launch = sys.modules.get("graphscale.distributed.launch")  # not imported: no process group was joined
    if launch is not None and launch.torchrun_detected():
        launch.exit_without_teardown(code)
    sys.exit(code)


if __name__ == "__main__":
    console_entry()

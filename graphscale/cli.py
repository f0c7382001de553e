"""The ``graphscale`` command: train, datasets, info, bench."""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys

from graphscale.bench.table import format_bytes, format_table
from graphscale.distributed.launch import WorkerError
from graphscale.metrics.ledger import moved_bytes

#: ``graphscale bench NAME`` -> module with ``add_arguments(parser)`` and ``run(args)``.
BENCHES = {
    "peers": ("graphscale.bench.peers", "2-layer GCN epoch: graphscale against PyG (time and peak memory)"),
    "sampler": ("graphscale.bench.sampler", "neighbour-sampler throughput in sampled edges per second"),
    "partition": ("graphscale.bench.partition",
                  "partitioner replication factor, peak memory, pass throughput, time ratios"),
    "minibatch": ("graphscale.bench.minibatch", ("mini-batch data vs split parallelism: feature bytes, redundant "
                  "edges, split time and quality (GSplit Tables 1, 2, 4, 5)")),
    "offload": ("graphscale.bench.offload",
                "HongTu offload: replication factor, host traffic by dedup mode, memory vs K (Tables 3/8, Fig. 10)"),
    "memory": ("graphscale.bench.memory", ("OS-measured memory per worker (anonymous / file-backed / RSS peak) "
               "next to the tracked design figure, single against the distributed strategies")),
}

#: command-line flag -> (config section or None for top level, field)
TRAIN_OPTIONS = {
    "dataset": ("data", "dataset"), "feature_norm": ("data", "feature_norm"), "model": ("model", "name"), "hidden": ("model", "hidden"),
    "layers": ("model", "layers"), "dropout": ("model", "dropout"), "heads": ("model", "heads"),
    "alpha": ("model", "alpha"), "theta": ("model", "theta"),
    "lr": ("optim", "lr"), "weight_decay": ("optim", "weight_decay"), "epochs": ("optim", "epochs"),
    "strategy": ("strategy", "name"), "workers": ("strategy", "workers"),
    "partitioner": ("strategy", "partitioner"), "balance": ("strategy", "balance"),
    "partitions": ("strategy", "partitions"), "cache_dir": (None, "cache_dir"), "minibatch": ("strategy", "minibatch"),
    "fanouts": ("strategy", "fanouts"), "batch_size": ("strategy", "batch_size"),
    "chunks": ("strategy", "chunks"), "dedup": ("strategy", "dedup"), "recompute": ("strategy", "recompute"),
    "memory_budget": ("strategy", "memory_budget"),
    "parts": ("strategy", "parts"), "average_every": ("strategy", "average_every"),
    "average_optimizer": ("strategy", "average_optimizer"), "state_dir": ("strategy", "state_dir"),
    "shm_dir": ("strategy", "shm_dir"),
    "timeout": ("strategy", "timeout"),
    "cache": ("strategy", "cache"), "cache_fraction": ("strategy", "cache_fraction"),
    "seed": (None, "seed"), "dtype": (None, "dtype"), "device": (None, "device"), "json": (None, "json"),
    "checkpoint": (None, "checkpoint"), "resume": (None, "resume"), "progress": (None, "progress"),
}


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every option defaults to None so that only what the user gave overrides the preset / TOML file."""
    p.add_argument("--config", help="TOML file with [data], [model], [optim], [strategy] tables")
    p.add_argument("--dataset", help="dataset spec (see `graphscale datasets`); default cora, or the dataset of "
                                     "--partitions")
    p.add_argument("--feature-norm", choices=["auto", "row", "none"],
                   help="row-normalise features (auto: when they are non-negative, as GCN/GAT preprocess Cora)")
    p.add_argument("--model", help="gcn | sage | gat | gcnii | resgcn; default gcn")
    p.add_argument("--hidden", type=int, help="hidden width (per head for GAT)")
    p.add_argument("--layers", type=int, help="message-passing layers")
    p.add_argument("--dropout", type=float)
    p.add_argument("--heads", type=int, help="GAT attention heads")
    p.add_argument("--alpha", type=float, help="GCNII initial-residual weight")
    p.add_argument("--theta", type=float, help="GCNII identity-mapping strength")
    p.add_argument("--lr", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--epochs", type=int)
    p.add_argument("--strategy", help="training strategy (single, graph-parallel, ...); default single")
    p.add_argument("--workers", type=int, help="worker processes (gloo on CPU, NCCL on GPUs)")
    p.add_argument("--partitioner", help="vertex partitioner for partitioned strategies: metis | random")
    from graphscale.partition.metis import BALANCE_CHOICES

    p.add_argument("--balance", choices=BALANCE_CHOICES,
                   help="metis: what the parts balance: vertex counts, in-edges (computation), or in-edges and "
                        "training vertices as a second constraint (default edges+train)")
    p.add_argument("--partitions", metavar="DIR",
                   help="graph-parallel: train from this partition store (written by `graphscale partition`; its "
                        "part count must equal --workers); default: partition into the cache directory")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where runs keep the partition stores and graph directories they write, reused by later "
                        "runs (default $GRAPHSCALE_CACHE_DIR or ~/.cache/graphscale)")
    p.add_argument("--minibatch", action="store_const", const=True, help="single: sampled mini-batch training")
    p.add_argument("--fanouts", type=_int_list, help="per-layer sampling fanouts, e.g. 10,10")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--chunks", type=int, help="offload: chunks per partition K (default 1)")
    p.add_argument("--dedup", choices=["baseline", "inter", "intra", "reorg"],
                   help="offload: host-device communication dedup, each adding to the previous (default reorg)")
    p.add_argument("--recompute", choices=["auto", "hybrid", "recompute", "none"],
                   help="offload: intermediate data per layer (default auto: the cost model decides)")
    p.add_argument("--memory-budget", help="offload: per-worker device-memory budget, e.g. 256MiB; picks the smallest K")
    p.add_argument("--parts", type=int, help="model-averaging: partitions of the store the run writes (default: "
                                             "one per worker; more than --workers trains them in turn)")
    p.add_argument("--average-every", type=int, help="model-averaging: average the models every N epochs (default 1)")
    p.add_argument("--average-optimizer", action="store_true", default=None,
                   help="model-averaging: also average Adam's moments (default: kept per partition, as SDT-GNN)")
    p.add_argument("--state-dir", metavar="DIR", help="model-averaging: per-partition states when a worker trains "
                                                      "several partitions or the run keeps checkpoints (default: "
                                                      "under the cache directory)")
    p.add_argument("--shm-dir", metavar="DIR",
                   help="offload: directory of the host arrays the workers share (default /dev/shm)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="seconds a collective waits for every worker before the run fails (default 600)")
    p.add_argument("--cache", choices=["none", "pagraph", "quiver"],
                   help="data-parallel feature cache: none (DGL-like), pagraph, quiver; default none")
    p.add_argument("--cache-fraction", type=float,
                   help="data-parallel / split-parallel: feature rows cached per worker, as a fraction of all vertices")
    p.add_argument("--seed", type=int)
    p.add_argument("--repeat", type=int, default=1, help="train N times with seeds seed..seed+N-1 and report mean/std")
    p.add_argument("--dtype", choices=["float32", "float64"])
    p.add_argument("--device", choices=["auto", "cpu", "cuda"])
    p.add_argument("--json", help="write a machine-readable report to this path")
    p.add_argument("--checkpoint", help="save model + optimiser here after every epoch")
    p.add_argument("--resume", action="store_const", const=True, help="continue from --checkpoint")
    p.add_argument("--no-progress", dest="progress", action="store_const", const=False, help="hide the progress bar")


def overrides_from_args(args: argparse.Namespace) -> dict:
    out: dict = {}
    for flag, (section, field) in TRAIN_OPTIONS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        (out.setdefault(section, {}) if section else out)[field] = value
    return out


def cmd_train(args: argparse.Namespace) -> int:
    from graphscale.config import build_config
    from graphscale.run import run, write_json

    base = build_config(overrides_from_args(args), args.config)
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    rows, reports = [], []
    for i in range(args.repeat):
        config = build_config({**overrides_from_args(args), "seed": base.seed + i}, args.config)
        if args.repeat > 1 and config.json:
            config.json = None  # one combined report below
        report = run(config)
        reports.append(report)
        final = report["final"]
        os_mem = max((m for m in final.get("os_memory_per_worker") or [] if m), default=None,
                     key=lambda m: m["peak_rss"])  # the OS figures of the worker with the largest resident set
        rows.append({"seed": config.seed, "best epoch": final["best_epoch"], "val acc": final["val_acc"],
                     "test acc": final["test_acc"], "s/epoch": final["mean_epoch_seconds"],
                     "bytes/epoch": format_bytes(moved_bytes(final["bytes_per_epoch"])),
                     "peak mem/worker": format_bytes(max(final["peak_memory_per_worker"] or [0])),
                     "RSS peak/worker": format_bytes(os_mem["peak_rss"]) if os_mem else "-",
                     "anon/file": (f"{format_bytes(os_mem['peak_anon'])} / {format_bytes(os_mem['peak_file'])}"
                                   if os_mem and os_mem.get("peak_anon") is not None else "-")})
    graph = reports[0]["graph"]
    title = (f"{base.model.name} on {graph['name']} ({graph['nodes']:,} nodes, {graph['edges']:,} edges), "
             f"strategy {base.strategy.name}, {base.strategy.workers} worker(s), {base.optim.epochs} epochs")
    print(format_table(rows, title=title))
    tests = [r["final"]["test_acc"] for r in reports]
    if len(tests) > 1:
        print(f"test accuracy over {len(tests)} seeds: {statistics.mean(tests):.4f} +- {statistics.stdev(tests):.4f}")
        if args.json:
            write_json({"runs": reports, "test_acc_mean": statistics.mean(tests),
                        "test_acc_std": statistics.stdev(tests)}, args.json)
    else:
        print(f"test accuracy at best validation: {tests[0]:.4f}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from graphscale.data.datasets import DATASET_HELP
    print(format_table([{"spec": spec, "description": text} for spec, text in DATASET_HELP], title="datasets"))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    if args.dataset:
        from graphscale.data.datasets import describe_dataset
        summary = describe_dataset(args.dataset)
        print(format_table([{"item": k, "value": f"{v:,}" if isinstance(v, int) else str(v)}
                            for k, v in summary.items()], title=f"dataset {args.dataset}"))
        return 0
    import torch
    import torch.distributed as dist

    from graphscale.run import environment
    rows = [{"item": k, "value": str(v)} for k, v in environment().items()]
    rows.append({"item": "torch threads", "value": str(torch.get_num_threads())})
    rows.append({"item": "gloo available", "value": str(dist.is_available() and dist.is_gloo_available())})
    rows.append({"item": "nccl available", "value": str(dist.is_available() and dist.is_nccl_available())})
    for i in range(torch.cuda.device_count()):
        rows.append({"item": f"cuda:{i}", "value": torch.cuda.get_device_name(i)})
    for name in ("numpy", "scipy", "numba", "pymetis", "torch_geometric", "ogb"):
        try:
            module = importlib.import_module(name)
            rows.append({"item": name, "value": getattr(module, "__version__", "installed")})
        except ImportError:
            rows.append({"item": name, "value": "not installed"})
    from graphscale.registry import MODELS, STRATEGIES
    rows.append({"item": "strategies", "value": ", ".join(STRATEGIES.names())})
    rows.append({"item": "models", "value": ", ".join(MODELS.names())})
    print(format_table(rows, title="graphscale info"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphscale", description="Scalable GNN training on torch.distributed")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a model", description="Train a GNN with a chosen strategy")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    sub.add_parser("datasets", help="list dataset specs").set_defaults(func=cmd_datasets)
    info = sub.add_parser("info", help="versions, devices and backends; or a dataset's counts with --dataset",
                          description="Versions, devices and backends; with --dataset, a dataset's counts instead")
    info.add_argument("--dataset", help="load this dataset spec (see `graphscale datasets`) and print its counts")
    info.set_defaults(func=cmd_info)
    part = sub.add_parser("partition", help="partition a dataset or an edge stream into a partition store",
                          description="Partition a dataset (or a bare edge-stream file) into a partition store")
    importlib.import_module("graphscale.partition.command").add_arguments(part)
    part.set_defaults(func=lambda a: importlib.import_module("graphscale.partition.command").run(a) and 0)
    bench = sub.add_parser("bench", help="benchmarks that print tables (and can write plots)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for name, (module, text) in BENCHES.items():
        p = bench_sub.add_parser(name, help=text, description=text)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(func=lambda a, m=module: importlib.import_module(m).run(a) and 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, KeyError, FileNotFoundError, FileExistsError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"graphscale: error: {message}", file=sys.stderr)
        return 2
    except WorkerError as err:
        print(f"graphscale: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("graphscale: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

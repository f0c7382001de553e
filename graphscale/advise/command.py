"""``graphscale advise``: every strategy's predicted cost on this graph and machine, ranked, with the recommendation.

``--dataset SPEC`` or ``--partitions DIR`` (a store: its dataset, and for the partition-local strategies its
parts), ``--model``, ``--workers``; ``--device-memory SIZE`` is the per-worker budget (default: on CPU ``--host-memory``
when given, else the profile's free memory, shared by the workers on CPU). Infeasible configurations are listed with the reason; the recommendation
is the fastest that fits, preferring exact strategies within 10% of the fastest. ``--profile`` measures the
machine again (:mod:`graphscale.advise.profile`); ``--synthetic-profile`` uses fixed rates (tests).

``single`` is weighed twice: full-graph, and mini-batch (``--minibatch``, its sampling options at their defaults);
the mini-batch row's ``run it`` line carries ``--minibatch``. The sampled strategies (``single --minibatch``,
``data-parallel``, ``split-parallel``) sample the default fanout at every model layer (``--fanouts 10,10,10`` for 3
layers: :func:`~graphscale.advise.configs.per_layer_fanouts`), which their ``run it`` line then carries. Every
candidate is checked as ``graphscale train`` checks a run (:func:`~graphscale.advise.configs.refusal`): one it would
refuse is listed with the reason, never predicted or recommended. The ``run it`` line carries ``--device``, the
device predicted for (``train``'s default ``auto`` would pick CUDA where there is one).

``--host-memory SIZE`` is also the budget of the runs: the mini-batch strategies (``single --minibatch``,
``data-parallel``, ``split-parallel``) are priced with the hot-row cache it sizes (:mod:`graphscale.cost.host_rows`: the cache's rows
and per-vertex arrays in the memory, the misses read from disk in the time); the table's ``host cache`` column
names the cache's rows and bytes and its hit rate over the epoch's reads.

``--task link`` (with ``--decoder`` and ``--link-split``) predicts link-prediction runs: the strategies that cannot
train it are listed with the reason (:func:`~graphscale.advise.configs.refusal`), the others with the link scoring's
bytes, memory and time in their predictions.
"""

from __future__ import annotations

import argparse
import sys

from graphscale.advise.configs import candidate_name, candidates, is_sampled_single, predict_config
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes

#: an exact strategy within this factor of the fastest is preferred to a faster approximate one
EXACT_SLACK = 1.10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``graphscale advise``'s options: those of a run made from their declarations (:mod:`graphscale.flags`)."""
    from graphscale.flags import NOT_GIVEN, add_declared, add_own

    preset = "the model's preset, as train"
    add_declared(parser, "dataset")
    add_declared(parser, "partitions", note="here: the partition-local strategies are predicted on this store")
    add_declared(parser, "model")
    add_declared(parser, "hidden", default=None, why=preset)
    add_declared(parser, "layers", default=None, why=preset)
    add_declared(parser, "optimizer", note="here: its per-parameter state is in every prediction's memory")
    add_declared(parser, "task", note="here: the task every candidate is predicted for")
    add_declared(parser, "decoder", default=NOT_GIVEN, note="here: its parameters and scoring are in the predictions")
    add_declared(parser, "link_split", default=NOT_GIVEN, note="here: the training pairs the predictions score")
    add_declared(parser, "workers", default=2, note="here: the workers available",
                 why="the fewest the distributed strategies run on")
    add_declared(parser, "device_memory", note="here: the budget each prediction must fit (default: the machine "
                                               "profile's free memory, shared by the workers on CPU)")
    add_declared(parser, "host_memory", note="here: on CPU, each worker's budget when --device-memory is not "
                 "given; and the budget the mini-batch strategies size their hot-row cache from (its rows and hit "
                 "rate are shown)")
    add_own(parser, "--device", default="cpu", choices=("cpu", "cuda"),
            help="the device the workers train on (default cpu)",
            differs="the device predicted for: cpu or cuda, no auto (a prediction needs one)")
    add_declared(parser, "cache_dir", note="here also the machine profile")
    add_declared(parser, "json", note="here: the predictions")
    parser.add_argument("--profile", action="store_true", help="measure this machine again before predicting")
    parser.add_argument("--synthetic-profile", action="store_true", help=argparse.SUPPRESS)


def base_config(args: argparse.Namespace):
    """The run configuration the candidates share (``single`` as placeholder strategy)."""
    from graphscale.config import build_config

    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    model = {"name": args.model}
    if args.hidden is not None:
        model["hidden"] = args.hidden
    if args.layers is not None:
        model["layers"] = args.layers
    overrides = {"data": {"dataset": args.dataset} if args.dataset else {}, "model": model, "progress": False,
                 "device": args.device, "optim": {"optimizer": args.optimizer},
                 "task": getattr(args, "task", "node")}  # bench advise's arguments have no task
    overrides.update({k: getattr(args, k) for k in ("decoder", "link_split") if getattr(args, k, None) is not None})
    if args.cache_dir:
        overrides["cache_dir"] = args.cache_dir
    if getattr(args, "host_memory", ""):  # the runs' budget: the mini-batch strategies' hot-row caches
        overrides["host_memory"] = args.host_memory
    config = build_config(overrides)
    if args.partitions:
        from graphscale.partition.store import check_partition_store

        try:
            meta = check_partition_store(args.partitions)
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(f"--partitions {args.partitions}: {err}") from None
        config.data.dataset = config.data.dataset or meta.get("dataset") or ""
        if not config.data.dataset:
            raise ValueError(f"--partitions {args.partitions}: the store names no dataset; pass --dataset too")
    return config


def machine_profile(args: argparse.Namespace, config):
    """The synthetic profile (tests), or this host's, calibrated for the model on ``--workers``
    (:func:`graphscale.advise.calibrate.calibrated_profile`)."""
    from graphscale.advise.calibrate import calibrated_profile
    from graphscale.cost.machine import synthetic

    if args.synthetic_profile:
        return synthetic(args.device)
    return calibrated_profile(config, args.workers, refresh=args.profile,
                              warn=lambda line: print(f"graphscale: warning: {line}", file=sys.stderr),
                              note=lambda line: print(f"graphscale: {line}", file=sys.stderr))


def budget_of(args: argparse.Namespace, machine) -> int:
    from graphscale.metrics.units import parse_bytes

    if args.device_memory:
        return parse_bytes(args.device_memory, "--device-memory")
    if args.device == "cpu" and getattr(args, "host_memory", ""):
        from graphscale.metrics.host_memory import resolve_host_memory

        return resolve_host_memory(args.host_memory)  # advise's own flag (bench advise has none)
    return machine.free_memory if args.device == "cuda" else machine.free_memory // max(args.workers, 1)


def advise(args: argparse.Namespace) -> dict:
    """Predict every candidate; returns ``{"predictions": [...], "recommended": index, "budget": bytes}``."""
    config = base_config(args)
    host_budget = args.device == "cpu" and getattr(args, "host_memory", "")
    if (args.device_memory or host_budget) and not args.synthetic_profile:
        from graphscale.cost.machine import synthetic

        # a budget below every configuration's need is refused before the host is measured or calibrated: the
        # uncalibrated memory prediction is a lower bound (calibration only adds what the model leaves out)
        rank(config, args.workers, synthetic(args.device), budget_of(args, None), args.partitions)
    machine = machine_profile(args, config)
    return rank(config, args.workers, machine, budget_of(args, machine), args.partitions)


def rank(config, workers: int, machine, budget: int, partitions: str = "") -> dict:
    """Predict every candidate of ``config`` on ``workers`` workers against the per-worker ``budget`` and pick the
    recommendation (module docstring); ``partitions``: a store the partition-local strategies read."""
    predictions, configs = [], []
    from graphscale.advise.configs import refusal
    from graphscale.cost.prediction import Prediction

    for candidate in candidates(config, workers):
        if partitions and candidate.strategy.name in ("graph-parallel", "model-averaging"):
            candidate.strategy.partitions = partitions
            candidate.strategy.parts = 0
        reference = candidate.strategy.name == "single" and not is_sampled_single(candidate)
        why = refusal(candidate)
        if why and reference:  # what train refuses of the full-graph reference it refuses of every candidate
            raise ValueError(why)
        if why:  # listed with the reason, never prepared or predicted
            predictions.append(Prediction(candidate.strategy.name, candidate.strategy.workers,
                                          {"minibatch": True} if is_sampled_single(candidate) else {},
                                          fits=False, reason=why))
            configs.append(candidate)
            continue
        # full-graph single, the first candidate: a bad dataset fails here, naming the option
        if reference:
            try:
                prediction = predict_config(candidate, machine)
            except (ValueError, FileNotFoundError, KeyError) as err:
                raise ValueError(f"--dataset {config.data.dataset or 'cora'}: {str(err).splitlines()[0]}") from None
            predictions.append(prediction.check_fit(budget, config.device))
            configs.append(candidate)
            continue
        try:
            prediction = predict_config(candidate, machine)
        except ValueError as err:
            prediction = Prediction(candidate.strategy.name, candidate.strategy.workers, fits=False,
                                    reason=str(err).splitlines()[0])
        predictions.append(prediction.check_fit(budget, config.device))
        configs.append(candidate)
    feasible = [i for i, p in enumerate(predictions) if p.fits]
    if not feasible:
        sized = [p for p in predictions if p.memory]
        closest = min(sized, key=lambda p: p.need(config.device)) if sized else predictions[0]
        need = format_bytes(closest.need(config.device))
        raise ValueError(f"--device-memory {format_bytes(budget)}: no configuration fits; the smallest requirement "
                         f"is {need} per worker ({closest.strategy} on {closest.workers} worker(s)); give a "
                         f"--device-memory of at least {need}, more --workers, or a smaller model or dataset")
    order = sorted(feasible, key=lambda i: predictions[i].seconds)
    fastest = predictions[order[0]].seconds
    exact = [i for i in order if predictions[i].exact and predictions[i].seconds <= EXACT_SLACK * fastest]
    best = exact[0] if exact else order[0]
    return {"predictions": predictions, "configs": configs, "recommended": best, "budget": budget,
            "machine": machine, "ranking": order}


def option_words(config, args: argparse.Namespace) -> list[str]:
    """The ``graphscale train`` flags of ``config`` beyond strategy, workers, model and dataset; always
    ``--device``, the device the prediction is for, and ``--oversubscribe`` for more workers than this machine's
    CPU cores (advise prices the workers asked for)."""
    from graphscale.options.shared import Sampling

    sc, words = config.strategy, []
    if is_sampled_single(config):
        words.append("--minibatch")
    if args.partitions and sc.partitions:
        words += ["--partitions", args.partitions]
    if args.hidden is not None:
        words += ["--hidden", str(args.hidden)]
    if args.layers is not None:
        words += ["--layers", str(args.layers)]
    if config.optim.optimizer != "adam":
        words += ["--optimizer", config.optim.optimizer]
    if config.task != "node":
        words += ["--task", config.task]
    if getattr(args, "decoder", None) is not None:
        words += ["--decoder", config.decoder]
    if getattr(args, "link_split", None) is not None:
        words += ["--link-split", ",".join(map(str, config.link_split))]
    if sc.name == "model-averaging" and not sc.partitions:
        words += ["--parts", str(sc.parts)]
    if list(sc.fanouts) != Sampling().fanouts:  # one per model layer (configs.per_layer_fanouts)
        words += ["--fanouts", ",".join(map(str, sc.fanouts))]
    words += ["--device", config.device]  # the device predicted for: train's default auto picks CUDA where it can
    from graphscale.distributed.launch import cpu_count

    if sc.workers > cpu_count():  # the workers advised for, more than this machine's cores: train refuses without
        words.append("--oversubscribe")
    if getattr(args, "host_memory", ""):  # the budget the predictions were made for
        words += ["--host-memory", args.host_memory]
    return words


def command_line(config, args: argparse.Namespace) -> str:
    """The ``graphscale train`` line that runs ``config``."""
    sc = config.strategy
    words = ["graphscale", "train", "--strategy", sc.name, "--workers", str(sc.workers), "--model", args.model]
    if not (args.partitions and sc.partitions) and config.data.dataset:
        words += ["--dataset", config.data.dataset]
    return " ".join(words + option_words(config, args))


def reason(prediction, best, fastest) -> str:
    """One sentence on why ``prediction`` ranks where it does."""
    if not prediction.fits:
        return prediction.reason
    if prediction is best:
        extra = "" if best is fastest else f" (within {EXACT_SLACK - 1:.0%} of the fastest, and exact)"
        return f"recommended: the fastest configuration that fits{extra}"
    return (f"{prediction.seconds / max(best.seconds, 1e-12):.1f}x the recommendation's time; "
            f"{prediction.semantics}")


def host_cache_cell(cache: dict) -> str:
    """A mini-batch prediction's hot-row cache (:mod:`graphscale.cost.host_rows`): its rows and bytes per worker,
    the hit rate over the epoch's host reads and where the misses come from; ``-`` for the other strategies."""
    if not cache:
        return "-"
    if not cache["rows"] and not cache["from_disk"]:
        return "none (the table fits the page cache)"
    where = "disk" if cache["from_disk"] else "page cache"
    return (f"{cache['rows']:,} rows ({format_bytes(cache['bytes'])}), {cache['hit_rate']:.0%} hits, "
            f"misses from {where}")


def run(args: argparse.Namespace) -> int:
    result = advise(args)
    preds, configs, best = result["predictions"], result["configs"], result["recommended"]
    fastest = preds[result["ranking"][0]]
    rank = {i: r + 1 for r, i in enumerate(result["ranking"])}
    rows = []
    for i in sorted(range(len(preds)), key=lambda i: (rank.get(i, 99), i)):
        p = preds[i]
        rows.append({"rank": rank.get(i, "-"), "strategy": p.strategy, "workers": p.workers,
                     "options": " ".join(f"{k}={v}" for k, v in p.options.items()) or "-",
                     "s/epoch": p.seconds if p.fits or p.memory else None,
                     "tracked/worker": format_bytes(p.memory) if p.memory else "-",
                     "RSS/worker": format_bytes(p.os_memory) if p.memory else "-",
                     "bytes/epoch": format_bytes(p.moved) if p.memory else "-",
                     "host cache": host_cache_cell(p.host_cache),
                     "accuracy": "exact" if p.exact else "approx.", "why": reason(p, preds[best], fastest)})
    print(format_table(rows))
    print(f"recommended: {candidate_name(configs[best])} on {preds[best].workers} worker(s) — "
          f"{preds[best].semantics}")
    print(f"run it: {command_line(configs[best], args)}")
    if args.json:
        from graphscale.data.formats import write_json_atomic

        write_json_atomic(args.json, {"budget": result["budget"], "machine": result["machine"].to_dict(),
                                      "recommended": best,
                                      "predictions": [dict(p.to_dict(), command=command_line(c, args))
                                                      for p, c in zip(preds, configs)]}, option="--json")
    return 0

"""One training run end to end: launch workers, train, merge their histories into a report.

``run(config)`` is what ``graphscale train`` and the Python API (:func:`graphscale.train`, which builds the
configuration from keywords and returns the report typed) call::

    from graphscale.config import build_config
    from graphscale.run import run
    report = run(build_config({"model": {"name": "gat"}, "strategy": {"name": "graph-parallel", "workers": 2}}))
    print(report["final"]["test_acc"])
"""

from __future__ import annotations

import math
import os
import platform
import time

import torch

from graphscale import __version__, allocator
from graphscale.checkpoint import check_resume, read_checkpoint
from graphscale.config import RunConfig, to_dict
from graphscale.data.formats import write_json_atomic
from graphscale.data.handle import PARTITION_LOCAL, DataHandle
from graphscale.data.output_lock import output_locks
from graphscale.distributed.env import DistEnv
from graphscale.distributed.launch import is_main_process, launch, resolve_device
from graphscale.metrics.memory import max_os_memory, os_memory
from graphscale.options.shared import SPLITS
from graphscale.prepare import prepare_data
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import metric_name
from graphscale.tasks.link import attach_decoder, output_width
from graphscale.validation import check_edge_weights, check_strategy_weights, check_user_model, validate


def train_worker(env: DistEnv, config: RunConfig, data: DataHandle, parent_baseline: tuple | None = None) -> dict:
    """Body of one worker: build the model, set up the strategy on its view of the data, train.

    ``parent_baseline`` is ``(pid, OSMemory)`` read by :func:`run` before it prepared the data; a worker running
    in that process (world size 1) uses it as its memory baseline, a spawned worker reads its own first.
    """
    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model, is_decoupled
    from graphscale.trainer import Trainer

    in_parent = parent_baseline is not None and parent_baseline[0] == os.getpid()
    baseline = parent_baseline[1] if in_parent else os_memory()

    torch.manual_seed(config.seed)
    dtype = getattr(torch, config.dtype)
    model = build_model(config.model, input_width(config.data.features, data.num_features),
                        output_width(config, data.num_classes), seed=config.seed, dtype=dtype,
                        decoupled=is_decoupled(config))
    model = attach_decoder(model.to(env.device), config)
    strategy = STRATEGIES.get(config.strategy.name)()
    try:
        strategy.setup(data, model, env, config)
        if allocator.state()["retaining"]:
            allocator.trim()  # setup's temporaries go back to the OS instead of staying resident through training
        try:
            result = Trainer(strategy, env, config, memory_baseline=baseline).fit()
        finally:
            strategy.teardown()
    except torch.cuda.OutOfMemoryError as err:
        raise ValueError(device_memory_message(env.device, config, err)) from None
    result["graph"] = dict(data.summary)
    result["allocator"] = allocator.state()  # what this worker's process really ran (library, settings)
    return result


def device_memory_message(device: torch.device, config: RunConfig, err: Exception) -> str:
    """One line for a run that does not fit its device's memory, naming the fixes."""
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (f"the run does not fit in the memory of {device} with --strategy {config.strategy.name} "
            f"({first}); keep vertex data in host memory with --strategy offload (more --chunks), split the graph "
            "over more --workers, or lower --hidden / use --feature-dtype bfloat16")


def merge_histories(results: list[dict]) -> list[dict]:
    """Per epoch: the (global) loss and metrics, the slowest worker's time, bytes and memory per worker.

    Memory per worker is the strategy's tracked peak (``peak_memory_per_worker``) and what the OS measured
    (``os_memory_per_worker``: peak RSS, sampled anonymous / file-backed peaks, baseline; ``None`` where a
    record has none, e.g. epochs restored from an older checkpoint). ``extra_per_worker`` keeps each worker's
    strategy-specific numbers (``EpochStats.extra``, e.g. pipeline's cut and stale fractions).
    """
    epochs = []
    for records in zip(*(r["history"] for r in results)):
        first = records[0]
        bytes_total: dict[str, int] = {}
        for rec in records:
            for cat, n in rec["bytes"].items():
                bytes_total[cat] = bytes_total.get(cat, 0) + n
        epochs.append({
            "epoch": first["epoch"], "loss": first["loss"],
            **{k: v for k, v in first.items() if k.startswith(tuple(f"{s}_" for s in SPLITS))},
            "seconds": max(rec["seconds"] for rec in records),
            "bytes": bytes_total,
            "bytes_per_worker": [rec["bytes"] for rec in records],
            "peak_memory_per_worker": [rec["peak_memory"] for rec in records],
            "os_memory_per_worker": [rec.get("os_memory") for rec in records],
            "extra_per_worker": [rec.get("extra", {}) for rec in records],
        })
    return epochs


#: how far above the trivial predictor's validation score a run's best must be to count as learning
TRIVIAL_MARGIN = 1e-3
#: a training loss larger than this many times the first epoch's is reported as divergence (:func:`report_warnings`)
DIVERGENCE_FACTOR = 1e3
#: epochs after which a best epoch that is the first one means training never improved the model
NO_IMPROVEMENT_EPOCHS = 5


def trivial_baseline(data: DataHandle) -> dict | None:
    """The trivial predictor's scores on the run's labels (:func:`graphscale.metrics.baseline.trivial_scores`);
    ``None`` where the parent has no whole graph (a partition store) or no labelled training split."""
    from graphscale.metrics.baseline import trivial_scores

    try:
        graph = data.open_graph()
    except ValueError:  # partition-local: the labels are spread over the store's parts
        return None
    if graph is None or graph.y is None or graph.train_mask is None:
        return None
    n = graph.num_nodes
    masks = {s: torch.as_tensor(getattr(graph, f"{s}_mask")) if getattr(graph, f"{s}_mask") is not None
             else torch.zeros(n, dtype=torch.bool) for s in ("train", "val", "test")}
    return trivial_scores(torch.as_tensor(graph.y), masks)


def beats_trivial(best: dict, baseline: dict | None) -> bool | None:
    """Whether the best validation score is above the trivial predictor's; ``None`` where either is unknown."""
    if baseline is None or math.isnan(best.get("val_acc", math.nan)) or math.isnan(baseline["val_acc"]):
        return None
    return best["val_acc"] > baseline["val_acc"] + TRIVIAL_MARGIN


def report_warnings(epochs: list[dict], best: dict, metric: str, baseline: dict | None = None) -> list[str]:
    """What the report's numbers do not say by themselves: an empty validation split (best epoch by training loss,
    no validation score), an empty test split (no test score), a best epoch that is the first of many (training
    never improved on it: the scores are those of a barely trained model), a loss that diverged (grew past
    :data:`DIVERGENCE_FACTOR` times the first epoch's: the optimiser may keep it finite, so the non-finite check
    never fires), a best validation score not above a trivial predictor's (``baseline``:
    :func:`trivial_baseline`; the model did not learn), a multi-label model that predicts nothing."""
    out = []
    if epochs and all(math.isnan(e.get("val_acc", math.nan)) for e in epochs):
        out.append("the validation split is empty: no validation score; the best epoch is the one with the lowest "
                   "training loss")
    if epochs and all(math.isnan(e.get("test_acc", math.nan)) for e in epochs):
        out.append("the test split is empty: no test score is reported")
    first = epochs[0]["epoch"] if epochs else 0
    if best.get("by", "val_acc") == "val_acc" and best["epoch"] == first and len(epochs) >= NO_IMPROVEMENT_EPOCHS \
            and not math.isnan(best["val_acc"]):
        last = epochs[-1]
        out.append(f"validation {metric} never improved after epoch {first + 1} of {len(epochs)} (last epoch: "
                   f"{last['val_acc']:.4f}): the reported scores are those of a barely trained model; check --lr, "
                   "--features and the labels")
    if beats_trivial(best, baseline) is False:
        out.append(f"the model did not learn: its best validation {metric} {best['val_acc']:.4f} is not better than "
                   f"a trivial predictor's {baseline['val_acc']:.4f} ({baseline['predictor']}, ignoring the graph and "
                   "the features); check --features, --lr, --epochs and the labels")
    losses = [e["loss"] for e in epochs if math.isfinite(e.get("loss", math.nan))]
    if losses and losses[0] > 0 and max(losses) > DIVERGENCE_FACTOR * losses[0]:
        worst = max(range(len(losses)), key=losses.__getitem__)
        out.append(f"the training loss diverged: {losses[worst]:.4g} at its peak, over {DIVERGENCE_FACTOR:g} times "
                   f"the first epoch's {losses[0]:.4g}; the learning rate is likely too large: lower --lr")
    if metric == "micro-f1" and epochs and epochs[-1].get("train_acc") == 0.0:
        out.append("the model predicts no label for any training vertex at the last epoch (micro-f1 0): it has "
                   "collapsed to all-negative outputs")
    return out


def link_split_warning(config: RunConfig, data: DataHandle) -> list[str]:
    """``--task link``: the split's warning (:meth:`graphscale.tasks.split.LinkSplit.warning`) as a report warning;
    the split is drawn here, in the parent, so that a split leaving a set empty fails before any worker starts."""
    if config.task != "link":
        return []
    from graphscale.tasks.link_store import link_folder, read_link_meta
    from graphscale.tasks.split import split_edges

    if data.view == PARTITION_LOCAL:  # a store of the message-passing graph, its split beside it (with its warning)
        warning = read_link_meta(data.shared)["warning"]
    elif data.path is not None and (link_folder(data.path) / "meta.json").is_file():  # the split's message graph
        warning = read_link_meta(link_folder(data.path))["warning"]
    else:
        warning = split_edges(data.open_graph(), config.link_split, config.seed).warning()
    return [warning] if warning else []


def best_link_scores(epochs: list[dict], best: dict) -> dict:
    """The best epoch's link-prediction scores of the validation and test splits (``val_auc``, ``test_hits@50``,
    ``test_mrr``, ...); empty for a node-classification run or where no epoch ran."""
    record = next((e for e in epochs if e["epoch"] == best["epoch"]), None)
    if record is None or "test_auc" not in record:
        return {}
    return {k: v for k, v in record.items() if k.startswith(("val_", "test_")) and not k.endswith(("_acc", "_loss"))}


def environment() -> dict:
    from graphscale.nn.backend import kernel_setting

    return {"graphscale": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "cuda": torch.cuda.is_available(), "host": platform.node(), "kernels": kernel_setting()}


def run(config: RunConfig, *, write: bool = True, keep_model: bool = False) -> dict:
    """Train once with ``config`` and return the report (also written to ``config.json`` and ``config.tensorboard``
    if set, unless ``write`` is False: the caller writes them, :func:`write_outputs`). Every output is locked while
    the run lasts (:func:`run_outputs`): a second run naming one stops before any work, naming this process.

    ``keep_model``: the report also holds ``models``, ``{"best": module, "last": module}``: the user's module (or
    graphscale's model) rebuilt here with the best and the last epoch's parameters (:func:`trained_modules`; not
    part of the JSON file).

    Under ``torchrun`` every rank calls this (``graphscale train`` on every node): each prepares the data (file
    locks in the cache directory make one rank per host write it, the others wait and reuse it), joins the group,
    trains its part, and receives every rank's result, merged here as in spawn mode; only global rank 0 writes
    ``--json`` (and checkpoints).

    Every option is checked first (:func:`graphscale.validation.validate`; with ``--resume`` also the checkpoint's
    configuration against this run's, :func:`graphscale.checkpoint.check_resume`), then the data is prepared
    (:func:`graphscale.prepare.prepare_data`), all in this process before any worker starts.
    """
    validate(config)
    with output_locks(run_outputs(config) if is_main_process() else []):
        saved = read_checkpoint(config.checkpoint) if config.resume else None
        if saved is not None:
            check_resume(config, saved)  # before the data is prepared (the dataset when it is given)
        backend = None if config.backend == "auto" else config.backend
        device = resolve_device(config.device, config.strategy.workers, backend)
        start = time.perf_counter()
        baseline = (os.getpid(), os_memory())  # the in-process worker's memory before its data is loaded
        data = prepare_data(config)  # before any worker starts: no worker waits while another partitions
        from graphscale.data.features import input_width

        weighted = bool(data.summary.get("weighted"))
        check_edge_weights(config, weighted)
        check_user_model(config, input_width(config.data.features, data.num_features),
                         output_width(config, data.num_classes), weighted)  # widths, and the convs' edge weights
        check_strategy_weights(config, weighted, int(data.summary.get("halo_hops", 1)))
        trivial = trivial_baseline(data) if config.task == "node" else None
        split_warning = link_split_warning(config, data)
        if saved is not None:
            check_resume(config, saved, data.summary)  # the resolved dataset and the graph's counts
            del saved
        results = launch(train_worker, config.strategy.workers, config, data, baseline, device=device,
                         backend=backend, timeout_s=config.strategy.timeout, allocator_mode=config.allocator or None)
        results.sort(key=lambda r: r["rank"])
        epochs = merge_histories(results)
        best = results[0]["best"]
        metric = "auc" if config.task == "link" else metric_name(bool(results[0]["graph"].get("multilabel")))
        from graphscale.nn.models import model_form

        report = {
            "config": to_dict(config), "environment": environment(), "graph": results[0]["graph"],
            "model_form": model_form(config),
            "allocator_per_worker": [r["allocator"] for r in results],
            "metric": metric,
            "epochs": epochs,
            "baseline": trivial,
            "warnings": split_warning + report_warnings(epochs, best, metric, trivial),
            "final": {"best_epoch": best["epoch"] if best["epoch"] >= 0 else None, "val_acc": best["val_acc"],
                      "test_acc": best["test_acc"], "best_by": best.get("by", "val_acc"),
                      "mean_epoch_seconds": sum(e["seconds"] for e in epochs) / max(len(epochs), 1),
                      "bytes_per_epoch": epochs[-1]["bytes"] if epochs else {},
                      "peak_memory_per_worker": [max(e["peak_memory_per_worker"][r] for e in epochs)
                                                 for r in range(len(results))] if epochs else [],
                      "os_memory_per_worker": [max_os_memory([e["os_memory_per_worker"][r] for e in epochs])
                                               for r in range(len(results))] if epochs else [],
                      "wall_seconds": time.perf_counter() - start,
                      **best_link_scores(epochs, best)},
        }
        if write:
            write_outputs(report, config)
        if keep_model:  # not part of the JSON file
            report["models"] = trained_modules(config, input_width(config.data.features, data.num_features),
                                               data.num_classes, results[0]["model_states"])
        return report


def run_outputs(config: RunConfig) -> list[tuple[str, str | None]]:
    """The outputs a run writes, by option (locked while it runs: :mod:`graphscale.data.output_lock`)."""
    return [("--checkpoint", config.checkpoint), ("--json", config.json), ("--tensorboard", config.tensorboard)]


def write_outputs(report: dict, config: RunConfig) -> None:
    """Write a finished run's ``--json`` report and ``--tensorboard`` scalars (under torchrun every rank has the
    report; rank 0 writes the report)."""
    if config.json and is_main_process():
        write_json(report, config.json)
    if config.tensorboard:
        from graphscale.data.outputs import write_failure
        from graphscale.plot import write_tensorboard

        try:
            write_tensorboard(report, config.tensorboard)
        except OSError as err:
            raise write_failure("--tensorboard", config.tensorboard, err, None) from None


def trained_modules(config: RunConfig, in_dim: int, num_classes: int, states: dict | None) -> dict:
    """``{"best": module, "last": module}``: the model of ``config`` built here (a factory called, a module object
    copied) with each state's parameters loaded, as the module the user gave (a PyG model, not graphscale's
    wrapper: :meth:`graphscale.nn.gnn.GNN.user_module`), in eval mode; ``None`` where no epoch ran. Under
    ``--task link`` the module carries the trained decoder as ``link_decoder``."""
    from graphscale.nn.models import build_model, is_decoupled

    out = {}
    for which in ("best", "last"):
        state = (states or {}).get(which)
        if state is None:
            out[which] = None
            continue
        model = build_model(config.model, in_dim, output_width(config, num_classes), seed=config.seed,
                            dtype=getattr(torch, config.dtype), decoupled=is_decoupled(config))
        model = attach_decoder(model, config)
        model.load_state_dict(state)
        user = model.user_module()
        if config.task == "link" and user is not model:  # a PyG model: it carries the trained decoder too
            user.link_decoder = model.link_decoder
        out[which] = user.eval()
    return out


def write_json(report: dict, path: str | os.PathLike) -> None:
    """Write ``report`` to ``--json`` (:func:`graphscale.data.outputs.write_output`: atomically, or in place for a
    FIFO or device; a failure is one line naming ``--json``, the path and the cause)."""
    write_json_atomic(path, report, option="--json")


def median_epoch_seconds(report: dict, warmup: int) -> float:
    """The median epoch time of a report's epochs after the first ``warmup`` (steady state: allocations, caches
    and lazy set-up belong to the first epochs)."""
    import statistics

    return statistics.median([e["seconds"] for e in report["epochs"]][warmup:])


def largest_peak_rss(report: dict) -> int | None:
    """The largest worker's peak resident set (``VmHWM``) in a report; ``None`` where the OS did not say."""
    peaks = [m.get("peak_rss") for m in report["final"].get("os_memory_per_worker") or [] if m]
    return max((p for p in peaks if p), default=None)

"""``graphscale train --strategy auto``: run ``graphscale advise``'s recommendation and record its prediction
next to the measurement in the run's report.

:func:`resolve` turns the command line's options into the recommended strategy's: the other options (dataset,
model, features, optimiser, ...) are the candidates' shared configuration, ``--workers`` the workers available
(default 2), the per-worker budget the cached machine profile's free memory shared by the workers (CPU) or the
device's (CUDA). Options only some strategies read cannot be given with ``auto`` (the placeholder ``single``
refuses them, naming the option). :func:`record` adds ``report["advise"]``: the prediction and the measured
figures side by side (epoch time: the shortest epoch after the first; memory: the largest worker's OS peak
resident set and tracked peak; bytes: the Ledger of the last epoch, or of the epoch the prediction replayed).
"""

from __future__ import annotations

import copy
import sys

#: workers ``--strategy auto`` weighs when ``--workers`` is not given
DEFAULT_WORKERS = 2


def resolve(overrides: dict, config_file=None) -> tuple[dict, dict]:
    """``(overrides for the recommended configuration, the advice)`` for overrides naming ``--strategy auto``."""
    from graphscale.advise.calibrate import calibrated_profile
    from graphscale.advise.command import rank
    from graphscale.advise.configs import candidate_name, is_sampled_single
    from graphscale.config import build_config

    out = copy.deepcopy(overrides)
    strategy = out.setdefault("strategy", {})
    strategy.pop("name")
    workers = int(strategy.pop("workers", DEFAULT_WORKERS))
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    base = build_config(out, config_file)
    machine = calibrated_profile(base, workers, warn=lambda line: print(f"graphscale: warning: {line}", file=sys.stderr),
                              note=lambda line: print(f"graphscale: {line}", file=sys.stderr))
    budget = machine.free_memory if base.device == "cuda" else machine.free_memory // workers
    result = rank(base, workers, machine, budget)
    best = result["predictions"][result["recommended"]]
    chosen = result["configs"][result["recommended"]].strategy
    strategy.update(name=chosen.name, workers=chosen.workers)
    if chosen.name == "model-averaging":
        strategy["parts"] = chosen.parts
    picked = result["configs"][result["recommended"]]
    if is_sampled_single(picked):
        strategy["minibatch"] = True
    if picked.strategy.fanouts != base.strategy.fanouts:  # one per model layer (configs.per_layer_fanouts)
        strategy["fanouts"] = list(picked.strategy.fanouts)
    print(f"graphscale: --strategy auto: {candidate_name(picked)} on {chosen.workers} worker(s), predicted "
          f"{best.seconds:.4g} s/epoch — {best.semantics}", file=sys.stderr)
    return out, {"predicted": best.to_dict(), "budget": budget, "machine": machine.to_dict()}


def measured(report: dict, bytes_epoch: int | None = None) -> dict:
    """A run's measured figures, in the prediction's terms."""
    from graphscale.metrics.ledger import moved_bytes
    from graphscale.run import largest_peak_rss

    times = [e["seconds"] for e in report["epochs"]]
    final = report["final"]
    epochs = report["epochs"]
    ledger = epochs[-1 if bytes_epoch is None else bytes_epoch]["bytes"] if epochs else {}
    return {"seconds": min(times[1:] if len(times) > 1 else times) if times else None,
            "os_memory": largest_peak_rss(report),
            "memory": max(final["peak_memory_per_worker"] or [0]),
            "bytes": ledger, "moved_bytes": moved_bytes(ledger)}


def record(report: dict, advice: dict) -> dict:
    """Add ``report["advise"]`` (the prediction and the measurement side by side); returns it."""
    predicted = advice["predicted"]
    got = measured(report, predicted.get("bytes_epoch"))
    report["advise"] = {**advice, "measured": got}
    return report["advise"]


def summary(advice: dict) -> str:
    """One line: predicted against measured epoch time, memory and bytes."""
    from graphscale.metrics.units import format_bytes

    p, m = advice["predicted"], advice["measured"]
    os_mem = format_bytes(m["os_memory"]) if m["os_memory"] else "-"
    return (f"advise predicted {p['seconds']:.4g} s/epoch, {format_bytes(p['os_memory'])} peak RSS/worker, "
            f"{format_bytes(p['moved_bytes'])} moved/epoch; measured {m['seconds']:.4g} s/epoch, {os_mem}, "
            f"{format_bytes(m['moved_bytes'])}")

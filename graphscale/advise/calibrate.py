"""The profile's calibration: every strategy's modelled epoch time against its measured one on two probe graphs.

The strategies' models (:mod:`graphscale.cost.prediction`) price the work a run does from micro-benchmarks: GEMM,
SpMM, elementwise passes, collectives, host events. What they leave out is strategy-specific and grows with the
graph (a strategy's own packing, indexing and bookkeeping, two workers sharing a host's caches and memory
bandwidth): on 2 shared cores the uncalibrated models under-predicted the multi-worker strategies by 18-62% and
over-predicted ``single`` by up to 76%, and their profile figures moved 30-90% between two measurements a minute
apart (``docs/benchmarks.md``). So the profile also runs each strategy itself, once per host, model and worker
count: :func:`calibrate` trains every candidate ``graphscale advise`` weighs (:func:`~.configs.candidates`, the
options at their defaults) on two SBM graphs (:data:`PROBE_GRAPHS`) for :data:`PROBE_EPOCHS` epochs, takes the
median epoch after :data:`PROBE_WARMUP` warm-up ones (the span ``train_epoch`` measures, as ``bench advise``),
and records, per strategy, the line through the two ``(modelled, measured)`` points
(:func:`~.host_costs.cost_line`: intercept = the seconds per epoch the model leaves out whatever the size, slope =
the factor on what it prices). A prediction's ``seconds`` is its model's time on that line
(:func:`~.configs.predict_config`; ``Prediction.modelled_seconds`` keeps the model's). The probe graphs are not the
graphs ``bench advise`` checks the predictions on (Cora, 200k-vertex SBM and R-MAT). The same probes give each
multi-worker strategy a line for what its resident-set model leaves out: the largest worker's measured peak less
the modelled one, against the graph's bytes (feature rows and CSR structure, ``Prediction.graph_bytes``: what a
worker maps and the buffers that grow with it; the modelled figures of the two probes can lie too close together
for a line in them: 449 and 454 MiB for data-parallel, measured 436 and 518), added to the model's
(``Prediction.modelled_os_memory`` keeps it); a ``single`` probe runs in the calibrating process, whose peak is not
the run's, so ``single`` keeps its model.

A profile keeps one calibration per graphscale version, model (its options, dtype and device) and worker count (:func:`~.configs.model_key`, :func:`~.configs.run_key`);
:func:`ensure_calibrated` runs the probes the first time a model and worker count is asked for (about 70 s on 2
cores) and saves them with the profile; the probe graphs and their stores stay in the run's cache directory,
reused by a later calibration. A synthetic profile (tests) is never calibrated
(``Machine.calibration is None``).
"""

from __future__ import annotations

import copy

from graphscale.advise.configs import (
    candidate_name,
    candidates,
    device_kind,
    model_key,
    predict_config,
    refusal,
    run_key,
)

#: the two probe graphs (normal, ``tiny``): a small one, where fixed costs dominate, and a large one
PROBE_GRAPHS = {False: ("sbm:nodes=4000,degree=10,features=64,seed=7", "sbm:nodes=100000,degree=10,features=64,seed=7"),
                True: ("sbm:nodes=300,degree=6,features=16,seed=7", "sbm:nodes=1500,degree=6,features=16,seed=7")}
#: epochs of each probe run and the first ones left out of its median
PROBE_EPOCHS, PROBE_WARMUP = 8, 2


def calibrated_profile(config, workers: int, refresh: bool = False, warn=None, note=None):
    """The host's machine profile for ``config``'s device (:func:`~.profile.cached_profile`), calibrated for its
    model on ``workers`` workers (:func:`ensure_calibrated`, saved with it); ``warn`` gets the one-line warnings,
    ``note`` the notice that the probes run."""
    from graphscale.advise.profile import cached_profile, profile_path, save_profile
    from graphscale.data.cache import resolve_cache_dir

    cache, device = resolve_cache_dir(config), device_kind(config)
    machine = cached_profile(cache, device, refresh=refresh, warn=warn)
    ensure_calibrated(machine, config, workers, save=lambda m: save_profile(m, profile_path(cache, device)),
                      note=note, warn=warn)
    return machine


def ensure_calibrated(machine, config, workers: int, save=None, note=None, tiny: bool = False, warn=None) -> bool:
    """Calibrate ``machine`` for every candidate of ``config`` on ``workers`` workers that it has no line for
    (never a synthetic profile: ``calibration is None``); ``save(machine)`` keeps the result, ``note`` gets a
    one-line notice before the probes run, ``warn`` a probe run that failed. Returns whether it ran the probes."""
    if machine.calibration is None:
        return False
    lines = machine.calibration.setdefault(model_key(config), {})
    missing = [candidate_name(c) for c in candidates(config, workers) if run_key(c) not in lines and not refusal(c)]
    if not missing:
        return False
    if note is not None:
        note(f"calibrating the time models of {', '.join(missing)} for {config.model.name} on {workers} worker(s) "
             "on this host (once per host, model and worker count: about 70 s on 2 cores)")
    lines.update(calibrate(machine, config, workers, tiny=tiny, strategies=missing, warn=warn))
    machine.how[f"calibration {model_key(config)}"] = how(tiny)
    if save is not None:
        save(machine)
    return True


def how(tiny: bool) -> str:
    small, large = PROBE_GRAPHS[tiny]
    return (f"every candidate strategy trained for {PROBE_EPOCHS} epochs on {small} and {large}, the median epoch "
            f"after {PROBE_WARMUP} against the model's time, a line through the two")


def probe_config(config, spec: str):
    """The configuration of a probe run on ``spec``: ``config``'s model, dtype, device, backend, seed and cache
    directory and task (``--task link``: its decoder, split and Hits@K too), every other option at its default (the
    user's features, output files or checkpoints are not the probe's); oversubscribed like the runs advised when
    the workers outnumber the cores."""
    from graphscale.config import build_config

    base = build_config({"data": {"dataset": spec}, "progress": False, "oversubscribe": True})
    base.model = copy.deepcopy(config.model)
    base.dtype, base.backend, base.seed, base.cache_dir = config.dtype, config.backend, config.seed, config.cache_dir
    base.task, base.decoder = config.task, config.decoder
    base.hits_k, base.link_split = list(config.hits_k), list(config.link_split)
    base.device = device_kind(config)
    base.optim.epochs = PROBE_EPOCHS
    return base


def calibrate(machine, config, workers: int, tiny: bool = False, strategies=None, warn=None) -> dict:
    """``{"strategy@workers": {"intercept_s", "slope", "probes": [[modelled, measured], ...], "memory": {...}}}``
    for ``config``'s model's candidates on ``workers`` workers (module docstring); ``memory``: the line of the
    measured peak resident set less the modelled one against the graph's bytes (``Prediction.graph_bytes``;
    ``intercept_bytes``, ``slope`` in bytes per graph byte, ``probes`` ``[[graph bytes, residual], ...]``), for the
    runs in spawned workers; a configuration whose prediction or probe run failed gets ``{"error": the one-line
    reason}`` instead (``warn`` gets it in one line), and its predictions stay uncalibrated (one ``graphscale
    train`` would refuse, :func:`~.configs.refusal`, is never probed); ``strategies``: only these
    (default: every candidate), by their :func:`~.configs.candidate_name` (``single`` is full-graph ``single``)."""
    points: dict[str, list] = {}
    memory: dict[str, list] = {}
    failed: dict[str, str] = {}
    for spec in PROBE_GRAPHS[tiny]:
        base = probe_config(config, spec)
        for candidate in candidates(base, workers):
            if (strategies is not None and candidate_name(candidate) not in strategies) or refusal(candidate):
                continue
            if run_key(candidate) in failed:
                continue
            try:
                prediction = predict_config(candidate, machine)
                seconds, rss = probe(candidate)
            except Exception as err:  # noqa: BLE001 - a configuration this model cannot run is left uncalibrated
                failed[run_key(candidate)] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                if warn is not None:
                    warn(f"calibration: {run_key(candidate)} on {spec} failed ({failed[run_key(candidate)]}); "
                         "its predictions keep the model's time")
                continue
            points.setdefault(run_key(candidate), []).append([prediction.modelled_seconds, seconds])
            if candidate.strategy.workers > 1 and rss:  # spawned workers: the peak is the run's own
                memory.setdefault(run_key(candidate), []).append(
                    [prediction.graph_bytes, rss - prediction.modelled_os_memory])
    out = {name: {"error": why} for name, why in failed.items()}
    for name, probes in points.items():
        if name in failed:
            continue
        intercept, slope = line(probes, cost=True)
        out[name] = {"intercept_s": intercept, "slope": slope, "probes": probes}
        if len(memory.get(name, [])) == 2:
            intercept, slope = line(memory[name], cost=False)
            out[name]["memory"] = {"intercept_bytes": intercept, "slope": slope, "probes": memory[name]}
    return out


def line(probes: list, cost: bool) -> tuple[float, float]:
    """``(intercept, slope)`` of the line through two ``[x, y]`` probes. A cost (times: ``x`` modelled, ``y``
    measured): :func:`~.host_costs.cost_line`'s (the intercept at least 0); a large probe modelled no larger than
    the small one, or measured no larger: ``(0, its ratio)``. Otherwise (memory: ``x`` the graph's bytes, ``y`` the
    measured peak less the modelled one, of either sign): the exact line; one size: ``(the mean, 0)``."""
    from graphscale.advise.host_costs import cost_line

    (m0, t0), (m1, t1) = sorted(probes)
    if not cost:
        if m1 <= m0:
            return (t0 + t1) / 2, 0.0
        slope = (t1 - t0) / (m1 - m0)
        return t0 - slope * m0, slope
    if not m1 > m0 > 0 or t1 <= t0:
        return 0.0, t1 / max(m1, 1e-12)
    return cost_line((m0, m1), (t0, t1))


def probe(config) -> tuple[float, int | None]:
    """One run of ``config``: the median epoch time after :data:`PROBE_WARMUP` (``train_epoch``'s span, the
    slowest worker's) and the largest worker's peak resident set (``VmHWM``; ``None`` where the OS did not say)."""
    from graphscale.run import largest_peak_rss, median_epoch_seconds, run

    report = run(config)
    return median_epoch_seconds(report, PROBE_WARMUP), largest_peak_rss(report)

"""The configurations ``graphscale advise`` weighs, and one prediction of a run configuration.

:func:`predict_config` prepares the data as the run would (:func:`graphscale.prepare.prepare_data`: the cache's
store, graph directory and shared plans, reused by the run that follows; a ``single`` run is priced from the
host-shared graph directory instead of loading the graph into memory), builds the model as a worker does, and
calls the strategy's ``predict``; the epoch time is then put on the profile's calibration line of the strategy
(:func:`calibration_line`, :mod:`graphscale.advise.calibrate`) where the profile has one, and the resident set
gets what the calibration measured the model to leave out.

``--task link``: the model is built as a link run's workers build it (its output rows are embeddings of
``--hidden`` width, the decoder attached: :mod:`graphscale.tasks.link`), and the strategies that cannot train link
prediction (:meth:`~graphscale.strategies.base.Strategy.link_refusal`) are not predicted: :func:`refusal` says why,
and ``advise`` lists them with it; so are the candidates whose configuration ``graphscale train`` would refuse
(:func:`graphscale.validation.validate`).
"""

from __future__ import annotations

import copy

from graphscale.config import RunConfig
from graphscale.cost.prediction import Prediction
from graphscale.registry import predictor

#: strategies in the order ``advise`` lists them (ties keep this order)
STRATEGY_ORDER = ("single", "graph-parallel", "offload", "pipeline", "task-parallel", "model-averaging",
                  "data-parallel", "split-parallel")


def candidates(base: RunConfig, workers: int) -> list[RunConfig]:
    """One configuration per strategy for ``workers`` workers (``single``: one worker), options at their defaults
    (model-averaging: one part per worker; the sampled strategies' ``--fanouts`` one per model layer:
    :func:`per_layer_fanouts`); after full-graph ``single``, its mini-batch mode (``--minibatch``). A candidate
    ``graphscale train`` would refuse is kept: :func:`refusal` says why, and ``advise`` lists it with the reason."""
    out = []
    for name in STRATEGY_ORDER:
        w = 1 if name == "single" else workers
        if name in ("task-parallel", "pipeline") and workers < 2:
            continue
        config = copy.deepcopy(base)
        config.strategy.name, config.strategy.workers = name, w
        if name == "pipeline" and config.model.layers < w:
            continue  # a stage needs at least one layer
        if name == "model-averaging":
            config.strategy.parts = w
        out.append(per_layer_fanouts(config))
        if name == "single":
            sampled = copy.deepcopy(config)
            sampled.strategy.minibatch = True
            out.append(per_layer_fanouts(sampled))
    return out


def per_layer_fanouts(config: RunConfig) -> RunConfig:
    """``config`` (changed in place) with its default ``--fanouts`` (one fanout per layer of a 2-layer model)
    repeated to one per model layer where its strategy samples with them: a 3-layer model's mini-batch candidates
    sample ``10,10,10``, which ``graphscale train`` accepts; ``--fanouts`` given (not the default) stay as given."""
    from graphscale.options.shared import Sampling
    from graphscale.registry import STRATEGIES

    sc, default = config.strategy, Sampling().fanouts
    cls = STRATEGIES.get(sc.name)
    reads = "fanouts" in cls.options and "fanouts" not in cls.unused_options(config)
    if reads and list(sc.fanouts) == default and len(default) != config.model.layers:
        sc.fanouts = [default[0]] * config.model.layers
    return config


def is_sampled_single(config: RunConfig) -> bool:
    """``config`` is ``single --minibatch``: a candidate of its own beside full-graph ``single``."""
    return config.strategy.name == "single" and bool(config.strategy.minibatch)


def candidate_name(config: RunConfig) -> str:
    """The name of a candidate: its strategy's, ``single --minibatch`` for the mini-batch ``single``."""
    return "single --minibatch" if is_sampled_single(config) else config.strategy.name


def refusal(config: RunConfig) -> str:
    """Why ``graphscale train`` would refuse ``config`` (one line; empty when it runs): ``--task link`` with a
    strategy that does not train link prediction (naming the task and the reason), else the first line of the
    error of :func:`graphscale.validation.validate`, the check ``train`` runs before any worker starts (an option
    the strategy or model cannot take, ...), of the options the ``run it`` line carries (not ``--cache-dir``).
    The one check of every candidate: ``advise`` lists a refused candidate with this reason and never predicts
    it, so no ``run it`` line is one ``train`` refuses."""
    from graphscale.registry import STRATEGIES
    from graphscale.validation import validate

    if config.task == "link":
        why = STRATEGIES.get(config.strategy.name).link_refusal(config)
        if why:
            return f"cannot run --task link: it {why}"
    run = copy.deepcopy(config)
    run.cache_dir = ""  # advise's own (also its profile's), which the run-it line does not carry
    run.oversubscribe = True  # the workers asked for are priced; the run-it line oversubscribes beyond the cores
    try:
        validate(run)
    except (ValueError, KeyError, OSError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return ""


def predict_config(config: RunConfig, machine) -> Prediction:
    """The prediction of one run configuration (module docstring). ``config.data.dataset`` is resolved in place."""
    import torch

    from graphscale.data.features import input_width
    from graphscale.data.handle import MEMORY
    from graphscale.nn.models import build_model, is_decoupled
    from graphscale.prepare import host_shared_data, prepare_data
    from graphscale.registry import STRATEGIES
    from graphscale.tasks.link import attach_decoder, output_width

    why = refusal(config)
    if why:
        raise ValueError(why)
    cls = STRATEGIES.get(config.strategy.name)
    if cls.data_view == MEMORY:  # price it from the graph directory: no graph loaded into memory
        from graphscale.prepare import DEFAULT_DATASET

        config.data.dataset = config.data.dataset or DEFAULT_DATASET
        data = host_shared_data(config, cls)
    else:
        data = prepare_data(config)
    model = build_model(config.model, input_width(config.data.features, data.num_features),
                        output_width(config, data.num_classes), seed=config.seed, dtype=getattr(torch, config.dtype),
                        decoupled=is_decoupled(config))
    model = attach_decoder(model, config)  # --task link: the decoder, whose parameters the run trains too
    prediction = predictor(config.strategy.name)(data, model, config, machine)
    prediction.modelled_seconds = prediction.seconds
    line = calibration_line(machine, config)
    if "intercept_s" in line:  # none, or its probe run failed: the model's time
        prediction.seconds = max(line["intercept_s"] + line["slope"] * prediction.seconds, 0.0)
        prediction.notes.append("seconds: the model's time on the profile's calibration line of this strategy")
    device_side = 0 if str(config.device).startswith("cuda") else prediction.memory  # on CUDA the GPU holds it
    prediction.os_memory = prediction.modelled_os_memory = (device_side + prediction.host_memory
                                                            + prediction.worker_host_memory + machine.process_rss)
    prediction.graph_bytes = graph_bytes(data, next(model.parameters()).element_size())
    memory = line.get("memory")
    if memory is not None:  # never below what the probes measured: a line is not extrapolated into a saving
        left_out = max(memory["intercept_bytes"] + memory["slope"] * prediction.graph_bytes,
                       min(r for _, r in memory["probes"]))
        prediction.os_memory = max(int(prediction.os_memory + left_out), 0)
        prediction.notes.append("os_memory: the model's plus what the profile's calibration of this strategy "
                                "measured it to leave out at this graph's size")
    return prediction


def device_kind(config, workers: int = 1) -> str:
    """``"cpu"`` or ``"cuda"``: the device ``config``'s workers would train on (``auto`` resolved as a run does)."""
    from graphscale.distributed.launch import resolve_device

    return resolve_device(config.device, workers, None if config.backend == "auto" else config.backend)


def model_key(config) -> str:
    """The profile's key of the calibrations of ``config``'s model: every model option, the dtype, the device the
    workers train on, the graphscale version whose models were calibrated (another version's lines are measured
    again) and, for ``--task link``, the task, decoder and split (link runs are calibrated on their own)."""
    import json
    from dataclasses import asdict

    from graphscale import __version__

    model = json.dumps(asdict(config.model), sort_keys=True, default=str)
    task = (f" task=link decoder={config.decoder} link_split={','.join(map(str, config.link_split))}"
            if config.task == "link" else "")
    return f"graphscale {__version__} {model} dtype={config.dtype} device={device_kind(config)}{task}"


def run_key(config) -> str:
    """The key of one configuration's line among its model's: its :func:`candidate_name` and workers
    (``single --minibatch@1``, a line of its own beside ``single@1``)."""
    return f"{candidate_name(config)}@{config.strategy.workers}"


def calibration_line(machine, config) -> dict:
    """The profile's calibration of ``config``'s strategy, workers and model (:mod:`graphscale.advise.calibrate`;
    empty where it has none)."""
    if not machine.calibration:
        return {}
    return machine.calibration.get(model_key(config), {}).get(run_key(config)) or {}


def graph_bytes(data, elem: int) -> int:
    """The graph's feature rows (at ``elem`` bytes an element) and CSR structure (int64 row pointers and
    indices): the size the memory calibration scales with."""
    nodes, edges = data.num_nodes, int(data.summary["edges"])
    return nodes * data.num_features * elem + 8 * (nodes + 1 + edges)

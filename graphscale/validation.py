"""Checks of a run's configuration in the parent, before any data is loaded or any worker starts.

* :func:`graphscale.config.check_given` (called by :func:`graphscale.config.build_config`): an option the user gave
  that the chosen strategy or model does not read is an error naming the strategies (models) that read it. What each
  reads is declared once: a strategy's option dataclass (:mod:`graphscale.options.by_strategy`, which its class reads
  as ``Strategy.options``) less ``Strategy.unused_options(config)``, and ``GNN.options``.
* :func:`validate` (called by :func:`graphscale.run.run`, so by ``graphscale train`` and the Python API): every
  option's range and its fit with the strategy and the model (a ``[strategy]`` option's allowed values from its
  declaration), the workers against the cores, the output paths.

Errors are ``ValueError`` (``KeyError`` for an unknown registry name) with a one-line message naming the option or
the file; ``graphscale`` prints it and exits with status 2. What needs the data (a store's part count, an empty
part, non-finite features, labels out of range) is checked by :mod:`graphscale.prepare`, also before any worker
starts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path

from graphscale.config import DTYPES, FEATURE_DTYPES, RunConfig, StrategyConfig
from graphscale.data.outputs import check_output_dir, check_output_path
from graphscale.metrics.units import parse_bytes
from graphscale.options.by_strategy import own_chunks
from graphscale.options.task import DECODERS, TASKS
from graphscale.partition.build import build_vertex_partitioner

#: the declared ``[strategy]`` options by name (their choices are checked here)
_STRATEGY_FIELDS = {f.name: f for f in dataclasses.fields(StrategyConfig)}


# ------------------------------------------------------------ values
def _resolved(path: str | os.PathLike) -> Path:
    return Path(path).expanduser().resolve()


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies under it (both resolved)."""
    return path == folder or folder in path.parents


def dataset_paths(spec: str) -> list[Path]:
    """The existing files and directories a dataset spec names (``npz:FILE``, ``graphdir:DIR``,
    ``planetoid:DIR:NAME``, ...): what a run reads and must never write into."""
    _kind, sep, arg = (spec or "").strip().partition(":")
    if not sep:
        return []
    return [_resolved(part) for part in arg.split(":") if part and "=" not in part and Path(part).exists()]


def run_paths(config: RunConfig, outputs: list[tuple[str, str]] | None = None) -> tuple[list, list]:
    """``(outputs, inputs)`` of a run as ``(option, resolved path, kind)``: what it writes (``file`` or ``dir``) and
    the inputs it reads (a partition store, the dataset's files or directories, the TOML file)."""
    outs = [(option, _resolved(path), "file") for option, path in
            (outputs if outputs is not None else [("--checkpoint", config.checkpoint), ("--json", config.json)])
            if path]
    for option, path in (("--tensorboard", config.tensorboard), ("--state-dir", config.strategy.state_dir)):
        if path:
            outs.append((option, _resolved(path), "dir"))
    ins = []
    if config.strategy.partitions:
        ins.append(("--partitions", _resolved(config.strategy.partitions)))
    ins += [("--dataset", path) for path in dataset_paths(config.data.dataset)]
    return outs, ins


def check_path_conflicts(config: RunConfig, outputs: list[tuple[str, str]] | None = None,
                         config_file: str | None = None) -> None:
    """Refuse a run that would write over what it reads or writes elsewhere: two outputs at one path (``--json``
    and ``--checkpoint``, one seed's checkpoint), an output file inside another output directory
    (``--tensorboard``, ``--state-dir``), or any output equal to or inside an input (``--partitions``, the
    dataset's files and directories, ``--config``) or the cache's stores and graph directories.

    Args:
        outputs: ``(option, path)`` of the output files (default: ``--checkpoint`` and ``--json``; ``--repeat``
            passes every seed's checkpoint).
        config_file: the ``--config`` file, an input too.

    Raises:
        ValueError: one line naming both options and the path.
    """
    outs, ins = run_paths(config, outputs)
    outs = list(dict.fromkeys(outs))  # --repeat passes --checkpoint and the seeds' files
    if config_file:
        ins.append(("--config", _resolved(config_file)))
    if config.cache_dir:
        cache = _resolved(config.cache_dir)
        ins += [("--cache-dir (its partition stores)", cache / "stores"),
                ("--cache-dir (its graph directories)", cache / "graphs")]
    for i, (option, path, kind) in enumerate(outs):
        for other, other_path, other_kind in outs[:i] + outs[i + 1:]:
            if path == other_path:
                raise ValueError(f"{other} and {option} name the same path {path}; the run would overwrite one "
                                 "with the other: give different paths")
            if other_kind == "dir" and _inside(path, other_path):
                raise ValueError(f"{option} {path} lies inside the {other} directory {other_path}, which the run "
                                 "writes: put it elsewhere")
        for source, source_path in ins:
            if path == source_path:
                raise ValueError(f"{option} {path} is the {source} input the run reads; writing it would destroy "
                                 "it: give another path")
            if _inside(path, source_path):
                raise ValueError(f"{option} {path} lies inside {source} {source_path}, which the run reads; writing "
                                 "there could destroy it: give a path outside it")


def check_finite(option: str, value, *, positive: bool = False, nonnegative: bool = False) -> None:
    """A float option is a finite number (``nan`` and ``inf`` are refused), ``> 0`` or ``>= 0`` when asked.

    Raises:
        ValueError: names the option, the value and what was expected.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{option} must be a number, got {value!r}")  # noqa: TRY004 - the CLI reports ValueErrors
    if not math.isfinite(value):
        expected = "a finite number > 0" if positive else "a finite number >= 0" if nonnegative else "a finite number"
        raise ValueError(f"{option} must be {expected}, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{option} must be > 0, got {value}")
    if nonnegative and not value >= 0:
        raise ValueError(f"{option} must be >= 0, got {value}")


def check_optim(optim) -> None:
    """``[optim]``: the optimiser and the schedule are known names, ``--lr`` > 0, ``--weight-decay`` >= 0,
    ``--momentum`` (sgd only) in [0, 1), ``--lr-step-size`` (step only, needed there) >= 1, ``--lr-gamma`` (step
    only) in (0, 1].

    Raises:
        ValueError: one line naming the option, its value and what was expected.
    """
    from graphscale.config import LR_SCHEDULES, OPTIMIZERS

    _check_choice("optimizer", optim.optimizer, OPTIMIZERS)
    _check_choice("lr-schedule", optim.lr_schedule, LR_SCHEDULES)
    check_finite("--lr", optim.lr, positive=True)
    check_finite("--weight-decay", optim.weight_decay, nonnegative=True)
    if optim.momentum is not None:
        if optim.optimizer != "sgd":
            raise ValueError(f"--momentum is read by --optimizer sgd only, not {optim.optimizer} (Adam's moments "
                             "are its betas); drop --momentum or use --optimizer sgd")
        check_finite("--momentum", optim.momentum, nonnegative=True)
        if optim.momentum >= 1:
            raise ValueError(f"--momentum must be in [0, 1), got {optim.momentum}")
    for option, value in (("--lr-step-size", optim.lr_step_size), ("--lr-gamma", optim.lr_gamma)):
        if value is not None and optim.lr_schedule != "step":
            raise ValueError(f"{option} is read by --lr-schedule step only, not {optim.lr_schedule}; drop {option} "
                             "or use --lr-schedule step")
    if optim.lr_schedule == "step":
        if optim.lr_step_size is None:
            raise ValueError("--lr-schedule step needs --lr-step-size N (epochs between learning-rate decays)")
        if isinstance(optim.lr_step_size, bool) or not isinstance(optim.lr_step_size, int) or optim.lr_step_size < 1:
            raise ValueError(f"--lr-step-size must be an integer >= 1, got {optim.lr_step_size!r}")
    if optim.lr_gamma is not None:
        check_finite("--lr-gamma", optim.lr_gamma, positive=True)
        if optim.lr_gamma > 1:
            raise ValueError(f"--lr-gamma must be in (0, 1] (a decay), got {optim.lr_gamma}")


#: the longest ``--timeout`` (one year): collective timeouts are kept in milliseconds by torch.distributed
MAX_TIMEOUT_S = 365 * 24 * 3600.0
#: the shortest ``--timeout``: below it gloo's connection set-up itself times out (and may crash the worker)
MIN_TIMEOUT_S = 1.0


def _check_fanouts(config: RunConfig, option: str = "fanouts") -> None:
    from graphscale.data.sampler import check_fanout

    fanouts = getattr(config.strategy, option)
    flag = f"--{option.replace('_', '-')}"
    if option == "eval_fanouts" and not fanouts:
        return
    if option == "eval_fanouts" and config.task != "node":
        raise ValueError(f"{flag} samples the evaluation of node classification; --task {config.task} evaluates "
                         "every vertex's embedding exactly")
    for i, fanout in enumerate(fanouts):
        check_fanout(fanout, f"{flag} value {i}")
    if len(fanouts) != config.model.layers:
        raise ValueError(f"{flag} gives {len(fanouts)} value(s) but model {config.model.name!r} has "
                         f"{config.model.layers} layers (--layers); give one fanout per layer")


def _check_at_least_one(option: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"--{option} must be >= 1, got {value}")


def _check_choice(option: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"--{option} must be one of {', '.join(choices)}, got {value!r}")


def _check_declared_choice(option: str, config: RunConfig) -> None:
    """A ``[strategy]`` option declared with ``choices`` (:mod:`graphscale.options.by_strategy`) holds one of them
    (or its default: ``balance``'s empty default means the partitioner's own)."""
    declared = _STRATEGY_FIELDS.get(option)
    choices = declared.metadata.get("choices") if declared is not None else None
    value = getattr(config.strategy, option, None)
    if choices and value != declared.default:
        _check_choice(option.replace("_", "-"), value, choices)


def _check_chunks(config: RunConfig) -> None:
    """``--chunks``: after ``StrategyConfig.resolve_chunks`` the strategy's own chunk count, which it reads."""
    value = config.strategy.chunks
    if value is None:
        return
    own = own_chunks(config.strategy.name)
    note = f" (--chunks is --{own.replace('_', '-')} for strategy {config.strategy.name!r})" if own else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"--chunks must be an integer, got {value!r}{note}")  # noqa: TRY004 - reported as ValueError
    if value < 1:
        raise ValueError(f"--chunks must be >= 1, got {value}{note}")


def _check_strategy_option(option: str, config: RunConfig) -> None:
    """Check the value of one ``[strategy]`` option the run's strategy reads: its declared choices, then what a
    declaration cannot say (ranges, sizes, paths, combinations)."""
    sc = config.strategy
    _check_declared_choice(option, config)
    if option in ("fanouts", "eval_fanouts"):
        _check_fanouts(config, option)
    elif option in ("batch_size", "average_every", "history_period", "hybrid_width", "subgraphs"):
        _check_at_least_one(option.replace("_", "-"), getattr(sc, option))
    elif option == "chunks":  # the strategy's own chunk count holds the same value
        _check_chunks(config)
    elif option == "t_workers" and sc.t_workers < 0:
        raise ValueError(f"--t-workers must be >= 0 (0: the scheduling model decides), got {sc.t_workers}")
    elif option == "task_gamma" and not 0.0 <= sc.task_gamma <= 1.0:
        raise ValueError(f"--task-gamma must lie in [0, 1], got {sc.task_gamma}")
    elif option in ("device_flops", "device_bandwidth"):
        value = getattr(sc, option)
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"--{option.replace('_', '-')} must be a positive rate (or 0: measured), got {value}")
    elif option == "cache_fraction" and not 0.0 <= sc.cache_fraction <= 1.0:
        raise ValueError(f"--cache-fraction must lie in [0, 1], got {sc.cache_fraction}")
    elif option == "offload_topology" and sc.offload_topology == "resident" and sc.memory_budget:
        raise ValueError("--offload-topology resident is not covered by --memory-budget's memory model: use "
                         "--chunks with it, or --offload-topology streamed")
    elif option == "offload_transfer" and sc.offload_transfer == "uva" and sc.offload_topology != "resident":
        raise ValueError("--offload-transfer uva needs --offload-topology resident (its GPU kernels index with "
                         "ids already on the device)")
    elif option == "memory_budget" and sc.memory_budget:
        parse_bytes(sc.memory_budget)
    elif option == "halo_hops":
        _check_at_least_one("halo-hops", sc.halo_hops)
    elif option == "correction_steps" and sc.correction_steps < 0:
        raise ValueError(f"--correction-steps must be >= 0, got {sc.correction_steps}")
    elif option == "device_memory" and sc.device_memory:
        parse_bytes(sc.device_memory, "--device-memory")
    elif option == "parts" and sc.parts < 0:
        raise ValueError(f"--parts must be >= 1 (or 0: one per worker), got {sc.parts}")
    elif option == "shm_dir" and not (os.path.isdir(sc.shm_dir) and os.access(sc.shm_dir, os.W_OK | os.X_OK)):
        raise ValueError(f"--shm-dir {sc.shm_dir} is not a writable directory; point --shm-dir at one (a "
                         "memory-backed tmpfs such as /dev/shm)")
    elif option == "partitioner":  # with --balance, which the partitioner checks
        build_vertex_partitioner(sc.partitioner, sc.balance)


def _check_workers(config: RunConfig, strategy) -> None:
    from graphscale.data.handle import MEMORY
    from graphscale.distributed.launch import cpu_count, local_world_size, multi_node, torchrun_detected

    workers = config.strategy.workers
    _check_at_least_one("workers", workers)
    if strategy.data_view == MEMORY and workers != 1:
        raise ValueError(f"strategy {config.strategy.name!r} runs on one worker, got --workers {workers}")
    if torchrun_detected():
        world = int(os.environ["WORLD_SIZE"])
        if workers != world:
            raise ValueError(f"--workers {workers} but torchrun started {world} processes (WORLD_SIZE): give "
                             f"--workers {world}, the ranks of all nodes together")
        if strategy.single_host and multi_node():
            raise ValueError(f"strategy {config.strategy.name!r} shares its host arrays between the workers of one "
                             f"host and cannot span nodes (torchrun: {world} ranks, {local_world_size(world)} on "
                             "this node); run it on one node (--nnodes 1)")
    cores = cpu_count()
    if workers > cores and not config.oversubscribe and not torchrun_detected():
        raise ValueError(f"--workers {workers} exceeds the {cores} CPU core(s) available; use fewer workers or "
                         "pass --oversubscribe to run them anyway")


def _default_features(config: RunConfig) -> None:
    """An empty ``--features`` of a dataset without node features becomes
    :data:`~graphscale.data.features.DEFAULT_FEATURELESS` (:func:`announce_default_features` says so); not with
    a given store, whose features are fixed."""
    from graphscale.data.features import default_features

    if not config.data.features and not config.strategy.partitions:
        config.data.features = default_features(config.data.dataset, config.data.features)


def announce_default_features(config: RunConfig, given: str) -> None:
    """Say on stderr (the main process) that ``config`` trains on the default features of a featureless dataset,
    when :func:`validate` chose them (``given``: its ``--features`` before)."""
    from graphscale.data.features import default_notice
    from graphscale.distributed.launch import is_main_process

    if not given and config.data.features and is_main_process():
        print(f"graphscale: {default_notice(f'dataset {config.data.dataset!r}')}", file=sys.stderr)


def _check_features(config: RunConfig, strategy) -> None:
    """``--features``: its form, a learnable input only for the strategies that train one (and checkpoints of a
    sharded table only on one worker), computed features not with a given store (they are written into it)."""
    from graphscale.data.features import is_computed, learnable_dim
    from graphscale.registry import STRATEGIES

    text = config.data.features
    if learnable_dim(text):
        if not strategy.learnable_input:
            able = [name for name in STRATEGIES.names() if STRATEGIES.get(name).learnable_input]
            raise ValueError(f"--features {text} (a learnable input table) is supported by strategies "
                             f"{', '.join(able)}, not by {config.strategy.name!r}; use --features degree, onehot "
                             "or random:D with it")
        if config.checkpoint and config.strategy.workers > 1:
            raise ValueError(f"--checkpoint with --features {text} on {config.strategy.workers} workers is not "
                             "supported (each worker holds its own rows of the table)")
    if is_computed(text) and config.strategy.partitions:
        raise ValueError(f"--features {text} is computed while the run writes its partition store; it cannot be "
                         f"added to the given store {config.strategy.partitions} (drop --partitions, or use "
                         "--features learnable:D)")


def _check_feature_dtype(config: RunConfig) -> None:
    """``--feature-dtype``: a known dtype; bfloat16 storage only under float32 computation (the rows are upcast
    to the parameters' dtype; under float64 the 1e-10 exactness of the reference would be lost for no saving)."""
    _check_choice("feature-dtype", config.data.feature_dtype, FEATURE_DTYPES)
    if config.data.feature_dtype == "bfloat16" and config.dtype != "float32":
        raise ValueError(f"--feature-dtype bfloat16 needs --dtype float32 (the features are upcast to the "
                         f"parameters' dtype where they enter the model), got --dtype {config.dtype}; drop "
                         "--feature-dtype or use --dtype float32")


def _check_decoupled(config: RunConfig, strategy) -> None:
    """A decoupled model (``--decoupled``, or ``auto`` with task-parallel) must exist for the model and be trained
    by the strategy."""
    from graphscale.nn.decoupled import DECOUPLED
    from graphscale.nn.models import is_decoupled
    from graphscale.registry import STRATEGIES

    if not is_decoupled(config):
        return
    name, how = config.strategy.name, f"--decoupled {config.model.decoupled}"
    if config.model.name not in DECOUPLED:
        raise ValueError(f"model {config.model.name!r} has no decoupled form ({how} with strategy {name!r}); "
                         f"models with one: {', '.join(DECOUPLED)}" +
                         ("; --decoupled off trains the coupled order" if strategy.decoupled_default else ""))
    if not strategy.decoupled_models:
        able = [n for n in STRATEGIES.names() if STRATEGIES.get(n).decoupled_models]
        raise ValueError(f"{how} (the decoupled model Y = A_hat^L MLP(X)) is trained by strategies "
                         f"{', '.join(able)}, not by {name!r}")


def check_edge_weights(config: RunConfig, weighted: bool) -> None:
    """A weighted graph (``edge_weight``) is trained only where the weights reach the convs: by a strategy whose
    blocks carry them (``Strategy.edge_weights``) and a PyG model every conv of which takes them (checked by
    :func:`check_user_model`) or graphscale's ``gcn`` (not decoupled), whose normalisation takes them as PyG's
    ``gcn_norm`` does; graphscale's other models take none."""
    from graphscale.nn.models import is_decoupled, is_pyg_config
    from graphscale.registry import STRATEGIES

    if not weighted:
        return
    name = config.strategy.name
    if not STRATEGIES.get(name).edge_weights:
        able = [n for n in STRATEGIES.names() if STRATEGIES.get(n).edge_weights]
        raise ValueError(f"the graph has edge weights (edge_weight), which strategy {name!r} does not give its "
                         f"convs; strategies that do: {', '.join(able)} (or delete the weights)")
    if is_pyg_config(config.model) or (config.model.name == "gcn" and not is_decoupled(config)):
        return
    what = "the decoupled form of graphscale's model" if config.model.name == "gcn" else "graphscale's model"
    raise ValueError(f"the graph has edge weights (edge_weight), which {what} {config.model.name!r} does not "
                     "take; train graphscale's gcn (not decoupled) or a PyG model whose convs take edge_weight "
                     "(GCNConv, GraphConv, ...), or delete the weights")


def _check_task(config: RunConfig, strategy) -> None:
    """``--task`` and, for ``link``, ``--decoder``, ``--hits-k``, ``--link-split`` and the strategy's ability to run
    it (:meth:`~graphscale.strategies.base.Strategy.link_refusal`)."""
    from graphscale.registry import STRATEGIES
    from graphscale.tasks.split import check_fractions

    _check_choice("task", config.task, TASKS)
    if config.task != "link":
        return
    _check_choice("decoder", config.decoder, DECODERS)
    if not config.hits_k or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in config.hits_k):
        raise ValueError(f"--hits-k must be integers >= 1, got {','.join(map(str, config.hits_k)) or 'none'}")
    check_fractions(config.link_split)
    why = strategy.link_refusal(config)
    if why:
        able = [n for n in STRATEGIES.names() if not STRATEGIES.get(n).link_refusal(config)]
        raise ValueError(f"--task link: strategy {config.strategy.name!r} {why}; strategies that run it here: "
                         f"{', '.join(able) or 'none'}")


def check_strategy_weights(config: RunConfig, weighted: bool, halo_hops: int) -> None:
    """A weighted graph under a strategy that carries the weights but not in every part ``config`` runs
    (:meth:`Strategy.edge_weight_refusal`; ``halo_hops``: the partition store's), refused naming the option; after
    :func:`check_user_model` (which counts a PyG model's layers)."""
    from graphscale.registry import STRATEGIES

    why = weighted and STRATEGIES.get(config.strategy.name).edge_weight_refusal(config, halo_hops)
    if why:
        raise ValueError(f"the graph has edge weights (edge_weight), which strategy {config.strategy.name!r} {why}")


def check_user_model(config: RunConfig, in_dim: int | None = None, num_classes: int | None = None,
                     weighted: bool = False) -> None:
    """A user's model (``[model] factory`` or ``--model module.path:attr``): built once here, in the parent, and
    checked for the run's strategy (:func:`graphscale.nn.pyg.check_model`; with ``in_dim`` / ``num_classes``, against
    the data's widths too); ``config.model.layers`` becomes its number of message-passing layers (what the strategies'
    plans and ``--fanouts`` count). A factory returning a graphscale ``GNN`` is taken as it is. ``weighted``: the
    graph has edge weights, which every conv must take (:func:`check_edge_weights` first)."""
    from graphscale.nn.models import GNN, is_pyg_config, make_user_model, model_label

    if not is_pyg_config(config.model):
        return
    module = make_user_model(config.model, config.seed)
    if isinstance(module, GNN):
        if weighted:
            raise ValueError(f"the graph has edge weights (edge_weight), which the graphscale model "
                             f"{model_label(config.model)} does not take; delete the weights")
        config.model.layers = module.num_layers
        return
    from graphscale.nn.pyg import check_model

    config.model.layers = check_model(module, config.strategy.name, in_dim, num_classes,
                                      dropout=config.model.pyg_dropout, label=model_label(config.model),
                                      weighted=weighted)


def validate(config: RunConfig) -> None:
    """Check every option of ``config`` that needs no data, with errors that name the option (module docstring).

    Raises:
        ValueError: an option out of range, not fitting the strategy or the model, or an unusable output path.
        KeyError: an unknown strategy, model or partitioner.
    """
    from graphscale.data.datasets import FEATURE_NORMS, untrainable_reason
    from graphscale.nn.models import check_model_config
    from graphscale.registry import STRATEGIES

    strategy = STRATEGIES.get(config.strategy.name)  # raises with the list of choices
    check_model_config(config.model)
    check_user_model(config)
    _check_decoupled(config, strategy)
    _check_task(config, strategy)
    _check_choice("dtype", config.dtype, DTYPES)
    _check_feature_dtype(config)
    _check_choice("backend", config.backend, ("auto", "gloo", "nccl"))
    if config.backend == "nccl" and config.device == "cpu":
        raise ValueError("--backend nccl needs --device cuda (or auto on a machine with GPUs); CPU workers use gloo")
    from graphscale.allocator import resolve_mode

    resolve_mode(config.allocator)  # --allocator, or $GRAPHSCALE_ALLOCATOR
    from graphscale.nn.backend import kernel_setting

    kernel_setting()  # $GRAPHSCALE_KERNELS, before any worker reads it
    _check_choice("feature-norm", config.data.feature_norm, FEATURE_NORMS)
    _default_features(config)
    _check_features(config, strategy)
    reason = config.data.dataset and untrainable_reason(config.data.dataset, features=config.data.features,
                                                           task=config.task)
    if reason:  # from the spec alone
        raise ValueError(reason)
    _check_at_least_one("epochs", config.optim.epochs)
    check_finite("--timeout", config.strategy.timeout, positive=True)
    if config.strategy.timeout < MIN_TIMEOUT_S:
        raise ValueError(f"--timeout must be at least {MIN_TIMEOUT_S:g} second(s) (the time workers need to connect "
                         f"to each other), got {config.strategy.timeout}")
    if config.strategy.timeout > MAX_TIMEOUT_S:
        raise ValueError(f"--timeout must be at most {MAX_TIMEOUT_S:.0f} seconds (one year), got "
                         f"{config.strategy.timeout}")
    check_optim(config.optim)
    for option, value in (("--dropout", config.model.dropout), ("--alpha", config.model.alpha),
                          ("--theta", config.model.theta)):
        check_finite(option, value)
    if config.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {config.seed}")
    from graphscale.metrics.host_memory import resolve_host_memory

    resolve_host_memory(config.host_memory)  # a size, or auto
    _check_workers(config, strategy)
    unused = strategy.unused_options(config)
    for option in sorted(strategy.options - set(unused)):
        _check_strategy_option(option, config)
    strategy.check_config(config)
    if config.resume and not config.checkpoint:
        raise ValueError("--resume needs --checkpoint PATH")
    if config.resume and not Path(config.checkpoint).is_file():
        raise ValueError(f"--resume: checkpoint {config.checkpoint} does not exist")
    from graphscale.distributed.launch import is_main_process

    check_path_conflicts(config)
    if is_main_process():  # the process that writes them (under torchrun: rank 0)
        for option, path in (("--checkpoint", config.checkpoint), ("--json", config.json)):
            if path:
                check_output_path(path, option)
    for option, path in (("--cache-dir", config.cache_dir), ("--state-dir", config.strategy.state_dir)):
        if path:
            check_output_dir(path, option)
    if config.tensorboard:
        from graphscale.plot import check_tensorboard

        check_tensorboard(config.tensorboard)

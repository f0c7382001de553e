"""Typed configuration of a run, its TOML form and the per-model presets.

Every command-line option of ``graphscale train`` is a field here, declared once
with :func:`graphscale.options.option` (default, help, choices, flag, metavar);
the command line's flags, the TOML reader and the Python API's keywords are made
from the declarations (:func:`declared_options`). A TOML file (``--config FILE``)
has one table per section (``[data]``, ``[model]``, ``[optim]``, ``[strategy]``)
plus top-level run fields, and command-line flags override it. The defaults
below are those ``graphscale train --help`` shows.

The ``[strategy]`` section, :class:`StrategyConfig`, is assembled from the option
dataclasses each strategy declares (:mod:`graphscale.options.by_strategy`), which
hold every field's default, help and allowed values.

Options are strict: :func:`build_config` refuses an option the user gave (in the
file or as an override) that the chosen strategy or model does not read
(:func:`check_given`, from the ``options`` each strategy and model class
declares); defaults never count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from graphscale.options import SWITCH, flag_of, int_list, meta, option
from graphscale.options.by_strategy import own_chunks
from graphscale.options.model_averaging import ModelAveragingOptions
from graphscale.options.offload import OffloadOptions
from graphscale.options.pipeline import PipelineOptions
from graphscale.options.shared import (
    DataParallelOptions,
    GraphParallelOptions,
    SingleOptions,
)
from graphscale.options.split_parallel import SplitParallelOptions
from graphscale.options.task import DECODERS, DEFAULT_HITS_K, DEFAULT_LINK_SPLIT, LINK_OPTIONS, TASKS, float_list
from graphscale.options.task_parallel import TaskParallelOptions

#: Collective timeout in seconds unless ``--timeout`` says otherwise (PyTorch's default).
DEFAULT_TIMEOUT_S = 600.0
#: the values of ``RunConfig.dtype`` (the parameter and feature dtype of a run)
DTYPES = ("float32", "float64")
#: the values of ``DataConfig.feature_dtype``: the dtype the input features are stored and moved in
FEATURE_DTYPES = ("float32", "bfloat16")
#: the values of ``ModelConfig.pyg_dropout`` (``--pyg-dropout``; :mod:`graphscale.nn.pyg`)
PYG_DROPOUT_CHOICES = ("keyed", "torch")
#: the values of ``OptimConfig.optimizer`` and ``.lr_schedule`` (:mod:`graphscale.strategies.optimizers`)
OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("none", "cosine", "step")
#: sgd's momentum and step's decay factor when not given
DEFAULT_MOMENTUM = 0.9
DEFAULT_LR_GAMMA = 0.1
#: the values of ``DataConfig.feature_norm``, ``ModelConfig.decoupled``, ``RunConfig.device``, ``.backend`` and
#: ``.allocator`` (empty: ``$GRAPHSCALE_ALLOCATOR``)
FEATURE_NORMS = ("auto", "row", "none")
DECOUPLED_CHOICES = ("auto", "on", "off")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
ALLOCATORS = ("default", "retain")


#: The training default of what a METIS partition balances (``--balance``; its values:
#: :data:`graphscale.options.shared.BALANCE_CHOICES`).
DEFAULT_BALANCE = "edges+train"


@dataclass
class DataConfig:
    dataset: str = option("", "dataset spec (see `graphscale datasets`); empty: the dataset of --partitions, else cora",
                          metavar="SPEC")
    """Dataset spec (empty: the dataset of ``--partitions``' store, else ``cora``): ``cora``,
    ``planetoid:DIR[:NAME]``, ``npz:FILE``, ``ogb:DIR``, ``musae:DIR``, ``graphdir:DIR``, ``sbm:...``, ``rmat:...``
    (``edgelist:FILE`` has no features: it trains on ``features``, by default ``fastrp:128``)."""
    feature_norm: str = option("auto", "row-normalise features (auto: when they are non-negative, as GCN/GAT "
                               "preprocess Cora)", choices=FEATURE_NORMS)
    """``row`` (L1 row normalisation), ``none``, or ``auto`` = ``row`` for non-negative features (``none`` for
    generated ``features``)."""
    features: str = option("", "input features: fastrp:D (FastRP: a seeded sparse random projection propagated "
                           "over the graph, computed in row chunks), spectral:D (the D leading eigenvectors of the "
                           "normalised adjacency, in memory), degree (log(1 + degree)), onehot (identity, small "
                           "graphs), random:D (seeded normal), learnable:D (a trainable [N, D] table; single, "
                           "graph-parallel); empty: the dataset's own, or fastrp:128 for a dataset without "
                           "features", metavar="MODE")
    """Input features (:mod:`graphscale.data.features`): ``fastrp:D``, ``spectral:D``, ``degree``, ``onehot``,
    ``random:D`` are computed by the parent; ``learnable:D``'s table is row-sharded; empty: the dataset's own, or
    :data:`~graphscale.data.features.DEFAULT_FEATURELESS` when it has none."""
    feature_dtype: str = option("float32", "dtype the input features are stored, gathered and exchanged in: bfloat16 "
                                "halves their memory and bytes moved, computation stays float32 (rows upcast where "
                                "they enter the model; needs --dtype float32)", choices=FEATURE_DTYPES)
    """Read by the strategies that declare it (``Strategy.options``)."""


@dataclass
class ModelConfig:
    name: str = option("gcn", "GNN model: a graphscale model name, or module.path:factory (a zero-argument callable "
                       "returning a PyG model, imported by every worker; docs/pyg.md)", flag="model")
    hidden: int = option(16, "hidden width (per attention head for gat); not given: the model's preset, or the "
                         "smallest power of two at least the dataset's class count where the preset is narrower (39 "
                         "classes: 64)")
    """Not given (:attr:`hidden_auto`): the preset's width (gcn, sage 16; gat 8 per head; gcnii, resgcn 64), widened
    once the dataset's class count is known (:func:`resolve_hidden`)."""
    layers: int = option(2, "message-passing layers")
    dropout: float = option(0.5, "dropout probability in [0, 1) (gat: also on the attention coefficients)")
    heads: int = option(8, "attention heads of the hidden layers")
    alpha: float = option(0.1, "GCNII initial-residual weight, in [0, 1]")
    theta: float = option(0.5, "GCNII identity-mapping strength (beta_l = log(theta / l + 1))")
    decoupled: str = option("auto", "train the decoupled model Y = A_hat^L MLP(X) (NeutronTask's task decoupling; gat: "
                            "attention computed once from the MLP output) or the standard one; auto: on with "
                            "task-parallel only", choices=DECOUPLED_CHOICES)
    """``gcn`` / ``gat`` only."""
    last_relu: bool = option(False, "decoupled models: a ReLU after the MLP's last layer too (the NeutronTask "
                             "artifact's)")
    pyg_dropout: str = option("keyed", "a PyG model's torch.nn.Dropout: keyed swaps it for graphscale's keyed dropout "
                              "(the same masks under every strategy, so partitioned runs equal single), torch keeps it "
                              "(masks from each worker's RNG: partitioned runs differ from single)",
                              choices=PYG_DROPOUT_CHOICES)
    """A user's PyG model (``name = "module.path:factory"`` or ``factory``) only; :mod:`graphscale.nn.pyg`."""
    hidden_auto: bool = field(default=False, metadata={"internal": True})
    """Whether ``hidden`` is the preset's width rather than one the user gave (``--hidden``, TOML ``hidden``, the
    API's ``hidden=``): set by :func:`build_config`, read by :func:`resolve_hidden`; not an option, not recorded
    (reports and checkpoints record the resolved ``hidden``)."""
    factory: Callable | None = field(default=None, metadata={"python_only": True})
    """A zero-argument callable returning the model (a PyG model, or a graphscale ``GNN``); set by the Python API
    only, never from a TOML file or the command line (``name = "module.path:attr"`` is their form). Reports hold its
    qualified name."""


@dataclass
class OptimConfig:
    optimizer: str = option("adam", "optimiser: adam, adamw (weight decay decoupled from the gradient) or sgd (with "
                            "--momentum)", choices=OPTIMIZERS)
    lr: float = option(0.01, "learning rate (with --lr-schedule: the first epoch's)")
    weight_decay: float = option(5e-4, "weight decay: an L2 penalty added to the gradient (adam, sgd), decoupled from "
                                 "it (adamw)")
    momentum: float | None = option(None, "sgd's momentum, in [0, 1); sgd only (default 0.9)", metavar="M")
    lr_schedule: str = option("none", "learning rate per epoch: none (constant), cosine (annealed to 0 over --epochs, "
                              "as torch's CosineAnnealingLR with T_max = --epochs) or step (times --lr-gamma every "
                              "--lr-step-size epochs, as torch's StepLR)", choices=LR_SCHEDULES)
    lr_step_size: int | None = option(None, "--lr-schedule step: epochs between learning-rate decays (at least 1; "
                                      "needed with step)", metavar="N")
    lr_gamma: float | None = option(None, "--lr-schedule step: the factor of each decay, in (0, 1] (default 0.1)",
                                     metavar="FACTOR")
    epochs: int = option(200, "training epochs, each followed by an evaluation; the reported test accuracy is that of "
                         "the epoch with the best validation accuracy")


@dataclass
class StrategyConfig(SingleOptions, GraphParallelOptions, DataParallelOptions, SplitParallelOptions, OffloadOptions,
                     ModelAveragingOptions, PipelineOptions, TaskParallelOptions):
    """The ``[strategy]`` section: the options every strategy reads (below) and those each strategy declares
    (:mod:`graphscale.options.by_strategy`), one flat namespace, so strategy code reads ``config.strategy.X``.

    ``chunks`` is an alias: given (``--chunks``, ``chunks =`` in TOML, ``StrategyConfig(chunks=...)``), it sets the
    chosen strategy's own chunk count (``chunks_per_part`` of offload, ``pipeline_chunks``, ``task_chunks``);
    after :meth:`resolve_chunks` it holds that count, which the strategies read.
    """

    name: str = option("single", "training strategy; auto: advise's pick", flag="strategy")
    workers: int = option(1, "worker processes (gloo on CPU, NCCL with one GPU each); at most the CPU cores unless "
                          "--oversubscribe")
    chunks: int | None = option(None, "the chosen strategy's chunk count: --chunks-per-part (offload), "
                                "--pipeline-chunks (pipeline) or --task-chunks (task-parallel)")
    timeout: float = option(DEFAULT_TIMEOUT_S, "seconds a collective waits for every worker before the run fails, at "
                            "least 1 (workers need that long to connect)", metavar="SECONDS")

    def __post_init__(self) -> None:
        self.resolve_chunks()

    def resolve_chunks(self) -> None:
        """Make ``chunks`` and the chosen strategy's own chunk count one value (whichever was given).

        Raises:
            ValueError: both given, with different values.
        """
        own = own_chunks(self.name)
        if own is None:
            return
        specific = getattr(self, own)
        if self.chunks is not None and specific is not None and self.chunks != specific:
            raise ValueError(f"--chunks {self.chunks} and --{own.replace('_', '-')} {specific} disagree; --chunks is "
                             f"--{own.replace('_', '-')} for strategy {self.name!r}: give one of them")
        value = specific if specific is not None else self.chunks
        setattr(self, own, value)
        self.chunks = value


#: ``chunks`` and every strategy's own name for it (one count, whichever name gives it)
CHUNK_FIELDS = frozenset({"chunks"} | {cls.CHUNKS for cls in (OffloadOptions, PipelineOptions, TaskParallelOptions)})


@dataclass
class RunConfig:
    """A run: the four tables and the top-level run fields (declared in the order ``graphscale train --help`` lists
    them)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    oversubscribe: bool = option(False, "allow more workers than the CPU cores this process may use",
                                 bool_form=SWITCH)
    allocator: str = option("", "workers' malloc: default (as found) or retain (glibc keeps freed large blocks for the "
                            "next epoch: fewer page faults, higher peak memory; skipped where another malloc is "
                            "preloaded or MALLOC_* / GLIBC_TUNABLES are set); without it: $GRAPHSCALE_ALLOCATOR, else "
                            "default", choices=ALLOCATORS)
    """:mod:`graphscale.allocator`."""
    cache_dir: str = option("", "where runs keep the partition stores and graph directories they write, reused by "
                            "later runs (empty: $GRAPHSCALE_CACHE_DIR or ~/.cache/graphscale)", metavar="DIR")
    host_memory: str = option("", "host memory one process may use, e.g. 4GiB; data that does not fit stays in "
                              "memory-mapped files on disk (empty or auto: what the machine, or the memory cgroup the "
                              "run is in, can spare when the run starts)", metavar="SIZE")
    """The per-process host memory budget (:mod:`graphscale.metrics.host_memory`)."""
    seed: int = option(0, "seed of parameters, dropout masks, sampling, shuffling and partitioning")
    dtype: str = option("float32", "parameter and feature dtype", choices=DTYPES)
    device: str = option("auto", "auto: CUDA when there is one GPU per worker, else CPU", choices=DEVICES)
    backend: str = option("auto", "collective backend; auto: NCCL on CUDA, gloo on CPU. gloo with --device cuda lets "
                          "workers share GPUs (transfers staged through host memory: for functional runs on one GPU)",
                          choices=BACKENDS)
    json: str | None = option(None, "write a machine-readable report here (the directory must exist)",
                              metavar="PATH")
    tensorboard: str | None = option(None, "also log the per-epoch scalars (loss, accuracies, epoch time, bytes) to "
                                     "this TensorBoard log directory (its parent must exist; needs `pip install "
                                     "tensorboard`)", metavar="DIR")
    checkpoint: str | None = option(None, "save model, optimiser and the run's configuration here after every epoch "
                                    "(the directory must exist); with --repeat one file per seed, PATH with .seedS "
                                    "before the extension", metavar="PATH")
    resume: bool = option(False, "continue from --checkpoint; the model, data and optimiser options must be the "
                          "checkpoint's (only --epochs and how the run is executed may change)", bool_form=SWITCH)
    progress: bool = option(True, "progress on stderr: a bar on a terminal, a line every tenth of the epochs when "
                            "redirected")
    task: str = option("node", "what the run trains: node classification, or link prediction (the model's output "
                       "rows are vertex embeddings, --decoder scores vertex pairs; docs/link-prediction.md)",
                       choices=TASKS)
    decoder: str = option("dot", "--task link: how a vertex pair is scored from its embeddings: inner product, "
                          "Hadamard product then a 2-layer MLP, or diagonal bilinear", choices=DECODERS)
    hits_k: list[int] = field(default_factory=lambda: list(DEFAULT_HITS_K), metadata=meta(
        "--task link: the K of the reported Hits@K scores", parse=int_list, metavar="K,K,..."))
    link_split: list[float] = field(default_factory=lambda: list(DEFAULT_LINK_SPLIT), metadata=meta(
        "--task link: train, validation and test fractions of the edges (seeded; positive, summing to at most 1; "
        "edges beyond the sum stay in the message-passing graph unsupervised)", parse=float_list,
        metavar="TRAIN,VAL,TEST"))


def declared_options() -> dict[str, tuple[tuple[str, ...], dataclasses.Field]]:
    """Every option of a run, from the declarations above (and the strategies'): its command-line flag as an argparse
    dest (``batch_size``; :func:`~graphscale.options.flag_of`) -> (the path of its field: ``("model", "hidden")``,
    ``("seed",)``; the field), tables in :data:`SECTIONS` order, the top-level fields last. The command line, the
    Python API's keywords and :func:`build_config`'s TOML reading all read these fields. Fields set from Python
    only (``metadata["python_only"]``: the model factory) and the internal ones (``metadata["internal"]``: whether
    ``hidden`` was given) are left out.

    Raises:
        RuntimeError: two fields share a flag.
    """
    out: dict[str, tuple[tuple[str, ...], dataclasses.Field]] = {}
    tables = [((name,), cls) for name, cls in SECTIONS.items()]
    top = [f for f in dataclasses.fields(RunConfig) if f.name not in SECTIONS]
    for path, f in [(p + (f.name,), f) for p, cls in tables for f in dataclasses.fields(cls)] + \
            [((f.name,), f) for f in top]:
        if f.metadata.get("python_only") or f.metadata.get("internal"):
            continue
        dest = flag_of(f)[2:].replace("-", "_")
        if dest in out:
            raise RuntimeError(f"configuration fields {'.'.join(out[dest][0])} and {'.'.join(path)} share the flag "
                               f"--{dest.replace('_', '-')}")
        out[dest] = (path, f)
    return out


#: Model-specific defaults (the published settings for Cora); applied before user overrides. A preset's ``hidden``
#: is widened for a dataset with more classes when the user gives no width (:func:`resolve_hidden`).
PRESETS: dict[str, dict[str, dict]] = {
    "gcn": {"model": {"hidden": 16, "dropout": 0.5}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "sage": {"model": {"hidden": 16, "dropout": 0.5}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "gat": {"model": {"hidden": 8, "heads": 8, "dropout": 0.6}, "optim": {"lr": 0.005, "weight_decay": 5e-4}},
    "gcnii": {"model": {"hidden": 64, "layers": 16, "dropout": 0.6}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "resgcn": {"model": {"hidden": 64, "layers": 8, "dropout": 0.5}, "optim": {"lr": 0.005, "weight_decay": 5e-4}},
}

_PLURALS = {"strategy": "strategies", "model": "models"}

SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "strategy": StrategyConfig}


def _apply(target, values: dict, where: str) -> None:
    names = {f.name: f for f in dataclasses.fields(target) if not f.metadata.get("internal")}
    for key, value in values.items():
        if key not in names:
            raise ValueError(f"{where}: unknown option {key!r}; expected one of {', '.join(sorted(names))}")
        if names[key].metadata.get("python_only"):
            raise ValueError(f"{where}: option {key!r} is set from Python only (gs.train(model=...)); give "
                             "name = \"module.path:factory\" instead")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ValueError(f"{where}: [{key}] must be a table")
            _apply(current, value, f"{where} [{key}]")
            continue
        if current is not None and value is not None and isinstance(value, bool) != isinstance(current, bool):
            raise ValueError(f"{where}: option {key!r} expects {type(current).__name__}, got the boolean "
                             f"{str(value).lower()}")  # bool is an int to Python: epochs = true would read as 1
        if current is not None and value is not None and not isinstance(value, type(current)):
            if isinstance(current, float) and isinstance(value, int):
                value = float(value)
            else:
                raise ValueError(f"{where}: option {key!r} expects {type(current).__name__}, got {value!r}")
        setattr(target, key, value)


def build_config(overrides: dict, config_file: str | Path | None = None, factory: Callable | None = None) -> RunConfig:
    """Defaults, then the model preset, then the TOML file, then ``overrides``; refuses given options the run's
    strategy or model does not read.

    Args:
        overrides: nested dict shaped like the TOML (``{"model": {"name": "gat"}, "seed": 1}``);
            only options the user actually gave.
        config_file: optional TOML file.
        factory: the model factory of a Python caller (``[model] factory``, set before the options are checked, so
            the options only a user's model reads, ``pyg_dropout``, are its own in the file and the overrides alike).
    """
    file_values: dict = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            file_values = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"--config: file {path} does not exist") from None
        except IsADirectoryError:
            raise ValueError(f"--config {path} is a directory; give a TOML file") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"--config: {path} is not a TOML file (not UTF-8 text: byte {err.start} is "
                             f"{err.object[err.start:err.start + 1]!r})") from None
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"--config: {path} is not valid TOML: {err}") from None
        except OSError as err:
            raise ValueError(f"--config: {path} cannot be read ({err.strerror or err})") from None
    def model_name_in(values: dict):
        section = values.get("model")
        return section.get("name") if isinstance(section, dict) else None

    model_name = model_name_in(overrides) or model_name_in(file_values) or "gcn"
    config = RunConfig()
    _apply(config, PRESETS.get(model_name, {}), f"preset {model_name!r}")
    _apply(config, file_values, str(config_file))
    given = overrides.get("strategy")
    if isinstance(given, dict) and CHUNK_FIELDS & set(given):  # a count given here replaces the file's, either name
        for name in CHUNK_FIELDS:
            setattr(config.strategy, name, None)
    _apply(config, overrides, "command line")
    config.model.factory = factory
    config.strategy.resolve_chunks()
    given_now = {**given_options(file_values, str(config_file)), **given_options(overrides, "command line")}
    check_given(config, given_now)
    config.model.hidden_auto = ("model", "hidden") not in given_now and not is_user_model(config.model)
    return config


def auto_hidden(model: ModelConfig, classes: int) -> int:
    """The hidden width of a run that gives none: the model's (its preset's) ``model.hidden``, or, when the hidden
    representation (``hidden`` times ``heads`` for gat) is narrower than ``classes``, the smallest power of two
    that makes it at least ``classes`` wide (gcn on 39 labels: 64; Cora's 7 classes keep 16)."""
    from graphscale.registry import MODELS  # the registries import the models: not at module level

    heads = model.heads if model.name in MODELS.names() and "heads" in MODELS.get(model.name).options else 1
    if model.hidden * heads >= classes:
        return model.hidden
    width = 1
    while width * heads < classes:
        width *= 2
    return width


def resolve_hidden(config: RunConfig, classes: int) -> None:
    """Widen an unset ``--hidden`` (``config.model.hidden_auto``) to the dataset's ``classes`` (:func:`auto_hidden`),
    in place, once, in the parent before any worker starts (:func:`graphscale.prepare.prepare_data`), so every
    strategy builds the same model and reports and checkpoints record the width it trained. A width the user gave,
    a user's model (it defines its own widths) and ``--task link`` (its output is an embedding, not class scores)
    are left as they are."""
    if config.model.hidden_auto and config.task == "node" and not is_user_model(config.model):
        config.model.hidden = auto_hidden(config.model, classes)


def _label(section: str, field: str, where: str) -> str:
    """How an option is named in a message: ``--batch-size`` (command line) or ``run.toml: [strategy] batch_size``."""
    return f"--{field.replace('_', '-')}" if where == "command line" else f"{where}: [{section}] {field}"


def check_given(config: RunConfig, given: dict[tuple[str | None, str], str]) -> None:
    """Refuse a given given_name the run's strategy or model does not read.

    Args:
        config: the built configuration.
        given: ``(section, given_name) -> where`` of every given_name the user set (``where``: ``"command line"`` or the
            TOML file); defaults and presets are not in it.

    Raises:
        ValueError: names the given_name, why it is unused and the strategies (models) that read it.
        KeyError: unknown strategy or model.
    """
    from graphscale.registry import MODELS, STRATEGIES  # the registries import the strategies: not at module level

    # a [data] given_name that some strategies declare in their ``options`` (``feature_dtype``) is checked as theirs
    chosen = {"strategy": (STRATEGIES, config.strategy.name), "data": (STRATEGIES, config.strategy.name),
              "model": (MODELS, config.model.name)}
    for (section, given_name), where in given.items():
        if section is None and given_name in LINK_OPTIONS and config.task != "link":
            label = f"--{given_name.replace('_', '-')}" if where == "command line" else f"{where}: {given_name}"
            raise ValueError(f"{label} is read by --task link only; this run's task is {config.task!r}")
        if section is None and given_name == "link_split" and config.data.dataset.strip().lower().startswith("ogbl:"):
            label = "--link-split" if where == "command line" else f"{where}: link_split"
            raise ValueError(f"{label} is not read with --dataset {config.data.dataset}: an OGB link dataset brings "
                             "its own split")
        if section not in chosen:
            continue
        if section == "model" and is_user_model(config.model):  # a user's model: no registry class to ask
            if given_name in BUILTIN_MODEL_FIELDS:
                raise ValueError(f"{_label(section, given_name, where)} is not used by model "
                                 f"{user_model_label(config.model)} (a PyG model defines its own layers, widths and "
                                 "dropout); it is used by graphscale's own models (--model NAME)")
            continue
        registry, name = chosen[section]
        cls = registry.get(name)
        readers = [other for other in registry.names() if given_name in registry.get(other).options]
        if section == "model" and given_name in USER_MODEL_OPTIONS:
            readers.append("module.path:factory (PyG models)")
        if not readers:  # read by every strategy (model), such as --workers or --hidden
            continue
        unused = cls.unused_options(config) if hasattr(cls, "unused_options") else {}  # models have no conditions
        own = own_chunks(name) if section == "strategy" else None
        if own and "chunks" in unused:  # the alias and the strategy's own name are one option
            unused.setdefault(own, unused["chunks"])
        if given_name in cls.options and given_name not in unused:
            continue
        why = f" {unused[given_name]}" if given_name in unused else ""
        kinds = registry.kind if len(readers) == 1 else _PLURALS[registry.kind]
        raise ValueError(f"{_label(section, given_name, where)} is not used by {registry.kind} {name!r}{why}; "
                         f"it is used by {kinds} {', '.join(readers)}")



def given_options(values: dict, where: str) -> dict[tuple[str | None, str], str]:
    """``(section, field) -> where`` for every option set in ``values`` (shaped like the TOML; section ``None`` for
    top-level fields)."""
    out: dict[tuple[str | None, str], str] = {}
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):
            out.update({(key, name): where for name in value})
        else:
            out[(None, key)] = where
    return out


def stored_feature_dtype(config: RunConfig) -> str:
    """The dtype a run stores its input features in: ``--feature-dtype bfloat16``, else the run's ``--dtype``."""
    return "bfloat16" if config.data.feature_dtype == "bfloat16" else config.dtype


def is_user_model(model: ModelConfig) -> bool:
    """Whether ``[model]`` names a user's model (``factory``, or ``name = "module.path:attr"``), not a registered
    one."""
    return model.factory is not None or ":" in model.name


#: the ``[model]`` fields only a user's model has (left out of a registered model's :func:`model_dict`)
USER_MODEL_FIELDS = ("pyg_dropout", "factory")
#: the ``[model]`` fields that are no option and no part of a run's record (left out of every :func:`model_dict`)
UNRECORDED_MODEL_FIELDS = ("hidden_auto",)
#: the ``[model]`` options only a user's model reads
USER_MODEL_OPTIONS = frozenset({"pyg_dropout"})
#: the ``[model]`` options of graphscale's own models, which a user's model defines itself (giving one is an error)
BUILTIN_MODEL_FIELDS = ("hidden", "layers", "dropout", "heads", "alpha", "theta", "decoupled", "last_relu")


def user_model_label(model: ModelConfig) -> str:
    """How messages name a user's model: ``factory module.qualname`` or the ``module.path:attr`` spec."""
    if model.factory is not None:
        target = model.factory if hasattr(model.factory, "__qualname__") else type(model.factory)
        return f"factory {getattr(target, '__module__', '?')}.{target.__qualname__}"
    return model.name


def model_dict(model: ModelConfig) -> dict:
    """``[model]`` as plain data (reports, cache keys): a model factory as its qualified name; a registered model
    without the fields only a user's model has (its reports and cache keys are as before they existed)."""
    out = {k: v for k, v in dataclasses.asdict(dataclasses.replace(model, factory=None)).items()
           if k not in UNRECORDED_MODEL_FIELDS}
    if not is_user_model(model):
        return {k: v for k, v in out.items() if k not in USER_MODEL_FIELDS}
    if model.factory is not None:
        out["factory"] = user_model_label(model).removeprefix("factory ")
    return out


def to_dict(config: RunConfig) -> dict:
    """The configuration as plain data (the JSON report's ``config``); a model factory as its qualified name."""
    return {**dataclasses.asdict(dataclasses.replace(config, model=ModelConfig())), "model": model_dict(config.model)}

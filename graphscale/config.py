"""Typed configuration of a run, its TOML form and the per-model presets.

Every command-line option of ``graphscale train`` is a field here; a TOML file
(``--config FILE``) has one table per section (``[data]``, ``[model]``,
``[optim]``, ``[strategy]``) plus top-level run fields, and command-line flags
override it. The defaults below are those ``graphscale train --help`` shows.

Options are strict: :func:`build_config` refuses an option the user gave (in the
file or as an override) that the chosen strategy or model does not read
(:func:`graphscale.validation.check_given`, from the ``options`` each strategy
and model class declares); defaults never count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

#: Collective timeout in seconds unless ``--timeout`` says otherwise (PyTorch's default).
DEFAULT_TIMEOUT_S = 600.0
#: the values of ``RunConfig.dtype`` (the parameter and feature dtype of a run)
DTYPES = ("float32", "float64")
#: the values of ``DataConfig.feature_dtype``: the dtype the input features are stored and moved in
FEATURE_DTYPES = ("float32", "bfloat16")
#: the values of ``ModelConfig.pyg_dropout`` (``--pyg-dropout``; :mod:`graphscale.nn.pyg`)
PYG_DROPOUT_CHOICES = ("keyed", "torch")


#: What a METIS partition balances (``--balance``); :data:`DEFAULT_BALANCE` is the training default.
BALANCE_CHOICES = ("vertices", "edges", "edges+train")
DEFAULT_BALANCE = "edges+train"

@dataclass
class DataConfig:
    dataset: str = ""
    """Dataset spec (empty: the dataset of ``--partitions``' store, else ``cora``): ``cora``,
    ``planetoid:DIR[:NAME]``, ``npz:FILE``, ``ogb:DIR``, ``musae:DIR``, ``graphdir:DIR``, ``sbm:...``, ``rmat:...``
    (``edgelist:FILE`` has no features: train it with ``features``)."""
    feature_norm: str = "auto"
    """``row`` (L1 row normalisation), ``none``, or ``auto`` = ``row`` for non-negative features (``none`` for
    generated ``features``)."""
    features: str = ""
    """Input features (:mod:`graphscale.data.features`): empty = the dataset's own; ``degree``, ``onehot``,
    ``random:D`` (computed by the parent) or ``learnable:D`` (a trainable [N, D] table, row-sharded)."""
    feature_dtype: str = "float32"
    """The dtype the input features are stored in, gathered and exchanged in: ``float32`` or ``bfloat16`` (half
    the bytes; computation stays float32: the rows are upcast where they enter the model; needs ``--dtype
    float32``). Read by the strategies that declare it (``Strategy.options``)."""


@dataclass
class ModelConfig:
    name: str = "gcn"
    hidden: int = 16
    """Hidden width (per head for GAT)."""
    layers: int = 2
    """Message-passing layers."""
    dropout: float = 0.5
    """Dropout probability (GAT: also on the attention coefficients)."""
    heads: int = 8
    """Attention heads of GAT's hidden layers."""
    alpha: float = 0.1
    """GCNII initial-residual weight."""
    theta: float = 0.5
    """GCNII identity-mapping strength (beta_l = log(theta / l + 1))."""
    decoupled: str = "auto"
    """``gcn`` / ``gat``: ``on`` trains the decoupled model ``Y = A_hat^L MLP(X)`` (NeutronTask's task decoupling;
    gat: attention computed once from the MLP output), ``off`` the standard one; ``auto``: on with strategy
    ``task-parallel``, off elsewhere."""
    last_relu: bool = False
    """Decoupled models: a ReLU after the MLP's last layer too (the NeutronTask artifact's choice)."""
    pyg_dropout: str = "keyed"
    """A user's PyG model (``name = "module.path:factory"`` or ``factory``): ``keyed`` swaps its
    ``torch.nn.Dropout`` for graphscale's keyed dropout (the same masks under every strategy: partitioned runs equal
    ``single``), ``torch`` keeps it (masks from each worker process's RNG: partitioned runs differ from ``single``);
    :mod:`graphscale.nn.pyg`."""
    factory: Callable | None = field(default=None, metadata={"python_only": True})
    """A zero-argument callable returning the model (a PyG model, or a graphscale ``GNN``); set by the Python API
    only, never from a TOML file or the command line (``name = "module.path:attr"`` is their form). Reports hold its
    qualified name."""


@dataclass
class OptimConfig:
    lr: float = 0.01
    """Adam learning rate."""
    weight_decay: float = 5e-4
    """Adam weight decay (L2 penalty)."""
    epochs: int = 200


@dataclass
class StrategyConfig:
    name: str = "single"
    workers: int = 1
    partitioner: str = "metis"
    balance: str = ""
    """What a ``metis`` partition balances: ``vertices``, ``edges`` or ``edges+train`` (the default when empty); a
    ``spring`` one: ``vertices`` or ``edges`` (the default when empty)."""
    partitions: str = ""
    """Train from this partition store (``graphscale partition``); empty: partition into the cache directory."""
    minibatch: bool = False
    """``single`` only: sampled mini-batch training instead of full-graph."""
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    """Sampled neighbours per layer, input layer first (``-1``: all); one per model layer."""
    batch_size: int = 512
    """Training vertices per mini-batch (over all workers)."""
    cache: str = "none"
    """``data-parallel`` feature cache: ``none`` (DGL-like), ``pagraph`` or ``quiver``."""
    cache_fraction: float = 0.0
    """``data-parallel`` / ``split-parallel``: feature rows each worker caches, as a fraction of all vertices."""
    chunks: int | None = None
    """Chunks (K): ``offload`` per partition (default 1; ignored when ``memory_budget`` is set), ``pipeline`` in
    all (default 4 per worker), ``task-parallel`` in all (M; default ``subgraphs`` x the largest group)."""
    dedup: str = "reorg"
    """``offload`` communication dedup: ``baseline``, ``inter``, ``intra`` or ``reorg`` (each adds to the previous)."""
    recompute: str = "auto"
    """``offload`` intermediate data per layer: ``auto`` (cost model), ``hybrid``, ``recompute`` or ``none``."""
    offload_topology: str = "streamed"
    """``offload``: ``streamed`` (HongTu's: each batch's chunk topology and plan indices go to the device with it and
    are freed after) or ``resident`` (sent once at setup and kept on the device; epochs move no ``h2d_topo`` bytes, and
    GPU gathers can read the pinned host rows in place; not with ``memory_budget``)."""
    offload_transfer: str = "auto"
    """``offload`` host-device transfers: ``auto`` (``uva`` where a GPU can read the registered host memory and the
    topology is resident, else ``staged``), ``staged`` (a worker thread fills two pinned staging buffers, copies on a
    copy stream, double-buffered) or ``uva`` (GPU kernels gather and scatter the host rows in place)."""
    memory_budget: str = ""
    """``offload``: per-worker device-memory budget (e.g. ``256MiB``); picks the smallest K that fits."""
    parts: int = 0
    """``model-averaging``: partitions of the store the run writes (0: one per worker); ``p`` may exceed ``--workers``."""
    average_every: int = 1
    """``model-averaging``: average the partitions' models every this many epochs."""
    average_optimizer: bool = False
    """``model-averaging``: deprecated spelling of ``optimizer_state = "averaged"`` (now the default); with
    ``optimizer_state = "local"`` it is an error."""
    optimizer_state: str = "averaged"
    """``model-averaging``: Adam's moments ``averaged`` with the model, weighted the same way (default), or kept
    ``local`` per partition (SDT-GNN's choice; on Cora it settles at a lower accuracy, see the README)."""
    evaluation: str = "exact"
    """``model-averaging``: ``exact`` (home vertices on their full L-hop neighbourhood: the store's halo when
    ``K >= L``, else rows fetched from their owners), ``halo`` (exact from a ``K >= L`` halo only, no traffic) or
    ``truncated`` (the partition-local forward; not the model's accuracy for ``L > K``)."""
    halo_hops: int = 1
    """``model-averaging``: hops of in-neighbourhood each partition of the store the run writes holds (K = layers
    makes full-neighbour training exact for home vertices)."""
    device_memory: str = ""
    """``model-averaging``: one worker's device memory (e.g. ``16GiB``) from which the partition count of the
    store the run writes is chosen when ``parts`` is 0 (empty: measured)."""
    correction_steps: int = 0
    """``model-averaging``: global correction steps after each averaging round (mini-batches sampled across
    partitions, remote rows fetched from their home workers); 0: none (SDT-GNN)."""
    state_dir: str = ""
    """``model-averaging``: keep the per-partition states on disk here (empty: under the cache directory when a
    worker trains several partitions or the run keeps checkpoints, else in memory)."""
    history_period: int = 10
    """``pipeline``: refresh the historical embeddings every this many epochs (1: every epoch)."""
    shuffle: bool = True
    """``pipeline``, ``task-parallel``: a new chunk order every epoch (the same on every worker)."""
    history_grad: str = "zero"
    """``pipeline``: gradients along stale edges: ``zero`` (GNNPipe) or ``historical`` (the previous epoch's)."""
    hybrid_width: int = 1
    """``pipeline``: W-way graph parallelism inside each of ``--workers / W`` stages (1: the pure pipeline)."""
    hybrid_split: str = "chunks-first"
    """``pipeline`` hybrid: ``chunks-first`` (each chunk cut into W sub-chunks, the paper's) or ``parts-first``
    (W parts, each cut into the K chunks' pieces: fewer ghost rows)."""
    t_workers: int = 0
    """``task-parallel``: ranks running T tasks (the first ones; the rest run P tasks); 0: the scheduling model
    decides."""
    p_split: str = "layers"
    """``task-parallel``: P ranks split the propagation ``layers`` (a chain of stages, the paper's) or take whole
    ``subgraphs`` round-robin (the artifact's)."""
    subgraphs: int = 4
    """``task-parallel``: subgraphs S streamed through the task pipeline every epoch (chunks / S chunks each)."""
    chunking: str = "partitioner"
    """``task-parallel``: chunks as the ``partitioner``'s parts (--partitioner, METIS by default: what the NeutronTask
    artifact trains, contiguous ranges after a METIS reorder; few edges cross chunks, so ``causal`` drops few), or
    equal ``contiguous`` id ranges (the spec's plain form: on Cora ``causal`` then drops about half the cross-chunk
    edges every epoch and loses 1.5 points)."""
    dependency: str = "causal"
    """``task-parallel``: edges a subgraph's propagation reads: ``full`` (every edge, exact), ``causal`` (from its
    own and earlier subgraphs, the paper's DM) or ``block_diag`` (its own subgraph only, the artifact's)."""
    t_recompute: bool = True
    """``task-parallel``: recompute the T stack in backward instead of keeping its activations."""
    pipelined: bool = True
    """``task-parallel``: T of subgraph s+1 runs while P of subgraph s runs (off: each stage finishes every subgraph
    before sending; the same numbers)."""
    loss_norm: str = "global"
    """``task-parallel``: the loss over the global training count (``global``) or the sum of per-subgraph means
    (``subgraph-mean``, the artifact's)."""
    task_gamma: float = 0.5
    """``task-parallel`` without ``t_workers``: the scheduling model's compute / memory overlap weight gamma of Eq. 6,
    in [0, 1] (0.5: the artifact's)."""
    device_flops: float = 0.0
    """``task-parallel`` without ``t_workers``: one worker's compute rate in FLOP/s for the scheduling model (Eqs.
    5-6); 0: measured on this machine (a float32 GEMM)."""
    device_bandwidth: float = 0.0
    """``task-parallel`` without ``t_workers``: one worker's memory bandwidth in bytes/s for the scheduling model
    (Eq. 6); 0: measured on this machine (a float32 copy)."""
    schedule: str = "gpipe"
    """``pipeline``: ``gpipe`` (all forwards, then the backwards in reverse) or ``1f1b`` (one forward, one
    backward; needs ``cross_chunk_grad = none``)."""
    cross_chunk_grad: str = "fresh"
    """``pipeline``: gradients along cross-chunk edges read fresh: ``fresh`` (propagated, GNNPipe) or ``none``."""
    shm_dir: str = "/dev/shm"
    """``offload``: where the host arrays shared by the workers live (a memory-backed tmpfs by default)."""
    timeout: float = DEFAULT_TIMEOUT_S
    """Seconds a collective waits for every worker before the run fails."""


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    seed: int = 0
    """Seed of parameters, dropout masks, sampling, shuffling and partitioning."""
    dtype: str = "float32"
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu`` or ``cuda``."""
    backend: str = "auto"
    """Collective backend: ``auto`` (NCCL on CUDA, gloo on CPU), ``gloo`` or ``nccl``. ``gloo`` with ``cuda`` lets
    the workers share fewer GPUs than workers, every transfer staged through host memory (functional runs on one
    GPU, not speed)."""
    cache_dir: str = ""
    """Where runs keep the partition stores and graph directories they write (empty: the user cache directory)."""
    json: str | None = None
    tensorboard: str | None = None
    """Log the per-epoch scalars of the report (loss, accuracies, epoch time, bytes) to this TensorBoard log
    directory (needs the ``tensorboard`` package)."""
    checkpoint: str | None = None
    resume: bool = False
    progress: bool = True
    """A bar on a terminal, a line every tenth of the epochs when stderr is redirected."""
    oversubscribe: bool = False
    """Allow more workers than the CPU cores this process may use (refused otherwise)."""
    allocator: str = ""
    """Worker processes' malloc (:mod:`graphscale.allocator`): ``default`` (malloc as found) or ``retain`` (glibc
    keeps freed large blocks for the next epoch, where safe: fewer page faults, higher peak memory); empty:
    ``$GRAPHSCALE_ALLOCATOR``, else ``default``."""


#: Model-specific defaults (the published settings for Cora); applied before user overrides.
PRESETS: dict[str, dict[str, dict]] = {
    "gcn": {"model": {"hidden": 16, "dropout": 0.5}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "sage": {"model": {"hidden": 16, "dropout": 0.5}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "gat": {"model": {"hidden": 8, "heads": 8, "dropout": 0.6}, "optim": {"lr": 0.005, "weight_decay": 5e-4}},
    "gcnii": {"model": {"hidden": 64, "layers": 16, "dropout": 0.6}, "optim": {"lr": 0.01, "weight_decay": 5e-4}},
    "resgcn": {"model": {"hidden": 64, "layers": 8, "dropout": 0.5}, "optim": {"lr": 0.005, "weight_decay": 5e-4}},
}

SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "strategy": StrategyConfig}


def _apply(target, values: dict, where: str) -> None:
    names = {f.name: f for f in dataclasses.fields(target)}
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
        if current is not None and value is not None and not isinstance(value, type(current)):
            if isinstance(current, float) and isinstance(value, int):
                value = float(value)
            else:
                raise ValueError(f"{where}: option {key!r} expects {type(current).__name__}, got {value!r}")
        setattr(target, key, value)


def build_config(overrides: dict, config_file: str | Path | None = None) -> RunConfig:
    """Defaults, then the model preset, then the TOML file, then ``overrides``; refuses given options the run's
    strategy or model does not read.

    Args:
        overrides: nested dict shaped like the TOML (``{"model": {"name": "gat"}, "seed": 1}``);
            only options the user actually gave.
        config_file: optional TOML file.
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
    _apply(config, overrides, "command line")
    from graphscale.validation import check_given  # imports the registries (and torch): not at module level

    check_given(config, {**given_options(file_values, str(config_file)), **given_options(overrides, "command line")})
    return config


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


def model_dict(model: ModelConfig) -> dict:
    """``[model]`` as plain data (reports, cache keys): a model factory as its qualified name; a registered model
    without the fields only a user's model has (its reports and cache keys are as before they existed)."""
    out = dataclasses.asdict(dataclasses.replace(model, factory=None))
    if not is_user_model(model):
        return {k: v for k, v in out.items() if k not in USER_MODEL_FIELDS}
    if model.factory is not None:
        target = model.factory if hasattr(model.factory, "__qualname__") else type(model.factory)
        out["factory"] = f"{getattr(target, '__module__', '?')}.{target.__qualname__}"
    return out


def to_dict(config: RunConfig) -> dict:
    """The configuration as plain data (the JSON report's ``config``); a model factory as its qualified name."""
    return {**dataclasses.asdict(dataclasses.replace(config, model=ModelConfig())), "model": model_dict(config.model)}

"""GNN models: a list of block layers between row-wise input and output maps.

A model is a plain ``nn.Module`` with no communication inside. Strategies run it
whole (:meth:`GNN.forward`), one layer at a time (:meth:`GNN.step`), or by halves
(:meth:`GNN.aggregate` then :meth:`GNN.update`), always on blocks::

    h   = input_map(x, blocks[0].src_ids)                       # row-wise
    h0  = h                                                     # GCNII's initial residual
    h   = step(l, blocks[l], h, h0[:blocks[l].num_dst])          # l = 0 .. L-1
    out = output_map(h, blocks[-1].dst_ids)                     # row-wise

Input features stored in bfloat16 (``--feature-dtype``) are upcast to the parameters' dtype where they enter
the model (:meth:`GNN.upcast`: the input map's input, or step 0's dropout): every computation is in that dtype.

Dropout everywhere is keyed by global vertex ids (:mod:`graphscale.nn.dropout`):
step ``l`` drops its source rows at site ``l``, ``input_map`` uses site ``L``
and ``output_map`` site ``L + 1``; GAT's attention dropout uses the edge stream
at site ``l``. A row recomputed in any partition, chunk or order therefore
gets the same mask, and :meth:`GNN.set_epoch` changes all masks per epoch.

Models (``cfg.layers`` = number of message-passing layers ``L``):

* ``gcn`` / ``sage``: dropout -> conv, ReLU between layers; last layer outputs classes.
* ``gat``: dropout -> GATConv (``heads`` heads of ``hidden``, concatenated, ELU) on
  hidden layers, last layer one head averaged; attention dropout = ``dropout``
  (Cora: 8 x 8, dropout 0.6).
* ``gcnii``: ``input_map = ReLU(Linear(drop(x)))``; step: drop -> GCN2Conv -> ReLU
  (after every layer, as in the GCNII paper); ``output_map = Linear(drop(h))``.
* ``resgcn`` (DeeperGCN res+): ``input_map = ReLU(Linear(drop(x)))``; step:
  ``h + GCN(drop(ReLU(LayerNorm(h))))``; ``output_map = Linear(drop(ReLU(LayerNorm(h))))``.
* ``--decoupled on`` (``gcn``, ``gat``): the decoupled forms of :mod:`graphscale.nn.decoupled`
  (``Y = A_hat^L MLP(X)``); ``auto`` turns them on for ``task-parallel`` only (:func:`is_decoupled`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphscale.config import PYG_DROPOUT_CHOICES, ModelConfig, is_user_model, user_model_label
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.gnn import GNN, relu_
from graphscale.nn.layers import GATLayer, GCNIILayer, GCNLayer, ResGCNPlusLayer, SAGELayer
from graphscale.registry import MODELS

#: the values of ``--decoupled``
DECOUPLED_CHOICES = ("auto", "on", "off")
#: the options only a decoupled form reads
_DECOUPLED_OPTIONS = frozenset({"decoupled", "last_relu"})


def is_decoupled(config) -> bool:
    """Whether a run trains the decoupled form of its model: ``--decoupled on``, or ``auto`` with a strategy whose
    default it is (``task-parallel``)."""
    if config.model.decoupled == "auto":
        from graphscale.registry import STRATEGIES

        return bool(STRATEGIES.get(config.strategy.name).decoupled_default)
    return config.model.decoupled == "on"


def model_form(config) -> str:
    """``decoupled`` or ``standard``: what a run's model is (reports name it)."""
    return "decoupled" if is_decoupled(config) else "standard"


def _unused_without_decoupling(config) -> dict[str, str]:
    return {} if is_decoupled(config) else {"last_relu": "without --decoupled"}


@MODELS.register("gcn")
class GCN(GNN):
    """GCN (Kipf & Welling): ``L`` GCN layers, dropout before each, ReLU between them."""

    options = _DECOUPLED_OPTIONS

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        return _unused_without_decoupling(config)

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
        super().__init__([GCNLayer(dims[l], dims[l + 1]) for l in range(cfg.layers)], dims[:-1], cfg.dropout, seed)


@MODELS.register("sage")
class GraphSAGE(GNN):
    """GraphSAGE (mean): ``L`` SAGE layers, dropout before each, ReLU between them."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
        super().__init__([SAGELayer(dims[l], dims[l + 1]) for l in range(cfg.layers)], dims[:-1], cfg.dropout, seed)


@MODELS.register("gat")
class GAT(GNN):
    """GAT: hidden layers of ``heads`` x ``hidden`` concatenated with ELU, last layer one head.

    Input and attention dropout both use ``cfg.dropout`` (Cora: 8 x 8, 0.6).
    """

    options = frozenset({"heads"}) | _DECOUPLED_OPTIONS

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        return _unused_without_decoupling(config)  # the decoupled form's propagations have --heads heads

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        layers, widths, width = [], [], in_dim
        for l in range(cfg.layers):
            last = l == cfg.layers - 1
            layer = GATLayer(width, num_classes if last else cfg.hidden, heads=1 if last else cfg.heads,
                             concat=not last, attn_dropout=cfg.dropout, site=l, seed=seed)
            layers.append(layer)
            widths.append(width)
            width = layer.output_dim
        super().__init__(layers, widths, cfg.dropout, seed)

    def post(self, l: int, out: Tensor) -> Tensor:
        """ELU except after the last layer."""
        return out if l == self.num_layers - 1 else F.elu(out)


@MODELS.register("gcnii")
class GCNII(GNN):
    """GCNII (Chen et al. 2020): Linear+ReLU input map, ``L`` GCN2Conv layers, Linear output map."""

    needs_h0 = True
    options = frozenset({"alpha", "theta"})

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        layers = [GCNIILayer(cfg.hidden, cfg.alpha, cfg.theta, layer=l + 1) for l in range(cfg.layers)]
        super().__init__(layers, [cfg.hidden] * cfg.layers, cfg.dropout, seed)
        self.lin_in = nn.Linear(in_dim, cfg.hidden)
        self.lin_out = nn.Linear(cfg.hidden, num_classes)
        self.drop_in = KeyedDropout(cfg.dropout, site=cfg.layers, seed=seed)
        self.drop_out = KeyedDropout(cfg.dropout, site=cfg.layers + 1, seed=seed)

    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """``ReLU(Linear(drop(x)))``: ``[N, in]`` -> ``[N, hidden]``."""
        return relu_(self.lin_in(self.drop_in(x, ids)))

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """``Linear(drop(h))``: ``[N, hidden]`` -> ``[N, classes]``."""
        return self.lin_out(self.drop_out(h, ids))

    def post(self, l: int, out: Tensor) -> Tensor:
        """ReLU (in place) after every layer (the output map is a separate Linear)."""
        return relu_(out)


@MODELS.register("resgcn")
class ResGCN(GNN):
    """ResGCN+ (DeeperGCN res+) with GCN-normalised convolutions and LayerNorm."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        layers = [ResGCNPlusLayer(cfg.hidden, cfg.dropout, site=l, seed=seed) for l in range(cfg.layers)]
        super().__init__(layers, [cfg.hidden] * cfg.layers, cfg.dropout, seed)
        self.lin_in = nn.Linear(in_dim, cfg.hidden)
        self.norm_out = nn.LayerNorm(cfg.hidden)
        self.lin_out = nn.Linear(cfg.hidden, num_classes)
        self.drop_in = KeyedDropout(cfg.dropout, site=cfg.layers, seed=seed)
        self.drop_out = KeyedDropout(cfg.dropout, site=cfg.layers + 1, seed=seed)

    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """``ReLU(Linear(drop(x)))``: ``[N, in]`` -> ``[N, hidden]``."""
        return relu_(self.lin_in(self.drop_in(x, ids)))

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """``Linear(drop(ReLU(LayerNorm(h))))``: ``[N, hidden]`` -> ``[N, classes]``."""
        return self.lin_out(self.drop_out(relu_(self.norm_out(h)), ids))

    def pre(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """Identity: the res+ layer applies LayerNorm, ReLU and its keyed dropout (site ``l``) itself."""
        return h

    def post(self, l: int, out: Tensor) -> Tensor:
        """Identity (pre-activation residual blocks)."""
        return out


def is_pyg_config(cfg: ModelConfig) -> bool:
    """Whether ``cfg`` names a user's model (``cfg.factory``, or ``--model module.path:attr``) rather than a
    registered one."""
    return is_user_model(cfg)


def model_factory(cfg: ModelConfig):
    """The zero-argument callable that builds a user's model: ``cfg.factory``, or ``attr`` of module
    ``module.path`` for ``--model module.path:attr`` (imported here, so in every worker).

    Raises:
        ValueError: one line naming ``--model`` and what is missing.
    """
    if cfg.factory is not None:
        if not callable(cfg.factory):
            raise ValueError(f"model factory {cfg.factory!r} is not callable; expected a zero-argument callable "
                             "returning a torch.nn.Module")
        return cfg.factory
    import importlib

    path, _, attr = cfg.name.partition(":")
    if not path or not attr:
        raise ValueError(f"--model {cfg.name}: expected module.path:factory (a zero-argument callable returning the "
                         "model)")
    try:
        module = importlib.import_module(path)
    except ImportError as err:
        raise ValueError(f"--model {cfg.name}: cannot import module {path!r} ({err}); it must be importable "
                         "(on PYTHONPATH) by the workers too") from None
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ValueError(f"--model {cfg.name}: module {path!r} has no attribute {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ValueError(f"--model {cfg.name}: {attr!r} is a {type(factory).__name__}, not a "  # noqa: TRY004
                         "zero-argument callable returning the model")
    return factory


def model_label(cfg: ModelConfig) -> str:
    """How messages name a user's model: ``model factory module.qualname`` or ``model module.path:attr``."""
    return f"model {user_model_label(cfg)}"


def make_user_model(cfg: ModelConfig, seed: int = 0) -> nn.Module:
    """Call the user's factory (:func:`model_factory`) with the torch RNG seeded by ``seed`` (inside
    ``fork_rng``: the caller's RNG is untouched), so every worker builds the same initial parameters.

    Raises:
        ValueError: the factory fails or returns no ``torch.nn.Module``.
    """
    factory = model_factory(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            module = factory()
        except Exception as err:  # noqa: BLE001 - a user's code: one line naming it
            first = str(err).splitlines()[0] if str(err) else ""
            raise ValueError(f"{model_label(cfg)}: calling it failed: {type(err).__name__}: {first}") from None
    if not isinstance(module, nn.Module):
        raise ValueError(  # noqa: TRY004 - bad input is a ValueError (the CLI exits 2 with it)
            f"{model_label(cfg)} returned a {type(module).__name__}, not a torch.nn.Module")
    return module


def check_model_config(cfg: ModelConfig) -> type[GNN]:
    """The registered model class ``cfg.name`` (:class:`~graphscale.nn.pyg.PyGModel` for a user's model), after
    checking the options it reads (errors name the option).

    Raises:
        KeyError: unknown model (the message lists the registered ones).
        ValueError: an option out of range.
    """
    if is_pyg_config(cfg):
        from graphscale.nn.pyg import PyGModel

        if cfg.pyg_dropout not in PYG_DROPOUT_CHOICES:
            raise ValueError(f"--pyg-dropout must be one of {', '.join(PYG_DROPOUT_CHOICES)}, got "
                             f"{cfg.pyg_dropout!r}")
        if cfg.factory is None:
            model_factory(cfg)  # --model module.path:attr resolves
        return PyGModel
    cls = MODELS.get(cfg.name)
    counts = {"layers": cfg.layers, "hidden": cfg.hidden, **({"heads": cfg.heads} if "heads" in cls.options else {})}
    for option, value in counts.items():
        if value < 1:
            raise ValueError(f"--{option} must be >= 1, got {value}")
    if not 0.0 <= cfg.dropout < 1.0:  # 1 drops every hidden unit: a constant model
        raise ValueError(f"--dropout must be in [0, 1) (the fraction of hidden units dropped), got {cfg.dropout}")
    if "alpha" in cls.options and not 0.0 <= cfg.alpha <= 1.0:
        raise ValueError(f"--alpha must lie in [0, 1], got {cfg.alpha}")
    if "theta" in cls.options and not cfg.theta > 0.0:
        raise ValueError(f"--theta must be > 0, got {cfg.theta}")
    if cfg.decoupled not in DECOUPLED_CHOICES:
        raise ValueError(f"--decoupled must be one of {', '.join(DECOUPLED_CHOICES)}, got {cfg.decoupled!r}")
    return cls


def build_model(cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0,
                dtype: torch.dtype = torch.float32, decoupled: bool | None = None) -> GNN:
    """Build the registered model ``cfg.name`` (or its decoupled form) with deterministic parameters.

    Parameters are drawn from the global torch RNG seeded with ``seed`` inside
    ``torch.random.fork_rng`` (the caller's RNG state is untouched); the
    dropout seed is ``seed`` as well.

    Args:
        cfg: model configuration (``name``, ``hidden``, ``layers``, ``dropout``, ``heads``, ``alpha``, ``theta``).
        in_dim: input feature width.
        num_classes: output width.
        seed: parameter and dropout seed.
        dtype: parameter dtype.
        decoupled: build the decoupled form (:mod:`graphscale.nn.decoupled`); ``None``: when ``cfg.decoupled`` is
            ``on`` (a run resolves ``auto`` with :func:`is_decoupled`).

    A user's model (``cfg.factory`` or ``--model module.path:attr``) is built by :func:`make_user_model` and
    wrapped by :func:`graphscale.nn.pyg.as_gnn` (its input and output widths checked against ``in_dim`` and
    ``num_classes``; ``cfg.pyg_dropout`` chooses its dropout); a factory returning a graphscale :class:`GNN` gives it
    as it is.

    Returns:
        The model, in training mode, with ``epoch = 0``.

    Raises:
        ValueError: a decoupled form asked of a model without one; a user's model that cannot be trained.
    """
    cls = check_model_config(cfg)
    if is_pyg_config(cfg):
        if decoupled:
            raise ValueError(f"{model_label(cfg)} has no decoupled form (--decoupled)")
        module = make_user_model(cfg, seed)
        if not isinstance(module, GNN):
            from graphscale.nn.pyg import as_gnn

            with torch.random.fork_rng(devices=[]):  # lazy modules draw their parameters in the width probe
                torch.manual_seed(seed)
                module = as_gnn(module, in_dim, num_classes, dropout=cfg.pyg_dropout, seed=seed,
                                label=model_label(cfg))
        return module.to(dtype)
    if cfg.decoupled == "on" if decoupled is None else decoupled:
        from graphscale.nn.decoupled import DECOUPLED

        if cfg.name not in DECOUPLED:
            raise ValueError(f"model {cfg.name!r} has no decoupled form (--decoupled); models with one: "
                             f"{', '.join(DECOUPLED)}")
        cls = DECOUPLED[cfg.name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(cfg, in_dim, num_classes, seed=seed)
    return model.to(dtype)

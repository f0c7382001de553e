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

from graphscale.config import PYG_DROPOUT_CHOICES, ModelConfig, is_user_model
from graphscale.data.block import Block
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.layers import DeferredLinearReLU, GATLayer, GCNIILayer, GCNLayer, ResGCNPlusLayer, SAGELayer
from graphscale.registry import MODELS


def relu_(out: Tensor) -> Tensor:
    """ReLU in place on a layer's fresh output (no new ``[N, d]`` tensor; its backward needs only the result,
    which it keeps); out of place on a view or a leaf that requires grad. Only for tensors the caller made:
    the layers' outputs here are always new tensors that no autograd node saved (autograd's version check
    would refuse the backward otherwise)."""
    return F.relu(out, inplace=out._base is None and not (out.is_leaf and out.requires_grad))


class GNN(nn.Module):
    """Base class: ``L`` message-passing layers on blocks plus row-wise input / output maps.

    Subclasses build ``layers`` and override :meth:`input_map`,
    :meth:`output_map`, :meth:`pre` (row-wise transform of a step's sources,
    dropout by default) and :meth:`post` (activation).

    Args:
        layers: the message-passing layers (see :mod:`graphscale.nn.layers`).
        widths: input width of each layer, ``len(layers)`` entries.
        dropout: dropout probability of the step dropouts.
        seed: dropout seed.

    Attributes:
        num_layers: number of message-passing layers ``L``.
        needs_h0: whether :meth:`step` needs the initial features of the destinations (GCNII).
    """

    needs_h0: bool = False
    #: Fuse step ``l``'s dropout into layer ``l``'s aggregation where the layer can (``fuses_dropout``) and
    #: :meth:`pre` is the plain keyed dropout: bit-identical, without the dropped ``[S, d_l]`` copy.
    fuse_dropout: bool = True
    #: The ``[model]`` options it reads besides ``name``, ``hidden``, ``layers`` and ``dropout`` (which every model
    #: reads); giving another is an error naming the models that read it (:func:`graphscale.validation.check_given`).
    options: frozenset[str] = frozenset()
    #: ``standard``, or ``decoupled`` (:mod:`graphscale.nn.decoupled`)
    form = "standard"

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        """Options of :attr:`options` that ``config``'s other settings leave unread, each with the reason."""
        return {}

    def __init__(self, layers: list[nn.Module], widths: list[int], dropout: float, seed: int) -> None:
        super().__init__()
        if not layers:
            raise ValueError("a GNN needs at least one message-passing layer (model.layers >= 1)")
        if len(widths) != len(layers):
            raise ValueError("one input width per layer expected")
        self.layers = nn.ModuleList(layers)
        self.num_layers = len(layers)
        self.dropout = float(dropout)
        self.seed = int(seed)
        self.epoch = 0
        self._widths = [int(w) for w in widths]
        self.drops = nn.ModuleList(KeyedDropout(dropout, site=l, seed=seed) for l in range(self.num_layers))

    # ------------------------------------------------------------------ keys
    def set_epoch(self, epoch: int) -> None:
        """Key every dropout mask of the model by ``epoch``."""
        self.epoch = int(epoch)
        for module in self.modules():
            if module is not self and hasattr(module, "set_epoch"):
                module.set_epoch(epoch)

    def layer_widths(self) -> list[int]:
        """Width ``d_l`` of the tensor entering each step ``l`` (for communication volumes)."""
        return list(self._widths)

    # ------------------------------------------------------------ row-wise
    @property
    def learned_input_map(self) -> bool:
        """Whether :meth:`input_map` is learned (GCNII, ResGCN+): else step 0 reads the input features themselves."""
        return type(self).input_map is not GNN.input_map

    def upcast(self, x: Tensor) -> Tensor:
        """Input feature rows as the model computes on them: rows stored in bfloat16 (``--feature-dtype``) upcast
        to the parameters' dtype (exact), right where they enter the model; other rows as they are.

        A learned :meth:`input_map` gets upcast rows (:meth:`forward`); otherwise step 0 takes the stored rows
        (from :meth:`forward`, or gathered by a strategy) and its keyed dropout reads them into a float32 output
        (:func:`~graphscale.nn.dropout.keyed_dropout`: no separate float32 copy), or :meth:`step` upcasts them
        where the dropout is the identity."""
        if x.dtype != torch.bfloat16:
            return x
        return x.to(next(self.parameters()).dtype)

    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """Row-wise map of the input features (identity here). Shapes: ``[N, in]`` -> ``[N, d_0]``."""
        return x

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """Row-wise map of the last layer's output (identity here). Shapes: ``[N, d_L]`` -> ``[N, classes]``."""
        return h

    def pre(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """Row-wise transform of step ``l``'s inputs before the layer: keyed dropout (site ``l``)."""
        return self.drops[l](h, ids)

    def post(self, l: int, out: Tensor) -> Tensor:
        """Activation after layer ``l`` (ReLU, in place, except after the last layer)."""
        return out if l == self.num_layers - 1 else relu_(out)

    # ------------------------------------------------------------ layers
    def _check_step(self, l: int, h, h0_dst: Tensor | None, check_h0: bool = True) -> None:
        if not 0 <= l < self.num_layers:
            raise ValueError(f"layer index {l} out of range for a {self.num_layers}-layer model")
        if len(h.shape) != 2 or h.shape[1] != self._widths[l]:
            raise ValueError(f"step {l}: input must be [rows, {self._widths[l]}], got {tuple(h.shape)}")
        if check_h0 and self.needs_h0 and h0_dst is None:
            raise ValueError(f"step {l}: {type(self).__name__} needs h0_dst (the input_map output of the "
                             "destination rows)")

    def step(self, l: int, block: Block, h_src: Tensor | DeferredLinearReLU, h0_dst: Tensor | None = None, *,
             pre_applied: bool = False, defer_relu: bool = False) -> Tensor | DeferredLinearReLU:
        """Run layer ``l`` on ``block``: pre (dropout keyed by ``block.src_ids``), layer, activation.

        Args:
            l: layer index in ``[0, L)``.
            block: the layer's block.
            h_src: inputs of the block's source rows; or step ``l - 1``'s deferred output (``defer_relu``).
            h0_dst: ``input_map`` output of the destination rows (GCNII only).
            pre_applied: ``h_src`` already is ``pre(l, ., src_ids)`` of the inputs. ``pre`` is row-wise and keyed
                by global ids, so a strategy may apply it to the rows it owns before exchanging them (one
                transformed copy of its own rows instead of one of every source row).
            defer_relu: where layer ``l`` ends in its dense product and ReLU, return them unevaluated
                (:class:`~graphscale.nn.layers.DeferredLinearReLU`) for step ``l + 1`` on the same rows to fuse
                with its own first product (:meth:`forward` does this when :meth:`takes_deferred` ``(l + 1)``).

        Returns:
            The destinations' outputs.

        Shapes:
            h_src ``[S, d_l]``, h0_dst ``[D, d_0]`` -> ``[D, d_{l+1}]``.
        """
        self._check_step(l, h_src, h0_dst)
        if h_src.shape[0] != block.num_src:
            raise ValueError(f"step {l}: h_src has {h_src.shape[0]} rows, the block has {block.num_src} sources")
        layer = self.layers[l]
        if isinstance(h_src, DeferredLinearReLU) and (pre_applied or not self.takes_deferred(l)):
            h_src = h_src.compute()
        stored = h_src.dtype == torch.bfloat16  # stored rows: the keyed dropout reads them into float32
        keep = None if pre_applied or stored else self._fused_dropout(l, block, h_src)
        relu = self._fuses_relu(l)
        kwargs = {"relu": True, "defer_relu": defer_relu} if relu else {}
        if keep is not None:
            kwargs["src_dropout"] = keep
        elif not isinstance(h_src, DeferredLinearReLU):  # (deferred: pre fuses, and is the identity here)
            h_src = self.upcast(h_src if pre_applied else self.pre(l, h_src, block.src_ids))  # upcast: pre the identity
        out = layer(block, h_src, h0_dst, **kwargs) if self.needs_h0 else layer(block, h_src, **kwargs)
        return out if relu else self.post(l, out)

    def _fuses_relu(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` lets layer ``l`` apply :meth:`post`'s ReLU itself (``fuses_relu``)."""
        return (type(self).post is GNN.post and l < self.num_layers - 1
                and getattr(self.layers[l], "fuses_relu", False))

    def takes_deferred(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` fuses step ``l - 1``'s deferred dense product and ReLU (``defer_relu``) into
        its own first product: :meth:`pre` fuses into layer ``l``, which takes deferred inputs
        (``takes_deferred``)."""
        return self.fuses_pre(l) and getattr(self.layers[l], "takes_deferred", False)

    def fuses_pre(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` fuses :meth:`pre` into layer ``l``'s first product when given raw inputs
        (``pre_applied=False``): then a strategy may pass it raw rows (its own and received ones) instead of
        materialising ``pre`` of its rows first."""
        return bool(self.fuse_dropout and getattr(self.layers[l], "fuses_dropout", False) and type(self).pre is GNN.pre)

    def _fused_dropout(self, l: int, block: Block, h_src: Tensor):
        """Step ``l``'s dropout as a :class:`~graphscale.nn.dropout.RowKeep` for layer ``l`` to fuse, or ``None``
        (not fusable here, or the dropout is inactive: then :meth:`pre` is applied as usual)."""
        if not self.fuses_pre(l):
            return None
        return self.drops[l].keep(block.src_ids, h_src.shape[1])

    def aggregate(self, l: int, block: Block, h_src: Tensor) -> Tensor:
        """Sparse half of step ``l``: ``layers[l].aggregate(block, pre(l, h_src))``.

        Together with :meth:`update` this equals :meth:`step`. When
        ``layers[l].linear_aggregate`` is true the result may be cached and its
        backward needs only the topology (the pre-transform is keyed dropout,
        whose backward needs only ids).

        Shapes:
            h_src ``[S, d_l]`` -> ``[D, *]``.
        """
        self._check_step(l, h_src, None, check_h0=False)
        keep = self._fused_dropout(l, block, h_src)
        if keep is not None:
            return self.layers[l].aggregate(block, h_src, src_dropout=keep)
        return self.layers[l].aggregate(block, self.pre(l, h_src, block.src_ids))

    def update(self, l: int, x_agg: Tensor, h_dst: Tensor, dst_ids: Tensor, h0_dst: Tensor | None = None) -> Tensor:
        """Dense half of step ``l``: ``post(layers[l].update(x_agg, pre(l, h_dst), h0_dst))``.

        Args:
            l: layer index.
            x_agg: output of :meth:`aggregate` for the destinations.
            h_dst: the step's *raw* inputs of the destination rows (``h_src[:num_dst]``).
            dst_ids: global ids of the destination rows (key of their dropout masks).
            h0_dst: ``input_map`` output of the destinations (GCNII only).

        Shapes:
            x_agg ``[D, *]``, h_dst ``[D, d_l]`` -> ``[D, d_{l+1}]``.
        """
        self._check_step(l, h_dst, h0_dst)
        z_dst = self.pre(l, h_dst, dst_ids)
        layer = self.layers[l]
        out = layer.update(x_agg, z_dst, h0_dst) if self.needs_h0 else layer.update(x_agg, z_dst)
        return self.post(l, out)

    def forward(self, blocks: list[Block] | Block, x: Tensor) -> Tensor:
        """The whole model on a list of blocks (one per layer) or one block used by every layer.

        Args:
            blocks: ``L`` chained blocks (``blocks[l].dst_ids == blocks[l+1].src_ids``) or one full block.
            x: input features of ``blocks[0]``'s source rows.

        Returns:
            Logits of ``blocks[-1]``'s destination rows.

        Shapes:
            x ``[S_0, in]`` -> ``[D_{L-1}, classes]``.
        """
        if isinstance(blocks, Block):
            blocks = [blocks] * self.num_layers
        if len(blocks) != self.num_layers:
            raise ValueError(f"{type(self).__name__} has {self.num_layers} layers but got {len(blocks)} blocks")
        if x.shape[0] != blocks[0].num_src:
            raise ValueError(f"x has {x.shape[0]} rows but blocks[0] has {blocks[0].num_src} source rows")
        for l in range(1, self.num_layers):
            if blocks[l].num_src != blocks[l - 1].num_dst:
                raise ValueError(f"blocks do not chain: blocks[{l}] has {blocks[l].num_src} sources but "
                                 f"blocks[{l - 1}] has {blocks[l - 1].num_dst} destinations")
        h = self.input_map(self.upcast(x) if self.learned_input_map else x, blocks[0].src_ids)
        h0 = h if self.needs_h0 else None
        for l, block in enumerate(blocks):
            defer = l + 1 < self.num_layers and self.takes_deferred(l + 1)
            h = self.step(l, block, h, None if h0 is None else h0[: block.num_dst], defer_relu=defer)
        return self.output_map(h, blocks[-1].dst_ids)


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


#: the ``[model]`` options only a user's PyG model reads (:class:`graphscale.nn.pyg.PyGModel`)
PYG_OPTIONS = frozenset({"pyg_dropout"})


def model_class(cfg: ModelConfig) -> type[GNN]:
    """The class of ``cfg``'s model, unchecked: the registered one, or :class:`~graphscale.nn.pyg.PyGModel` for a
    user's model (:func:`is_pyg_config`)."""
    if is_pyg_config(cfg):
        from graphscale.nn.pyg import PyGModel

        return PyGModel
    return MODELS.get(cfg.name)


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
    """How messages name a user's model: the factory's qualified name or the ``--model`` spec."""
    if cfg.factory is not None:
        return f"model factory {qualified_name(cfg.factory)}"
    return f"model {cfg.name}"


def qualified_name(obj) -> str:
    """``module.qualname`` of a callable (its type's for other objects)."""
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


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
    if not 0.0 <= cfg.dropout <= 1.0:
        raise ValueError(f"--dropout must lie in [0, 1], got {cfg.dropout}")
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

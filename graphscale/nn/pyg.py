"""PyTorch Geometric models as graphscale models: PyG convs applied to blocks, behind the :class:`GNN` interface.

:func:`as_gnn` wraps a *layer-sequential* PyG model, one whose layer order graphscale can read without running
its ``forward``:

* a :class:`torch_geometric.nn.models.basic_gnn.BasicGNN` (``GCN``, ``GraphSAGE``, ``GIN``, ``GAT``, ``PNA``,
  ``EdgeCNN``, or a subclass with its own ``init_conv``) without jumping knowledge (``jk=None`` or ``'last'``):
  ``conv_0, [act, norm, dropout], conv_1, ..., conv_{L-1}[, act, norm, dropout, lin]``;
* a :class:`torch_geometric.nn.Sequential` whose every entry reads the running ``x`` (convs: ``x, edge_index ->
  x``; other modules: ``x -> x``);
* a :class:`torch.nn.Sequential` or :class:`torch.nn.ModuleList` of convs and row-wise modules, applied in order
  (a conv with ``(x, edge_index)``, any other module with ``x``).

Every module between two convs must be row-wise (each output row a function of the same input row): a
normalisation over the rows of a batch (``BatchNorm``, ``InstanceNorm``, ``GraphNorm``, ``PairNorm``, a graph-mode
``LayerNorm``, ...) sees other rows in a partition or a mini-batch than in the whole graph, and is refused. The
wrapped model maps onto :class:`GNN` as::

    input_map(x, ids)   = the modules before the first conv          (row-wise)
    step(l, block, h)   = tail_l(conv_l on block(h), dst_ids)        (tail_l: the modules after conv_l)
    output_map(h, ids)  = the modules after the last conv's tail (BasicGNN's ``lin``; Sequential: empty)

A model with its own ``forward`` (skip connections, jumping knowledge) is not layer-sequential: :func:`as_gnn` wraps
it as a :class:`~graphscale.nn.pyg_forward.ForwardGNN`, which runs that forward on a strategy's rows and hands each
conv call to the strategy; strategies that split a model by layer (offload, pipeline) refuse it with the reason.

**Convs on blocks**: :mod:`graphscale.nn.pyg_convs` (bipartite call, GCNConv with the whole graph's
normalisation, other convs on all source rows; convs that cannot run on a block are refused before training).

**Dropout** (``[model] pyg_dropout``, ``--pyg-dropout``): ``keyed`` (default) swaps every
:class:`torch.nn.Dropout` between the convs for graphscale's :class:`~graphscale.nn.dropout.KeyedDropout`
(masks keyed by global vertex id, epoch and the dropout's position), so every strategy and worker count draws
the same masks and partitioned runs equal ``single``; dropout inside a conv (GATConv's attention dropout, an MLP's
dropout) cannot be keyed and is refused in this mode. ``torch`` keeps the model's own dropout: masks come from
each worker process's RNG, so runs are reproducible for a given strategy and worker count but partitioned runs
differ from ``single`` (each row still gets one mask per step: a strategy applies a step's tail where the row is
computed, before the row is exchanged).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphscale.config import BUILTIN_MODEL_FIELDS, PYG_DROPOUT_CHOICES, USER_MODEL_OPTIONS
from graphscale.data.block import Block
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.gnn import GNN
from graphscale.nn.pyg_convs import (
    ALL,
    ConvLayer,
    check_conv,
    check_conv_rows,
    check_row_wise,
    class_name,
    message_passing_class,
    weight_refusal,
)


class NotSequential(ValueError):
    """A model whose layer order graphscale cannot read without running it (message: why): it runs its own forward
    (:class:`~graphscale.nn.pyg_forward.ForwardGNN`)."""


# ------------------------------------------------------------ layer order
def _sequence(module: nn.Module, label: str) -> list[nn.Module]:
    """The modules of a layer-sequential model in the order its forward applies them (module docstring)."""
    from torch_geometric.nn import Sequential as PyGSequential
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    mp = message_passing_class()
    if isinstance(module, BasicGNN):
        if type(module).forward is not BasicGNN.forward:
            raise NotSequential(f"{label}: {class_name(module)} overrides BasicGNN.forward, so graphscale cannot read "
                                "its layer order; keep BasicGNN's forward (customise init_conv) or use a "
                                "torch_geometric.nn.Sequential")
        if module.jk_mode not in (None, "last"):
            raise NotSequential(f"{label}: {class_name(module)} has jumping knowledge jk={module.jk_mode!r}, which "
                                "reads every layer's output (not layer-sequential); use jk=None or 'last'")
        items: list[nn.Module] = []
        for i, (conv, norm) in enumerate(zip(module.convs, module.norms)):
            items.append(conv)
            if i < module.num_layers - 1 or module.jk_mode is not None:
                act = [module.act] if module.act is not None else []
                items += (act if module.act_first else []) + [norm] + ([] if module.act_first else act)
                items.append(module.dropout)
        if hasattr(module, "lin"):
            items.append(module.lin)
        return items
    if isinstance(module, PyGSequential):
        names = list(module.signature.param_dict)
        if len(names) < 2:
            raise ValueError(f"{label}: torch_geometric.nn.Sequential takes ({', '.join(names)}); graphscale needs "
                             "(x, edge_index)")
        x, ei = names[0], names[1]
        items = []
        for i, child in enumerate(module._children):
            sub = getattr(module, child.name)
            want = [x, ei] if isinstance(sub, mp) else [x]
            if list(child.param_names) != want or list(child.return_names) != [x]:
                raise NotSequential(f"{label}: entry {i} ({class_name(sub)}) maps ({', '.join(child.param_names)}) "
                                    f"-> ({', '.join(child.return_names)}); a layer-sequential Sequential's entries "
                                    f"all read the running {x} ('{', '.join(want)} -> {x}')")
            items.append(sub)
        return items
    if isinstance(module, (nn.Sequential, nn.ModuleList)):
        return list(module)
    if not any(isinstance(m, mp) for m in module.modules()):
        raise ValueError(f"{label}: {class_name(module)} has no message-passing layers (no torch_geometric "
                         "MessagePassing conv)")
    raise NotSequential(f"{label}: {class_name(module)} defines its own forward, so graphscale cannot read its layer "
                        "order; write it as a torch_geometric.nn.Sequential, a torch.nn.Sequential of convs and "
                        "row-wise modules, or a BasicGNN subclass (customise init_conv)")


def _row_module(module: nn.Module, dropout: str, seed: int, sites: list[int], label: str) -> nn.Module:
    """A row-wise module as the wrapper applies it: a torch dropout keyed (``keyed``) or kept (``torch``)."""
    if dropout == "keyed" and isinstance(module, nn.modules.dropout._DropoutNd):
        if type(module) is not nn.Dropout:
            raise ValueError(f"{label}: {class_name(module)} cannot be swapped for graphscale's keyed dropout "
                             "(--pyg-dropout keyed swaps torch.nn.Dropout); use torch.nn.Dropout, or "
                             "--pyg-dropout torch")
        sites.append(len(sites))
        return KeyedDropout(module.p, site=sites[-1], seed=seed)
    return module


def _apply_rows(modules: nn.ModuleList, h: Tensor, ids: Tensor) -> Tensor:
    for module in modules:
        h = module(h, ids) if isinstance(module, KeyedDropout) else module(h)
    return h


def _probe_block() -> Block:
    """Two vertices joined both ways, as one full block (for widths and checks)."""
    return Block(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.arange(2), torch.ones(2, dtype=torch.int64))


class PyGModel(GNN):
    """A layer-sequential PyG model behind graphscale's :class:`GNN` interface (module docstring).

    Args:
        module: the PyG model; its convs and other modules are shared, not copied (training the wrapper trains it).
        in_dim: input feature width.
        dropout: ``keyed`` or ``torch`` (:data:`PYG_DROPOUT_CHOICES`).
        seed: keyed dropout seed.
        label: how errors name the model.
    """

    options = USER_MODEL_OPTIONS

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        return {name: "(a PyG model defines its own layers, widths and dropout)" for name in BUILTIN_MODEL_FIELDS}

    def __init__(self, module: nn.Module, in_dim: int, dropout: str = "keyed", seed: int = 0,
                 label: str | None = None) -> None:
        label = label or class_name(module)
        if dropout not in PYG_DROPOUT_CHOICES:
            raise ValueError(f"--pyg-dropout must be one of {', '.join(PYG_DROPOUT_CHOICES)}, got {dropout!r}")
        mp = message_passing_class()
        items = _sequence(module, label)
        sites: list[int] = []
        groups: list[list[nn.Module]] = [[]]
        for i, item in enumerate(items):
            if isinstance(item, mp):
                check_conv(item, f"layer {len(groups) - 1}", dropout, label)
                groups.append([])
                continue
            if any(isinstance(m, mp) for m in item.modules()):
                raise ValueError(f"{label}: entry {i} ({class_name(item)}) nests message-passing layers; graphscale "
                                 "reads the convs from the top level of the stack")
            check_row_wise(item, f"entry {i}", label)
            groups[-1].append(_row_module(item, dropout, seed, sites, label))
        convs = [i for i, m in enumerate(items) if isinstance(m, mp)]
        if not convs:
            raise ValueError(f"{label}: {class_name(module)} has no message-passing layers (no torch_geometric "
                             "MessagePassing conv)")
        layers = [ConvLayer(items[i]) for i in convs]
        head, tails = groups[0], groups[1:]
        # BasicGNN / Sequential: the modules after the last conv belong to the output map
        out = tails[-1]
        tails[-1] = []
        widths = _probe_widths(head, layers, tails, out, in_dim, label)
        super().__init__(layers, widths[:-1], 0.0, seed)
        self.head = nn.ModuleList(head)
        self.tails = nn.ModuleList(nn.ModuleList(t) for t in tails)
        self.out = nn.ModuleList(out)
        self.out_width = widths[-1]
        self.pyg_dropout, self.label = dropout, label
        self.__dict__["source"] = module  # the user's model (not a submodule: its parameters are the convs')

    def weight_refusal(self) -> str | None:
        """Why this model cannot train on a weighted graph (a conv takes no ``edge_weight``), or ``None``."""
        return next((why for l, layer in enumerate(self.layers)
                     if (why := weight_refusal(layer.conv, f"layer {l}", self.label))), None)

    def user_module(self) -> nn.Module:
        """The user's PyG module (its convs and other modules are this model's; its own dropout modules are kept
        where this model runs keyed ones)."""
        return self.__dict__["source"]

    @property
    def learned_input_map(self) -> bool:
        """Whether modules run before the first conv."""
        return bool(len(self.head))

    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """The modules before the first conv (row-wise)."""
        return _apply_rows(self.head, x, ids)

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """The modules after the last conv (row-wise)."""
        return _apply_rows(self.out, h, ids)

    def pre(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """Identity: the model's own row-wise modules (dropout included) run in the previous step's tail."""
        return h

    def step(self, l: int, block: Block, h_src: Tensor, h0_dst: Tensor | None = None, *,
             pre_applied: bool = False, defer_relu: bool = False) -> Tensor:
        """Conv ``l`` on ``block``, then the row-wise modules after it, keyed by the destinations' ids.

        Shapes:
            h_src ``[S, d_l]`` -> ``[D, d_{l+1}]``.
        """
        self._check_step(l, h_src, h0_dst)
        if h_src.shape[0] != block.num_src:
            raise ValueError(f"step {l}: h_src has {h_src.shape[0]} rows, the block has {block.num_src} sources")
        return _apply_rows(self.tails[l], self.layers[l](block, self.upcast(h_src)), block.dst_ids)

    def prepare_block(self, block: Block) -> None:
        """Build every conv's adjacency (or edge list) of ``block`` now, kept with its topology."""
        dtype = next(self.parameters()).dtype
        for layer in self.layers:
            layer.prepare(block, dtype)

    def aggregate(self, l: int, block: Block, h_src: Tensor) -> Tensor:
        """Conv ``l`` on ``block`` (its sparse and dense parts together: a PyG conv is not split)."""
        self._check_step(l, h_src, None, check_h0=False)
        return self.layers[l](block, self.upcast(h_src))

    def update(self, l: int, x_agg: Tensor, h_dst: Tensor, dst_ids: Tensor, h0_dst: Tensor | None = None) -> Tensor:
        """The row-wise modules after conv ``l`` on its output ``x_agg`` (``h_dst`` is not read)."""
        return _apply_rows(self.tails[l], x_agg, dst_ids)


def _probe_widths(head, layers, tails, out, in_dim: int, label: str) -> list[int]:
    """Width entering each conv, then the output width, from a forward on a two-vertex block in eval mode."""
    block = _probe_block()
    modules = [*head, *layers, *(m for t in tails for m in t), *out]
    training = [m.training for m in modules]
    for m in modules:
        m.eval()
    widths = []
    try:
        with torch.no_grad():
            dtype = next((p.dtype for m in modules for p in m.parameters()), torch.float32)
            h = _apply_rows(head, torch.zeros(2, in_dim, dtype=dtype), block.src_ids)
            for l, (layer, tail) in enumerate(zip(layers, tails)):
                widths.append(int(h.shape[1]))
                if layer.mode == ALL:  # a conv run on all of a block's sources: it must read only its in-edges
                    check_conv_rows(layer.conv, widths[-1], f"layer {l}", label)
                try:
                    h = _apply_rows(tail, layer(block, h), block.dst_ids)
                except Exception as err:  # noqa: BLE001 - reported with the conv's name
                    first = str(err).splitlines()[0] if str(err) else type(err).__name__
                    what = f"takes {widths[-1]} input features" if l == 0 else f"gets {widths[-1]}-wide rows"
                    raise ValueError(f"{label}: layer {l} ({class_name(layer.conv)}) {what} and fails on a graphscale "
                                     f"block: {first}") from None
            h = _apply_rows(out, h, block.dst_ids)
            widths.append(int(h.shape[1]))
    finally:
        for m, mode in zip(modules, training):
            m.train(mode)
    return widths


def as_gnn(module: nn.Module, in_dim: int, num_classes: int | None = None, *, dropout: str = "keyed",
           seed: int = 0, label: str | None = None) -> GNN:
    """Wrap a PyG model as a graphscale :class:`GNN`: a layer-sequential one as a :class:`PyGModel` (module
    docstring), any other as a :class:`~graphscale.nn.pyg_forward.ForwardGNN` (its own forward, each conv call
    handed to the strategy).

    Args:
        module: a PyG ``BasicGNN``, a ``torch_geometric.nn.Sequential``, or a ``torch.nn.Sequential`` /
            ``ModuleList`` of PyG convs and row-wise modules.
        in_dim: input feature width of the data.
        num_classes: expected output width (checked when given).
        dropout: ``keyed`` or ``torch`` (``--pyg-dropout``).
        seed: keyed dropout seed.
        label: how errors name the model (default: its class).

    Raises:
        ValueError: one line naming the model, conv or module and why it cannot be trained.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"{label or type(module).__name__}: expected a torch.nn.Module, got "  # noqa: TRY004
                         f"{type(module).__name__}")
    if isinstance(module, GNN):
        raise ValueError(f"{label or class_name(module)}: already a graphscale GNN")  # noqa: TRY004
    try:
        model = PyGModel(module, in_dim, dropout=dropout, seed=seed, label=label)
    except NotSequential as err:
        from graphscale.nn.pyg_forward import ForwardGNN

        model = ForwardGNN(module, in_dim, dropout=dropout, seed=seed, label=label, reason=str(err))
    if num_classes is not None and model.out_width != num_classes:
        raise ValueError(f"{label or class_name(module)}: the model outputs {model.out_width} values per vertex but "
                         f"the data has {num_classes} classes")
    return model


def check_model(module: nn.Module, strategy_name: str, in_dim: int | None = None, num_classes: int | None = None,
                *, dropout: str = "keyed", label: str | None = None, weighted: bool = False) -> int:
    """Raise a one-line ``ValueError`` when ``module`` cannot be trained by strategy ``strategy_name``: no
    message-passing layers, a conv that cannot run on a block, a strategy that does not train PyG models
    (``Strategy.pyg_refusal``) or only layer-sequential ones (``Strategy.pyg_forward_refusal``: a model with its own
    forward), a forward graphscale cannot run on rows (:mod:`graphscale.nn.pyg_forward`), widths that do not fit
    the data, a conv that would train without the edge weights of a ``weighted`` graph (the model's
    ``weight_refusal``).

    The module is not changed (the checks run on a copy).

    Returns:
        The number of message-passing layers.
    """
    import copy

    from graphscale.registry import STRATEGIES

    strategy = STRATEGIES.get(strategy_name)
    label = label or class_name(module)
    if strategy.pyg_refusal:
        raise ValueError(f"strategy {strategy_name!r} does not train PyG models ({label}): {strategy.pyg_refusal}")
    model = as_gnn(copy.deepcopy(module), in_dim if in_dim is not None else _declared_in_dim(module),
                   num_classes, dropout=dropout, label=label)
    if strategy.pyg_forward_refusal and not getattr(model, "layer_sequential", True):
        raise ValueError(f"strategy {strategy_name!r} trains layer-sequential PyG models only (it "
                         f"{strategy.pyg_forward_refusal}): {model.reason}")
    why = weighted and model.weight_refusal()
    if why:
        raise ValueError(why)
    return model.num_layers


def _declared_in_dim(module: nn.Module) -> int:
    """The input width a model declares: its first module's ``in_features`` / ``in_channels``, in registration
    order; 1 when none declares one (lazy modules take any width)."""
    for sub in module.modules():
        width = getattr(sub, "in_features", getattr(sub, "in_channels", None))
        if isinstance(width, tuple):
            width = width[0]
        if isinstance(width, int) and width > 0:
            return width
    return 1

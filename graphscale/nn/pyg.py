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

A model with its own ``forward`` (skip connections, jumping knowledge, several inputs) is refused with the reason:
graphscale runs a model layer by layer on blocks and needs the layer order.

**Convs on blocks** (:class:`ConvLayer`). A block's destinations are the first rows of its sources, so
``edge_index = [indices, dst_of_edges]`` (cached on the block) indexes source rows by local number. A conv whose
``x`` accepts a pair (SAGEConv, GATConv, GINConv, GraphConv, GATv2Conv, TransformerConv, ...) is called
bipartite: ``conv((h_src, h_src[:D]), edge_index, size=(S, D))``. GCNConv (``normalize=True``) gets the whole
graph's normalisation as edge weights from the block's global in-degrees ``src_deg`` (with its self-loops, weight
``fill`` as GCNConv adds them): ``w_ji = (deg_j + fill)^-1/2 (deg_i + fill)^-1/2``, normalisation off, so a
partition or a sampled block equals full-graph training. Any other conv is called on all source rows and its
first ``D`` output rows kept (exact for any conv whose output row depends only on the row's in-edges and inputs).
Convs that need more than one hop or graph-global quantities (APPNP, SGConv, ChebConv, GCN2Conv, ...) or required
inputs besides ``x`` and ``edge_index`` are refused before training, naming the conv and why.

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

import inspect

import torch
from torch import Tensor, nn

from graphscale.config import PYG_DROPOUT_CHOICES
from graphscale.data.block import Block
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.models import GNN, PYG_OPTIONS

_EDGES_ATTR = "_graphscale_pyg_edges"

#: convs that cannot run on a one-hop block, with the reason
_REFUSED_CONVS = {
    "APPNP": "propagates K hops in one layer (a block holds one hop)",
    "SGConv": "propagates K hops in one layer and normalises by the degrees of the edges it is given",
    "SSGConv": "propagates K hops in one layer and normalises by the degrees of the edges it is given",
    "TAGConv": "propagates K hops in one layer and normalises by the degrees of the edges it is given",
    "ChebConv": "propagates K hops in one layer and normalises by the degrees of the edges it is given",
    "MixHopConv": "propagates several hops in one layer",
    "ARMAConv": "propagates several hops in one layer and normalises by the degrees of the edges it is given",
    "GatedGraphConv": "propagates several hops in one layer",
    "DNAConv": "reads every earlier layer's output",
    "GCN2Conv": "needs the initial features x_0 and normalises by the degrees of the edges it is given",
    "FAConv": "needs the initial features x_0",
    "LGConv": "normalises by the degrees of the edges it is given",
    "ClusterGCNConv": "normalises by the degrees of the edges it is given",
    "EGConv": "normalises by the degrees of the edges it is given",
    "GravNetConv": "builds its own neighbourhoods from the features of all nodes",
    "DynamicEdgeConv": "builds its own neighbourhoods from the features of all nodes",
    "SuperGATConv": "samples negative edges over the whole graph",
}
#: normalisations over the rows of a batch or graph (not row-wise), by class name
_ROW_MIXING = {"BatchNorm", "BatchNorm1d", "SyncBatchNorm", "InstanceNorm", "InstanceNorm1d", "GraphNorm",
               "PairNorm", "DiffGroupNorm", "MeanSubtractionNorm", "GraphSizeNorm", "HeteroBatchNorm",
               "HeteroLayerNorm"}


def _message_passing():
    from torch_geometric.nn.conv import MessagePassing

    return MessagePassing


def _name(module: nn.Module) -> str:
    return type(module).__name__


# ------------------------------------------------------------ blocks as PyG edges
def block_edge_index(block: Block) -> Tensor:
    """``[2, nnz]`` ``(source row, destination row)`` of a block's edges in local numbering, cached on the block
    (rebuilt when its ``indptr`` / ``indices`` are replaced)."""
    cached = block.__dict__.get(_EDGES_ATTR)
    if cached is not None and cached[0] is block.indptr and cached[1] is block.indices:
        return cached[2]
    edge_index = torch.stack([block.indices, block.dst_of_edges()])
    block.__dict__[_EDGES_ATTR] = (block.indptr, block.indices, edge_index, {})
    return edge_index


def gcn_edges(block: Block, fill: float, self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """GCN's normalised edges of a block from the whole graph's in-degrees: the block's edges, then one self-loop
    per destination (if ``self_loops``), weighted ``(deg_src + f)^-1/2 (deg_dst + f)^-1/2`` (``f = fill`` with
    self-loops, else 0), as GCNConv's ``gcn_norm`` weights them on the whole graph. Cached on the block."""
    edge_index = block_edge_index(block)
    store = block.__dict__[_EDGES_ATTR][3]
    key = (float(fill), bool(self_loops), dtype)
    if key not in store:
        f = float(fill) if self_loops else 0.0
        deg = block.src_deg.to(dtype) + f
        scale = deg.pow(-0.5)
        scale.masked_fill_(scale == float("inf"), 0.0)
        if self_loops:
            loops = torch.arange(block.num_dst, device=edge_index.device)
            edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)
        src, dst = edge_index
        weight = scale[src] * scale[dst]
        if self_loops:
            weight[block.num_edges:] *= f
        store[key] = (edge_index, weight)
    return store[key]


def _forward_params(conv: nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(type(conv).forward).parameters)


def _takes_pair(conv: nn.Module) -> bool:
    """Whether ``conv.forward``'s ``x`` is annotated to accept a ``(x_src, x_dst)`` pair."""
    x = _forward_params(conv).get("x")
    return x is not None and any(word in str(x.annotation) for word in ("Pair", "Tuple", "tuple"))


def _is_gcn(conv: nn.Module) -> bool:
    from torch_geometric.nn.conv import GCNConv

    return isinstance(conv, GCNConv) and bool(conv.normalize)


def conv_refusal(conv: nn.Module) -> str | None:
    """Why ``conv`` cannot run on a block (``None`` if it can)."""
    import torch_geometric.nn.conv as convs

    for name, why in _REFUSED_CONVS.items():
        cls = getattr(convs, name, None)
        if cls is not None and isinstance(conv, cls):
            return why
    if _is_gcn(conv) and conv.cached:
        return ("caches the normalisation of the first edges it sees (cached=True); graphscale gives it the "
                "graph's normalisation per block: construct it with cached=False")
    params = list(_forward_params(conv).values())[1:]
    names = [p.name for p in params]
    if names[:2] != ["x", "edge_index"] and len(params) >= 2:
        return f"takes ({', '.join(names)}) in its forward, not (x, edge_index, ...)"
    required = [p.name for p in params[2:] if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        return f"needs {', '.join(required)} besides x and edge_index in its forward"
    return None


def run_conv(conv: nn.Module, block: Block, h_src: Tensor) -> Tensor:
    """``conv`` on ``block``: the destinations' outputs ``[D, *]`` from the sources' inputs ``h_src [S, d]``
    (module docstring: bipartite, GCN-normalised or all-sources call)."""
    d = block.num_dst
    if _is_gcn(conv):
        edge_index, weight = gcn_edges(block, 2.0 if conv.improved else 1.0, conv.add_self_loops, h_src.dtype)
        conv.normalize = False  # the weights above are the whole graph's normalisation
        try:
            return conv(h_src, edge_index, weight)[:d]
        finally:
            conv.normalize = True
    edge_index = block_edge_index(block)
    if _takes_pair(conv):
        if "size" in _forward_params(conv):
            return conv((h_src, h_src[:d]), edge_index, size=(block.num_src, d))
        return conv((h_src, h_src[:d]), edge_index)
    return conv(h_src, edge_index)[:d]


class ConvLayer(nn.Module):
    """A PyG conv as a graphscale layer: ``layer(block, h_src) -> h_dst`` (:func:`run_conv`).

    Attributes:
        conv: the PyG conv (its parameters are the layer's).
    """

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        return run_conv(self.conv, block, h_src)

    def extra_repr(self) -> str:
        return "bipartite" if _takes_pair(self.conv) else "gcn-normalised" if _is_gcn(self.conv) else "all sources"


# ------------------------------------------------------------ layer order
def _sequence(module: nn.Module, label: str) -> list[nn.Module]:
    """The modules of a layer-sequential model in the order its forward applies them (module docstring)."""
    from torch_geometric.nn import Sequential as PyGSequential
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    mp = _message_passing()
    if isinstance(module, BasicGNN):
        if type(module).forward is not BasicGNN.forward:
            raise ValueError(f"{label}: {_name(module)} overrides BasicGNN.forward, so graphscale cannot read its "
                             "layer order; keep BasicGNN's forward (customise init_conv) or use a "
                             "torch_geometric.nn.Sequential")
        if module.jk_mode not in (None, "last"):
            raise ValueError(f"{label}: {_name(module)} has jumping knowledge jk={module.jk_mode!r}, which reads "
                             "every layer's output (not layer-sequential); use jk=None or 'last'")
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
                raise ValueError(f"{label}: entry {i} ({_name(sub)}) maps ({', '.join(child.param_names)}) -> "
                                 f"({', '.join(child.return_names)}); graphscale runs a Sequential whose entries "
                                 f"all read the running {x} ('{', '.join(want)} -> {x}'), layer by layer")
            items.append(sub)
        return items
    if isinstance(module, (nn.Sequential, nn.ModuleList)):
        return list(module)
    if not any(isinstance(m, mp) for m in module.modules()):
        raise ValueError(f"{label}: {_name(module)} has no message-passing layers (no torch_geometric "
                         "MessagePassing conv)")
    raise ValueError(f"{label}: {_name(module)} defines its own forward, so graphscale cannot run it layer by layer "
                     "on blocks; write it as a torch_geometric.nn.Sequential, a torch.nn.Sequential of convs and "
                     "row-wise modules, or a BasicGNN subclass (customise init_conv)")


def _check_row_wise(module: nn.Module, where: str, label: str) -> None:
    """Refuse a module that mixes rows (a normalisation over the rows of a batch)."""
    from torch_geometric.nn.norm import LayerNorm

    for sub in module.modules():
        if isinstance(sub, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)) \
                or _name(sub) in _ROW_MIXING or (isinstance(sub, LayerNorm) and sub.mode != "node"):
            raise ValueError(f"{label}: {_name(sub)} ({where}) normalises over the rows of a batch or graph, which "
                             "a partition or mini-batch holds differently from the whole graph; use a row-wise "
                             "normalisation (torch.nn.LayerNorm, or PyG LayerNorm with mode='node') or none")


def _inner_dropout(conv: nn.Module) -> str | None:
    """A dropout inside ``conv`` with a positive probability, described; ``None`` if there is none."""
    for name, sub in conv.named_modules():
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0:
            return f"{name or _name(sub)}: {_name(sub)}(p={sub.p})"
        p = getattr(sub, "dropout", None)
        values = p if isinstance(p, (list, tuple)) else [p]
        if any(isinstance(v, float) and v > 0 for v in values):
            return f"{_name(sub)}(dropout={p})"
    return None


def _row_module(module: nn.Module, dropout: str, seed: int, sites: list[int], label: str) -> nn.Module:
    """A row-wise module as the wrapper applies it: a torch dropout keyed (``keyed``) or kept (``torch``)."""
    if dropout == "keyed" and isinstance(module, nn.modules.dropout._DropoutNd):
        if type(module) is not nn.Dropout:
            raise ValueError(f"{label}: {_name(module)} cannot be swapped for graphscale's keyed dropout "
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

    options = PYG_OPTIONS
    #: the ``[model]`` options of graphscale's own models; a PyG model defines these itself
    _OWN = ("hidden", "layers", "dropout", "heads", "alpha", "theta", "decoupled", "last_relu")

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        return {name: "(a PyG model defines its own layers, widths and dropout)" for name in cls._OWN}

    def __init__(self, module: nn.Module, in_dim: int, dropout: str = "keyed", seed: int = 0,
                 label: str | None = None) -> None:
        label = label or _name(module)
        if dropout not in PYG_DROPOUT_CHOICES:
            raise ValueError(f"--pyg-dropout must be one of {', '.join(PYG_DROPOUT_CHOICES)}, got {dropout!r}")
        mp = _message_passing()
        items = _sequence(module, label)
        sites: list[int] = []
        groups: list[list[nn.Module]] = [[]]
        for i, item in enumerate(items):
            if isinstance(item, mp):
                why = conv_refusal(item)
                if why:
                    raise ValueError(f"{label}: {_name(item)} (layer {len(groups) - 1}) cannot run on a graphscale "
                                     f"block: it {why}")
                inner = dropout == "keyed" and _inner_dropout(item)
                if inner:
                    raise ValueError(f"{label}: {_name(item)} (layer {len(groups) - 1}) has a dropout inside "
                                     f"({inner}) that draws from the process RNG and cannot be keyed; set it to 0 "
                                     "or use --pyg-dropout torch")
                _check_row_wise(item, f"inside {_name(item)}", label)
                groups.append([])
                continue
            if any(isinstance(m, mp) for m in item.modules()):
                raise ValueError(f"{label}: entry {i} ({_name(item)}) nests message-passing layers; graphscale "
                                 "reads the convs from the top level of the stack")
            _check_row_wise(item, f"entry {i}", label)
            groups[-1].append(_row_module(item, dropout, seed, sites, label))
        convs = [i for i, m in enumerate(items) if isinstance(m, mp)]
        if not convs:
            raise ValueError(f"{label}: {_name(module)} has no message-passing layers (no torch_geometric "
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
        self.pyg_dropout = dropout
        self.__dict__["source"] = module  # the user's model (not a submodule: its parameters are the convs')

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
                try:
                    h = _apply_rows(tail, layer(block, h), block.dst_ids)
                except Exception as err:  # noqa: BLE001 - reported with the conv's name
                    first = str(err).splitlines()[0] if str(err) else type(err).__name__
                    what = f"takes {widths[-1]} input features" if l == 0 else f"gets {widths[-1]}-wide rows"
                    raise ValueError(f"{label}: layer {l} ({_name(layer.conv)}) {what} and fails on a graphscale "
                                     f"block: {first}") from None
            h = _apply_rows(out, h, block.dst_ids)
            widths.append(int(h.shape[1]))
    finally:
        for m, mode in zip(modules, training):
            m.train(mode)
    return widths


def as_gnn(module: nn.Module, in_dim: int, num_classes: int | None = None, *, dropout: str = "keyed",
           seed: int = 0, label: str | None = None) -> PyGModel:
    """Wrap a layer-sequential PyG model as a graphscale :class:`GNN` (module docstring).

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
        raise ValueError(f"{label or _name(module)}: already a graphscale GNN")  # noqa: TRY004
    model = PyGModel(module, in_dim, dropout=dropout, seed=seed, label=label)
    if num_classes is not None and model.out_width != num_classes:
        raise ValueError(f"{label or _name(module)}: the model outputs {model.out_width} values per vertex but the "
                         f"data has {num_classes} classes")
    return model


def check_model(module: nn.Module, strategy_name: str, in_dim: int | None = None, num_classes: int | None = None,
                *, dropout: str = "keyed", label: str | None = None) -> int:
    """Raise a one-line ``ValueError`` when ``module`` cannot be trained by strategy ``strategy_name``: no
    message-passing layers, a conv that cannot run on a block, a model whose layer order graphscale cannot read,
    a strategy that does not train PyG models (``Strategy.pyg_refusal``), widths that do not fit the data.

    The module is not changed (the checks run on a copy).

    Returns:
        The number of message-passing layers.
    """
    import copy

    from graphscale.registry import STRATEGIES

    strategy = STRATEGIES.get(strategy_name)
    label = label or _name(module)
    if strategy.pyg_refusal:
        raise ValueError(f"strategy {strategy_name!r} does not train PyG models ({label}): {strategy.pyg_refusal}")
    model = as_gnn(copy.deepcopy(module), in_dim if in_dim is not None else _declared_in_dim(module),
                   num_classes, dropout=dropout, label=label)
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

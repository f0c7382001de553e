"""PyG convs on graphscale blocks: a block's edges in PyG's form, GCN's whole-graph normalisation, and which convs
cannot run on a block, with the row-wise and keyed-dropout checks both model wrappers share
(:mod:`graphscale.nn.pyg` wraps layer-sequential models, :mod:`graphscale.nn.pyg_forward` models with their own
forward).

A block's destinations are the first rows of its sources, so the block's CSR by destination is PyG's ``adj_t``
(``[D, S]``) and ``edge_index = [indices, dst_of_edges]`` indexes source rows by local number (both cached with
the block). A conv whose ``x`` accepts a pair (SAGEConv, GATConv, GINConv, GraphConv, GATv2Conv, TransformerConv,
...) is called bipartite: ``conv((h_src, h_src[:D]), adj_t)`` where it aggregates with one sparse product
(``message_and_aggregate``: SAGEConv, GINConv, GraphConv, ...), else ``conv((h_src, h_src[:D]), edge_index,
size=(S, D))``. GCNConv (``normalize=True``) gets the whole graph's normalisation from the block's global
in-degrees ``src_deg`` as the values of ``adj_t`` (with its self-loops, weight ``fill`` as GCNConv adds them):
``w_ji = (deg_j + fill)^-1/2 (deg_i + fill)^-1/2``, its own normalisation off, so a partition or a sampled block
equals full-graph training. On a weighted graph (``Block.edge_weight``) every conv gets the block's edge
weights: GCNConv as the values ``w_ji (deg_j + fill)^-1/2 (deg_i + fill)^-1/2`` with the weighted global degrees
(PyG's ``gcn_norm`` with weights), a conv aggregating by ``adj_t`` as its values, any other as ``edge_weight=``; a
conv whose forward takes no ``edge_weight`` is refused on weighted data (:func:`weight_refusal`). Any other conv is
called on all source rows and its first ``D`` output rows kept (exact for any conv whose output row depends only on
the row's in-edges and inputs). Convs that need more than one hop or graph-global quantities (APPNP, SGConv,
ChebConv, GCN2Conv, ...) or required inputs besides ``x`` and ``edge_index`` are refused (:func:`conv_refusal`).
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn

from graphscale.data.block import Block
from graphscale.nn.topology import topology

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


def message_passing_class():
    from torch_geometric.nn.conv import MessagePassing

    return MessagePassing


def class_name(module: nn.Module) -> str:
    return type(module).__name__


# ------------------------------------------------------------ blocks as PyG edges
def block_edge_index(block: Block) -> Tensor:
    """``[2, nnz]`` ``(source row, destination row)`` of a block's edges in local numbering (for convs that
    compute per edge, such as attention), kept with the block's topology (:meth:`~graphscale.nn.topology.Topology.
    derived`), whose ``tensors()`` count it."""
    return topology(block).derived("pyg-edge-index", lambda: torch.stack([block.indices, block.dst_of_edges()]))


def _weights(block: Block, dtype: torch.dtype) -> Tensor | None:
    """The block's edge weights in ``dtype`` on its device (``None`` unweighted), kept with its topology."""
    if block.edge_weight is None:
        return None
    return topology(block).derived(f"edge-weight-{dtype}", lambda: block.edge_weight.to(block.indices.device, dtype))


def block_adjacency(block: Block, dtype: torch.dtype) -> Tensor:
    """The block's adjacency as a sparse CSR ``[D, S]`` of ones, or of its edge weights on a weighted graph (PyG's
    ``adj_t``: rows are destinations), for convs that aggregate with one sparse product (``message_and_aggregate``).
    Kept with the block's topology (:meth:`~graphscale.nn.topology.Topology.operator`), whose ``tensors()`` count
    it."""
    return topology(block).operator("pyg-adjacency", dtype, lambda: (_weights(block, dtype), None, None, None)).matrix


def gcn_adjacency(block: Block, fill: float, self_loops: bool, dtype: torch.dtype) -> Tensor:
    """GCN's normalised adjacency of a block from the whole graph's in-degrees, sparse CSR ``[D, S]``:
    ``w_ji (deg_j + f)^-1/2 (deg_i + f)^-1/2`` on the edge ``j -> i`` (``w = 1`` unweighted; weighted: the edge's
    weight, ``deg`` the weighted in-degrees) and ``f / (deg_i + f)`` on the self-loop of each
    destination (``f = fill`` with self-loops, none and ``f = 0`` without), as GCNConv's ``gcn_norm`` weights the
    whole graph. Kept with the block's topology (:meth:`~graphscale.nn.topology.Topology.operator`)."""
    f = float(fill) if self_loops else 0.0

    def scales():
        scale = (block.src_deg.to(dtype) + f).pow(-0.5)
        scale.masked_fill_(scale == float("inf"), 0.0)
        dst = scale[: block.num_dst]
        return _weights(block, dtype), scale, dst, (dst * dst * f if self_loops else None)

    return topology(block).operator(f"pyg-gcn-{f:g}-{int(self_loops)}", dtype, scales).matrix


def _forward_params(conv: nn.Module) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(type(conv).forward).parameters)


def _takes_pair(conv: nn.Module) -> bool:
    """Whether ``conv.forward``'s ``x`` is annotated to accept a ``(x_src, x_dst)`` pair."""
    x = _forward_params(conv).get("x")
    return x is not None and any(word in str(x.annotation) for word in ("Pair", "Tuple", "tuple"))


def _is_gcn(conv: nn.Module) -> bool:
    from torch_geometric.nn.conv import GCNConv

    return isinstance(conv, GCNConv) and bool(conv.normalize)


def takes_edge_weight(conv: nn.Module) -> bool:
    """Whether ``conv.forward`` has an ``edge_weight`` parameter."""
    return "edge_weight" in _forward_params(conv)


def weight_refusal(conv: nn.Module, where: str, label: str) -> str | None:
    """Why ``conv`` cannot train on a weighted graph (its forward takes no ``edge_weight``), or ``None``."""
    if takes_edge_weight(conv):
        return None
    return (f"{label}: the graph has edge weights (edge_weight), but {class_name(conv)} ({where}) takes no "
            "edge_weight in its forward, so it would train without them; use a conv that takes edge_weight "
            "(GCNConv, GraphConv, ...) or delete the weights (del data.edge_weight)")


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
    edge_dim = getattr(conv, "edge_dim", None)
    if class_name(conv) == "GINEConv" or edge_dim is not None:
        what = f"edge_dim={edge_dim}" if edge_dim is not None else "in every message"
        return (f"uses edge features (edge_attr, {what}), which graphscale does not pass to a conv (its blocks carry "
                "no edge features, only edge weights); use a conv without edge features (GINConv, or edge_dim=None)")
    params = list(_forward_params(conv).values())[1:]
    names = [p.name for p in params]
    if names[:2] != ["x", "edge_index"] and len(params) >= 2:
        return f"takes ({', '.join(names)}) in its forward, not (x, edge_index, ...)"
    required = [p.name for p in params[2:] if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        return f"needs {', '.join(required)} besides x and edge_index in its forward"
    return None


#: how a conv is called on a block (:func:`call_mode`)
GCN, PAIR, ALL = "gcn-normalised", "bipartite", "all sources"


def call_mode(conv: nn.Module) -> str:
    """``gcn-normalised`` (GCNConv with ``normalize``), ``bipartite`` (its ``x`` takes a pair) or ``all sources``
    (module docstring)."""
    return GCN if _is_gcn(conv) else PAIR if _takes_pair(conv) else ALL


def prepare_conv(conv: nn.Module, block: Block, mode: str, dtype: torch.dtype) -> None:
    """Build what :func:`run_conv` keeps with ``block``'s topology (its adjacency or edge list) now."""
    if mode == GCN:
        gcn_adjacency(block, 2.0 if conv.improved else 1.0, conv.add_self_loops, dtype)
    elif mode == PAIR and getattr(conv, "fuse", False):
        block_adjacency(block, dtype)
    else:
        block_edge_index(block)


def run_conv(conv: nn.Module, block: Block, h_src: Tensor, mode: str | None = None) -> Tensor:
    """``conv`` on ``block``: the destinations' outputs ``[D, *]`` from the sources' inputs ``h_src [S, d]``, called
    as ``mode`` says (default: :func:`call_mode`). A conv that aggregates with one sparse product
    (``message_and_aggregate``) gets the block's CSR as ``adj_t`` (no ``[nnz, d]`` gather of source rows)."""
    mode = mode or call_mode(conv)
    d = block.num_dst
    weight = _weights(block, h_src.dtype)
    if weight is not None and not takes_edge_weight(conv):
        raise ValueError(weight_refusal(conv, "on a weighted block", class_name(conv)))
    given = {} if weight is None else {"edge_weight": weight}
    if mode == GCN:
        adj = gcn_adjacency(block, 2.0 if conv.improved else 1.0, conv.add_self_loops, h_src.dtype)
        conv.normalize = False  # the adjacency above holds the whole graph's normalisation
        try:
            return conv(h_src, adj)
        finally:
            conv.normalize = True
    if mode == PAIR:
        if getattr(conv, "fuse", False):
            return conv((h_src, h_src[:d]), block_adjacency(block, h_src.dtype))
        if "size" in _forward_params(conv):
            return conv((h_src, h_src[:d]), block_edge_index(block), size=(block.num_src, d), **given)
        return conv((h_src, h_src[:d]), block_edge_index(block), **given)
    return conv(h_src, block_edge_index(block), **given)[:d]


class ConvLayer(nn.Module):
    """A PyG conv as a graphscale layer: ``layer(block, h_src) -> h_dst`` (:func:`run_conv`; the call mode is read
    once, here).

    Attributes:
        conv: the PyG conv (its parameters are the layer's).
        mode: how it is called (:func:`call_mode`).
    """

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv
        self.mode = call_mode(conv)

    def forward(self, block: Block, h_src: Tensor) -> Tensor:
        return run_conv(self.conv, block, h_src, self.mode)

    def prepare(self, block: Block, dtype: torch.dtype) -> None:
        """Build what a step on ``block`` keeps with its topology (:func:`prepare_conv`)."""
        prepare_conv(self.conv, block, self.mode, dtype)

    def extra_repr(self) -> str:
        return self.mode


# ------------------------------------------------------------ checks
def check_row_wise(module: nn.Module, where: str, label: str) -> None:
    """Refuse a module that mixes rows (a normalisation over the rows of a batch)."""
    from torch_geometric.nn.norm import LayerNorm

    for sub in module.modules():
        if isinstance(sub, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)) \
                or class_name(sub) in _ROW_MIXING or (isinstance(sub, LayerNorm) and sub.mode != "node"):
            raise ValueError(f"{label}: {class_name(sub)} ({where}) normalises over the rows of a batch or graph, "
                             "which a partition or mini-batch holds differently from the whole graph; use a row-wise "
                             "normalisation (torch.nn.LayerNorm, or PyG LayerNorm with mode='node') or none")


def check_conv_rows(conv: nn.Module, in_width: int, where: str, label: str) -> None:
    """Refuse a conv whose output for a vertex depends on more than its in-edges and their source rows: run on a
    small graph whole and on a block of two of its vertices (in float64, eval mode), the two vertices' outputs must
    agree. What differs is almost always a degree normalisation computed inside the conv from the edges it is given
    (PyG's tutorial ``GCNConv`` with ``degree()``): a partition's or a sample's edges give other degrees."""
    import copy

    from graphscale.data.graph import Graph

    n = 12
    v = torch.arange(n)
    gen = torch.Generator().manual_seed(0)
    graph = Graph.from_edges(torch.cat([(v + 1) % n, (v + 5) % n]), torch.cat([v, v]), n,
                             x=torch.randn(n, in_width, generator=gen, dtype=torch.float64))
    targets = torch.tensor([0, n // 2])
    block = Block.from_nodes(graph, targets)
    probe = copy.deepcopy(conv).double().eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            whole = run_conv(probe, Block.full(graph), graph.x)[targets]
            part = run_conv(probe, block, graph.x[block.src_ids])
    except Exception:  # noqa: BLE001 - a conv that fails here is reported by the model's own dry run
        return
    if whole.shape == part.shape and torch.allclose(whole, part, rtol=1e-9, atol=1e-12):
        return
    raise ValueError(f"{label}: {class_name(conv)} ({where}) computes a vertex's output from more than its in-edges "
                     "and their source rows (a degree normalisation inside the conv, computed from the edges it is "
                     "given, as PyG's tutorial GCNConv does with degree()), which a partition or a mini-batch holds "
                     "differently from the whole graph; use torch_geometric.nn.GCNConv (graphscale gives it the whole "
                     "graph's normalisation) or a conv without it")


def _inner_dropout(conv: nn.Module) -> str | None:
    """A dropout inside ``conv`` with a positive probability, described; ``None`` if there is none."""
    for name, sub in conv.named_modules():
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0:
            return f"{name or class_name(sub)}: {class_name(sub)}(p={sub.p})"
        p = getattr(sub, "dropout", None)
        values = p if isinstance(p, (list, tuple)) else [p]
        if any(isinstance(v, float) and v > 0 for v in values):
            return f"{class_name(sub)}(dropout={p})"
    return None


def check_conv(conv: nn.Module, where: str, dropout: str, label: str) -> None:
    """Refuse a conv that cannot run on a block, that mixes rows, or (``keyed``) that drops inside."""
    why = conv_refusal(conv)
    if why:
        raise ValueError(f"{label}: {class_name(conv)} ({where}) cannot run on a graphscale block: it {why}")
    inner = dropout == "keyed" and _inner_dropout(conv)
    if inner:
        raise ValueError(f"{label}: {class_name(conv)} ({where}) has a dropout inside ({inner}) that draws from the "
                         "process RNG and cannot be keyed; set it to 0 or use --pyg-dropout torch")
    check_row_wise(conv, f"inside {class_name(conv)}", label)

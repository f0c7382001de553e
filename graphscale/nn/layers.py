"""GNN layers on blocks, each split into a sparse ``aggregate`` and a dense ``update`` half.

Every layer runs on a :class:`~graphscale.data.block.Block` (``num_dst``
destination rows, the first ``num_dst`` of the ``num_src`` source rows) and
offers three entry points:

* ``aggregate(block, x_src) -> x_agg`` - the sparse half (parameter-free, or
  edge-parametrised for attention); ``[num_dst, *]``;
* ``update(x_agg, x_dst, ...) -> out`` - the dense half that holds the weights;
* ``forward(block, x_src, ...)`` - the layer whole, which may pick the cheaper
  order (``A (X W) = (A X) W``) but equals ``update(aggregate(...))`` up to float
  rounding.

``fuses_dropout`` says that ``forward`` and ``aggregate`` take ``src_dropout=``, a keyed dropout of
``x_src`` (:class:`~graphscale.nn.dropout.RowKeep`) that the aggregation applies as it reads its rows (no dropped
``[S, F]`` copy; bit-identical to dropping first). The model passes its step dropout this way.

``fuses_relu`` says that ``forward`` takes ``relu=True`` and returns the layer's output after a ReLU: where the
layer ends in its dense product (:func:`linear_relu`) the ReLU's backward runs block by block inside that product's
backward, so no ``[D, out_dim]`` gradient of the pre-activation is ever held. The model passes its hidden layers'
activation this way. With ``defer_relu=True`` as well, it returns them unevaluated (:class:`DeferredLinearReLU`);
a layer with ``takes_deferred`` that transforms first takes that as its input and runs both dense products block by
block (:func:`linear_relu_linear`), so the hidden rows' ``[D, out_dim]`` gradient is never held whole either
(:meth:`~graphscale.nn.models.GNN.forward` defers where the next step takes it).

``linear_aggregate`` tells strategies whether ``aggregate`` is a fixed linear
map of ``x_src`` (GCN, SAGE, GCNII): then its backward needs only the topology
and ``x_agg`` may be cached (HongTu's hybrid). It is ``False`` for GAT (the
attention depends on ``x_src``) and ResGCN+ (its pre-activation LayerNorm runs
before the aggregation).

Degrees. GCN-style normalisation uses ``block.src_deg``: *global* in-degrees
without self-loops, so a partition or chunk block normalises exactly like the
whole graph. Graphs are assumed to have no explicit self-loops (the implicit
self-loop is added by the layers, as PyG does with ``add_self_loops=True``).
SAGE's mean uses the block's *local* row lengths (the sampled neighbours of a
mini-batch block; all in-edges for full, partition and chunk blocks).

Numerical equivalents (tested in float64): :class:`GCNLayer` = PyG
``GCNConv``, :class:`SAGELayer` = ``SAGEConv(aggr='mean')``, :class:`GATLayer` =
``GATConv`` (``add_self_loops=True``), :class:`GCNIILayer` = ``GCN2Conv``
(``shared_weights=True``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphscale.nn.dense import DeferredLinearReLU, linear_relu, linear_relu_linear
from graphscale.nn.dropout import EdgeDropout, KeyedDropout
from graphscale.nn.ops import gcn_norm_scales, propagate, propagate_transpose, segment_softmax, spmm_heads, topology
from graphscale.nn.order import transform_first


def _check_src(block, x_src, in_dim: int, who: str) -> None:
    if len(x_src.shape) != 2 or x_src.shape[0] != block.num_src or x_src.shape[1] != in_dim:
        raise ValueError(f"{who}: x_src must be [num_src={block.num_src}, {in_dim}], got {tuple(x_src.shape)}")


def _gcn_scales(block, like: Tensor):
    """GCN's normalisation of ``block`` as :func:`~graphscale.nn.ops.propagate`'s scales (from global degrees; a
    weighted block's edge weights, its degrees the weighted in-degrees, as PyG's ``gcn_norm`` with weights)."""
    def scales():
        cs, rs, ss = gcn_norm_scales(block.src_deg.to(like.device), block.num_dst, like.dtype)
        weight = _edge_weight(block)
        return (None if weight is None else weight.to(like.device, like.dtype)), cs, rs, ss

    return scales


def _edge_weight(block) -> Tensor | None:
    """A block's edge weights (``None`` unweighted, or for a bare topology)."""
    return getattr(block, "edge_weight", None)


def gcn_aggregate(block, x_src: Tensor, src_dropout=None) -> Tensor:
    r"""GCN propagation with an implicit self-loop and global degrees.

    .. math::
        (\hat A x)_v = \sum_{u \in N_{in}(v)} \frac{w_{uv} x_u}{\sqrt{(d_u+1)(d_v+1)}} + \frac{x_v}{d_v + 1}

    Args:
        block: the block; ``d = block.src_deg``, ``w = block.edge_weight`` (1 unweighted; a weighted graph's
            degrees are its weighted in-degrees).
        x_src: source features.
        src_dropout: a keyed dropout of ``x_src`` fused into the product
            (:class:`~graphscale.nn.dropout.RowKeep`; see :func:`~graphscale.nn.ops.spmm`).

    Returns:
        Aggregated destination features.

    Shapes:
        x_src ``[S, F]`` -> ``[D, F]``.
    """
    return propagate(block, x_src, "gcn", _gcn_scales(block, x_src), symmetric=_edge_weight(block) is None,
                     src_dropout=src_dropout)


def gcn_aggregate_transpose(block, g_dst: Tensor) -> Tensor:
    """The adjoint of :func:`gcn_aggregate`: the sources' gradient for the destinations' gradient ``g_dst``.

    Needs only the topology and the global degrees (never the propagated rows).

    Shapes:
        g_dst ``[D, F]`` -> ``[S, F]``.
    """
    return propagate_transpose(block, g_dst, "gcn", _gcn_scales(block, g_dst), symmetric=_edge_weight(block) is None)


def attention_coefficients(topo, a_src: Tensor, a_dst: Tensor, negative_slope: float) -> tuple[Tensor, Tensor]:
    r"""GAT's attention over every destination's in-edges and its self-loop, from per-vertex scores.

    .. math::
        \alpha_{uv,h} = \text{softmax}_{u \in N(v) \cup \{v\}}\,
        \text{LeakyReLU}(a^{src}_{u,h} + a^{dst}_{v,h})

    Args:
        topo: the block's :class:`~graphscale.nn.ops.Topology`.
        a_src: source scores ``[S, H]``.
        a_dst: destination scores ``[D, H]``.
        negative_slope: LeakyReLU slope.

    Returns:
        ``(alpha [nnz, H], alpha_self [D, H])``, differentiable in both scores.
    """
    d = topo.num_dst
    scores = a_src.index_select(0, topo.indices) + a_dst.index_select(0, topo.edge_dst())
    scores = F.leaky_relu(scores, negative_slope)
    self_scores = F.leaky_relu(a_src[:d] + a_dst, negative_slope)
    return segment_softmax(topo, scores, self_scores)


def mean_aggregate(block, x_src: Tensor, src_dropout=None) -> Tensor:
    r"""Mean over the block's in-edges of each destination (0 for rows without in-edges).

    .. math::
        m_v = \frac{1}{\max(|N(v)|, 1)} \sum_{u \in N(v)} x_u

    ``src_dropout``: as in :func:`gcn_aggregate`.

    Shapes:
        x_src ``[S, F]`` -> ``[D, F]``.
    """
    def scales():
        counts = (block.indptr[1:] - block.indptr[:-1]).to(device=x_src.device, dtype=x_src.dtype)
        return None, None, 1.0 / counts.clamp_min(1), None

    return propagate(block, x_src, "mean", scales, src_dropout=src_dropout)


class GCNLayer(nn.Module):
    r"""Graph convolution (Kipf & Welling) on blocks; equal to PyG ``GCNConv``.

    .. math::
        \text{out}_v = W \Big( \sum_{u \in N_{in}(v)} \frac{x_u}{\sqrt{(d_u+1)(d_v+1)}}
        + \frac{x_v}{d_v+1} \Big) + b

    ``forward`` transforms first (``A (X W)``) when that is cheaper.

    Args:
        in_dim: input width.
        out_dim: output width.
        bias: add a learnable bias.

    Shapes:
        x_src ``[S, in_dim]`` -> ``[D, out_dim]``.
    """

    linear_aggregate = True
    fuses_dropout = True
    fuses_relu = True
    takes_deferred = True

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.empty(out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def aggregate(self, block, x_src: Tensor, *, src_dropout=None) -> Tensor:
        """``A_hat x_src`` (of ``src_dropout(x_src)``, fused, when given): ``[S, in_dim]`` -> ``[D, in_dim]``."""
        _check_src(block, x_src, self.in_dim, "GCNLayer.aggregate")
        return gcn_aggregate(block, x_src, src_dropout)

    def update(self, x_agg: Tensor, x_dst: Tensor | None = None) -> Tensor:
        """``W x_agg + b``: ``[D, in_dim]`` -> ``[D, out_dim]`` (``x_dst`` unused)."""
        return F.linear(x_agg, self.lin.weight, self.bias)

    def forward(self, block, x_src: Tensor | DeferredLinearReLU, *, src_dropout=None, relu: bool = False,
                defer_relu: bool = False) -> Tensor | DeferredLinearReLU:
        """The whole layer on ``x_src`` (or on ``src_dropout(x_src)``: a
        :class:`~graphscale.nn.dropout.RowKeep`, fused into the aggregation when that comes first), followed by
        a ReLU when ``relu`` (fused into the dense product when that comes last: :func:`linear_relu`, returned
        as a :class:`DeferredLinearReLU` when ``defer_relu``). ``x_src`` may be a previous layer's
        :class:`DeferredLinearReLU` (``takes_deferred``): transform first, both dense products run block by block
        (:func:`linear_relu_linear`). ``[S, in_dim]`` -> ``[D, out_dim]``."""
        _check_src(block, x_src, self.in_dim, "GCNLayer")
        deferred = isinstance(x_src, DeferredLinearReLU)
        if transform_first(block, x_src, self.in_dim, self.out_dim, self.lin.weight):
            if deferred:
                z = linear_relu_linear(x_src, src_dropout, self.lin.weight)
            else:
                z = self.lin(x_src) if src_dropout is None else src_dropout.linear(x_src, self.lin.weight)
            out = gcn_aggregate(block, z)
            out = out if self.bias is None else out + self.bias
            return out.relu_() if relu else out  # a fresh tensor no autograd node saved
        x_agg = gcn_aggregate(block, x_src.compute() if deferred else x_src, src_dropout)
        if relu and defer_relu:
            return DeferredLinearReLU(x_agg, self.lin.weight, self.bias)
        return linear_relu(x_agg, self.lin.weight, self.bias) if relu else self.update(x_agg)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}"


class SAGELayer(nn.Module):
    r"""GraphSAGE with the mean aggregator on blocks; equal to PyG ``SAGEConv(aggr='mean')``.

    .. math::
        \text{out}_v = W_l \, \text{mean}_{u \in N(v)} x_u + b + W_r\, x_v

    ``aggregate`` returns the mean; ``update`` applies both weights.

    Args:
        in_dim: input width.
        out_dim: output width.
        bias: learnable bias (on the neighbour branch, as PyG).

    Shapes:
        x_src ``[S, in_dim]`` -> ``[D, out_dim]``.
    """

    linear_aggregate = True
    fuses_dropout = True

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_l = nn.Linear(in_dim, out_dim, bias=bias)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

    def aggregate(self, block, x_src: Tensor, *, src_dropout=None) -> Tensor:
        """Neighbour mean (of ``src_dropout(x_src)``, fused, when given): ``[S, in_dim]`` -> ``[D, in_dim]``."""
        _check_src(block, x_src, self.in_dim, "SAGELayer.aggregate")
        return mean_aggregate(block, x_src, src_dropout)

    def update(self, x_agg: Tensor, x_dst: Tensor) -> Tensor:
        """``W_l x_agg + b + W_r x_dst``: ``[D, in_dim]`` x2 -> ``[D, out_dim]``."""
        return self.lin_l(x_agg) + self.lin_r(x_dst)

    def forward(self, block, x_src: Tensor, *, src_dropout=None) -> Tensor:
        """The whole layer on ``x_src`` (or on ``src_dropout(x_src)``, fused into the aggregation when that
        comes first; the destination rows' dropped copy feeds ``W_r``): ``[S, in_dim]`` -> ``[D, out_dim]``."""
        _check_src(block, x_src, self.in_dim, "SAGELayer")
        first = transform_first(block, x_src, self.in_dim, self.out_dim, self.lin_l.weight)
        x_dst = x_src[: block.num_dst]
        if first:
            if src_dropout is None:
                z, root = F.linear(x_src, self.lin_l.weight), self.lin_r(x_dst)
            else:  # dropped rows one block at a time, for both products
                z = src_dropout.linear(x_src, self.lin_l.weight)
                root = src_dropout.rows(block.num_dst).linear(x_dst, self.lin_r.weight)
            out = mean_aggregate(block, z)
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias
            return out + root
        if src_dropout is not None:
            x_dst = src_dropout.rows(block.num_dst).apply(x_dst)
        return self.update(mean_aggregate(block, x_src, src_dropout), x_dst)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}"


class GATLayer(nn.Module):
    r"""Graph attention (Velickovic et al.) on blocks; equal to PyG ``GATConv`` (self-loops added).

    .. math::
        z = x W, \quad e_{uv,h} = \text{LeakyReLU}_{0.2}(a_{s,h} \cdot z_{u,h} + a_{d,h} \cdot z_{v,h}),

        \alpha_{uv,h} = \text{softmax}_{u \in N(v) \cup \{v\}}(e_{uv,h}), \quad
        \text{out}_{v} = \big\Vert_h \text{ or } \text{mean}_h \sum_{u} \text{drop}(\alpha_{uv,h}) z_{u,h} \; + b

    ``aggregate`` is edge-parametrised: it projects, scores, normalises and
    aggregates (per-head ``[E, H]`` scalars only; no ``[E, H, F]`` tensor);
    ``update`` concatenates or averages the heads and adds the bias. Attention
    dropout is keyed by ``(dst gid, src gid, head)`` (see :mod:`graphscale.nn.dropout`).

    Args:
        in_dim: input width.
        out_dim: width per head.
        heads: attention heads ``H``.
        concat: concatenate heads (``[D, H * out_dim]``) or average them (``[D, out_dim]``).
        negative_slope: LeakyReLU slope.
        attn_dropout: dropout probability on the attention coefficients.
        site: dropout site of the attention dropout.
        seed: dropout seed.
        bias: learnable bias.

    Shapes:
        x_src ``[S, in_dim]`` -> ``aggregate`` ``[D, H * out_dim]`` -> ``[D, H * out_dim]`` or ``[D, out_dim]``.
    """

    #: its products read per-edge weights (attention), so its backward needs the transpose's permutation
    edge_weighted = True

    linear_aggregate = False

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True, negative_slope: float = 0.2,
                 attn_dropout: float = 0.0, site: int = 0, seed: int = 0, bias: bool = True) -> None:
        super().__init__()
        if heads < 1:
            raise ValueError(f"GATLayer: heads must be >= 1, got {heads}")
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.negative_slope = negative_slope
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.empty(heads * out_dim if concat else out_dim)) if bias else None
        self.attn_dropout = EdgeDropout(attn_dropout, site=site, seed=seed)
        self.reset_parameters()

    @property
    def agg_dim(self) -> int:
        return self.heads * self.out_dim

    @property
    def output_dim(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        for att in (self.att_src, self.att_dst):  # PyG glorot on [1, H, F]: bound sqrt(6 / (H + F))
            bound = math.sqrt(6.0 / (att.shape[-2] + att.shape[-1]))
            nn.init.uniform_(att, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def aggregate(self, block, x_src: Tensor) -> Tensor:
        """Attention-weighted sum of projected sources: ``[S, in_dim]`` -> ``[D, H * out_dim]``."""
        _check_src(block, x_src, self.in_dim, "GATLayer.aggregate")
        return self.attend(block, self.lin(x_src))

    def attend(self, block, z_src: Tensor) -> Tensor:
        """The attention-weighted sum from the sources' projected rows ``z_src = lin(x_src)``:
        ``[S, H * out_dim]`` -> ``[D, H * out_dim]``."""
        topo = topology(block)
        d, nh = block.num_dst, self.heads
        z = z_src.view(-1, nh, self.out_dim)
        a_src = (z * self.att_src).sum(-1)
        a_dst = (z[:d] * self.att_dst).sum(-1)
        alpha, alpha_self = attention_coefficients(topo, a_src, a_dst, self.negative_slope)
        alpha, alpha_self = self.attn_dropout(block, alpha, alpha_self)
        return spmm_heads(topo, z, alpha, alpha_self).reshape(d, nh * self.out_dim)

    def update(self, x_agg: Tensor, x_dst: Tensor | None = None) -> Tensor:
        """Concatenate or average heads, add bias: ``[D, H * out_dim]`` -> output (``x_dst`` unused)."""
        out = x_agg if self.concat else x_agg.view(-1, self.heads, self.out_dim).mean(1)
        return out if self.bias is None else out + self.bias

    def forward(self, block, x_src: Tensor) -> Tensor:
        """The whole layer: ``[S, in_dim]`` -> ``[D, H * out_dim]`` (concat) or ``[D, out_dim]``."""
        return self.update(self.aggregate(block, x_src))

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}"


class GCNIILayer(nn.Module):
    r"""GCNII convolution (Chen et al. 2020) on blocks; equal to PyG ``GCN2Conv(shared_weights=True)``.

    .. math::
        \text{out} = \big((1-\alpha)\, \hat A h + \alpha\, h_0\big)\big((1-\beta) I + \beta W\big),
        \qquad \beta = \log(\theta / \ell + 1)

    Args:
        channels: width (input = output).
        alpha: initial-residual weight.
        theta: identity-mapping strength.
        layer: 1-based layer index ``l`` in ``beta``.

    Shapes:
        x_src ``[S, C]``, h0_dst ``[D, C]`` -> ``[D, C]``.
    """

    linear_aggregate = True
    fuses_dropout = True

    def __init__(self, channels: int, alpha: float, theta: float, layer: int) -> None:
        super().__init__()
        if layer < 1:
            raise ValueError(f"GCNIILayer: layer index is 1-based, got {layer}")
        self.channels, self.alpha, self.theta, self.layer = channels, float(alpha), float(theta), int(layer)
        self.beta = math.log(theta / layer + 1.0)
        self.weight = nn.Parameter(torch.empty(channels, channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)

    def aggregate(self, block, x_src: Tensor, *, src_dropout=None) -> Tensor:
        """``A_hat x_src`` (of ``src_dropout(x_src)``, fused, when given): ``[S, C]`` -> ``[D, C]``."""
        _check_src(block, x_src, self.channels, "GCNIILayer.aggregate")
        return gcn_aggregate(block, x_src, src_dropout)

    def update(self, x_agg: Tensor, x_dst: Tensor | None, h0_dst: Tensor) -> Tensor:
        """Initial residual and identity mapping: ``[D, C]`` x2 -> ``[D, C]`` (``x_dst`` unused)."""
        if h0_dst is None or h0_dst.shape != x_agg.shape:
            raise ValueError(f"GCNIILayer: h0_dst must be {tuple(x_agg.shape)} (the initial features of the "
                             f"destination rows), got {None if h0_dst is None else tuple(h0_dst.shape)}")
        z = (1.0 - self.alpha) * x_agg + self.alpha * h0_dst
        return torch.addmm(z, z, self.weight, beta=1.0 - self.beta, alpha=self.beta)

    def forward(self, block, x_src: Tensor, h0_dst: Tensor, *, src_dropout=None) -> Tensor:
        """The whole layer (on ``src_dropout(x_src)``, fused, when given): ``[S, C]``, ``[D, C]`` -> ``[D, C]``."""
        return self.update(self.aggregate(block, x_src, src_dropout=src_dropout), None, h0_dst)

    def extra_repr(self) -> str:
        return f"{self.channels}, alpha={self.alpha}, theta={self.theta}, layer={self.layer}"


class ResGCNPlusLayer(nn.Module):
    r"""DeeperGCN "res+" block (pre-activation residual) with a GCN-normalised convolution.

    .. math::
        h_{l+1} = h_l + \text{GCN}\big(\text{drop}(\text{ReLU}(\text{LayerNorm}(h_l)))\big)

    The convolution is :class:`GCNLayer` (symmetric normalisation with global
    degrees) rather than GENConv's softmax aggregation: it keeps ``aggregate``
    a plain sparse product. LayerNorm is row-wise, so any partition of the rows
    computes exactly the same values; the dropout is keyed by the source rows'
    global ids. ``aggregate`` includes the pre-activation (it carries the
    LayerNorm parameters, hence ``linear_aggregate = False``); ``update`` adds
    the residual: ``update(x_agg, x_dst) = x_dst + W x_agg + b``.

    Args:
        channels: width (input = output).
        dropout: dropout probability after the activation.
        site: dropout site.
        seed: dropout seed.

    Shapes:
        x_src ``[S, C]`` -> ``[D, C]``.
    """

    linear_aggregate = False

    def __init__(self, channels: int, dropout: float = 0.0, site: int = 0, seed: int = 0) -> None:
        super().__init__()
        self.channels = channels
        self.norm = nn.LayerNorm(channels)
        self.dropout = KeyedDropout(dropout, site=site, seed=seed)
        self.conv = GCNLayer(channels, channels)

    def pre(self, x: Tensor, ids: Tensor) -> Tensor:
        """Row-wise pre-activation ``drop(relu(LayerNorm(x)))`` keyed by global ids ``ids``."""
        return self.dropout(F.relu(self.norm(x), inplace=True), ids)  # LayerNorm keeps its input, not its output

    def aggregate(self, block, x_src: Tensor) -> Tensor:
        """``A_hat pre(x_src)``: ``[S, C]`` -> ``[D, C]``."""
        _check_src(block, x_src, self.channels, "ResGCNPlusLayer.aggregate")
        return self.conv.aggregate(block, self.pre(x_src, block.src_ids))

    def update(self, x_agg: Tensor, x_dst: Tensor) -> Tensor:
        """Residual plus convolution weights: ``[D, C]`` x2 -> ``[D, C]``."""
        return x_dst + self.conv.update(x_agg)

    def forward(self, block, x_src: Tensor) -> Tensor:
        """The whole block: ``[S, C]`` -> ``[D, C]``."""
        _check_src(block, x_src, self.channels, "ResGCNPlusLayer")
        return x_src[: block.num_dst] + self.conv(block, self.pre(x_src, block.src_ids))

    def extra_repr(self) -> str:
        return f"{self.channels}"


class GCNPropagation(nn.Module):
    r"""Parameter-free GCN propagation :math:`\hat A x` (the P task of a decoupled model, spec NeutronTask §3.4).

    ``aggregate`` is the propagation, ``update`` the identity; :meth:`transpose` is its adjoint, which needs no
    stored input (the propagation is linear), so a strategy can run the backward keeping no P intermediates.

    Shapes:
        x_src ``[S, dim]`` -> ``[D, dim]``.
    """

    linear_aggregate = True

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def aggregate(self, block, x_src: Tensor) -> Tensor:
        _check_src(block, x_src, self.dim, "GCNPropagation")
        return gcn_aggregate(block, x_src)

    def update(self, x_agg: Tensor, x_dst: Tensor | None = None) -> Tensor:
        return x_agg

    def forward(self, block, x_src: Tensor) -> Tensor:
        return self.aggregate(block, x_src)

    def transpose(self, block, g_dst: Tensor) -> Tensor:
        """The sources' gradient for the destinations' gradient ``g_dst`` (``[D, dim]`` -> ``[S, dim]``)."""
        return gcn_aggregate_transpose(block, g_dst)

    def extra_repr(self) -> str:
        return f"{self.dim}"


class ScoredAttentionPropagation(nn.Module):
    r"""One propagation step of the decoupled GAT (spec NeutronTask §3.4): attention from per-vertex scores.

    Rows are ``[z_1 .. z_H | s_src | s_dst]`` (``H (dim + 2)`` columns: ``H`` heads of width ``dim``, then one
    source and one destination score per head): head ``h``'s slice ``z_h`` is propagated with the attention
    :func:`attention_coefficients` of its own scores (self-loop included, softmax over the block's in-edges), and
    the destinations' score columns pass through unchanged, so every step of a stack uses the attention computed
    once from the T output, and the scores' gradient sums every step's
    :math:`\langle \nabla H_{v,h}^{(l+1)}, H_{u,h}^{(l)} \rangle` (exact; the backward needs the step's input
    rows).

    Args:
        dim: width per head.
        heads: attention heads ``H``.
        negative_slope: LeakyReLU slope.

    Shapes:
        x_src ``[S, H (dim + 2)]`` -> ``[D, H (dim + 2)]``.
    """

    #: its products read per-edge weights (attention), so its backward needs the transpose's permutation
    edge_weighted = True

    linear_aggregate = False

    def __init__(self, dim: int, heads: int = 1, negative_slope: float = 0.2) -> None:
        super().__init__()
        if heads < 1:
            raise ValueError(f"ScoredAttentionPropagation: heads must be >= 1, got {heads}")
        self.dim, self.heads, self.negative_slope = dim, heads, negative_slope

    def aggregate(self, block, x_src: Tensor) -> Tensor:
        nh, width = self.heads, self.heads * self.dim
        _check_src(block, x_src, width + 2 * nh, "ScoredAttentionPropagation")
        topo = topology(block)
        d = block.num_dst
        z, s = x_src[:, :width], x_src[:, width:]
        alpha, alpha_self = attention_coefficients(topo, s[:, :nh], s[:d, nh:], self.negative_slope)
        out = spmm_heads(topo, z.reshape(-1, nh, self.dim), alpha, alpha_self).reshape(d, width)
        return torch.cat([out, s[:d]], dim=1)

    def update(self, x_agg: Tensor, x_dst: Tensor | None = None) -> Tensor:
        return x_agg

    def forward(self, block, x_src: Tensor) -> Tensor:
        return self.aggregate(block, x_src)

    def extra_repr(self) -> str:
        return f"{self.dim}, heads={self.heads}"

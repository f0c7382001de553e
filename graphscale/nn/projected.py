"""Layers whose step is a dense projection of each source row, then the aggregation of the projected rows: the
step split at the projection, so a strategy can project rows where they live and move the projected rows.

Three layers are linear-then-aggregate:

* :class:`~graphscale.nn.layers.GCNLayer`: ``out = A_hat (x W^T) + b`` (the order ``forward`` picks when that is
  cheaper; the other order, ``(A_hat x) W^T``, gives the same values up to float rounding);
* :class:`~graphscale.nn.layers.SAGELayer`: the neighbour term ``mean(x_u) W_l^T = mean(x_u W_l^T)``, the root
  term ``x_v W_r^T`` a row-wise term of the destinations;
* :class:`~graphscale.nn.layers.GATLayer`: the projection ``z = x W^T``, from which the scores, the attention and
  the aggregation follow.

:func:`project` runs the projection of some rows (the step's keyed dropout of them fused in as a
:class:`~graphscale.nn.dropout.RowKeep` where the layer fuses it), giving the rows that cross and the destination
term (SAGE's root term; ``None`` for the others); :func:`aggregate_projected` aggregates the projected source rows
of a block and adds the destination term and the bias. Both are row-wise in the rows they read, so a graph-parallel
worker projects its own rows, exchanges the projected halo rows (``projected_width`` wide instead of ``in_dim``)
and aggregates, and the projection's backward returns the halo rows' gradients to their owners.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphscale.nn.layers import GATLayer, GCNLayer, SAGELayer, gcn_aggregate, mean_aggregate


def projected_width(layer: nn.Module) -> int | None:
    """The width of ``layer``'s projected rows, or ``None`` where its step is not linear-then-aggregate."""
    if isinstance(layer, (GCNLayer, SAGELayer)):
        return layer.out_dim
    if isinstance(layer, GATLayer):
        return layer.agg_dim
    return None


def project(layer: nn.Module, x: Tensor, keep=None) -> tuple[Tensor, Tensor | None]:
    """``layer``'s projection of the rows ``x`` (of ``keep.apply(x)`` when ``keep``, a
    :class:`~graphscale.nn.dropout.RowKeep` of these rows, is given: no dropped copy of ``x`` is made).

    Returns:
        ``(z, local)``: the projected rows ``[N, projected_width]`` and the rows' own destination term (SAGE's
        ``x W_r^T``, ``[N, out_dim]``; ``None`` for GCN and GAT).
    """
    if isinstance(layer, GCNLayer):
        w = layer.lin.weight
        return (F.linear(x, w) if keep is None else keep.linear(x, w)), None
    if isinstance(layer, SAGELayer):
        w_l, w_r = layer.lin_l.weight, layer.lin_r.weight
        if keep is None:
            return F.linear(x, w_l), F.linear(x, w_r)
        return keep.linear(x, w_l), keep.linear(x, w_r)
    if isinstance(layer, GATLayer):
        if keep is not None:
            raise ValueError("GATLayer does not fuse a dropout into its projection; apply it first")
        return layer.lin(x), None
    raise ValueError(f"{type(layer).__name__} is not linear-then-aggregate (projected_width is None)")


def aggregate_projected(layer: nn.Module, block, z_src: Tensor, local_dst: Tensor | None) -> Tensor:
    """``layer`` on ``block`` from its sources' projected rows ``z_src`` (:func:`project`) and the destinations'
    own term ``local_dst``: the layer's output before its activation, ``[D, out]``."""
    if z_src.shape[0] != block.num_src:
        raise ValueError(f"{type(layer).__name__}: z_src has {z_src.shape[0]} rows, the block has {block.num_src} "
                         "sources")
    # the bias and the destination term are added in place: the aggregation's output is a fresh tensor that its
    # backward does not read, so no second [D, out] table exists (the same additions, in the same order)
    if isinstance(layer, GCNLayer):
        out = gcn_aggregate(block, z_src)
        return out if layer.bias is None else out.add_(layer.bias)
    if isinstance(layer, SAGELayer):
        out = mean_aggregate(block, z_src)
        if layer.lin_l.bias is not None:
            out.add_(layer.lin_l.bias)
        return out.add_(local_dst)
    if isinstance(layer, GATLayer):
        return layer.update(layer.attend(block, z_src))
    raise ValueError(f"{type(layer).__name__} is not linear-then-aggregate (projected_width is None)")

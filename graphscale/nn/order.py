"""Which order a layer's two products run in: ``A (X W)`` or ``(A X) W``, priced per device.

Both orders give the same values up to float rounding; the cheaper one depends on the widths, the block's shape
(a partition block pays the transform for its halo rows too), which inputs need gradients, and the device (a
gathered multiply-add costs some 20 dense ones on a CPU, about 100 on a GPU).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class ProductCosts(NamedTuple):
    """Costs of :func:`transform_first`'s two orders on one device, in dense multiply-adds (a GEMM's inner step):
    a sparse product pays per stored entry (index read, a random row fetch) and per entry and column (a gathered
    multiply-add), a dense one per row and column for streaming its input and output. The choice only needs their
    order of magnitude."""

    sparse_entry: int
    sparse_element: int
    dense_element: int


#: Per device type. ``cpu``: measured single-threaded on a 1M-vertex SBM block (``X W``: 0.045 ns per multiply-add;
#: SpMM: about 25 ns per entry plus 0.9 ns per entry and column): a gathered multiply-add is some 20 dense ones.
#: ``cuda``: from an H100's datasheet, not measured here (no GPU was lent): a GEMM's multiply-add at about 50 TFLOP/s
#: (0.02 ns) against a gathered one bound by HBM (3 TB/s: 1.3 ps per 4-byte read, some 100 multiply-adds) and a
#: streamed element at the same bandwidth (about 70); an entry's index read and row start about 200. Devices not
#: listed take the ``cuda`` figures (tensor-core GEMMs against gathered reads).
PRODUCT_COSTS = {"cpu": ProductCosts(500, 20, 5), "cuda": ProductCosts(200, 100, 70)}


def _sparse_cost(costs: ProductCosts, nnz: int, width: int) -> int:
    return nnz * (costs.sparse_entry + costs.sparse_element * width)


def _dense_cost(costs: ProductCosts, rows: int, in_dim: int, out_dim: int) -> int:
    return rows * (in_dim * out_dim + costs.dense_element * (in_dim + out_dim))


def transform_first(block, x_src: Tensor, in_dim: int, out_dim: int, weight: Tensor) -> bool:
    """Whether ``A (X W)`` is cheaper than ``(A X) W`` for this call.

    Both orders' forward and, when autograd will run, backward products, priced by the costs of the input's device
    (:data:`PRODUCT_COSTS`: a sparse product's multiply-adds cost one to two orders of magnitude more than a
    GEMM's): the aggregation's
    backward runs when its input requires grad (or, transform first, when the weight does), the dense
    backward products for each of the input and the weight that requires grad. A partition block (sources =
    its rows plus a halo) pays the transform for every source row, so the order can differ from the whole
    graph's; both give the same values up to float rounding.
    """
    grad = torch.is_grad_enabled()
    return cheaper_to_transform_first(block.num_edges + block.num_dst, block.num_src, block.num_dst, in_dim, out_dim,
                                      grad and x_src.requires_grad, grad and weight.requires_grad, x_src.device.type)


def cheaper_to_transform_first(nnz: int, rows_src: int, rows_dst: int, in_dim: int, out_dim: int, x_grad: bool,
                               w_grad: bool, device_type: str) -> bool:
    """:func:`transform_first`'s choice from the counts alone (``nnz``: the block's edges and self-loops; the
    input's and the weight's need of gradients): also what ``graphscale advise`` prices a layer's products in."""
    costs = PRODUCT_COSTS.get(device_type, PRODUCT_COSTS["cuda"])
    agg_first = (_sparse_cost(costs, nnz, in_dim) * (1 + int(x_grad))
                 + _dense_cost(costs, rows_dst, in_dim, out_dim) * (1 + int(x_grad) + int(w_grad)))
    tr_first = (_dense_cost(costs, rows_src, in_dim, out_dim) * (1 + int(x_grad) + int(w_grad))
                + _sparse_cost(costs, nnz, out_dim) * (1 + int(x_grad or w_grad)))
    return tr_first < agg_first

"""A model's shapes, from a forward pass on a one-vertex block: the widths every cost model prices (offload's
analytic model, :mod:`graphscale.strategies.offload.cost`, and every strategy's prediction, :func:`dims`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphscale.data.block import Block


@dataclass(frozen=True)
class ModelDims:
    """The widths a model moves per layer (from a shape probe of the model).

    Attributes:
        in_dim: raw feature width.
        widths: ``d_l``, rows entering layer ``l`` (``H^l``).
        agg: ``a_l``, width of layer ``l``'s aggregate (the hybrid's cache ``A^l``).
        out: ``o_l``, width of layer ``l``'s output (``H^{l+1}``).
        uses_dst: whether layer ``l``'s update reads the destinations' own rows.
        linear: whether layer ``l``'s aggregate is a fixed linear map (cacheable).
        learned_input: whether ``input_map`` has parameters (then ``G^0`` is needed).
        needs_h0: whether every step reads ``H^0`` of its destinations (GCNII).
    """

    in_dim: int
    widths: tuple[int, ...]
    agg: tuple[int, ...]
    out: tuple[int, ...]
    uses_dst: tuple[bool, ...]
    linear: tuple[bool, ...]
    learned_input: bool
    needs_h0: bool

    @property
    def num_layers(self) -> int:
        return len(self.widths)

    def needs_src_grad(self, layer: int) -> bool:
        """Whether layer ``layer``'s backward must send gradients to its source rows."""
        return layer > 0 or self.learned_input


def probe_dims(model: torch.nn.Module, in_dim: int, dtype: torch.dtype) -> ModelDims:
    """Widths and properties of a model's steps, from a forward pass on a one-vertex block.

    Args:
        model: a :class:`~graphscale.nn.models.GNN`.
        in_dim: raw feature width.
        dtype: parameter dtype.
    """
    device = next(model.parameters()).device
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    block = Block(torch.zeros(2, dtype=torch.int64, device=device), torch.zeros(0, dtype=torch.int64, device=device),
                  zero, zero)
    training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            x = torch.zeros(1, in_dim, dtype=dtype, device=device)
            h0 = model.input_map(x, zero)
            learned_input = bool(h0.requires_grad)
            h0 = h0.detach()
            h, agg_w, out_w, uses_dst = h0, [], [], []
            for layer in range(model.num_layers):
                agg = model.aggregate(layer, block, h).detach()
                h_dst = h.clone().requires_grad_(True)
                out = model.update(layer, agg, h_dst, zero, h0 if model.needs_h0 else None)
                used = out.requires_grad and torch.autograd.grad(out.sum(), h_dst, allow_unused=True)[0] is not None
                agg_w.append(int(agg.shape[1]))
                out_w.append(int(out.shape[1]))
                uses_dst.append(bool(used))
                h = out.detach()
    finally:
        model.train(training)
    linear = tuple(bool(getattr(layer, "linear_aggregate", False)) for layer in model.layers)
    return ModelDims(in_dim, tuple(model.layer_widths()), tuple(agg_w), tuple(out_w), tuple(uses_dst), linear,
                     learned_input, bool(model.needs_h0))


def dims(model, config, data):
    """The model's per-layer widths (:func:`probe_dims` at the run's input width): ``widths`` ``d_l`` entering each
    step, ``out`` ``o_l`` leaving it."""
    from graphscale.data.features import input_width

    return probe_dims(model, input_width(config.data.features, data.num_features), next(model.parameters()).dtype)

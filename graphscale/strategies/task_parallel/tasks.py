"""How a model's computation splits into NeutronTask's tasks (spec ``neutrontask.md`` §2, §3.4), and the closed-form
stage traffic of the resulting chain.

A :class:`TaskSplit` lists the model's tasks in chain order: **T** ops (row-wise, they hold every parameter) and
**P** ops (one propagation layer each, parameter-free). The strategy maps each op onto the plan's T or P stage
that holds its layer and runs consecutive ops of one stage as one segment.

* :class:`DecoupledSplit` (task decoupling, ``--decoupled on``, the default of ``task-parallel``): ``T_0 .. T_{L-1}``
  are the MLP's layers (:meth:`~graphscale.nn.decoupled.DecoupledGNN.t_step`; GAT's last one also emits the
  attention scores), then ``P_0 .. P_{L-1}`` the propagations; the loss is computed after ``P_{L-1}``. Rows cross
  the T-P boundary once, at the output width.
* :class:`CoupledGCNSplit` (``--decoupled off``, the no-TD baseline: standard GCN): ``T_l`` is ``drop(h) W_l``
  (with, for ``l > 0``, the previous layer's bias and ReLU first), ``P_l`` is ``A_hat z``; a last T op ``T_L``
  adds the last bias, so the chain is ``T_0 P_0 T_1 P_1 .. T_{L-1} P_{L-1} T_L`` and the loss is computed on the
  T rank of the last layer (the bias is a T parameter: ``2 L`` boundaries, one more than the spec's ``2 L - 1``,
  which leaves the last bias out). ``A_hat (drop(h) W) + b`` is what ``single``'s GCN layer computes (it may
  aggregate first; both orders agree within float rounding).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from graphscale.nn.decoupled import DecoupledGNN
from graphscale.nn.layers import GCNLayer, gcn_aggregate, gcn_aggregate_transpose
from graphscale.nn.models import GCN, GNN

T, P = "T", "P"


@dataclass(frozen=True)
class Op:
    """One task: ``kind`` T or P; ``index``: the T op's index or the P op's layer."""

    kind: str
    index: int


class TaskSplit(ABC):
    """A model's tasks in chain order (subclasses fill :attr:`chain` and the methods)."""

    chain: list[Op]
    #: whether the P ops are linear (their backward needs no stored input: :meth:`p_transpose`)
    linear_p: bool = True

    def __init__(self, model: GNN) -> None:
        self.model = model

    def layer_of(self, op: Op) -> int:
        """The model layer that decides which stage runs ``op``."""
        return op.index

    @abstractmethod
    def t_op(self, index: int, h: Tensor, ids: Tensor) -> Tensor:
        """T op ``index`` on rows of global ids ``ids`` (row-wise)."""

    @abstractmethod
    def t_params(self, index: int) -> list[nn.Parameter]:
        """The parameters T op ``index`` uses."""

    @abstractmethod
    def out_width(self, op: Op) -> int:
        """Width of the rows ``op`` outputs."""

    @abstractmethod
    def p_op(self, layer: int, block, h_src: Tensor) -> Tensor:
        """P op ``layer`` on a block (its destinations' rows from all its sources' rows)."""

    @abstractmethod
    def p_transpose(self, layer: int, block, g_dst: Tensor) -> Tensor:
        """The sources' gradient of a linear P op for its destinations' gradient."""

    def logits(self, h: Tensor, ids: Tensor) -> Tensor:
        """The class logits from the chain's last output rows."""
        return h


class DecoupledSplit(TaskSplit):
    """``T_0 .. T_{L-1}`` (the MLP), then ``P_0 .. P_{L-1}`` (the propagations) of a decoupled model."""

    def __init__(self, model: DecoupledGNN) -> None:
        super().__init__(model)
        n = model.num_layers
        self.chain = [Op(T, i) for i in range(n)] + [Op(P, l) for l in range(n)]
        self.linear_p = all(hasattr(layer, "transpose") for layer in model.layers)

    def t_op(self, index: int, h: Tensor, ids: Tensor) -> Tensor:
        return self.model.t_step(index, h, ids)

    def t_params(self, index: int) -> list[nn.Parameter]:
        params = list(self.model.lins[index].parameters())
        if index == self.model.num_layers - 1:  # the edge-T's vertex half (GAT's attention vectors)
            params += [p for name, p in self.model.named_parameters() if name.startswith("att_")]
        return params

    def out_width(self, op: Op) -> int:
        return self.model.t_width(op.index) if op.kind == T else self.model.layer_widths()[op.index]

    def p_op(self, layer: int, block, h_src: Tensor) -> Tensor:
        return self.model.step(layer, block, h_src)

    def p_transpose(self, layer: int, block, g_dst: Tensor) -> Tensor:
        return self.model.layers[layer].transpose(block, g_dst)

    def logits(self, h: Tensor, ids: Tensor) -> Tensor:
        return self.model.output_map(h, ids)


class CoupledGCNSplit(TaskSplit):
    """``T_0 P_0 .. T_{L-1} P_{L-1} T_L`` of a standard GCN (the no-TD baseline)."""

    def __init__(self, model: GCN) -> None:
        super().__init__(model)
        if not all(isinstance(layer, GCNLayer) for layer in model.layers):
            raise ValueError("the coupled task split needs GCN layers")
        n = model.num_layers
        self.chain = [op for l in range(n) for op in (Op(T, l), Op(P, l))] + [Op(T, n)]

    def layer_of(self, op: Op) -> int:
        return min(op.index, self.model.num_layers - 1)

    def t_op(self, index: int, h: Tensor, ids: Tensor) -> Tensor:
        model = self.model
        if index == 0:
            h = model.input_map(h, ids)
        else:
            prev = model.layers[index - 1]
            h = model.post(index - 1, h if prev.bias is None else h + prev.bias)
        if index == model.num_layers:
            return model.output_map(h, ids)
        return torch.nn.functional.linear(model.pre(index, h, ids), model.layers[index].lin.weight)

    def t_params(self, index: int) -> list[nn.Parameter]:
        model = self.model
        params = [model.layers[index].lin.weight] if index < model.num_layers else []
        if index > 0 and model.layers[index - 1].bias is not None:
            params.append(model.layers[index - 1].bias)
        return params

    def out_width(self, op: Op) -> int:
        layers = self.model.layers
        return layers[min(op.index, len(layers) - 1)].out_dim

    def p_op(self, layer: int, block, h_src: Tensor) -> Tensor:
        return gcn_aggregate(block, h_src)

    def p_transpose(self, layer: int, block, g_dst: Tensor) -> Tensor:
        return gcn_aggregate_transpose(block, g_dst)


def task_split(model: GNN) -> TaskSplit:
    """The split of ``model``: decoupled models, or a standard GCN in the coupled order.

    Raises:
        ValueError: a model with no task split (the parent refuses it first: ``check_config``).
    """
    if isinstance(model, DecoupledGNN):
        return DecoupledSplit(model)
    if isinstance(model, GCN):
        return CoupledGCNSplit(model)
    raise ValueError(f"strategy 'task-parallel' trains decoupled gcn / gat or the coupled gcn, not "
                     f"{type(model).__name__}")


# ------------------------------------------------------------------ closed forms
def chain_bytes_per_epoch(num_nodes: int, boundary_widths: list[int], element_size: int) -> int:
    """Stage traffic of one training epoch summed over workers: every vertex's row crosses every boundary once
    forward and its gradient once backward, ``2 N sum_i d_i b`` (hybrid groups route each chunk from its owner in
    one group to its owner in the next, so the volume does not depend on the groups)."""
    return 2 * num_nodes * sum(int(d) for d in boundary_widths) * element_size


def td_boundary_widths(t_stage_outputs: list[int], t_output: int, p_stages: int) -> list[int]:
    """The TD chain's boundaries (spec §7): between T stages (each non-last stage's output width), T -> P (the MLP
    output, ``classes``; GAT with ``H`` heads: ``H (classes + 2)``, every head's slice and scores), and between the
    ``p_stages`` P stages (the same width)."""
    return list(t_stage_outputs) + [t_output] * p_stages


def coupled_boundary_widths(layer_out_widths: list[int]) -> list[int]:
    """The coupled chain's ``2 L`` boundaries: ``T_l -> P_l`` and ``P_l -> T_{l+1}`` both carry ``d_{l+1}``."""
    return [d for d in layer_out_widths for _ in range(2)]

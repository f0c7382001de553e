r"""Decoupled models (NeutronTask's task decoupling, spec ``shared/specs/neutrontask.md`` §2, §3.4).

``--decoupled on`` turns ``gcn`` and ``gat`` into their decoupled forms, which run every dense transformation
(T) before every propagation (P):

* ``gcn``: :math:`Y = \hat A^L \, \text{MLP}_\theta(X)`. The MLP has ``L`` layers ``Linear(drop(h))`` (widths
  ``in -> hidden -> ... -> classes``) with ReLU between them; the last layer's ReLU is off unless ``--last-relu``
  (the artifact applies it; the spec makes it optional, off by default). Dropout (keyed, site ``l``) is on the T
  side only. P is ``L`` parameter-free steps of :class:`~graphscale.nn.layers.GCNPropagation` at the output
  width (``classes``), with GCN's normalisation by global degrees.
* ``gat`` with ``H = --heads`` attention heads: the same MLP, whose last layer is ``H`` heads wide (``hidden ->
  H classes``, head ``h`` the slice ``z_h`` of width ``classes``); the edge-T's vertex half computes two scores
  per vertex and head from the MLP output once (``s_src,h = z_h a_src,h``, ``s_dst,h = z_h a_dst,h``); the ``L``
  P steps (:class:`~graphscale.nn.layers.ScoredAttentionPropagation`) propagate every head's slice with the
  attention of its own scores, which travel with the rows (``H (classes + 2)`` columns: ``[z_1 .. z_H | s_src |
  s_dst]``). As in the standard GAT (``GATLayer``), the heads stay concatenated between steps (no step mixes
  them) and the output averages them (``concat=False`` of the output layer). ``H = 1`` is the one-head model. No
  attention dropout.

They are :class:`~graphscale.nn.models.GNN` s like the others: ``input_map`` is the T stack (row-wise, keyed by
global ids), the ``L`` steps are the propagations (no dropout, no activation), ``output_map`` keeps the class
columns; so ``single`` (and every strategy driving ``model.step``) runs them unchanged. ``--strategy
task-parallel`` drives the halves separately: :meth:`DecoupledGNN.t_step` is T layer ``l``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphscale.config import ModelConfig
from graphscale.nn.gnn import GNN
from graphscale.nn.layers import GCNPropagation, ScoredAttentionPropagation


class DecoupledGNN(GNN):
    """``L`` T layers (an MLP, keyed dropout before each Linear) then ``L`` propagation steps.

    Args:
        cfg: model configuration (``hidden``, ``layers``, ``dropout``, ``last_relu``).
        in_dim: input width.
        num_classes: output width.
        seed: dropout seed.
        props: the ``L`` propagation layers.
        heads: slices of width ``num_classes`` the T stack's last layer outputs (GAT's heads; 1 otherwise).
        score_columns: extra columns the T stack appends for the propagations (GAT's two scores per head).
    """

    #: the model's name in reports (``gcn`` / ``gat`` with ``decoupled``)
    form = "decoupled"

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int, props: list[nn.Module],
                 heads: int = 1, score_columns: int = 0) -> None:
        super().__init__(props, [heads * num_classes + score_columns] * cfg.layers, cfg.dropout, seed)
        dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [heads * num_classes]
        self.t_dims = dims
        self.lins = nn.ModuleList(nn.Linear(dims[l], dims[l + 1]) for l in range(cfg.layers))
        for lin in self.lins:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.last_relu = bool(cfg.last_relu)
        self.num_classes, self.heads = num_classes, heads
        self.score_columns = score_columns

    # ------------------------------------------------------------ T
    def t_width(self, l: int) -> int:
        """Width of T layer ``l``'s output (the last one carries the score columns)."""
        return self.t_dims[l + 1] + (self.score_columns if l == self.num_layers - 1 else 0)

    def t_step(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """T layer ``l`` on rows of global ids ``ids``: ``act(Linear_l(drop_l(h)))``; the last layer also appends
        the score columns. Row-wise. Shapes: ``[R, d_l]`` -> ``[R, t_width(l)]``."""
        z = self.lins[l](self.drops[l](h, ids))
        last = l == self.num_layers - 1
        if not last or self.last_relu:
            z = F.relu(z)
        return self.t_scores(z) if last else z

    def t_scores(self, z: Tensor) -> Tensor:
        """The columns the propagations read: ``z`` itself (GCN)."""
        return z

    # ------------------------------------------------------------ GNN hooks
    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """The T stack: every :meth:`t_step` in order. Shapes: ``[N, in]`` -> ``[N, heads classes (+ scores)]``."""
        h = x
        for l in range(self.num_layers):
            h = self.t_step(l, h, ids)
        return h

    def pre(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """Identity: no dropout on the propagations."""
        return h

    def post(self, l: int, out: Tensor) -> Tensor:
        """Identity: the propagations are linear (GCN) or attention-weighted sums (GAT)."""
        return out

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """The class columns, averaged over the heads. Shapes: ``[N, heads classes (+ scores)]`` ->
        ``[N, classes]``."""
        h = h[:, : self.heads * self.num_classes]
        return h if self.heads == 1 else h.reshape(-1, self.heads, self.num_classes).mean(1)


class DecoupledGCN(DecoupledGNN):
    r""":math:`Y = \hat A^L \, \text{MLP}(X)` (SGC / APPNP-style with ``alpha = 0``)."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        super().__init__(cfg, in_dim, num_classes, seed, [GCNPropagation(num_classes) for _ in range(cfg.layers)])


class DecoupledGAT(DecoupledGNN):
    """MLP (last layer ``heads`` x ``classes``), per-head attention scores computed once from its output, ``L``
    attention-weighted propagations of every head; the output averages the heads."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        heads = cfg.heads
        props = [ScoredAttentionPropagation(num_classes, heads) for _ in range(cfg.layers)]
        super().__init__(cfg, in_dim, num_classes, seed, props, heads=heads, score_columns=2 * heads)
        bound = math.sqrt(6.0 / (heads + num_classes))  # glorot on [1, H, C], as GATLayer's attention vectors
        self.att_src = nn.Parameter(torch.empty(heads, num_classes).uniform_(-bound, bound))
        self.att_dst = nn.Parameter(torch.empty(heads, num_classes).uniform_(-bound, bound))

    def t_scores(self, z: Tensor) -> Tensor:
        """``[z | s_src | s_dst]`` with ``s_*[:, h] = z_h a_*,h``: the edge-T's vertex half (per-vertex, per-head
        scalars, no edge embeddings). Shapes: ``[R, H C]`` -> ``[R, H (C + 2)]``."""
        zh = z.reshape(-1, self.heads, self.num_classes)
        return torch.cat([z, (zh * self.att_src).sum(-1), (zh * self.att_dst).sum(-1)], dim=1)


#: model name -> its decoupled class
DECOUPLED = {"gcn": DecoupledGCN, "gat": DecoupledGAT}

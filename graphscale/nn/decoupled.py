r"""Decoupled models (NeutronTask's task decoupling, spec ``shared/specs/neutrontask.md`` §2, §3.4).

``--decoupled on`` turns ``gcn`` and ``gat`` into their decoupled forms, which run every dense transformation
(T) before every propagation (P):

* ``gcn``: :math:`Y = \hat A^L \, \text{MLP}_\theta(X)`. The MLP has ``L`` layers ``Linear(drop(h))`` (widths
  ``in -> hidden -> ... -> classes``) with ReLU between them; the last layer's ReLU is off unless ``--last-relu``
  (the artifact applies it; the spec makes it optional, off by default). Dropout (keyed, site ``l``) is on the T
  side only. P is ``L`` parameter-free steps of :class:`~graphscale.nn.layers.GCNPropagation` at the output
  width (``classes``), with GCN's normalisation by global degrees.
* ``gat``: the same MLP (width ``hidden``, one attention head), then the edge-T's vertex half computes two scores
  per vertex from the MLP output ``z`` (``s_src = z a_src``, ``s_dst = z a_dst``) once; the ``L`` P steps
  (:class:`~graphscale.nn.layers.ScoredAttentionPropagation`) propagate ``z`` with the attention of those
  scores, which travel with the rows (``classes + 2`` columns). No attention dropout.

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
from graphscale.nn.layers import GCNPropagation, ScoredAttentionPropagation
from graphscale.nn.models import GNN


class DecoupledGNN(GNN):
    """``L`` T layers (an MLP, keyed dropout before each Linear) then ``L`` propagation steps.

    Args:
        cfg: model configuration (``hidden``, ``layers``, ``dropout``, ``last_relu``).
        in_dim: input width.
        num_classes: output width.
        seed: dropout seed.
        props: the ``L`` propagation layers.
        score_columns: extra columns the T stack appends for the propagations (GAT's two scores).
    """

    #: the model's name in reports (``gcn`` / ``gat`` with ``decoupled``)
    form = "decoupled"

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int, props: list[nn.Module],
                 score_columns: int = 0) -> None:
        super().__init__(props, [num_classes + score_columns] * cfg.layers, cfg.dropout, seed)
        dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
        self.t_dims = dims
        self.lins = nn.ModuleList(nn.Linear(dims[l], dims[l + 1]) for l in range(cfg.layers))
        for lin in self.lins:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.last_relu = bool(cfg.last_relu)
        self.num_classes = num_classes
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
        """The T stack: every :meth:`t_step` in order. Shapes: ``[N, in]`` -> ``[N, classes (+ scores)]``."""
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
        """The class columns. Shapes: ``[N, classes (+ scores)]`` -> ``[N, classes]``."""
        return h[:, : self.num_classes]


class DecoupledGCN(DecoupledGNN):
    r""":math:`Y = \hat A^L \, \text{MLP}(X)` (SGC / APPNP-style with ``alpha = 0``)."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        super().__init__(cfg, in_dim, num_classes, seed, [GCNPropagation(num_classes) for _ in range(cfg.layers)])


class DecoupledGAT(DecoupledGNN):
    """MLP, attention scores computed once from its output, ``L`` attention-weighted propagations."""

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, seed: int = 0) -> None:
        props = [ScoredAttentionPropagation(num_classes) for _ in range(cfg.layers)]
        super().__init__(cfg, in_dim, num_classes, seed, props, score_columns=2)
        bound = math.sqrt(6.0 / (1 + num_classes))  # glorot on [1, C], as GATLayer's attention vectors
        self.att_src = nn.Parameter(torch.empty(num_classes).uniform_(-bound, bound))
        self.att_dst = nn.Parameter(torch.empty(num_classes).uniform_(-bound, bound))

    def t_scores(self, z: Tensor) -> Tensor:
        """``[z | z a_src | z a_dst]``: the edge-T's vertex half (per-vertex scalars, no edge embeddings)."""
        return torch.cat([z, (z @ self.att_src)[:, None], (z @ self.att_dst)[:, None]], dim=1)


#: model name -> its decoupled class
DECOUPLED = {"gcn": DecoupledGCN, "gat": DecoupledGAT}

"""The single-process reference of ``--strategy task-parallel``'s semantics (the tests' oracle).

One autograd pass per epoch over the whole graph with the epoch's operator (:func:`.chunks.masked_operator`:
``full``, ``causal``'s block lower-triangular :math:`\\hat A_\\varepsilon`, or ``block_diag``) built from the same
shuffle as the strategy, and its loss: the training vertices' loss summed and divided by the global training count
(``--loss-norm global``), or every subgraph's mean summed (``subgraph-mean``, the artifact's). With ``full`` and
the global loss it is exactly ``single`` on the same model.
"""

from __future__ import annotations

import torch

from graphscale.config import OptimConfig
from graphscale.data.graph import Graph
from graphscale.nn.models import GNN
from graphscale.options.task_parallel import LOSS_NORMS
from graphscale.strategies.base import make_optimizer, masked_loss_sum
from graphscale.strategies.task_parallel.chunks import Layout, layout, masked_operator

GLOBAL, SUBGRAPH_MEAN = "global", "subgraph-mean"


def subgraph_train_counts(train_mask: torch.Tensor, chunk_of: torch.Tensor, lay: Layout) -> torch.Tensor:
    """Training vertices of every subgraph of ``lay`` (the ``subgraph-mean`` normalisers)."""
    return torch.bincount(lay.sub[chunk_of[train_mask]], minlength=lay.num_subgraphs)


def loss_weights(train_mask: torch.Tensor, chunk_of: torch.Tensor, lay: Layout, loss_norm: str) -> torch.Tensor:
    """The weight of every vertex's loss term (0 off the training set): ``1 / |train|`` (``global``) or
    ``1 / |train of its subgraph|`` (``subgraph-mean``). float64 ``[N]``."""
    if loss_norm not in LOSS_NORMS:
        raise ValueError(f"--loss-norm must be one of {', '.join(LOSS_NORMS)}, got {loss_norm!r}")
    if loss_norm == GLOBAL:
        count = torch.full((chunk_of.numel(),), float(train_mask.sum()), dtype=torch.float64)
    else:
        count = subgraph_train_counts(train_mask, chunk_of, lay).double()[lay.sub[chunk_of]]
    return torch.where(train_mask, 1.0 / count.clamp_min(1), torch.zeros_like(count))


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, train_mask: torch.Tensor,
                  weights: torch.Tensor) -> torch.Tensor:
    """``sum_v w_v loss_v`` over the training rows, with each distinct weight's rows summed by
    :func:`~graphscale.strategies.base.masked_loss_sum` (the project's one loss)."""
    total = logits.sum() * 0.0
    for w in torch.unique(weights[train_mask]).tolist():
        rows = train_mask & (weights == w)
        total = total + masked_loss_sum(logits, labels, rows) * w
    return total


class TaskReference:
    """Single-process training with the task-parallel semantics.

    Args:
        model: the model (decoupled or standard), trained in place.
        graph: the whole graph.
        chunk_of: the chunk of every vertex.
        num_subgraphs: ``S``.
        mode: dependency mode.
        optim: optimiser settings (Adam, as every strategy).
        seed: shuffle seed (the run's seed).
        shuffle: shuffle the chunks every epoch.
        loss_norm: ``global`` or ``subgraph-mean``.
    """

    def __init__(self, model: GNN, graph: Graph, chunk_of: torch.Tensor, num_subgraphs: int, mode: str,
                 optim: OptimConfig, seed: int = 0, shuffle: bool = True, loss_norm: str = GLOBAL) -> None:
        self.model, self.graph, self.chunk_of = model, graph, chunk_of
        self.num_chunks = int(chunk_of.max()) + 1
        self.num_subgraphs, self.mode, self.seed, self.shuffle, self.loss_norm = (num_subgraphs, mode, seed,
                                                                                  shuffle, loss_norm)
        self.optimizer = make_optimizer(model, optim)

    def layout(self, epoch: int) -> Layout:
        return layout(self.num_chunks, self.num_subgraphs, self.seed, epoch, self.shuffle)

    def loss(self, epoch: int) -> torch.Tensor:
        """The epoch's loss with gradients (training mode, the epoch's dropout masks); no optimiser step."""
        g, model = self.graph, self.model
        lay = self.layout(epoch)
        model.train()
        model.set_epoch(epoch)
        logits = model(masked_operator(g, self.chunk_of, lay.sub, self.mode), g.x)
        return weighted_loss(logits, g.y, g.train_mask, loss_weights(g.train_mask, self.chunk_of, lay,
                                                                     self.loss_norm))

    def train_epoch(self, epoch: int) -> float:
        """One Adam step on the epoch's loss; returns the loss. The gradients stay on the parameters."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(epoch)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

"""The single-process chunked reference of GNNPipe's semantics: the oracle of the pipeline strategy's tests.

It runs Algorithm 1 sequentially on one process, layer by layer inside each chunk, chunks in the epoch's order,
and differentiates the whole epoch with one ``torch.autograd`` pass: no stages, no islands, no gradient
accumulators. A chunk reads, at every layer, the rows of chunks processed earlier in the epoch as the live
tensors computed this epoch (so gradients flow along those edges) and every other row from the history, a
constant (so the gradient along a stale edge is dropped). That is the definition of the pipelined training
step; :class:`~graphscale.strategies.pipeline.strategy.PipelineStrategy` must reproduce it for any number of
stages and any hybrid width (sub-chunks do not change which rows are fresh).

* **History** (§3.4, §3.5 technique 2): one exact forward with the first epoch's weights and dropout masks fills
  every layer's rows; epoch ``e`` starts from the rows as they stood when the last refresh
  (:func:`~graphscale.strategies.pipeline.plan.refreshes_history`) took them.
* **Cross-chunk gradients** (``cross_chunk_grad``): ``fresh`` (GNNPipe) differentiates along every edge read
  fresh; ``none`` reads the rows of other chunks as constants too (their values are the same), so gradients flow
  only inside a chunk, the semantics under which 1F1B is run.
* **Historical gradients** (``history_grad="historical"``, the ablation of technique 3): the gradients an epoch
  computes along its stale edges (``d loss / d history row``) are added, one epoch later, to the gradient of the
  vertex's live row at the same layer. Here that is one extra loss term, ``sum_l <late_l, h_l>`` with the
  previous epoch's ``late_l`` held constant. (The spec's §3.5 variant applies the previous epoch's
  ``d loss / d z_v`` along the edges stale in the *current* epoch; without shuffling both use the same edges,
  and for a GCN without dropout the same values. This one needs no per-aggregate state and works for every
  layer, ResGCN+'s LayerNorm included.)

Nothing here talks to other processes; it is used by tests, never by a run.
"""

from __future__ import annotations

import torch

from graphscale.config import OptimConfig
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.strategies.base import make_optimizer, masked_loss_sum
from graphscale.strategies.chunking import chunk_order
from graphscale.strategies.pipeline.plan import ChunkPlan, refreshes_history


def learned_input(model) -> bool:
    """Whether the model's input map is learned (not the identity): then layer 0's rows get gradients. The model's
    own answer (``GNN.learned_input_map``: a PyG model's is whether modules run before its first conv)."""
    return bool(model.learned_input_map)


@torch.no_grad()
def exact_rows(model, graph: Graph, x: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's input rows ``[h^0, ..., h^{L-1}]`` of an exact full-graph forward (current mode and masks)."""
    block = Block.full(graph)
    ids = block.dst_ids
    h = model.input_map(x, ids)
    h0 = h if model.needs_h0 else None
    rows = []
    for layer in range(model.num_layers):
        rows.append(h.clone())
        h = model.step(layer, block, h, h0)
    return rows


class ChunkedReference:
    """GNNPipe training on one process (module docstring).

    Args:
        model: the model (trained in place).
        graph: the whole graph (features in the model's dtype).
        chunk_of: int64 ``[N]`` chunk of every vertex.
        optim: learning rate and weight decay (Adam, as every strategy).
        seed: seed of the chunk orders.
        shuffle: a new chunk order every epoch.
        history_period: epochs between history refreshes.
        history_grad: ``zero`` or ``historical``.
        cross_chunk_grad: ``fresh`` or ``none``.
    """

    def __init__(self, model, graph: Graph, chunk_of: torch.Tensor, optim: OptimConfig, seed: int = 0,
                 shuffle: bool = True, history_period: int = 10, history_grad: str = "zero",
                 cross_chunk_grad: str = "fresh") -> None:
        self.model, self.graph = model, graph
        self.plan = ChunkPlan.build(graph, chunk_of)
        self.optimizer = make_optimizer(model, optim)
        self.seed, self.shuffle, self.period, self.history_grad = seed, shuffle, history_period, history_grad
        self.fresh_cross = cross_chunk_grad == "fresh"
        self.num_train = int(graph.train_mask.sum())
        self.learned = learned_input(model)
        self.view: list[torch.Tensor] | None = None
        self.hist: list[torch.Tensor] | None = None
        self.late: list[torch.Tensor] | None = None

    def train_epoch(self, epoch: int) -> float:
        """One epoch (the model's parameters take one Adam step); returns the training loss."""
        model, graph, plan = self.model, self.graph, self.plan
        model.train()
        model.set_epoch(epoch)
        if self.view is None:
            self.view = exact_rows(model, graph, graph.x)
            self.late = [torch.zeros_like(v) for v in self.view]
        if self.hist is None or refreshes_history(epoch, self.period):
            self.hist = [v.clone() for v in self.view]
        grad_rows = [layer > 0 or self.learned for layer in range(model.num_layers)]
        historical = self.history_grad == "historical"
        stale = [h.clone().requires_grad_(historical and g) for h, g in zip(self.hist, grad_rows)]
        cur = list(stale)
        if not self.learned:
            cur[0] = graph.x
        order = chunk_order(plan.num_chunks, epoch, self.seed, self.shuffle)
        loss = 0.0
        for k in order.tolist():
            ids, block = plan.nodes[k], plan.blocks[k]
            h = model.input_map(graph.x[ids], ids)
            h0 = h if model.needs_h0 else None
            if self.learned:
                cur[0] = cur[0].index_put((ids,), h)
            for layer in range(model.num_layers):
                src = cur[layer][block.src_ids]
                if not self.fresh_cross:  # rows of other chunks enter as constants
                    src = torch.cat([src[: block.num_dst], src[block.num_dst:].detach()])
                h = model.step(layer, block, src, h0)
                if layer + 1 < model.num_layers:
                    cur[layer + 1] = cur[layer + 1].index_put((ids,), h)
            logits = model.output_map(h, ids)
            loss = loss + masked_loss_sum(logits, graph.y[ids], graph.train_mask[ids]) / self.num_train
        objective = loss
        if historical:
            objective = objective + sum((late * c).sum() for late, c, g in zip(self.late, cur, grad_rows) if g)
        self.optimizer.zero_grad(set_to_none=True)
        objective.backward()
        self.optimizer.step()
        if historical:
            self.late = [torch.zeros_like(s) if s.grad is None else s.grad.detach() for s in stale]
        self.view = [c.detach().clone() for c in cur]
        return float(loss.detach())

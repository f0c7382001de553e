"""``--task link`` under offload: the embeddings through the chunks as for node classification, then the scoring.

The parent writes the split's message-passing graph as the run's graph directory and the pairs beside it
(:mod:`graphscale.tasks.link_store`); a worker scores the pairs whose source it owns (``V_i``). The last layer's
forward writes its rows to the host ``H^L`` without a loss; after its barrier each worker reads back its own rows
(``h2d_dst``: ``|V_i| d_L b``), applies the output map with autograd and scores its pairs as graph-parallel's
workers do (:class:`~graphscale.strategies.link_scoring.LinkScorer`: the destination rows another worker owns come
from it, category ``"link"``, in that module's closed form, their gradients go back to it). Each worker then writes
the gradients of its own rows to ``G^L`` (``d2h_grad``, the bytes the node loss writes) and the backward layers
run as for node classification. Evaluation runs the chunked inference, then scores every split the same way. The
scoring holds the worker's own embedding rows and the fetched ones on its device at once.
"""

from __future__ import annotations

import torch

from graphscale.strategies.link_scoring import LinkScorer, RowFetch
from graphscale.strategies.offload.cost import D2H_GRAD, H2D_DST
from graphscale.tasks.link_store import link_folder, read_link_part


def link_scorer(strategy) -> LinkScorer:
    """The scorer of the pairs whose source ``strategy``'s worker owns, from the link folder beside its graph
    directory."""
    if strategy.data.path is None:
        raise ValueError("offload --task link reads the split written beside the run's graph directory; an "
                         "in-memory graph has none: pass the dataset (or the graph to graphscale.train)")
    owner = strategy.sets.owner
    part = read_link_part(link_folder(strategy.data.path), 0).owned_by(owner, strategy.env.rank)
    fetch = RowFetch(strategy.comm, strategy.owned.to(strategy.device), owner)
    return LinkScorer(part, fetch, strategy.model.link_decoder, strategy.config.seed, strategy.config.hits_k)


def own_rows(strategy, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, z)``: the worker's own rows of the host ``H^L`` on its device and their embeddings (the output map
    applied; with autograd when ``grad``, ``rows`` then a leaf)."""
    rows = strategy.host[f"H{strategy.num_layers}"][strategy.owned].to(strategy.device)
    strategy._record(H2D_DST, rows.numel() * rows.element_size())
    rows.requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        z = strategy.model.output_map(rows, strategy.owned.to(strategy.device))
    return rows, z


def link_step(strategy, epoch: int) -> float:
    """Score the worker's training pairs of epoch ``epoch`` on the host ``H^L``, backpropagate into the
    parameters and the worker's rows of ``G^L``; the worker's summed loss."""
    rows, z = own_rows(strategy, grad=True)
    with torch.enable_grad():
        loss_sum = strategy.link.loss_sum(z, epoch)
    (loss_sum / strategy.link.normaliser).backward()
    grad = rows.grad
    strategy.host[f"G{strategy.num_layers}"][strategy.owned] = grad.to("cpu")
    strategy._record(D2H_GRAD, grad.numel() * grad.element_size())
    strategy._barrier()  # every worker's G^L rows written before the backward layers read them
    return float(loss_sum.detach())


@torch.no_grad()
def link_evaluate(strategy) -> dict[str, float]:
    """Every split's metrics over every worker's pairs, on the host ``H^L`` the inference wrote."""
    _, z = own_rows(strategy, grad=False)
    return strategy.link.evaluate(z)

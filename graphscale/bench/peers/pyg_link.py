"""PyG's own link-prediction loop, the peer of ``graphscale bench link``, run on graphscale's edge split.

The loop is PyG's ``examples/link_pred.py``: a 2-layer ``GCNConv`` encoder (``in -> hidden -> hidden``, ReLU between,
``cached=True``: PyG's setting for a fixed transductive graph, so the normalisation runs once), the dot decoder
``(z[u] * z[v]).sum(-1)``, one ``torch_geometric.utils.negative_sampling`` negative per training positive each
epoch (``method="sparse"``, avoiding the message-passing edges), binary cross-entropy with logits, Adam. It trains on
the split ``graphscale train --task link`` draws (:func:`graphscale.tasks.split.split_edges` with the same fractions
and seed): message passing over the same graph (the held-out pairs removed), the same training positives. Every
epoch is evaluated as graphscale evaluates (:class:`graphscale.tasks.link.LinkTask`: the same fixed candidates, OGB's
AUC, Hits@K and MRR), and the reported scores are the best validation epoch's.

:func:`measure_pyg` runs the loop in a fresh process (``spawn``) and reads, as ``graphscale train`` reads for its
workers: the process's resident set after the imports and one warm-up epoch on a toy graph, before the dataset is
loaded (``baseline_rss``), and its peak (``VmHWM``) over the epochs' training and evaluation (``peak_rss``: reset once
the data is loaded and split, where allowed, as a worker resets it every epoch); each training epoch's seconds
(forward, negatives, loss, backward, step; not the evaluation).
"""

from __future__ import annotations

import multiprocessing as mp
import time

import torch


def pyg_link_model(in_width: int, hidden: int) -> torch.nn.Module:
    """PyG's link-prediction encoder: ``GCNConv(in_width, hidden) -> ReLU -> GCNConv(hidden, hidden)``."""
    from torch_geometric.nn import GCNConv

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = GCNConv(in_width, hidden, cached=True)
            self.conv2 = GCNConv(hidden, hidden, cached=True)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    return Encoder()


def pyg_link_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                   edge_index: torch.Tensor, positives: torch.Tensor) -> float:
    """One epoch of PyG's loop (module docstring): the embeddings, ``negative_sampling`` negatives as many as the
    training ``positives [2, P]``, the dot decoder's BCE, backward and the optimiser's step; the loss."""
    import torch.nn.functional as F
    from torch_geometric.utils import negative_sampling

    model.train()
    optimizer.zero_grad()
    z = model(x, edge_index)
    negatives = negative_sampling(edge_index=edge_index, num_nodes=x.shape[0],
                                  num_neg_samples=positives.shape[1], method="sparse")
    pairs = torch.cat([positives, negatives], dim=-1)
    label = torch.cat([torch.ones(positives.shape[1]), torch.zeros(negatives.shape[1])])
    loss = F.binary_cross_entropy_with_logits((z[pairs[0]] * z[pairs[1]]).sum(-1), label)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def _toy_graph():
    from graphscale.testing.graphs import random_graph

    return random_graph(60, 4.0, num_features=8, num_classes=2, seed=0)


def train_pyg_link(graph, fractions, seed: int, hidden: int, epochs: int, lr: float, hits_k,
                   ready=None) -> dict:
    """PyG's loop on ``graph`` split as ``graphscale train --task link --link-split fractions --seed seed`` splits
    it: ``{"times": [s per epoch], "losses": [...], "best_epoch", "final": {val_* and test_* scores of the best
    validation epoch}}``; ``ready()`` is called once the split, the candidates and the model are built, before
    the first epoch."""
    from graphscale.tasks.decoders import DotDecoder
    from graphscale.tasks.link import LinkTask
    from graphscale.tasks.split import split_edges

    split = split_edges(graph, fractions, seed)
    message = split.message_graph
    edge_index = torch.stack([message.indices, message.dst_of_edges()])
    positives = split.pairs[:, split.ids("train")]
    x = graph.x.float().contiguous()
    task = LinkTask(split, DotDecoder(), seed, hits_k, "cpu")
    torch.manual_seed(seed)
    model = pyg_link_model(x.shape[1], hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    times, losses, best, best_epoch = [], [], None, 0
    if ready is not None:
        ready()
    for epoch in range(epochs):
        start = time.perf_counter()
        losses.append(pyg_link_epoch(model, optimizer, x, edge_index, positives))
        times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            scores = task.evaluate(model(x, edge_index))
        if best is None or scores["val_auc"] > best["val_auc"]:
            best, best_epoch = scores, epoch
    final = {k: v for k, v in best.items() if k.startswith(("val_", "test_")) and not k.endswith("_acc")}
    return {"times": times, "losses": losses, "best_epoch": best_epoch, "final": final}


def _child(spec: str, fractions, seed: int, hidden: int, epochs: int, lr: float, hits_k, threads: int) -> dict:
    """Body of the measurement process (module level so that spawn can import it)."""
    import warnings

    from graphscale.data.datasets import load_dataset
    from graphscale.metrics.memory import os_memory, reset_peak_rss

    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    if threads > 0:
        torch.set_num_threads(threads)
    train_pyg_link(_toy_graph(), (0.8, 0.1, 0.1), 0, 4, 1, lr, [1])  # libraries imported, kernels loaded
    baseline = os_memory().rss
    exact = []
    result = train_pyg_link(load_dataset(spec), fractions, seed, hidden, epochs, lr, hits_k,
                            ready=lambda: exact.append(reset_peak_rss()))
    return {**result, "baseline_rss": baseline, "peak_rss": os_memory().peak_rss, "exact_peak_reset": exact[0],
            "threads": torch.get_num_threads()}


def measure_pyg(spec: str, fractions, seed: int, hidden: int, epochs: int, lr: float, hits_k,
                threads: int = 0) -> dict:
    """:func:`train_pyg_link` on the dataset ``spec`` in a fresh process, with its memory readings (module
    docstring): adds ``baseline_rss``, ``peak_rss``, ``exact_peak_reset``, ``threads``."""
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(_child, (spec, tuple(fractions), seed, hidden, epochs, lr, list(hits_k), threads))

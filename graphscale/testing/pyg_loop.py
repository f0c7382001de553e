"""A PyG user's own full-graph training loop, what the PyG-model tests compare :func:`graphscale.train` against."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pyg_loop_losses(model: torch.nn.Module, data, epochs: int, lr: float, weight_decay: float,
                    edge_weight: bool = False) -> list[float]:
    """Train ``model`` in place on a PyG ``data`` for ``epochs`` full-graph steps (Adam, cross-entropy over the
    training vertices, ``model(x, edge_index)``, or ``model(x, edge_index, edge_weight)`` with ``edge_weight``) and
    return every epoch's loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    inputs = (data.x, data.edge_index, data.edge_weight) if edge_weight else (data.x, data.edge_index)
    losses = []
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(*inputs)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses

"""``data-parallel``'s single-process reference for tests: the losses of the same micro-batch steps, each over the
union of the workers' micro-batches (:func:`graphscale.strategies.data_parallel.reference_step`)."""

from __future__ import annotations

import torch


def data_parallel_reference_losses(model: torch.nn.Module, optimizer, graph, batch_size: int, fanouts, epochs: int,
                                   workers: int = 2, seed: int = 0) -> list[float]:
    """Train ``model`` in place for ``epochs`` with ``optimizer`` as ``data-parallel`` on ``workers`` workers would
    (one step per iteration over the workers' micro-batches, each sampled with its own key) and return every
    epoch's loss, the mean over the training vertices."""
    from graphscale.data.sampler import NeighborSampler
    from graphscale.strategies.data_parallel import MicroBatchSchedule, reference_step

    train_ids = torch.nonzero(graph.train_mask).flatten()
    schedule = MicroBatchSchedule(train_ids, batch_size, workers, seed)
    sampler = NeighborSampler(graph, fanouts, seed=seed)
    losses = []
    for epoch in range(epochs):
        model.train()
        model.set_epoch(epoch)
        total = 0.0
        for k, micro in enumerate(schedule.iterations(epoch)):
            optimizer.zero_grad()
            loss, _ = reference_step(model, sampler, graph.x, graph.y, micro,
                                     [schedule.batch_key(epoch, k, r) for r in range(workers)])
            optimizer.step()
            total += float(loss) * sum(t.numel() for t in micro)
        losses.append(total / train_ids.numel())
    return losses

"""Weighted model averaging (SDT-GNN §2.6): ``w = sum_i alpha_i w_i`` in one flat all-reduce.

``alpha_i = n_train_i / sum_j n_train_j`` with ``n_train_i`` the training vertices partition ``i`` owns,
so the alphas sum to 1 and a partition without training vertices contributes nothing. What is averaged
is every *floating* tensor of the model's ``state_dict`` (parameters and floating buffers; integer buffers
such as counters are left alone) and, with ``--optimizer-state averaged`` (the default), the optimiser's
per-parameter tensors: Adam's (AdamW's) two moments, SGD's momentum buffer (SDT-GNN keeps them local:
``--optimizer-state local``). Where every partition takes one step per round (full-graph training,
``--average-every 1``) Adam's second moment is then recomputed from the averaged gradient
(:func:`moments_of_mean_gradient`), so the moments are exactly those of Adam stepping on the global gradient
(SGD's momentum buffer is linear in the gradient: its average is already the global gradient's).
A worker holding several partitions first sums its own
``alpha_j w_j``, then one all-reduce of a single flat buffer (Ledger category ``allreduce``, ring model)
adds the workers' sums; every worker ends with bit-identical weights.
"""

from __future__ import annotations

import torch

from graphscale.distributed.comm import ALLREDUCE, Comm
from graphscale.strategies.optimizers import state_layout


def float_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The floating tensors of ``model.state_dict()`` in a fixed order (what averaging touches)."""
    return [t for t in model.state_dict().values() if torch.is_floating_point(t)]


def optimizer_moments(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    """The optimiser's per-parameter tensors of every parameter, in parameter order
    (:func:`~graphscale.strategies.optimizers.state_layout`: Adam's and AdamW's two moments, ``2 P`` elements in
    all; SGD's momentum buffer, ``P``; none for SGD without momentum); what ``--optimizer-state averaged`` averages
    (each partition keeps its ``step``). A parameter without state yet gets detached zeros, so every partition
    contributes a buffer of the same size."""
    keys = state_layout(optimizer).tensors
    out = []
    for p in params:
        state = optimizer.state.get(p, {})
        out.extend(state[k] if k in state else torch.zeros_like(p, requires_grad=False) for k in keys)
    return out


def moments_of_mean_gradient(averaged: torch.Tensor, previous: torch.Tensor | None, sizes: list[int],
                              betas: tuple[float, float]) -> torch.Tensor:
    """Adam's moments of the *averaged* gradient, from the averaged moments after one local step each.

    Every partition stepped once from the same moments ``(m, v)`` (``previous``; zeros before the first round), so
    its first moment is ``m_i = b1 m + (1 - b1) g_i`` and the alpha-weighted average ``sum_i alpha_i m_i`` is
    ``b1 m + (1 - b1) g`` with ``g = sum_i alpha_i g_i``, the global gradient: the first moment is already the one a
    single optimiser would hold. The averaged second moment, ``b2 v + (1 - b2) sum_i alpha_i g_i^2``, is not: it
    exceeds ``b2 v + (1 - b2) g^2`` by the variance of the partitions' gradients, which shrinks every later step on
    coordinates the partitions disagree on. Here ``g`` is recovered from the first moments and the second moment
    is recomputed from it, so both are exactly the moments Adam keeps when it steps on ``g``.

    Args:
        averaged: ``sum_i alpha_i [m_i, v_i]`` per parameter, in :func:`optimizer_moments` order.
        previous: the moments every partition started the round from (same layout), or ``None`` (zeros).
        sizes: elements of each parameter.
        betas: Adam's ``(b1, b2)``.
    """
    b1, b2 = betas
    out = averaged.clone()
    offset = 0
    for n in sizes:
        m = averaged[offset: offset + n]
        m0 = previous[offset: offset + n] if previous is not None else torch.zeros_like(m)
        v0 = previous[offset + n: offset + 2 * n] if previous is not None else torch.zeros_like(m)
        g = (m - b1 * m0) / (1 - b1)
        out[offset + n: offset + 2 * n] = b2 * v0 + (1 - b2) * g * g
        offset += 2 * n
    return out


def flatten(tensors: list[torch.Tensor], dtype: torch.dtype, device: torch.device | None = None) -> torch.Tensor:
    """One contiguous copy of ``tensors`` (``dtype``) on ``device`` (the strategy passes the run's, where the
    all-reduce reads it; by default the first tensor's, the host for none); empty for no tensors."""
    if device is None:
        device = tensors[0].device if tensors else torch.device("cpu")
    if not tensors:
        return torch.zeros(0, dtype=dtype, device=device)
    return torch.cat([t.detach().reshape(-1).to(device=device, dtype=dtype) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy ``flat`` back into ``tensors`` (in place, each in its own dtype)."""
    if flat.numel() != sum(t.numel() for t in tensors):
        raise ValueError(f"averaged buffer has {flat.numel()} elements, the state {sum(t.numel() for t in tensors)}")
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset: offset + n].view_as(t))
            offset += n


def alphas(train_counts: list[int] | torch.Tensor) -> torch.Tensor:
    """float64 ``alpha_i = n_i / sum n`` of every partition.

    Raises:
        ValueError: no partition holds a training vertex.
    """
    counts = torch.as_tensor(train_counts, dtype=torch.float64, device=torch.device("cpu"))  # a host table
    total = float(counts.sum())
    if total <= 0:
        raise ValueError("model averaging: no partition holds a training vertex")
    return counts / total


def all_reduce_average(comm: Comm, local_sum: torch.Tensor) -> torch.Tensor:
    """Sum the workers' ``sum_{j in mine} alpha_j w_j`` buffers (one all-reduce) and return ``w``."""
    return comm.all_reduce(local_sum, ALLREDUCE)

"""The learnable input of ``--features learnable:D``: a trainable embedding table, the model's input.

A worker holds the rows of the vertices it computes from: ``single`` all ``N`` rows, a graph-parallel worker
only its inner (owned) vertices; halo rows reach the workers that read them through the halo exchange, whose
backward returns their gradients to the owner (:mod:`graphscale.distributed.functional`). Every row is
initialised from its global vertex id alone (:func:`graphscale.data.features.keyed_normal`, stream
``LEARNABLE_STREAM``, seeded by ``--seed``), and Adam is element-wise, so a row sharded over workers follows
exactly the trajectory of the same row of the single-process table.

The table is not a parameter of the model: the strategy owns it and adds it to its optimiser as a parameter group
of its own, and the gradient all-reduce of the model's parameters leaves it out (each row has one owner).
"""

from __future__ import annotations

import torch
from torch import nn

from graphscale.data.features import LEARNABLE_STREAM, keyed_normal


class LearnableInput(nn.Module):
    """A trainable ``[len(ids), dim]`` table of the rows of vertices ``ids`` (global ids, any order).

    Attributes:
        weight: the table (a Parameter); row ``i`` belongs to vertex ``ids[i]``.
    """

    def __init__(self, ids: torch.Tensor, dim: int, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        ids = torch.as_tensor(ids, dtype=torch.int64).cpu()
        self.weight = nn.Parameter(keyed_normal(ids, int(dim), seed, LEARNABLE_STREAM).to(device=device,
                                                                                         dtype=dtype))

    def forward(self) -> torch.Tensor:
        return self.weight

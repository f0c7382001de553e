"""Pair decoders: the score of vertex pairs from their embeddings ``z_u``, ``z_v`` (``[..., d]`` each, any leading
shape) as logits ``[...]``.

* ``dot``: ``<z_u, z_v>`` (no parameters);
* ``mlp``: ``W_2 relu(W_1 (z_u * z_v) + b_1) + b_2`` (the Hadamard product, then a 2-layer MLP of width ``d``);
* ``distmult``: ``<z_u, diag(r) z_v>`` (DistMult's diagonal bilinear form, ``r`` initialised to ones).

A decoder's parameters are drawn from a generator seeded with the run's seed, so every worker starts from the same.
"""

from __future__ import annotations

import torch
from torch import nn

from graphscale.options.task import DECODERS


class DotDecoder(nn.Module):
    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return (zu * zv).sum(-1)


class MLPDecoder(nn.Module):
    def __init__(self, width: int, generator: torch.Generator, dtype: torch.dtype) -> None:
        super().__init__()
        self.hidden = nn.Linear(width, width, dtype=dtype)
        self.out = nn.Linear(width, 1, dtype=dtype)
        for layer in (self.hidden, self.out):  # PyTorch's default initialisation, from the seeded generator
            bound = 1.0 / max(layer.in_features, 1) ** 0.5
            with torch.no_grad():
                layer.weight.copy_(torch.rand(layer.weight.shape, generator=generator, dtype=dtype) * 2 * bound - bound)
                layer.bias.copy_(torch.rand(layer.bias.shape, generator=generator, dtype=dtype) * 2 * bound - bound)

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(zu * zv))).squeeze(-1)


class DistMultDecoder(nn.Module):
    def __init__(self, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.relation = nn.Parameter(torch.ones(width, dtype=dtype))

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return (zu * self.relation * zv).sum(-1)


def build_decoder(name: str, width: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """The decoder ``name`` (:data:`~graphscale.options.task.DECODERS`) for embeddings of width ``width``.

    Raises:
        ValueError: an unknown name.
    """
    if name == "dot":
        return DotDecoder()
    if name == "mlp":
        return MLPDecoder(width, torch.Generator().manual_seed(seed), dtype)
    if name == "distmult":
        return DistMultDecoder(width, dtype)
    raise ValueError(f"--decoder must be one of {', '.join(DECODERS)}, got {name!r}")

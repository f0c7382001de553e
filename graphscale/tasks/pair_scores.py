"""Scores of vertex pairs read from embedding tables in chunks, without the ``[P, d]`` gathers autograd would keep.

``decoder(z_src[src], z_dst[dst])`` gathers both endpoints' rows of all ``P`` pairs, ``[P, d]`` each, multiplies
them into a third and keeps the two gathers for the backward: three ``[P, d]`` tensors at the peak, the largest
allocations of a full-graph link-prediction step (``P`` is twice the training edges, ``d`` the embedding width).
:func:`table_scores` computes the same scores for the ``dot`` and ``distmult`` decoders :data:`CHUNK_PAIRS` pairs at
a time: a chunk's rows are gathered, scored and dropped, and the backward gathers them again chunk by chunk and
adds each pair's gradient into its rows (``index_add_``; when both endpoints' rows come from one table, as in a
full-graph step, into one ``[N, d]`` buffer for both), so the step holds ``O(CHUNK_PAIRS * d)`` beyond the tables, that
buffer and the ``[P]`` scores. Every pair's score is computed as the decoder computes it (the same products, summed over the
same axis), so the scores are the decoder's to the last bit; the gradients are the same sums in another order
(``tests/tasks/test_pair_scores.py``). Other decoders (``mlp``) are scored through the gathers.
"""

from __future__ import annotations

import torch

from graphscale.tasks.decoders import DistMultDecoder, DotDecoder

#: pairs gathered at a time (a chunk holds two ``[CHUNK_PAIRS, d]`` gathers and their product)
CHUNK_PAIRS = 1 << 16


class _TableScores(torch.autograd.Function):
    """``<z_src[src], r * z_dst[dst]>`` per pair in chunks (``r``: ones for ``dot``, the relation for ``distmult``)."""

    @staticmethod
    def forward(ctx, z_src, z_dst, relation, src, dst):
        out = z_src.new_empty(src.numel())
        for start in range(0, src.numel(), CHUNK_PAIRS):
            end = start + CHUNK_PAIRS
            a, b = z_src.index_select(0, src[start:end]), z_dst.index_select(0, dst[start:end])
            out[start:end] = (a * b if relation is None else a * relation * b).sum(-1)
        ctx.save_for_backward(z_src, z_dst, relation, src, dst)
        ctx.one_table = z_src is z_dst  # one gradient buffer for both endpoints' rows
        return out

    @staticmethod
    def backward(ctx, grad):
        z_src, z_dst, relation, src, dst = ctx.saved_tensors
        want_src, want_dst, want_rel = ctx.needs_input_grad[:3]
        g_src = torch.zeros_like(z_src) if want_src else None
        if ctx.one_table and want_src and want_dst:  # one table: both gradients into one buffer, returned once
            g_dst, want_dst = g_src, False
        else:
            g_dst = torch.zeros_like(z_dst) if want_dst else None
        g_rel = torch.zeros_like(relation) if relation is not None and want_rel else None
        for start in range(0, src.numel(), CHUNK_PAIRS):
            end = start + CHUNK_PAIRS
            s, d, g = src[start:end], dst[start:end], grad[start:end, None]
            a, b = z_src.index_select(0, s), z_dst.index_select(0, d)
            if relation is not None:
                if g_rel is not None:
                    g_rel += (g * a * b).sum(0)
                a = a * relation  # the gradient of <a, r * b> in b is g * r * a, in a g * r * b
                b = b * relation
            if g_src is not None:
                g_src.index_add_(0, s, g * b)
            if g_dst is not None:
                g_dst.index_add_(0, d, g * a)
        return g_src, g_dst if want_dst else None, g_rel, None, None


def fusable(decoder: torch.nn.Module) -> bool:
    """Whether ``decoder`` is scored in chunks by :func:`table_scores` (``dot``, ``distmult``)."""
    return isinstance(decoder, (DotDecoder, DistMultDecoder))


def table_scores(decoder: torch.nn.Module, z_src: torch.Tensor, src: torch.Tensor, z_dst: torch.Tensor,
                 dst: torch.Tensor) -> torch.Tensor:
    """``decoder(z_src[src], z_dst[dst])``, the ``[P]`` scores of the pairs ``(src, dst)`` (rows of the two tables,
    which may be one), in chunks for ``dot`` and ``distmult`` (module docstring)."""
    if not fusable(decoder):
        return decoder(z_src[src], z_dst[dst])
    relation = decoder.relation if isinstance(decoder, DistMultDecoder) else None
    return _TableScores.apply(z_src, z_dst, relation, src, dst)

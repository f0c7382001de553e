"""Pair scores read from embedding tables in chunks equal the decoder's on gathered rows: the scores to the last
bit, the gradients (tables and DistMult's relation) to rounding."""

import pytest
import torch

from graphscale.tasks import pair_scores
from graphscale.tasks.decoders import build_decoder
from graphscale.tasks.pair_scores import fusable, table_scores


def _case(dtype, same_table: bool):
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(30, 6, generator=gen, dtype=dtype)
    other = z if same_table else torch.randn(25, 6, generator=gen, dtype=dtype)
    src = torch.randint(0, 30, (101,), generator=gen)
    dst = torch.randint(0, other.shape[0], (101,), generator=gen)
    weight = torch.randn(101, generator=gen, dtype=dtype)
    return z, other, src, dst, weight


@pytest.mark.parametrize("name", ["dot", "distmult"])
@pytest.mark.parametrize("same_table", [True, False])
def test_chunked_scores_and_gradients_equal_the_decoders(monkeypatch, name, same_table):
    monkeypatch.setattr(pair_scores, "CHUNK_PAIRS", 16)  # several chunks, the last one short
    results = []
    for chunked in (False, True):
        z, other, src, dst, weight = _case(torch.float64, same_table)
        decoder = build_decoder(name, 6, seed=0, dtype=torch.float64)
        if name == "distmult":
            with torch.no_grad():
                decoder.relation.copy_(torch.linspace(0.5, 1.5, 6, dtype=torch.float64))
        z.requires_grad_(True)
        if not same_table:
            other.requires_grad_(True)
        table = z if same_table else other
        scores = table_scores(decoder, z, src, table, dst) if chunked else decoder(z[src], table[dst])
        (scores * weight).sum().backward()
        grads = [z.grad] + ([] if same_table else [other.grad]) + [p.grad for p in decoder.parameters()]
        results.append((scores.detach(), grads))
    (plain, plain_grads), (fused, fused_grads) = results
    assert fusable(build_decoder(name, 6, seed=0))
    assert torch.equal(plain, fused)
    assert len(plain_grads) == len(fused_grads)
    for a, b in zip(plain_grads, fused_grads):
        assert a.abs().max() > 0
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_other_decoders_are_scored_through_the_gathers():
    z, other, src, dst, _ = _case(torch.float32, False)
    decoder = build_decoder("mlp", 6, seed=0)
    assert not fusable(decoder)
    assert torch.equal(table_scores(decoder, z, src, other, dst), decoder(z[src], other[dst]))

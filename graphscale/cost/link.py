"""The link-prediction head's costs (``--task link``, :mod:`graphscale.tasks.link`): a worker that scores ``pairs``
vertex pairs (the epoch's training positives and their keyed negatives, ``2 P`` in all, or its share of them) from
embeddings of width ``d`` at ``b`` bytes an element, with the decoder ``dot``, ``mlp`` or ``distmult``
(:mod:`graphscale.tasks.decoders`). Every strategy's ``predict`` adds these to its embeddings' figures; the bytes
the scoring moves between workers are the strategies' own closed forms.

**Memory** (:func:`head_bytes`, tracked the way :class:`~graphscale.metrics.memory.MemoryTracker` counts: what
autograd saves for the backward): per pair, the two gathers' int64 indices (16 bytes), the two gathered embedding
rows the decoder's product saves (``2 d b``), the score and its label the loss saves (``2 b``), and what the decoder
saves besides: ``distmult`` the source rows scaled by its relation (``d b``), ``mlp`` the Hadamard product and the
hidden layer's output (``2 d b``); scored in chunks from an embedding table (``dot``, ``distmult``:
:mod:`graphscale.tasks.pair_scores`) no row is saved. The decoder's parameters are the model's (its ``link_decoder``), in its state.

**Time** (:func:`head_seconds`): the decoder's products (``mlp``: ``2 d^2 + 2 d`` FLOPs a pair at the GEMM rate) and
its elementwise passes over the pairs' rows (the two gathers, the product; ``distmult`` one more, ``mlp`` two more:
the hidden layer's bias and activation), each at the profile's cost per element, backward twice the forward.
"""

from __future__ import annotations

#: extra ``[pairs, d]`` tensors each decoder saves for its backward, beyond the two gathered rows
SAVED_ROWS = {"dot": 0, "distmult": 1, "mlp": 2}
#: elementwise ``[pairs, d]`` passes of each decoder's forward: the two gathers and the product, plus its own
PASSES = {"dot": 3, "distmult": 4, "mlp": 5}


def _check(decoder: str) -> None:
    if decoder not in SAVED_ROWS:
        raise ValueError(f"--decoder must be one of {', '.join(SAVED_ROWS)}, got {decoder!r}")


def head_bytes(pairs: int, width: int, elem: int, decoder: str, chunked: bool = False) -> int:
    """Tracked bytes of scoring ``pairs`` pairs of ``width``-wide embeddings (module docstring). ``chunked``: the
    scoring gathers the rows chunk by chunk and saves none of them for the backward
    (:mod:`graphscale.tasks.pair_scores`: ``dot`` and ``distmult`` scored from an embedding table), so only the
    indices, scores and labels stay."""
    _check(decoder)
    rows = 0 if chunked else pairs * (2 + SAVED_ROWS[decoder]) * width * elem
    return int(pairs * (16 + 2 * elem) + rows)


def head_flops(pairs: int, width: int, decoder: str) -> float:
    """The decoder's dense-product FLOPs of one forward over ``pairs`` pairs (``mlp`` only: its two layers)."""
    _check(decoder)
    return float(pairs * (2 * width * width + 2 * width)) if decoder == "mlp" else 0.0


def head_seconds(machine, pairs: int, width: int, decoder: str, workers: int = 1) -> float:
    """One worker's forward and backward time of scoring ``pairs`` pairs (module docstring), scaled by
    :func:`~graphscale.cost.pricing.worker_scale` like the layers' data-proportional work."""
    from graphscale.cost.pricing import worker_scale

    products = head_flops(pairs, width, decoder) / machine.gemm_flops
    elementwise = pairs * width * PASSES[decoder] * machine.elementwise_s
    return 3.0 * (products + elementwise) * worker_scale(machine, workers)

"""The task a run trains (``--task``) and the link-prediction options, with their allowed values.

``node`` is node classification (the labels and vertex splits of the dataset); ``link`` is link prediction
(:mod:`graphscale.tasks`): the model's output rows are vertex embeddings, a decoder scores vertex pairs.
"""

from __future__ import annotations

import argparse

#: the values of ``RunConfig.task``
TASKS = ("node", "link")
#: the values of ``RunConfig.decoder``: inner product, Hadamard product then a 2-layer MLP, diagonal bilinear
DECODERS = ("dot", "mlp", "distmult")
#: the options only ``--task link`` reads (giving one with ``--task node`` is an error)
LINK_OPTIONS = ("decoder", "hits_k", "link_split")
#: ``--hits-k``'s default: OGB's Hits@20 (ogbl-ddi), Hits@50 (ogbl-collab), Hits@100 (ogbl-ppa)
DEFAULT_HITS_K = (20, 50, 100)
#: ``--link-split``'s default: train, validation and test fractions of the edges
DEFAULT_LINK_SPLIT = (0.85, 0.05, 0.10)


def float_list(text: str) -> list[float]:
    """``"0.85,0.05,0.1"`` -> ``[0.85, 0.05, 0.1]`` (an option type)."""
    fields = text.split(",")
    try:
        if any(not f.strip() for f in fields):
            raise ValueError
        return [float(f) for f in fields]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None

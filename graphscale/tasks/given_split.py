"""A link split given with the dataset (:mod:`graphscale.data.link_pairs`) as a :class:`~graphscale.tasks.split.LinkSplit`.

The supervised pairs are the training positives, then the validation ones, then the test ones, in the order
given; a pair's index in that list is its edge id (the key of its keyed training negatives). The validation and
test positives are removed from the message-passing graph (both directions when the graph is symmetric; a PyG
``RandomLinkSplit`` or an OGB dataset has already left them out, so nothing changes there). The validation and test
negatives given with the split are the ones scored: shared negative pairs (``neg``: AUC and Hits@K against them,
as ogbl-collab; no MRR) or each positive's own candidate tails (``neg_tails``: MRR among them, as
ogbl-citation2; AUC and Hits@K against every positive's first candidate); a split given without negatives gets
the keyed candidates of a seeded split.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from graphscale.data.graph import Graph
from graphscale.data.link_pairs import load_pairs
from graphscale.tasks.split import SPLIT_NAMES, LinkSplit


def given_split(graph: Graph) -> LinkSplit:
    """The split ``graph`` carries (module docstring).

    Raises:
        ValueError, FileNotFoundError: malformed or missing pairs (one line naming the file or field).
    """
    pairs = load_pairs(graph.meta, graph.num_nodes)
    n = graph.num_nodes
    positives = [pairs[name]["pos"] for name in SPLIT_NAMES]
    split_of = torch.cat([torch.full((p.shape[1],), i, dtype=torch.int8) for i, p in enumerate(positives)])
    held = torch.cat(positives[1:], dim=1)
    held_keys = torch.cat([held[1] * n + held[0], held[0] * n + held[1]])  # dst * N + src, both directions
    src, dst = graph.indices, graph.dst_of_edges()
    kept = ~torch.isin(dst * n + src, held_keys)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst[kept], minlength=n), 0, out=indptr[1:])
    weight = None if graph.edge_weight is None else graph.edge_weight[kept]
    meta = {k: v for k, v in graph.meta.items()}
    message = replace(graph, indptr=indptr, indices=graph.indices[kept].contiguous(), edge_weight=weight, meta=meta)
    had = (graph.in_degrees() + graph.out_degrees()) > 0
    has = torch.zeros(n, dtype=torch.bool)
    has[src[kept]] = True
    has[dst[kept]] = True
    return LinkSplit(n, torch.cat(positives, dim=1), split_of, graph.is_symmetric(), message, int((had & ~has).sum()),
                     neg_pairs={k: a["neg"] for k, a in pairs.items() if "neg" in a},
                     neg_tails={k: a["neg_tails"] for k, a in pairs.items() if "neg_tails" in a})

"""Seeded train/validation/test splits of a graph's edges for link prediction.

The supervised pairs are the graph's *undirected* edges when the graph is symmetric (each ``{u, v}`` once, as
``(u, v)`` with ``u < v``: both directions of an edge are in one split by construction), else its directed edges.
Pairs are listed in ``(u, v)`` order, and a pair's index in that list is its **edge id** (the key of its keyed
negatives, :mod:`graphscale.tasks.negatives`). A seeded permutation of the ids assigns ``round(val * M)`` pairs to
validation, ``round(test * M)`` to test, ``round(train * M)`` to training (``M`` minus the others when the fractions
sum to 1) and the rest to no split. The validation and test pairs are removed from the message-passing graph (both
directions); the training pairs and those in no split stay in it.

**A given split.** A graph that carries its own split (a PyG ``RandomLinkSplit`` triple, an ``ogbl:`` dataset:
:mod:`graphscale.data.link_pairs`) is split as given instead (:func:`given_split`).
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

import math
from dataclasses import dataclass, field, replace

import torch

from graphscale.data.graph import Graph, csr_from_edges
from graphscale.data.link_inputs import load_pairs
from graphscale.data.link_pairs import has_given_pairs

#: the values of :attr:`LinkSplit.split_of`: training, validation, test, and in no split (message passing only)
TRAIN, VAL, TEST, UNSUPERVISED = 0, 1, 2, 3
#: the split names, in :data:`TRAIN`, :data:`VAL`, :data:`TEST` order
SPLIT_NAMES = ("train", "val", "test")


def check_fractions(fractions, option: str = "--link-split") -> tuple[float, float, float]:
    """``(train, val, test)`` from ``fractions``: three finite numbers, each > 0, summing to at most 1.

    Raises:
        ValueError: one line naming ``option``, the values and what was expected.
    """
    values = list(fractions)
    shown = ",".join(f"{v:g}" if isinstance(v, (int, float)) else repr(v) for v in values)
    if len(values) != 3:
        raise ValueError(f"{option} takes three fractions TRAIN,VAL,TEST, got {len(values)} ({shown})")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"{option} fractions must be positive finite numbers, got {shown}")
    if sum(values) > 1 + 1e-9:
        raise ValueError(f"{option} fractions must sum to at most 1, got {shown} (sum {sum(values):g})")
    return float(values[0]), float(values[1]), float(values[2])


@dataclass
class LinkSplit:
    """A graph's edges split for link prediction (module docstring).

    Attributes:
        num_nodes: the graph's vertex count.
        pairs: int64 ``[2, M]``: the supervised pairs ``(u, v)`` by edge id.
        split_of: int8 ``[M]``: each pair's split (:data:`TRAIN`, :data:`VAL`, :data:`TEST`, :data:`UNSUPERVISED`).
        undirected: whether a pair stands for both directions (the graph is symmetric).
        message_graph: the graph with the validation and test pairs removed (both directions), node data kept;
            ``None`` for a split read back from its link folder
            (:func:`graphscale.tasks.link_store.read_link_split`).
        stranded: vertices that have an edge in the graph but none in the message-passing graph.
        neg_pairs: a given split's negative pairs ``[2, Q]`` per split (``val``, ``test``), shared by its positives.
        neg_tails: a given split's candidate tails ``[P, C]`` per split, each positive's own.
    """

    num_nodes: int
    pairs: torch.Tensor
    split_of: torch.Tensor
    undirected: bool
    message_graph: Graph | None
    stranded: int
    neg_pairs: dict[str, torch.Tensor] = field(default_factory=dict)
    neg_tails: dict[str, torch.Tensor] = field(default_factory=dict)

    def ids(self, split: str) -> torch.Tensor:
        """The edge ids of ``split`` (``train``, ``val`` or ``test``), ascending."""
        return torch.nonzero(self.split_of == SPLIT_NAMES.index(split)).flatten()

    def counts(self) -> dict[str, int]:
        """Pairs per split."""
        return {name: int((self.split_of == i).sum()) for i, name in enumerate(SPLIT_NAMES)}

    def warning(self) -> str | None:
        """The warning a run prints when the split leaves vertices without any message-passing edge (their
        embeddings see no neighbour), with the counts; ``None`` when every vertex with an edge keeps one."""
        if not self.stranded:
            return None
        counts = self.counts()
        return (f"--link-split leaves {self.stranded:,} of {self.num_nodes:,} vertices without any training edge "
                f"(all their edges are among the {counts['val']:,} validation and {counts['test']:,} test pairs): "
                "their embeddings come from their own features only")


def supervised_pairs(graph: Graph) -> tuple[torch.Tensor, bool]:
    """``(pairs [2, M], undirected)``: the graph's undirected edges ``u < v`` when it is symmetric, else its directed
    edges ``(src, dst)``; self-loops left out; sorted by ``(u, v)``."""
    src, dst = graph.indices, graph.dst_of_edges()
    undirected = graph.is_symmetric()
    keep = (src < dst) if undirected else (src != dst)
    src, dst = src[keep], dst[keep]
    order = torch.argsort(src * max(graph.num_nodes, 1) + dst, stable=True)
    return torch.stack([src[order], dst[order]]), undirected


def split_edges(graph: Graph, fractions, seed: int) -> LinkSplit:
    """Split ``graph``'s edges (module docstring) with the permutation seeded by ``seed``; a graph that carries its
    own split is split as given (:func:`given_split`; ``fractions`` and ``seed``
    unused).

    Raises:
        ValueError: bad fractions (:func:`check_fractions`); a graph whose split leaves no training or no held-out
            pair.
    """
    if has_given_pairs(graph.meta):
        return given_split(graph)
    train, val, test = check_fractions(fractions)
    pairs, undirected = supervised_pairs(graph)
    m = pairs.shape[1]
    n_val, n_test = round(val * m), round(test * m)
    n_train = m - n_val - n_test if abs(train + val + test - 1) <= 1e-9 else min(round(train * m), m - n_val - n_test)
    if n_train <= 0 or n_val <= 0 or n_test <= 0:
        raise ValueError(f"--link-split {train:g},{val:g},{test:g} of the graph's {m:,} edges leaves a split empty "
                         f"({n_train} train, {n_val} validation, {n_test} test pairs); give larger fractions")
    perm = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
    split_of = torch.full((m,), UNSUPERVISED, dtype=torch.int8)
    split_of[perm[:n_val]] = VAL
    split_of[perm[n_val:n_val + n_test]] = TEST
    split_of[perm[n_val + n_test:n_val + n_test + n_train]] = TRAIN
    kept = (split_of == TRAIN) | (split_of == UNSUPERVISED)
    u, v = pairs[0, kept], pairs[1, kept]
    if undirected:
        u, v = torch.cat([u, v]), torch.cat([v, u])
    indptr, indices = csr_from_edges(u, v, graph.num_nodes)
    message = replace(graph, indptr=indptr, indices=indices, meta=dict(graph.meta))
    had = (graph.in_degrees() + graph.out_degrees()) > 0
    has = torch.zeros(graph.num_nodes, dtype=torch.bool)
    has[u] = True
    has[v] = True
    return LinkSplit(graph.num_nodes, pairs, split_of, undirected, message, int((had & ~has).sum()))


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

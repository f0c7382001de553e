"""The text edge-list reader (SNAP style), with an optional ``node label`` file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphscale.data.graph import Graph
from graphscale.data.readers.common import build_graph, require
from graphscale.data.readers.labels import class_ids, per_class_split
from graphscale.data.readers.metis import is_metis
from graphscale.data.readers.text import int_pairs, read_int_pairs, text_bytes
from graphscale.data.readers.weighted_edges import undirected, weighted_edges


def _relabel(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """Map the ids used by ``src``/``dst`` to ``0..N-1`` in increasing order unless they already are exactly
    ``0..max``. Returns ``(src, dst, N, original_ids or None)``."""
    top = int(max(src.max(), dst.max()))
    if top < 4 * (src.size + dst.size) + (1 << 20):  # a presence table beats sorting
        present = np.zeros(top + 1, dtype=bool)
        present[src] = True
        present[dst] = True
        if present.all():
            return src, dst, top + 1, None
        original = np.flatnonzero(present).astype(np.int64)
        new_id = np.cumsum(present, dtype=np.int64) - 1
        return new_id[src], new_id[dst], original.size, original
    original, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    return inverse[:src.size], inverse[src.size:], original.size, original


def node_labels(file: Path, labels: str | Path | None, n: int, original: np.ndarray | None, seed: int = 0):
    """The node data of an edge list ``file`` with ``n`` nodes (``original``: new id -> original id, or ``None``)
    from its optional ``labels`` file (see :func:`read_edgelist`): ``(y, masks, num_classes, class_names,
    source)``, ``y``/``masks``/``class_names`` ``None`` without labels. Reads the labels file whole: O(nodes)."""
    source = f"edgelist:{file.resolve()}"
    if labels is None:
        return None, None, 0, None, source
    labels = require(Path(labels), "a text file of 'node label' lines")
    table = read_int_pairs(labels, "node ids and labels")
    nodes = table[:, 0]
    if original is None:
        absent = nodes >= n
        new = nodes
    else:
        new = np.minimum(np.searchsorted(original, nodes), n - 1)
        absent = original[new] != nodes
    if absent.any():
        first = int(np.flatnonzero(absent)[0])
        raise ValueError(f"{labels} labels node {int(nodes[first])}, which is not in the edge list {file} "
                         f"({int(absent.sum())} labelled node(s) are absent from it)")
    classes, class_names = class_ids(table[:, 1])
    order = np.argsort(new, kind="stable")
    same_node = new[order][1:] == new[order][:-1]
    conflict = same_node & (classes[order][1:] != classes[order][:-1])
    if conflict.any():
        node = int(nodes[order][1:][conflict][0])
        raise ValueError(f"{labels} gives node {node} two different labels")
    y = np.full(n, -1, dtype=np.int64)
    y[new] = classes
    return y, per_class_split(y, seed), len(class_names), class_names, source + f":{labels.resolve()}"


def read_edgelist(file: str | Path, labels: str | Path | None = None, seed: int = 0, weighted: bool = False) -> Graph:
    """Read a plain-text edge list (SNAP style), optionally with a ``node label`` file; ``weighted``: lines
    ``src dst weight`` (:mod:`~graphscale.data.readers.weighted_edges`), the graph's edge weights.

    Lines hold ``src dst`` (blank- or comma-separated); ``#`` / ``%`` comment lines, a header line
    (``id_1,id_2``) and extra columns are skipped (see :func:`read_int_pairs`). Edges are treated as
    undirected (directed input is symmetrised, duplicates and self-loops dropped). Node ids that are
    not exactly ``0..max`` are relabelled to ``0..N-1`` in increasing order of the original id, N being
    the number of distinct ids, and ``meta['original_ids']`` (int64 array, new id -> original id) is
    set; ids that already are ``0..max`` are kept and ``original_ids`` is absent. There are no features.

    With ``labels`` (lines ``node label``, same syntax), labels are mapped through the same relabelling,
    label values are renumbered ``0..C-1`` in increasing order (``meta['class_names']`` holds the original
    values as strings), nodes without a label get ``-1``, and the split is :func:`per_class_split` with
    ``seed`` (20 per class train, 30 val, the rest test).

    Raises:
        ValueError: a malformed line (file and line named), no edges, a labels line naming a node that is
            not in the edge list, a node given two different labels, or a file that is a METIS graph (a header
            ``n m`` and ``n`` adjacency lines, see :func:`is_metis`; read those with ``metis:``) or binary.
    """
    file = require(Path(file), "a text edge list (one 'src dst' pair per line)")
    data = text_bytes(file, "node ids")
    if is_metis(data):
        raise ValueError(f"{file} is a METIS graph file (a header 'n m', then one line of neighbours per vertex), "
                         f"not an edge list; read it with metis:{file}")
    if weighted:
        src, dst, weight, lines = weighted_edges(data, file)
    else:
        pairs = int_pairs(data, file, "node ids")
        src, dst, weight, lines = pairs[:, 0], pairs[:, 1], None, None
    del data
    if src.size == 0:
        raise ValueError(f"{file} holds no edges (expected lines 'src dst{' weight' if weighted else ''}'; '#'/'%' "
                         "lines are comments)")
    src, dst, n, original = _relabel(src, dst)
    if weighted:
        src, dst, weight = undirected(src, dst, weight, lines, file)
    y, masks, num_classes, class_names, source = node_labels(file, labels, n, original, seed)
    if weighted:
        source += ":weighted"
    graph = build_graph(src, dst, n, y=y, masks=masks, name=file.stem, num_classes=num_classes, source=source,
                        edge_weight=weight)
    if original is not None:
        graph.meta["original_ids"] = original
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph


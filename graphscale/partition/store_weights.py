"""Edge weights in a partition store: every part's local edges weighted as in the graph.

A weighted graph's store (``meta.json``: ``"weighted": true``) holds two more arrays per part::

    edge_weight.npy      float64 [nnz]  weight of every local in-edge (aligned with indices.npy)
    weighted_degree.npy  float64 [L]    global weighted in-degree of every local vertex (:meth:`Graph.gcn_degrees`)

A local edge ``u -> v`` (original ids) takes the weight of the graph's edge ``u -> v``; a record the store added
reversed for a halo vertex (a ``v -> u`` the graph lacks) takes the weight of the edge it reverses. Each worker
therefore reads the weights of its own in-edges; the inner rows' edges are exactly the graph's in-edges of those
vertices. The weights are looked up by the edges' keys ``dst * N + src`` in the graph's CSR (rows ascending, each
row's sources ascending: how graphscale writes a CSR; repeated edges are refused for weighted data).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from graphscale.data.graph import Graph

#: the per-part arrays of a weighted store
WEIGHT_ARRAYS = ("edge_weight", "weighted_degree")


def _edge_keys(graph: Graph) -> np.ndarray:
    """``dst * N + src`` of every edge in CSR order, checked ascending (the lookup's binary search needs it)."""
    n = graph.num_nodes
    keys = graph.dst_of_edges().numpy() * n + graph.indices.numpy()
    if keys.size > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        raise ValueError(f"{graph.name}: a weighted graph's CSR rows must hold distinct sources in ascending order "
                         "(coalesce its edges)")
    return keys


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``wanted`` keys in ``keys`` and whether each was found."""
    pos = np.searchsorted(keys, wanted).clip(max=max(keys.size - 1, 0))
    found = keys[pos] == wanted if keys.size else np.zeros(wanted.size, dtype=bool)
    return pos, found


def write_part_weights(folder: Path, graph: Graph, keys: np.ndarray, degrees: np.ndarray) -> None:
    """Add ``edge_weight.npy`` and ``weighted_degree.npy`` to the part directory ``folder`` and list them in its
    ``meta.json``."""
    indptr = np.load(folder / "indptr.npy", mmap_mode="r")
    indices = np.load(folder / "indices.npy", mmap_mode="r")
    orig = np.load(folder / "orig_ids.npy")
    n = graph.num_nodes
    dst = np.repeat(orig, np.diff(indptr))
    src = orig[indices]
    pos, found = _lookup(keys, dst * n + src)
    weight = np.empty(src.size, dtype=np.float64)
    w = graph.edge_weight.numpy()
    weight[found] = w[pos[found]]
    if not found.all():  # records added reversed for halo vertices
        rpos, rfound = _lookup(keys, src[~found] * n + dst[~found])
        if not rfound.all():
            raise ValueError(f"{folder}: a local edge is neither an edge of {graph.name} nor its reverse")
        weight[~found] = w[rpos]
    np.save(folder / "edge_weight.npy", weight)
    np.save(folder / "weighted_degree.npy", degrees[orig])
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["arrays"] = [*meta["arrays"], *WEIGHT_ARRAYS]
    meta_file.write_text(json.dumps(meta, indent=1))


def write_store_weights(tmp: Path, graph: Graph, num_parts: int) -> None:
    """Weight every part of the store being written in ``tmp`` (module docstring)."""
    from graphscale.partition.store import part_dir

    keys = _edge_keys(graph)
    degrees = graph.gcn_degrees().numpy()
    for s in range(num_parts):
        write_part_weights(part_dir(tmp, s), graph, keys, degrees)

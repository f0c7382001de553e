"""A graph directory with a new train / val / test split, sharing every other array with its source.

``graphscale convert --dataset graphdir:SRC --out DIR --split train=0.01,val=0.005,test=0.005`` writes ``DIR`` as a
graph directory whose CSR, features and labels are ``SRC``'s files (hard links where both lie on one file system,
so the new directory costs only its masks and ``meta.json``; else copied by the kernel) and whose masks are a
seeded random split: in the order of ``numpy.random.default_rng(seed).permutation(N)``, the first
``round(train * N)`` vertices train, the next ``round(val * N)`` validate and the next ``round(test * N)`` test
(``test`` defaults to the rest; vertices past the three are in no split). Labels are kept as they are, so an
unlabelled vertex (``-1``) may fall in a split; give labelled graphs.

This is how a large graph is trained with a small training set (papers100M trains on about 1% of its vertices)
without writing its features again: a mini-batch epoch reads the sampled neighbourhoods of the training vertices
only. Graph directories are never changed in place, so the shared files stay valid for both; ``meta.json``
records each file's size and fingerprint as for any other graph directory, and ``meta.split`` the split and its
source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphscale.data.formats import MASKS, GraphDirWriter, load_graph_dir, writer_options

#: the keys of ``--split``
SPLIT_KEYS = ("train", "val", "test", "seed")
#: ``--split``'s form, for messages
SPLIT_FORM = "train=F,val=F[,test=F][,seed=S] (fractions of the vertices, summing to at most 1)"


def parse_split(text: str) -> dict:
    """``train=F,val=F[,test=F][,seed=S]`` as ``{"train", "val", "test" (None = the rest), "seed"}``; a bad item
    is a one-line ``ValueError`` naming ``--split`` and the expected form."""
    out: dict = {"train": None, "val": None, "test": None, "seed": 0}
    for item in (t.strip() for t in text.split(",")):
        key, eq, value = (t.strip() for t in item.partition("="))
        if not eq or key not in SPLIT_KEYS or not value:
            raise ValueError(f"--split: bad item {item!r}; expected {SPLIT_FORM}")
        try:
            out[key] = int(value) if key == "seed" else float(value)
        except ValueError:
            raise ValueError(f"--split: {key} must be {'an integer' if key == 'seed' else 'a fraction'}, got "
                             f"{value!r}") from None
        if key != "seed" and not 0 <= out[key] <= 1:
            raise ValueError(f"--split: {key} must be a fraction in [0, 1], got {value}")
    if out["train"] is None or out["val"] is None:
        raise ValueError(f"--split: give train= and val=; expected {SPLIT_FORM}")
    total = out["train"] + out["val"] + (out["test"] or 0.0)
    if total > 1 + 1e-12:
        raise ValueError(f"--split: the fractions sum to {total:g}, more than 1")
    if out["train"] == 0:
        raise ValueError("--split: train must be above 0 (a training split is needed)")
    return out


def split_masks(num_nodes: int, split: dict) -> dict[str, np.ndarray]:
    """The three bool ``[N]`` masks of ``split`` (module docstring)."""
    perm = np.random.default_rng(split["seed"]).permutation(num_nodes)
    n_train, n_val = round(split["train"] * num_nodes), round(split["val"] * num_nodes)
    n_test = num_nodes - n_train - n_val if split["test"] is None else round(split["test"] * num_nodes)
    if n_train == 0:
        raise ValueError(f"--split: train={split['train']} of {num_nodes} vertices is no training vertex")
    bounds = np.cumsum([0, n_train, n_val, min(n_test, num_nodes - n_train - n_val)])
    masks = {}
    for i, name in enumerate(MASKS):
        masks[name] = np.zeros(num_nodes, dtype=bool)
        masks[name][perm[bounds[i]: bounds[i + 1]]] = True
    return masks


def write_resplit(source: Path, out_dir: Path, split: dict, *, overwrite: bool = True) -> Path:
    """Write ``out_dir``: ``source``'s arrays linked, new split masks (module docstring); returns ``out_dir``."""
    graph = load_graph_dir(source)  # mapped, its files checked against its meta.json
    if graph.y is None:
        raise ValueError(f"--split: {source} has no labels (y.npy); a split needs labelled vertices")
    options = writer_options(graph, out_dir)
    options["masks"] = True
    meta = {k: v for k, v in graph.meta.items() if k != "num_classes"}
    meta["split"] = {"from": str(Path(source).resolve()), **split}
    options["meta"] = meta
    linked = ["indptr", "indices", *(["edge_weight"] if graph.edge_weight is not None else []),
              *(["x"] if options["num_features"] else []), "y"]
    masks = split_masks(graph.num_nodes, split)
    del graph
    with GraphDirWriter(out_dir, int(masks["train_mask"].size), overwrite=overwrite, **options) as writer:
        writer.link(source, linked)
        writer.append_nodes(**masks)
    return out_dir

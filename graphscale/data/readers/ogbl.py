"""The offline OGB link-property reader (``ogbl:DIR[:SPLIT]``): ``raw/*.csv.gz`` and ``split/SPLIT/*.pt``.

The layout is what ``ogb.linkproppred`` downloads (ogbl-collab, -ddi, -ppa, -citation2): ``raw/edge.csv.gz``
(``src,dst`` rows: the message-passing edges), optional ``raw/node-feat.csv.gz`` and ``raw/num-node-list.csv.gz``
(else the node count is the feature rows', else one past the largest id), and ``split/SPLIT/{train,valid,test}.pt``:
``torch.save``'d dicts of arrays, either ``edge [P, 2]`` with ``edge_neg [Q, 2]`` in ``valid``/``test`` (negatives
shared by every positive: Hits@K as ogbl-collab is scored) or ``source_node`` / ``target_node [P]`` with
``target_node_neg [P, C]`` (each positive's own candidates: MRR as ogbl-citation2 is scored). The graph is
symmetrised like every reader's; its split is kept as the reference ``meta["link_split"] = "ogbl:DIR:SPLIT"``
(:mod:`graphscale.data.link_pairs`), read again wherever a run splits the edges. A link dataset has no node
labels: ``y`` is ``-1`` everywhere and the node masks are empty, so it trains ``--task link`` only. Edge weights
and years (``raw/edge_weight.csv.gz``, ``edge_year``) are not read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data.graph import Graph
from graphscale.data.link_pairs import REFERENCE_KEY, check_pairs
from graphscale.data.readers.common import build_graph, require
from graphscale.data.readers.ogb import read_csv_gz

#: what unpickling OGB's numpy arrays needs, allowed in ``torch.load(weights_only=True)``
NUMPY_GLOBALS = [np.ndarray, np.dtype, getattr(getattr(np, "_core", None), "multiarray", None)._reconstruct
                 if hasattr(np, "_core") else np.core.multiarray._reconstruct,
                 *{type(np.dtype(t)) for t in ("int64", "int32", "float32", "float64")}]
#: the split files, by the split's name in graphscale
OGBL_FILES = {"train": "train.pt", "val": "valid.pt", "test": "test.pt"}


def _root(folder: Path) -> Path:
    """The dataset root: ``folder`` when it holds ``raw/``, else its only sub-directory that does."""
    if not folder.is_dir():
        raise FileNotFoundError(f"OGB directory {folder} does not exist; expected a link-property dataset root "
                                "holding raw/edge.csv.gz and split/NAME/{train,valid,test}.pt")
    if (folder / "raw").is_dir():
        return folder
    found = [d for d in sorted(folder.iterdir()) if (d / "raw").is_dir()]
    if len(found) != 1:
        raise FileNotFoundError(f"{folder} has no raw/ directory and {len(found)} sub-directories with one; point "
                                "ogbl:DIR at a dataset root holding raw/ and split/")
    return found[0]


def split_name(root: Path, split: str | None) -> str:
    """``split``, or the only directory under ``root/split``; a missing one is one line naming the directory."""
    folder = root / "split"
    names = sorted(d.name for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
    if split is None:
        if len(names) != 1:
            raise FileNotFoundError(f"{folder} holds splits {names or 'none'}; an OGB link-property dataset needs "
                                    "exactly one split/NAME/{train,valid,test}.pt (or name one as ogbl:DIR:SPLIT)")
        return names[0]
    if split not in names:
        raise FileNotFoundError(f"{folder / split} does not exist (splits found: {names or 'none'}); expected "
                                "split/SPLIT/{train,valid,test}.pt")
    return split


def _load(file: Path) -> dict:
    """A split file: a dict of arrays (numpy, as OGB saves them, or tensors), loaded without running code."""
    require(file, "an OGB link split file (a torch.save'd dict of arrays)")
    try:
        with torch.serialization.safe_globals(NUMPY_GLOBALS):
            value = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a malformed file
        raise ValueError(f"{file}: cannot read as an OGB link split (a dict of arrays): "
                         f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    if not isinstance(value, dict):
        raise ValueError(  # noqa: TRY004 - a malformed file, as every reader's
            f"{file}: expected a dict of arrays, got {type(value).__name__}")
    return {k: torch.as_tensor(np.asarray(v)) for k, v in value.items()}


def _edges(value: torch.Tensor, file: Path, key: str) -> torch.Tensor:
    if value.dim() != 2 or value.shape[1] != 2:
        raise ValueError(f"{file}: {key} must be [P, 2] (source, target) rows, got shape {list(value.shape)}")
    return value.t().contiguous()


def read_ogbl_split(root: Path, split: str) -> dict:
    """The pairs of split ``split`` of the dataset at ``root`` (:mod:`graphscale.data.link_pairs`' form, unchecked
    ids)."""
    pairs = {}
    for name, filename in OGBL_FILES.items():
        file = root / "split" / split / filename
        arrays = _load(file)
        if "edge" in arrays:
            pairs[name] = {"pos": _edges(arrays["edge"], file, "edge")}
            if name != "train" and "edge_neg" in arrays:
                pairs[name]["neg"] = _edges(arrays["edge_neg"], file, "edge_neg")
        elif "source_node" in arrays and "target_node" in arrays:
            src, dst = arrays["source_node"].reshape(-1), arrays["target_node"].reshape(-1)
            if src.shape != dst.shape:
                raise ValueError(f"{file}: source_node and target_node differ in length ({src.numel()} and "
                                 f"{dst.numel()})")
            pairs[name] = {"pos": torch.stack([src, dst])}
            if name != "train" and "target_node_neg" in arrays:
                pairs[name]["neg_tails"] = arrays["target_node_neg"]
        else:
            raise ValueError(f"{file}: expected the keys edge (and edge_neg) or source_node, target_node (and "
                             f"target_node_neg), got {sorted(arrays)}")
    return pairs


def read_ogbl(folder: str | Path, split: str | None = None) -> Graph:
    """Read an OGB link-property dataset from its downloaded files, offline (module docstring); its split is read
    and checked here too, so a bad one fails before any worker starts."""
    root = _root(Path(folder)).resolve()
    raw = root / "raw"
    split = split_name(root, split)
    edges = read_csv_gz(require(raw / "edge.csv.gz", "OGB edges (src,dst rows)"), np.int64)
    if edges.size and edges.shape[1] != 2:
        raise ValueError(f"{raw / 'edge.csv.gz'}: expected 2 columns (src,dst), got {edges.shape[1]}")
    edges = edges.reshape(-1, 2)
    feats = read_csv_gz(raw / "node-feat.csv.gz", np.float32) if (raw / "node-feat.csv.gz").exists() else None
    if (raw / "num-node-list.csv.gz").exists():
        n = int(read_csv_gz(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
    elif feats is not None:
        n = feats.shape[0]
    else:
        n = int(edges.max(initial=-1)) + 1
    if feats is not None and feats.shape[0] != n:
        raise ValueError(f"{raw / 'node-feat.csv.gz'} has {feats.shape[0]} rows but the graph has {n} nodes")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise ValueError(f"{raw / 'edge.csv.gz'} has node ids outside [0, {n})")
    check_pairs(read_ogbl_split(root, split), n, f"{root}/split/{split}")
    none = np.zeros(n, dtype=bool)
    graph = build_graph(edges[:, 0], edges[:, 1], n, x=feats, y=np.full(n, -1, dtype=np.int64),
                        masks={"train_mask": none, "val_mask": none, "test_mask": none}, name=root.name.replace("_", "-"),
                        num_classes=0, source=f"ogbl:{root}:{split}")
    graph.meta[REFERENCE_KEY] = f"ogbl:{root}:{split}"
    return graph

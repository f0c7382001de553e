"""Link-prediction pairs given with a dataset: the split a run uses instead of its seeded one.

A graph carries its own link split in one of two forms, both under its ``meta``:

* ``meta["link_pairs"]``: the pairs in memory (a PyG ``Data`` triple converted by
  :func:`graphscale.data.link_inputs.from_link_data`);
  :func:`graphscale.prepare.input_dataset` writes them to a ``.npz`` file and replaces them with
* ``meta["link_split"]``: a reference the graph directory keeps in its ``meta.json``: ``npz:FILE`` (the pairs as
  :func:`save_pairs` writes them) or ``ogbl:DIR:SPLIT`` (an OGB link-property dataset's ``split/SPLIT/*.pt``,
  :mod:`graphscale.data.readers.ogbl`).

The pairs are a dict per split (``train``, ``val``, ``test``) of int64 tensors: ``pos [2, P]`` the positive pairs
``(u, v)``; for ``val`` and ``test`` optionally ``neg [2, Q]`` (negative pairs shared by every positive, as
ogbl-collab's ``edge_neg``) or ``neg_tails [P, C]`` (each positive's own candidate tails, as ogbl-citation2's
``target_node_neg``). Every id is checked against the graph's vertex count when the pairs are read
(:func:`graphscale.data.link_inputs.load_pairs`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

#: the graph ``meta`` keys of a given link split (module docstring)
PAIRS_KEY, REFERENCE_KEY = "link_pairs", "link_split"
#: the splits of given pairs and the arrays each may hold
SPLITS = ("train", "val", "test")
ARRAYS = ("pos", "neg", "neg_tails")


def has_given_pairs(meta: dict) -> bool:
    """Whether a graph with this ``meta`` carries its own link split."""
    return PAIRS_KEY in meta or REFERENCE_KEY in meta


def check_ids(ids: torch.Tensor, num_nodes: int, where: str) -> torch.Tensor:
    """``ids`` as int64 when every one lies in ``[0, num_nodes)``; else one line naming ``where``."""
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise ValueError(f"{where} must hold integer node ids, got dtype {str(ids.dtype).removeprefix('torch.')}")
    ids = ids.to(torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"{where} has node ids outside [0, {num_nodes}): range [{int(ids.min())}, "
                         f"{int(ids.max())}]")
    return ids


def check_pairs(pairs: dict, num_nodes: int, where: str) -> dict:
    """``pairs`` (module docstring) checked: shapes, integer ids in range, every split with positives; the same
    dict with int64 tensors."""
    out = {}
    for split in SPLITS:
        arrays = pairs.get(split)
        if not arrays or arrays.get("pos") is None:
            raise ValueError(f"{where}: the {split} split has no positive pairs")
        got = {}
        for key, value in arrays.items():
            if key not in ARRAYS or (split == "train" and key != "pos"):
                raise ValueError(f"{where}: unexpected array {split}.{key}")
            value = torch.as_tensor(value)
            if key == "neg_tails":
                if value.dim() != 2 or value.shape[0] != got["pos"].shape[1]:
                    raise ValueError(f"{where}: {split}.{key} must be [{got['pos'].shape[1]}, C] (candidate tails "
                                     f"per positive), got shape {list(value.shape)}")
            elif value.dim() != 2 or value.shape[0] != 2:
                raise ValueError(f"{where}: {split}.{key} must be an [2, P] tensor of (source, target) node ids, got "
                                 f"shape {list(value.shape)}")
            got[key] = check_ids(value, num_nodes, f"{where}: {split}.{key}")
        if not got["pos"].shape[1]:
            raise ValueError(f"{where}: the {split} split has no positive pairs")
        out[split] = got
    return out


def pairs_digest(pairs: dict) -> str:
    """A content hash (SHA-256, hex) of given pairs."""
    h = hashlib.sha256()
    for split in SPLITS:
        for key in ARRAYS:
            value = pairs[split].get(key)
            if value is not None:
                array = np.ascontiguousarray(value.numpy())
                h.update(f"{split}.{key}{array.shape}".encode())
                h.update(memoryview(array).cast("B"))
    return h.hexdigest()


def save_pairs(pairs: dict, path: str | Path) -> Path:
    """Write ``pairs`` to the ``.npz`` file ``path`` (atomically: a temporary file renamed into place)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **{f"{split}.{key}": value.numpy() for split, arrays in pairs.items()
                     for key, value in arrays.items()})
    tmp.replace(path)
    return path

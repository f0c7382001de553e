"""What every reader shares: assembling the normalised :class:`Graph`, index masks, required files, and
telling a file's kind from its first bytes (so a reader refuses another format by name)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphscale.data.graph import Graph


def build_graph(src, dst, num_nodes: int, *, x=None, y=None, masks: dict | None = None, name: str, num_classes: int,
                source: str, edge_weight=None) -> Graph:
    """Assemble a symmetric, coalesced, self-loop-free graph with normalised dtypes; with ``edge_weight`` (one per
    edge) a weighted one from edges already symmetric and distinct (self-loops still dropped)."""
    src, dst = torch.as_tensor(np.asarray(src), dtype=torch.int64), torch.as_tensor(np.asarray(dst), dtype=torch.int64)
    keep = src != dst
    masks = {k: torch.as_tensor(np.asarray(v), dtype=torch.bool) for k, v in (masks or {}).items()}
    if y is not None:  # class ids [N] as int64, a multi-label 0/1 matrix [N, C] as uint8
        y = np.asarray(y)
        y = torch.as_tensor(y, dtype=torch.uint8 if y.ndim == 2 else torch.int64)
    weight = None if edge_weight is None else torch.as_tensor(np.asarray(edge_weight), dtype=torch.float64)[keep]
    graph = Graph.from_edges(src[keep], dst[keep], num_nodes, weight, name=name,
                             x=None if x is None else torch.as_tensor(np.asarray(x), dtype=torch.float32), y=y,
                             meta={"num_classes": int(num_classes), "source": source}, **masks)
    return graph if weight is not None else graph.symmetrize()


def index_mask(index: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[index] = True
    return mask


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


# What a file is, from its first bytes: (magic, kind, description).
_MAGIC = ((b"MATLAB 7.3", "mat73", "a MATLAB v7.3 (HDF5) .mat file"), (b"MATLAB", "mat", "a MATLAB .mat file"),
          (b"PK\x03\x04", "zip", "a zip archive (a .npz?)"), (b"PK\x05\x06", "zip", "a zip archive (a .npz?)"),
          (b"\x93NUMPY", "npy", "a single .npy array"), (b"\x89HDF\r\n\x1a\n", "hdf5", "an HDF5 file"),
          (b"\x1f\x8b", "gzip", "gzip-compressed"))
_SPEC_OF_KIND = {"mat": "mat", "zip": "npz"}


def binary_kind(head: bytes) -> tuple[str, str]:
    """``(kind, description)`` of a file whose first bytes are ``head``; ``("", "")`` when none matches."""
    return next(((kind, text) for magic, kind, text in _MAGIC if head.startswith(magic)), ("", ""))


def file_head(file: Path, what: str) -> bytes:
    try:
        with open(file, "rb") as f:
            return f.read(128)
    except IsADirectoryError:
        raise ValueError(f"{file} is a directory; expected {what}") from None


def wrong_kind(file: Path, kind: str, text: str, expected: str) -> ValueError:
    """The error for ``file`` (of ``kind``, described by ``text``) given where ``expected`` was wanted."""
    if kind == "gzip":
        hint = "; decompress it first (gunzip)"
    elif kind in _SPEC_OF_KIND:
        hint = f"; read it with {_SPEC_OF_KIND[kind]}:{file}"
    elif kind == "mat73":
        hint = "; mat: reads .mat files up to v7 (scipy.io.loadmat), so re-save it in MATLAB with save(FILE, '-v7')"
    else:
        hint = ""
    return ValueError(f"{file} is {text}, not {expected}{hint}")


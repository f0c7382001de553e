"""GSplit's offline split plan (once per run): partition-contiguous, degree-sorted split ids and the caches.

**Offline** (:class:`SplitPlan`, once per run). A vertex partition ``owner[N]``
into ``W`` parts is turned into *split ids*: part ``0``'s vertices first, then
part ``1``'s, ...; inside a part by descending degree (ties by ascending
vertex id). Part ``i`` holds the split-id range ``[poff[i], poff[i+1])``, so

* ``owner(v)`` is a range check of ``split_id[v]`` against ``poff`` (a
  branch-free count of the ``W - 1`` inner boundaries it reaches);
* worker ``i`` caches the ``cap_i = min(cap, |part i|)`` highest-degree vertices
  of its part (``cap = floor(cache_fraction * N)``), and ``v`` is cached by its
  owner iff ``split_id[v] - poff[owner(v)] < cap`` (the slot is that difference).

Both answers are folded once into a one-byte table ``part_code[v] = owner(v) |
cached(v) << 7``, so the online split reads one byte per vertex (a table of
``N`` bytes stays in cache far better than the ``8 N`` bytes of ``split_id``);
the split id itself is read only by a worker for its own cache hits.

The caches are disjoint, ``C_i`` lies inside part ``i``, and their union is
``C = union_i C_i`` with ``|C| = sum_i min(cap, |part i|)``. Sampling, dropout
and the model keep the dataset's vertex ids: the graph itself is not
renumbered (GSplit stores it renumbered, which makes the range check
table-free), so a split-parallel run draws exactly the mini-batches of
``single``; the price is one ``[N]`` byte-table lookup per vertex.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numba as nb
import numpy as np
import torch

#: Workers a split can address (the owner takes the low 7 bits of ``SplitPlan.part_code``).
MAX_PARTS = 128


@nb.njit(cache=True)
def _split_ids_kernel(owner, degree, num_parts):
    """Counting sort by part, then (degree desc, id asc) inside each part: returns (perm, split_id, poff)."""
    n = owner.size
    poff = np.zeros(num_parts + 1, np.int64)
    for v in range(n):
        poff[owner[v] + 1] += 1
    for p in range(num_parts):
        poff[p + 1] += poff[p]
    cursor = poff[:num_parts].copy()
    perm = np.empty(n, np.int64)
    for v in range(n):
        p = owner[v]
        perm[cursor[p]] = v
        cursor[p] += 1
    for p in range(num_parts):  # stable sort of each part by descending degree (ids stay ascending within ties)
        lo, hi = poff[p], poff[p + 1]
        keys = -degree[perm[lo:hi]]
        order = np.argsort(keys, kind="mergesort")
        perm[lo:hi] = perm[lo:hi][order]
    split_id = np.empty(n, np.int64)
    for i in range(n):
        split_id[perm[i]] = i
    return perm, split_id, poff


@nb.njit(cache=True)
def _part_code_kernel(split_id, poff, cap):
    """``owner(v) | cached(v) << 7`` for every vertex: the range check and the cache test, once."""
    n = split_id.size
    w = poff.size - 1
    out = np.empty(n, np.uint8)
    for v in range(n):
        s = split_id[v]
        i = 0
        for k in range(1, w):  # branch-free range check against the inner boundaries
            i += s >= poff[k]
        out[v] = i | ((s - poff[i] < cap) << 7)
    return out


@dataclass
class SplitPlan:
    """The offline part of GSplit: partition-contiguous, degree-sorted split ids and the cache capacity.

    Attributes:
        num_parts: workers ``W``.
        perm: int64 ``[N]``; split id ``k`` is vertex ``perm[k]``.
        split_id: int64 ``[N]``; the split id of vertex ``v``.
        poff: int64 ``[W+1]``; part ``i`` holds split ids ``[poff[i], poff[i+1])``.
        cap: cache rows per worker (``floor(cache_fraction * N)``); worker ``i`` caches ``min(cap, |part i|)``.
        part_code: uint8 ``[N]``: ``owner(v) | cached(v) << 7`` (what the online split reads).
    """

    num_parts: int
    perm: np.ndarray
    split_id: np.ndarray
    poff: np.ndarray
    cap: int
    part_code: np.ndarray

    @classmethod
    def build(cls, owner: torch.Tensor | np.ndarray, degrees: torch.Tensor | np.ndarray, num_parts: int,
              cache_fraction: float = 0.0) -> SplitPlan:
        """Relabel ``owner``'s parts into contiguous, degree-sorted split-id ranges.

        Args:
            owner: int ``[N]`` part of every vertex, values in ``[0, num_parts)``.
            degrees: int ``[N]`` degree in the sampling direction (how often a vertex can be drawn as a source:
                the out-degree; equal to the in-degree on symmetric graphs).
            num_parts: ``W``.
            cache_fraction: per-worker cache size as a fraction of all ``N`` vertices, in ``[0, 1]``.

        Raises:
            ValueError: on a bad owner array, degree shape or cache fraction (naming ``cache_fraction``).
        """
        owner_np = np.ascontiguousarray(torch.as_tensor(owner).cpu().numpy(), dtype=np.int64)
        degree_np = np.ascontiguousarray(torch.as_tensor(degrees).cpu().numpy(), dtype=np.int64)
        if owner_np.ndim != 1 or degree_np.shape != owner_np.shape:
            raise ValueError(f"SplitPlan.build: owner and degrees must be 1-D of equal length, got "
                             f"{owner_np.shape} and {degree_np.shape}")
        if not 1 <= num_parts <= MAX_PARTS:
            raise ValueError(f"split parallelism supports 1 to {MAX_PARTS} workers, got {num_parts}")
        if owner_np.size and (owner_np.min() < 0 or owner_np.max() >= num_parts):
            raise ValueError(f"SplitPlan.build: owner values must lie in [0, {num_parts})")
        if not 0.0 <= float(cache_fraction) <= 1.0:
            raise ValueError(f"cache_fraction must lie in [0, 1], got {cache_fraction!r}")
        perm, split_id, poff = _split_ids_kernel(owner_np, degree_np, int(num_parts))
        cap = int(np.floor(float(cache_fraction) * owner_np.size + 1e-9))
        return cls(int(num_parts), perm, split_id, poff, cap, _part_code_kernel(split_id, poff, np.int64(cap)))

    _ARRAYS = ("perm", "split_id", "poff", "part_code")

    def save(self, folder: Path) -> None:
        """Write the plan as ``.npy`` files (and ``split_plan.json``: ``num_parts``, ``cap``) into ``folder``."""
        for name in self._ARRAYS:
            np.save(folder / f"{name}.npy", getattr(self, name))
        (folder / "split_plan.json").write_text(json.dumps({"num_parts": self.num_parts, "cap": self.cap}))

    @classmethod
    def load(cls, folder: Path) -> SplitPlan:
        """The plan :meth:`save` wrote, memory-mapped read-only: the ``[N]`` arrays exist once per host."""
        folder = Path(folder)
        meta = json.loads((folder / "split_plan.json").read_text())
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in cls._ARRAYS}
        return cls(int(meta["num_parts"]), cap=int(meta["cap"]), **arrays)

    @property
    def num_nodes(self) -> int:
        return int(self.split_id.size)

    def part_sizes(self) -> np.ndarray:
        return self.poff[1:] - self.poff[:-1]

    def owner_of(self, ids) -> np.ndarray:
        """Part of each vertex id (range check of the split ids)."""
        ids = np.asarray(torch.as_tensor(ids).cpu().numpy(), dtype=np.int64)
        return np.searchsorted(self.poff, self.split_id[ids], side="right") - 1

    def cache_size(self, part: int) -> int:
        """``|C_part| = min(cap, |part|)``."""
        return int(min(self.cap, self.poff[part + 1] - self.poff[part]))

    def cached_ids(self, part: int) -> torch.Tensor:
        """Vertex ids cached by ``part``, in slot order (highest degree first)."""
        start = int(self.poff[part])
        return torch.from_numpy(self.perm[start:start + self.cache_size(part)].copy())

    def cached_mask(self) -> np.ndarray:
        """bool ``[N]``: whether a vertex is in the union of the caches."""
        part = np.searchsorted(self.poff, self.split_id, side="right") - 1
        return (self.split_id - self.poff[part]) < self.cap

    def cache_slot(self, ids, part: int) -> np.ndarray:
        """Rows of vertices ``ids`` (all cached by ``part``) in ``part``'s cache."""
        return self.split_id[np.asarray(ids, dtype=np.int64)] - self.poff[part]

"""A link split as a partitioned run's workers read it: each worker reads only the supervised pairs whose *source*
vertex it owns (the worker that scores them).

The parent draws the split over the whole graph (:func:`graphscale.tasks.split.split_edges`, the same as
``single``'s), partitions the split's message-passing graph (the validation and test edges removed) and writes,
next to that partition store ``STORE``, the folder ``STORE.link``:

* ``meta.json``: the vertex count, the part count, the supervised pair count ``num_pairs`` (edge ids are below
  it), the pairs per split (``counts``; the training count gives the loss normaliser ``2 P``), whether a pair
  stands for both directions (``undirected``), the count of vertices the split leaves without a message-passing
  edge (``stranded``) and the split's warning (:meth:`~graphscale.tasks.split.LinkSplit.warning`) or ``null``;
* ``part-I.pt``: part ``I``'s pairs: ``ids`` (edge ids, ascending: the keys of the keyed negatives), ``pairs``
  (int64 ``[2, P_I]``) and ``split_of`` (int8 ``[P_I]``), the pairs in no split left out;
* ``negatives.pt``, only for a split given with its own validation and test negatives: ``neg_pairs`` and
  ``neg_tails`` by split (:class:`~graphscale.tasks.split.LinkSplit`'s).

A graph-parallel or offload worker reads its own part (:func:`read_link_part`) and finds the owner of any vertex
from the store's partition book (:func:`store_owner`), so it can ask the owner of a destination for its embedding.
A model-averaging worker reads the whole split back (:func:`read_link_split`): every part, and the negatives.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from graphscale.data.formats import replace_dir, temp_sibling, write_json_atomic
from graphscale.partition.store import load_book
from graphscale.tasks.split import SPLIT_NAMES, UNSUPERVISED, LinkSplit

LINK_SUFFIX = ".link"
#: the file of a given split's negatives in a link folder
NEGATIVES_FILE = "negatives.pt"
#: the meta fields of a link folder in the current form (a cached folder without them is written again)
META_FIELDS = ("num_nodes", "parts", "num_pairs", "counts", "undirected", "stranded", "warning")


def link_folder(store: str | Path) -> Path:
    """The link folder of partition store ``store`` (module docstring)."""
    store = Path(store)
    return store.with_name(store.name + LINK_SUFFIX)


def store_owner(store: str | Path) -> torch.Tensor:
    """int64 ``[N]``: the part of every original vertex id, from the store's partition book."""
    book = load_book(store)
    return torch.searchsorted(book.boundaries, book.inv_perm, right=True) - 1


def write_link_parts(split: LinkSplit, owner: torch.Tensor, parts: int, folder: str | Path) -> None:
    """Write ``split``'s pairs by the part that owns their source (``owner``: the part of every vertex) into the
    new folder ``folder`` (module docstring), atomically."""
    folder = Path(folder)
    tmp = temp_sibling(folder, "tmp")
    tmp.mkdir(parents=True)
    try:
        supervised = split.split_of != UNSUPERVISED
        source_part = owner[split.pairs[0]]
        for part in range(parts):
            ids = torch.nonzero(supervised & (source_part == part)).flatten()
            torch.save({"ids": ids, "pairs": split.pairs[:, ids].clone(), "split_of": split.split_of[ids].clone()},
                       tmp / f"part-{part}.pt")
        if split.neg_pairs or split.neg_tails:
            torch.save({"neg_pairs": split.neg_pairs, "neg_tails": split.neg_tails}, tmp / NEGATIVES_FILE)
        write_json_atomic(tmp / "meta.json", {"num_nodes": split.num_nodes, "parts": parts,
                                              "num_pairs": int(split.pairs.shape[1]), "counts": split.counts(),
                                              "undirected": bool(split.undirected), "stranded": int(split.stranded),
                                              "warning": split.warning()})
        replace_dir(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_link_meta(folder: str | Path) -> dict:
    """The link folder's ``meta.json``.

    Raises:
        FileNotFoundError: no link folder there.
    """
    path = Path(folder) / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the partition store has no link split next to it")
    return json.loads(path.read_text())


def is_link_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is a complete link folder in the current form (its ``meta.json`` has every field)."""
    try:
        meta = read_link_meta(folder)
    except (FileNotFoundError, ValueError):
        return False
    return all(key in meta for key in META_FIELDS)


@dataclass
class LinkPart:
    """The pairs one worker scores (module docstring)."""

    num_nodes: int
    num_train: int
    ids: torch.Tensor
    pairs: torch.Tensor
    split_of: torch.Tensor

    def owned_by(self, owner: torch.Tensor, part: int) -> LinkPart:
        """The pairs whose source ``owner`` (the part of every vertex) gives to ``part``."""
        keep = owner[self.pairs[0]] == part
        return LinkPart(self.num_nodes, self.num_train, self.ids[keep], self.pairs[:, keep], self.split_of[keep])

    def split_ids(self, split: str) -> torch.Tensor:
        """Positions (into :attr:`ids`) of the pairs of ``split``."""
        return torch.nonzero(self.split_of == SPLIT_NAMES.index(split)).flatten()


def read_link_part(folder: str | Path, part: int) -> LinkPart:
    """Part ``part``'s pairs from the link folder ``folder``."""
    meta = read_link_meta(folder)
    if not 0 <= part < int(meta["parts"]):
        raise ValueError(f"{folder}: part {part} is out of range [0, {meta['parts']})")
    data = torch.load(Path(folder) / f"part-{part}.pt", weights_only=True)
    return LinkPart(int(meta["num_nodes"]), int(meta["counts"]["train"]), data["ids"], data["pairs"],
                    data["split_of"])


def read_link_split(folder: str | Path) -> LinkSplit:
    """The whole split from the link folder ``folder``: every part's pairs at their edge ids (ids in no split hold
    the pair ``(0, 0)`` in :data:`~graphscale.tasks.split.UNSUPERVISED`, never scored), the given negatives, no
    message-passing graph."""
    meta = read_link_meta(folder)
    m = int(meta["num_pairs"])
    pairs = torch.zeros((2, m), dtype=torch.int64)
    split_of = torch.full((m,), UNSUPERVISED, dtype=torch.int8)
    for part in range(int(meta["parts"])):
        data = torch.load(Path(folder) / f"part-{part}.pt", weights_only=True)
        pairs[:, data["ids"]] = data["pairs"]
        split_of[data["ids"]] = data["split_of"]
    file = Path(folder) / NEGATIVES_FILE
    negatives = torch.load(file, weights_only=True) if file.is_file() else {}
    return LinkSplit(int(meta["num_nodes"]), pairs, split_of, bool(meta["undirected"]), None, int(meta["stranded"]),
                     neg_pairs=negatives.get("neg_pairs", {}), neg_tails=negatives.get("neg_tails", {}))

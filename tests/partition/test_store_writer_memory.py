"""The store writer's memory per vertex, counted rather than timed: the bytes of numpy arrays it holds at once (as
``tracemalloc`` traces them, a deterministic count) grow with the vertices by at most a stated per-vertex term
when the record chunks are fixed; and the book it writes without the two int64 permutations equals
:class:`~graphscale.partition.book.PartitionBook`'s."""

from __future__ import annotations

import numpy as np
import torch

from graphscale.data.synthetic import generate
from graphscale.partition.book import PartitionBook
from graphscale.partition.store import load_book
from graphscale.partition.store_writer import _book, write_partition_store
from graphscale.testing import traced_peak

#: per vertex of the graph: owner (int16) 2, global-id rank 4, degrees 4, halo mark 1, local-id map 4; per local
#: vertex of the part being built (about 0.97 of the graph here: random owners put almost every vertex in the
#: halo): its original id (int32) 4 and row pointer 8, so about 26.6; 23.7 measured, against 32.0 (numpy's share
#: alone) before the book's permutations and the halo's copies were dropped
STORE_BYTES_PER_VERTEX = 28


def test_book_without_permutations_equals_the_partition_book(tmp_path):
    owner = np.random.default_rng(3).integers(0, 5, 1000).astype(np.int16)
    owner[owner == 3] = 4  # an empty part in the middle
    boundaries, rank = _book(owner, 6, tmp_path / "perm.npy", np.int32)
    book = PartitionBook.from_owner(torch.from_numpy(owner.astype(np.int64)), 6)
    assert np.array_equal(np.load(tmp_path / "perm.npy"), book.perm.numpy())
    assert np.load(tmp_path / "perm.npy").dtype == np.int64
    assert np.array_equal(boundaries, book.boundaries.numpy())
    assert rank.dtype == np.int32
    assert np.array_equal(boundaries[owner] + rank, book.inv_perm.numpy())


def _traced_peak(tmp_path, n: int) -> int:
    graph = generate(f"sbm:nodes={n},degree=4,features=0")
    owner = np.random.default_rng(0).integers(0, 2, n).astype(np.int16)
    return traced_peak(lambda: write_partition_store(tmp_path / f"store-{n}", graph, owner, 2, chunk_edges=4096,
                                                     feature_chunk_bytes=1 << 16,
                                                     node_data={"y": graph.y, "train_mask": graph.train_mask}))


def test_store_writer_holds_a_bounded_number_of_bytes_per_vertex(tmp_path):
    _traced_peak(tmp_path, 2000)  # (first calls load compiled kernels)
    small, large = _traced_peak(tmp_path, 20000), _traced_peak(tmp_path, 60000)
    per_vertex = (large - small) / 40000
    assert 10 < per_vertex <= STORE_BYTES_PER_VERTEX, per_vertex
    book = load_book(tmp_path / "store-60000")
    assert book.num_nodes == 60000  # (the store the bound was counted on is a whole one)

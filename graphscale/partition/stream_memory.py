"""Host memory of a streaming partition and its store, and the record chunk that fits a ``--host-memory`` budget.

Every partitioner but METIS reads the graph's records in chunks of ``chunk_edges`` (the streaming vertex and edge
partitioners, and the store writer's routing and local CSR passes), holds a few arrays per vertex (owner, degrees,
the partition book's permutations, per-part id maps) and copies node rows in steps of ``feature_chunk_bytes``. Its
host memory is therefore::

    STREAM_FIXED_BYTES + feature_chunk_bytes + STREAM_BYTES_PER_VERTEX * N + STREAM_BYTES_PER_RECORD * min(chunk, E)

The coefficients lie above every measured anonymous peak of ``graphscale partition`` from a graph directory (SBM,
degree 10, 128 float32 features, 2 parts, 64 MiB feature chunks, under a memory cgroup): ``restream`` at 0.2M,
0.8M, 1M, 3M and 20M vertices with 2^22-record chunks (289, 509, 471, 658 and 1,659 MiB; estimated 348, 537, 556,
739 and 2,295 MiB), ``restream`` and ``hdrf`` at 1M vertices with 2^17-record chunks (289 and 292 MiB; estimated
308 MiB). From 1M to 20M vertices the peak grows 65 bytes per vertex (96 between 1M and 3M, where freed per-vertex
arrays stay in the allocator's heap); a chunk record costs about 47 bytes (its ids, the routing keys, the sort's
permutation).

:func:`plan_chunk_edges` picks the largest chunk, at most the one asked for, whose estimate fits the budget. When
not even :data:`MIN_CHUNK_EDGES` records fit, ``graphscale partition`` refuses in one line naming the minimum; a
training run, which plans every step within the same budget as far as it can (the smallest cache, tables on disk),
partitions with the smallest chunk.
"""

from __future__ import annotations

from graphscale.metrics.units import format_bytes

#: the interpreter with torch and numpy loaded, and the writer's fixed buffers
STREAM_FIXED_BYTES = 144 << 20
#: the per-vertex arrays of the partitioner and the store writer
STREAM_BYTES_PER_VERTEX = 96
#: the buffers of one chunk record (ids, routing keys, sort permutation)
STREAM_BYTES_PER_RECORD = 64
#: the smallest chunk a budget may shrink the stream to (smaller chunks only add passes' overhead)
MIN_CHUNK_EDGES = 1 << 16


def streaming_memory_estimate(num_vertices: int, num_edges: int, chunk_edges: int, feature_chunk_bytes: int) -> int:
    """Bytes of host memory a streaming partition of a graph with ``num_vertices`` and ``num_edges`` records and
    its store writer need with chunks of ``chunk_edges`` records (module docstring)."""
    records = min(int(chunk_edges), max(int(num_edges), 1))
    return (STREAM_FIXED_BYTES + int(feature_chunk_bytes) + STREAM_BYTES_PER_VERTEX * int(num_vertices)
            + STREAM_BYTES_PER_RECORD * records)


def plan_chunk_edges(num_vertices: int, num_edges: int, chunk_edges: int, budget: int, feature_chunk_bytes: int,
                     method: str, refuse: bool = True) -> int:
    """The largest chunk of at most ``chunk_edges`` records whose estimate fits ``budget`` bytes; with ``refuse``
    false, :data:`MIN_CHUNK_EDGES` (at most ``chunk_edges``) when none does.

    Raises:
        ValueError: ``refuse`` and not even :data:`MIN_CHUNK_EDGES` records fit (one line: the minimum, the budget,
            the graph).
    """
    if streaming_memory_estimate(num_vertices, num_edges, chunk_edges, feature_chunk_bytes) <= budget:
        return int(chunk_edges)
    floor = min(int(chunk_edges), MIN_CHUNK_EDGES)
    need = streaming_memory_estimate(num_vertices, num_edges, floor, feature_chunk_bytes)
    if need > budget and not refuse:
        return floor
    if need > budget:
        raise ValueError(f"partitioning {num_vertices:,} vertices and {num_edges:,} records with {method} needs at "
                         f"least about {format_bytes(need)} of host memory ({STREAM_BYTES_PER_VERTEX} bytes per "
                         f"vertex, {format_bytes(feature_chunk_bytes)} feature chunks, chunks of {floor:,} records), "
                         f"more than the {format_bytes(budget)} budget (--host-memory)")
    room = budget - streaming_memory_estimate(num_vertices, num_edges, 0, feature_chunk_bytes)
    return max(floor, min(int(chunk_edges), room // STREAM_BYTES_PER_RECORD))

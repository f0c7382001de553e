"""Profile figures of the host-side work some strategies repeat per chunk, per task or per mini-batch, outside the
layers (:mod:`graphscale.advise.profile` records them; the strategies' ``predict`` price counted events with them).

Measured with one torch thread, like the profile's other rates, each as a line through two sizes (best of
repetitions): the intercept is the fixed cost of one call (Python, dispatch, allocations), the slope the cost per
edge:

* ``block_call_s`` / ``block_edge_s``: building a block of a row subset and restricting it to the edges a
  dependency mode keeps, as a task-parallel P segment does for every subgraph in every epoch
  (:func:`~graphscale.strategies.task_parallel.chunks.masked_block` of :meth:`~graphscale.data.block.Block.from_nodes`,
  ``causal``, the default mode) on a random graph, per call and per edge of the rows' CSR;
* ``sample_call_s`` / ``sample_edge_s``: sampling one mini-batch's blocks
  (:meth:`~graphscale.data.sampler.NeighborSampler.sample`, fanouts 10, 10) on the same graph, per call and per
  sampled edge (the blocks' edges);
* ``host_transfer_bandwidth`` (CPU): bytes per second of offload's host-array gathers and scatters through its own
  transfer pipeline (:func:`transfer_costs`: the slope only, the median of 3).
"""

from __future__ import annotations

#: (vertices, average degree) of the random graph the host costs are measured on (normal, ``tiny``)
GRAPH = {False: (50000, 16.0), True: (4000, 8.0)}
#: fanouts of the sampling probe
PROBE_FANOUTS = (10, 10)


def cost_line(sizes: tuple[float, float], times: tuple[float, float]) -> tuple[float, float]:
    """``(intercept, slope)`` of the line through ``(sizes[i], times[i])`` (``sizes[1] > sizes[0] > 0``, positive
    times). Where noise makes the slope not positive (the small probe timed at or above the large one), the large
    probe's average cost per unit is the slope and the intercept 0: the costs at the large size stay what was
    measured and nothing is priced free. A negative intercept (a quiet small probe under a noisy large one's line)
    is 0."""
    slope = (times[1] - times[0]) / (sizes[1] - sizes[0])
    if slope <= 0:
        return 0.0, times[1] / sizes[1]
    return max(times[0] - slope * sizes[0], 0.0), slope


def block_costs(tiny: bool, seconds: float) -> tuple[float, float, str]:
    """``(block_call_s, block_edge_s, how)`` (module docstring): blocks of the ascending first 1/16 and 1/2 of a
    random graph's vertices, 4 chunks in 2 subgraphs (chunk ``v % 4``)."""
    import torch

    from graphscale.advise.timing import best_of as _best
    from graphscale.data.block import Block
    from graphscale.strategies.task_parallel.chunks import CAUSAL, masked_block
    from graphscale.testing import random_graph

    n, deg = GRAPH[tiny]
    graph = random_graph(n, deg, num_features=1, seed=0)
    chunk_of = torch.arange(n) % 4
    sub = torch.tensor([0, 1, 0, 1])
    sizes, times = [], []
    for count in (n // 16, n // 2):
        ids = torch.arange(count)
        sizes.append(float(graph.indptr[count] - graph.indptr[0]))
        times.append(_best(lambda ids=ids: masked_block(Block.from_nodes(graph, ids), chunk_of, sub, CAUSAL),
                           seconds / 2))
    call, edge = cost_line(tuple(sizes), tuple(times))
    return call, edge, (f"masked_block(Block.from_nodes) (causal) of the first {n // 16} and {n // 2} vertices of a "
                        f"random graph of {n} vertices (degree {deg:g}), best of repetitions, a line through the two "
                        "over the rows' edges")


def sample_costs(tiny: bool, seconds: float) -> tuple[float, float, str]:
    """``(sample_call_s, sample_edge_s, how)`` (module docstring): mini-batches of 64 and 1024 targets."""
    import torch

    from graphscale.advise.timing import best_of as _best
    from graphscale.data.sampler import NeighborSampler
    from graphscale.testing import random_graph

    n, deg = GRAPH[tiny]
    graph = random_graph(n, deg, num_features=1, seed=0)
    sampler = NeighborSampler(graph, list(PROBE_FANOUTS), seed=0)
    sizes, times = [], []
    for batch in (64, 1024):
        targets = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:batch]
        sizes.append(float(sum(b.num_edges for b in sampler.sample(targets, 0))))
        times.append(_best(lambda targets=targets: sampler.sample(targets, 0), seconds / 2))
    call, edge = cost_line(tuple(sizes), tuple(times))
    return call, edge, (f"NeighborSampler.sample (fanouts {', '.join(map(str, PROBE_FANOUTS))}) of 64 and 1024 "
                        f"targets on a random graph of {n} vertices (degree {deg:g}), best of repetitions, a line "
                        "through the two over the sampled edges")


def transfer_costs(tiny: bool, seconds: float) -> tuple[float, str]:
    """``(host_transfer_bandwidth, how)``: bytes per second of offload's host-array traffic on a CPU, where the
    "host-to-device" reads are row gathers and the writes row scatters through the strategy's own pipeline
    (:class:`~graphscale.strategies.offload.transfer.Transfers`, staged: a gather of random rows waited for, then
    a write of as many rows flushed), the slope through 2 sizes (fixed costs left out), bytes = rows read + written (:func:`cost_line`)."""
    import statistics

    import torch

    from graphscale.advise.timing import best_of as _best
    from graphscale.strategies.offload.transfer import Request, Transfers

    rows, width = (20000, 64) if tiny else (400000, 64)
    host = {"h": torch.zeros(rows, width)}
    transfers = Transfers(host, "cpu", mode="staged")
    gen = torch.Generator().manual_seed(0)
    probes = []
    for count in (rows // 16, rows // 4):
        ids = torch.randperm(rows, generator=gen)[:count].sort().values
        payload = torch.ones(count, width)

        def round_trip(ids=ids, payload=payload):
            transfers.wait(transfers.gather([Request("x", "h", ids)]))
            transfers.write("h", ids, None, payload)
            transfers.flush()
        probes.append((2.0 * count * width * 4, round_trip))
    slopes = []
    try:
        for _ in range(3):  # the median of 3 slopes: one slow large probe on a shared machine is not the rate
            (small, fn_small), (large, fn_large) = probes
            times = [_best(fn, seconds / 6, at_least=3) for fn in (fn_small, fn_large)]
            slopes.append(cost_line((small, large), (times[0], times[1]))[1])
    finally:
        transfers.close()
    slope = statistics.median(slopes)
    return 1.0 / slope, (f"offload's staged Transfers on {rows} x {width} float32 host rows: a gather of random "
                         f"rows waited for and a write of as many flushed, {rows // 16} and {rows // 4} rows, best "
                         "of repetitions, bytes read + written over the difference's time, median of 3")

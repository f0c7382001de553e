r"""HongTu's communication volumes in closed form, and the cost model built on them.

Everything here is set algebra over the scheduled chunk sets
(:class:`~graphscale.strategies.offload.plan.ChunkSets`), written
independently of the slot plans the strategy executes, so that the strategy's
measured Ledger can be asserted against it.

**One layer pass** (rows; multiply by the row width ``d_l`` and the element
size ``b``), with ``N_{i,j}`` the chunk source sets (destinations included),
``T_j = ∪_i N_{i,j}``, ``T_{i,j} = T_j ∩ V_i``, ``T_{i,-1} = T_{i,K} = ∅``
(spec §3.5)::

    baseline   h2d_local  = Σ_{i,j} |N_{i,j} ∩ V_i|      h2d_remote = Σ_{i,j} |N_{i,j} \ V_i|
    +inter     h2d_local  = Σ_j |T_j|                     p2p        = V_P = Σ_{i,j} |N_{i,j} \ V_i|
    +intra     h2d_local  = V_H = Σ_j (|T_j| - Σ_i |T_{i,j} ∩ T_{i,j-1}|)
               reuse      = V_R = Σ_{i,j} |T_{i,j} ∩ T_{i,j-1}|,    p2p = V_P
    baseline is α_{MK}·|V| rows in all:  Σ_{i,j} |N_{i,j}| = α_{MK} |V|

The gradient pass of a layer (backward, neighbour gradients to their owners)
moves, per pass::

    baseline   d2h_grad = Σ |N_{i,j} ∩ V_i|,  d2h_grad_remote = Σ |N_{i,j} \ V_i|   (written straight to host rows)
    +inter     p2p_grad = V_P,  d2h_grad = Σ_j |T_j|                               (pushed to owners, flushed)
    +intra     p2p_grad = V_P,  d2h_grad = Σ_j (|T_j| - Σ_i |T_{i,j} ∩ T_{i,j+1}|)  (= V_H rows)

**Cost** (Eq. 4): ``C = V_H / B_H + V_P / B_P + V_R / B_R`` in bytes over
bytes per second; defaults are A100-class links (PCIe 4.0 effective 25 GB/s,
NVLink 3.0 200 GB/s, HBM 1.5 TB/s). Every time computed here is *modelled*.

**Epoch** (:func:`epoch_bytes`): the closed form of every Ledger category of
one training epoch of :class:`~graphscale.strategies.offload.OffloadStrategy`
summed over workers; see that function for the terms.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from graphscale.cost.dims import ModelDims
from graphscale.distributed.comm import ALLREDUCE, CONTROL
from graphscale.options.offload import RECOMPUTE_MODES
from graphscale.strategies.offload.plan import ChunkSets, check_dedup

#: Ledger categories of the offload strategy.
H2D_LOCAL, H2D_REMOTE, P2P, REUSE = "h2d_local", "h2d_remote", "p2p", "reuse"
P2P_GRAD, D2H, D2H_GRAD, D2H_GRAD_REMOTE = "p2p_grad", "d2h", "d2h_grad", "d2h_grad_remote"
H2D_GRAD, H2D_CACHE, D2H_CACHE, H2D_DST, H2D_TOPO = "h2d_grad", "h2d_cache", "d2h_cache", "h2d_dst", "h2d_topo"
#: Categories that cross the host link, the peer link, or stay in device memory (reuse).
HOST_CATEGORIES = (H2D_LOCAL, H2D_REMOTE, D2H, D2H_GRAD, D2H_GRAD_REMOTE, H2D_GRAD, H2D_CACHE, D2H_CACHE, H2D_DST,
                   H2D_TOPO)
PEER_CATEGORIES = (P2P, P2P_GRAD)
INDEX_BYTES = 8  # int64 plan and topology entries



def check_recompute(option: str) -> str:
    """Validate the ``recompute`` option and return it."""
    if option not in RECOMPUTE_MODES:
        raise ValueError(f"--recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {option!r}")
    return option


@dataclass(frozen=True)
class Bandwidths:
    """Link throughputs of the modelled platform in bytes per second.

    Attributes:
        host: ``B_H``, host <-> device (PCIe 4.0 x16, effective).
        peer: ``B_P``, device <-> device (NVLink 3.0).
        reuse: ``B_R``, in-device reuse (HBM2e).
    """

    host: float = 25e9
    peer: float = 200e9
    reuse: float = 1.5e12


@dataclass(frozen=True)
class PassRows:
    """Rows moved by one neighbour-load pass and one gradient pass of a layer (summed over workers).

    Attributes:
        h2d_local, h2d_remote, p2p, reuse: the neighbour-load pass.
        p2p_grad, d2h_grad, d2h_grad_remote: the gradient pass.
        neighbours: ``Σ |N_{i,j}|`` (= ``α_{MK} |V|``).
        transition: ``Σ_j |T_j|``.
        loads, sends, flushes: plan entries ``Σ|R_{i,j}|``, ``Σ_{i,j} (rows peers read from i)``, ``Σ|F_{i,j}|``.
    """

    h2d_local: int
    h2d_remote: int
    p2p: int
    reuse: int
    p2p_grad: int
    d2h_grad: int
    d2h_grad_remote: int
    neighbours: int
    transition: int
    loads: int
    sends: int
    flushes: int

    @property
    def host(self) -> int:
        """``V_H``: rows over the host link in one neighbour-load pass."""
        return self.h2d_local + self.h2d_remote


def layer_pass_rows(sets: ChunkSets, dedup: str) -> PassRows:
    """The rows of one layer pass for a dedup mode (module docstring), by set algebra: O(Σ_{i,j} |N_{i,j}|) time
    and one int32 per vertex."""
    check_dedup(dedup)
    m, k, n = sets.num_parts, sets.num_chunks, sets.num_nodes
    owner = sets.owner
    local = remote = neighbours = 0
    for i in range(m):
        for j in range(k):
            nb = sets.nbr[i][j]
            r = int((owner[nb] != i).sum())
            remote += r
            local += nb.numel() - r
            neighbours += nb.numel()
    transition = overlap = 0
    batch = torch.full((n,), -1, dtype=torch.int32)  # the last batch whose transition set held each vertex
    for j in range(k):
        t_j = torch.unique(torch.cat([sets.nbr[i][j] for i in range(m)]))  # T_j = ∪_i N_{i,j}
        transition += t_j.numel()
        if j > 0:
            overlap += int((batch[t_j] == j - 1).sum())  # Σ_i |T_{i,j} ∩ T_{i,j-1}| (ownership partitions T_j)
        batch[t_j] = j
    return rows_from_counts(local, remote, neighbours, transition, overlap, dedup)


def rows_from_counts(local: int, remote: int, neighbours: int, transition: int, overlap: int, dedup: str) -> PassRows:
    """The rows of one layer pass from its set sizes: ``local`` / ``remote`` / ``neighbours`` (``Σ_{i,j}`` of
    ``|N_{i,j} ∩ V_i|``, ``|N_{i,j} \\ V_i|``, ``|N_{i,j}|``), ``transition`` (``Σ_j |T_j|``) and ``overlap``
    (``Σ_j |T_j ∩ T_{j-1}|``)."""
    check_dedup(dedup)
    if dedup == "baseline":
        return PassRows(local, remote, 0, 0, 0, local, remote, neighbours, transition, 0, 0, 0)
    if dedup == "inter":
        return PassRows(transition, 0, remote, 0, remote, transition, 0, neighbours, transition, transition, remote,
                        transition)
    v_h = transition - overlap
    return PassRows(v_h, 0, remote, overlap, remote, v_h, 0, neighbours, transition, v_h, remote, v_h)


def pass_cost(rows: PassRows, width: int, element_size: int, bw: Bandwidths = Bandwidths()) -> float:
    """Modelled seconds of one neighbour-load pass: ``V_H/B_H + V_P/B_P + V_R/B_R`` (bytes over bytes/s)."""
    row = width * element_size
    return rows.host * row / bw.host + rows.p2p * row / bw.peer + rows.reuse * row / bw.reuse


def modelled_seconds(volumes: dict[str, int], bw: Bandwidths = Bandwidths()) -> float:
    """Modelled transfer time of a byte breakdown: host categories at ``B_H``, peer at ``B_P``, reuse at ``B_R``."""
    host = sum(volumes.get(c, 0) for c in HOST_CATEGORIES)
    peer = sum(volumes.get(c, 0) for c in PEER_CATEGORIES)
    return host / bw.host + peer / bw.peer + volumes.get(REUSE, 0) / bw.reuse


def layer_modes(option: str, dims: ModelDims, rows: PassRows, num_nodes: int, element_size: int,
                bw: Bandwidths = Bandwidths()) -> list[str]:
    """Intermediate-data management per layer: ``hybrid``, ``recompute`` or ``none``.

    ``auto`` picks ``hybrid`` for a layer whose aggregate is linear when the
    modelled cost of caching (``A^l`` out and back over the host link, plus the
    destinations' rows when the update reads them) is below the cost of the
    extra neighbour-load pass that recomputation needs; otherwise ``recompute``.

    Raises:
        ValueError: ``hybrid`` is forced on a layer whose aggregate is not a fixed linear map.
    """
    check_recompute(option)
    out = []
    for layer in range(dims.num_layers):
        if option in ("recompute", "none"):
            out.append(option)
            continue
        if option == "hybrid":
            if not dims.linear[layer]:
                raise ValueError(f"--recompute hybrid: layer {layer}'s aggregate is edge-parametrised (not a fixed "
                                 "linear map), so it cannot be cached; use --recompute auto or recompute")
            out.append("hybrid")
            continue
        cache_rows = 2 * num_nodes * dims.agg[layer] + (num_nodes * dims.widths[layer] if dims.uses_dst[layer] else 0)
        cache = cache_rows * element_size / bw.host
        recompute = pass_cost(rows, dims.widths[layer], element_size, bw)
        out.append("hybrid" if dims.linear[layer] and cache < recompute else "recompute")
    return out


# ----------------------------------------------------------------------------- epoch closed form
def epoch_bytes(sets: ChunkSets, dedup: str, modes: list[str], dims: ModelDims, element_size: int,
                num_params: int, resident_topology: bool = False) -> dict[str, int]:
    """Bytes of every Ledger category in one training epoch, summed over workers.

    With ``V = |V|``, ``E = |E|``, ``b`` bytes per element, the pass rows of
    :func:`layer_pass_rows` and, for layer ``l``, widths ``d_l``, ``a_l``,
    ``o_l``:

    * forward of layer ``l``: one neighbour-load pass of width ``d_l``;
      ``d2h += V o_l b`` (``H^{l+1}``); hybrid: ``d2h_cache += V a_l b``;
      GCNII: ``h2d_dst += V d_0 b`` (``H^0`` of the destinations); last layer:
      ``d2h_grad += V o_{L-1} b`` (``G^L`` from the fused loss);
    * backward of layer ``l``: ``h2d_grad += V o_l b`` (``G^{l+1}``);
      recompute: another neighbour-load pass (and ``H^0`` rows for GCNII);
      hybrid: ``h2d_cache += V a_l b``, ``h2d_dst += V d_l b`` if the update
      reads the destinations, ``+ V d_0 b`` for GCNII; none: nothing more;
      when ``l > 0`` or the input map is learned, one gradient pass of width
      ``d_l``; a learned input map with GCNII adds ``d2h_grad += V d_0 b``;
    * a learned input map: ``h2d_dst += 2 V in b`` (raw rows, forward and
      backward), ``d2h += V d_0 b``, ``h2d_grad += V d_0 b``;
    * ``h2d_topo``: 8 bytes per index moved: every chunk pass moves its block
      (``|V_{i,j}| + 1 + |E_{i,j}| + 2 |N_{i,j}|`` entries; summed
      ``V + MK + E + 2 α V``) except a ``none`` backward (the block stayed on
      the device); with dedup a neighbour-load pass adds
      ``α V + Σ|R| + Σ sends`` (``src_index``, load and send slots) and a
      gradient pass adds ``Σ|F|`` (flush slots), plus ``α V + Σ sends`` when
      they were not moved by a load in the same chunk pass (hybrid, none); an
      input-map pass moves ``V`` ids; with ``resident_topology`` (the plan moved
      once at setup, :mod:`~graphscale.strategies.offload.resident`) an epoch
      moves none;
    * ``allreduce = 2 (M-1) P b`` (ring), ``control = 2 (M-1) 8`` (loss).
    """
    check_dedup(dedup)
    if len(modes) != dims.num_layers:
        raise ValueError(f"epoch_bytes: {len(modes)} modes for {dims.num_layers} layers")
    rows = layer_pass_rows(sets, dedup)
    m, k, v = sets.num_parts, sets.num_chunks, sets.num_nodes
    e = int(sets.num_edges.sum())
    b = element_size
    dedup_on = dedup != "baseline"
    out: dict[str, int] = defaultdict(int)
    block = INDEX_BYTES * (v + m * k + e + 2 * rows.neighbours)
    load_plan = INDEX_BYTES * (rows.neighbours + rows.loads + rows.sends) if dedup_on else 0
    push_plan = INDEX_BYTES * (rows.neighbours + rows.sends) if dedup_on else 0
    flush_plan = INDEX_BYTES * rows.flushes if dedup_on else 0

    def neighbour_pass(width: int) -> None:
        out[H2D_LOCAL] += rows.h2d_local * width * b
        out[H2D_REMOTE] += rows.h2d_remote * width * b
        out[P2P] += rows.p2p * width * b
        out[REUSE] += rows.reuse * width * b

    def gradient_pass(width: int) -> None:
        out[P2P_GRAD] += rows.p2p_grad * width * b
        out[D2H_GRAD] += rows.d2h_grad * width * b
        out[D2H_GRAD_REMOTE] += rows.d2h_grad_remote * width * b

    d0 = dims.widths[0]
    if dims.learned_input:
        out[H2D_DST] += 2 * v * dims.in_dim * b
        out[D2H] += v * d0 * b
        out[H2D_GRAD] += v * d0 * b
        out[H2D_TOPO] += 2 * INDEX_BYTES * v
    last = dims.num_layers - 1
    for layer, mode in enumerate(modes):
        d, a, o = dims.widths[layer], dims.agg[layer], dims.out[layer]
        need = dims.needs_src_grad(layer)
        # forward
        neighbour_pass(d)
        out[H2D_TOPO] += block + load_plan
        if dims.needs_h0:
            out[H2D_DST] += v * d0 * b
        out[D2H] += v * o * b
        if mode == "hybrid":
            out[D2H_CACHE] += v * a * b
        if layer == last:
            out[D2H_GRAD] += v * o * b
        # backward
        out[H2D_GRAD] += v * o * b
        if mode == "recompute":
            neighbour_pass(d)
            out[H2D_TOPO] += block + load_plan + (flush_plan if need else 0)
            if dims.needs_h0:
                out[H2D_DST] += v * d0 * b
        elif mode == "hybrid":
            out[H2D_CACHE] += v * a * b
            if dims.uses_dst[layer]:
                out[H2D_DST] += v * d * b
            if dims.needs_h0:
                out[H2D_DST] += v * d0 * b
            out[H2D_TOPO] += block + (push_plan + flush_plan if need else 0)
        else:
            out[H2D_TOPO] += push_plan + flush_plan if need else 0
        if dims.needs_h0 and dims.learned_input:
            out[D2H_GRAD] += v * d0 * b
        if need:
            gradient_pass(d)
    if m > 1:
        out[ALLREDUCE] += 2 * (m - 1) * num_params * b
        out[CONTROL] += 2 * (m - 1) * 8
    if resident_topology:
        out.pop(H2D_TOPO, None)
    return {c: n for c, n in sorted(out.items()) if n}

"""NeutronTask's task plan (spec §3.1, §3.3) and its scheduling model (§3.6, Eqs. 5-8).

**Ranks and roles** (Algorithm 2). Of ``N`` workers, ranks ``0..q-1`` run the dense transformations (T: the MLP
``g_theta``, every parameter) and ranks ``q..N-1`` the sparse propagations (P: no parameters). Each task type is a
chain of *stages* in layer order; a stage is a *group* of ranks (size 1 in plain task parallelism) holding a
half-open range ``[start, stop)`` of consecutive layers. Subgraphs flow T stage 0 -> ... -> last T stage ->
P stage 0 -> ... -> last P stage (which computes the loss), and gradients flow back.

**Layers per stage.** With ``n`` ranks of a type and ``L`` layers:

* ``n <= L``: ``n`` stages of one rank, the layers split into contiguous blocks as evenly as possible; when ``n``
  does not divide ``L`` the *last* ``L mod n`` stages take one layer more (the first T layer, ``F x d``, is the
  widest GEMM, so the stage holding it gets the smaller share; P layers all run at one width in the decoupled
  model, so for P the choice is neutral).
* ``n > L`` (P only with ``p_split="layers"``): hybrid parallelism (§3.3), ``L`` stages of ``n / L`` ranks each,
  one layer per stage; ``L`` must divide ``n`` (equal groups), else ``ValueError`` naming ``--t-workers`` /
  ``--workers`` and the values that would work. Inside a T group the members split the rows and all-reduce the
  weight gradients; inside a P group they split the chunks and exchange mirrors per layer, so a P group of ``g``
  ranks replicates vertices with the factor :func:`replication_alpha` of a ``g``-way partition.
* ``p_split="subgraphs"`` (the artifact's regime): one P stage ``(0, L)`` holding every P rank; subgraph ``s`` goes
  to member ``s % n`` (data parallel over subgraphs, no layer split), so any ``n`` works.

**How many T ranks.** ``--t-workers q`` (``1 <= q <= N - 1``) when given. Otherwise the scheduling model:
``T_t`` and ``T_p`` (:func:`task_costs`, Eqs. 5-6), ``N_p = round(N T_p / (T_p + T_t))`` (Eq. 7, rounding half
up), ``N_t = N - N_p`` (Eq. 8), both clamped to ``>= 1`` (:func:`schedule`). When the model's ``q`` cannot be
split into equal hybrid groups (say ``N = 8``, ``L = 2``, ``q = 1``: 7 P ranks over 2 layers), the plan takes the
feasible ``q`` nearest to it (ties: nearest to the unrounded ``N T_t / (T_t + T_p)``); a ``q`` the user gave is
never changed. Task parallelism needs two workers at least (one of each type).

**Scheduling model** (§3.6). With ``widths = (d^1, ..., d^{L+1})`` the T stack's widths (input, hidden...,
output), ``d_bar = |E| / |V|`` and ``b`` bytes per element::

    T_t = [ sum_l 2 |V| d^l d^{l+1}  +  2 |E| d_e^2 ] / FLOPS          (edge term only with attention, d_e = d^L)
    T_p = sum_l [ gamma 2 |V| d_bar p_l / FLOPS + (1 - gamma) (|V| d_bar (1 + 2 p_l) + |V|) b / Bandwidth ]

where ``p_l`` is the width P layer ``l`` runs at: the T stack's output width for every layer in the decoupled
model (``Y = A^L MLP(X)``), ``d^{l+1}`` (T layer ``l``'s output) in the coupled order. The bandwidth term counts
elements, multiplied by ``b`` (the spec's rule). ``d_e = d^L`` is Eq. 5 as printed. FLOPS and bandwidth default to
this machine's, measured once per thread count (:func:`cpu_speeds`: a short GEMM timing and a short copy timing,
about 0.2 s together) and kept for the life of the process.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from graphscale.options.task_parallel import P_SPLITS

#: the overlap weight gamma of Eq. 6 (the artifact's commented code)
DEFAULT_GAMMA = 0.5
#: seconds each of the two speed measurements runs for (best rate of the repetitions it fits)
MEASURE_SECONDS = 0.08


@dataclass(frozen=True)
class TaskPlan:
    """Which rank runs which tasks (module docstring).

    Attributes:
        workers: ``N``.
        layers: ``L``.
        p_split: ``"layers"`` (P stages chained over layers) or ``"subgraphs"`` (one P stage, subgraphs
            round-robin over its members: subgraph ``s`` -> member ``s % size``).
        t_groups: the ranks of every T stage, in chain order (size-1 groups = plain task parallelism).
        p_groups: the ranks of every P stage, in chain order.
        t_layers: half-open layer range of every T stage (contiguous, covering ``0..L``).
        p_layers: the same for the P stages (``((0, L),)`` with ``p_split="subgraphs"``).
    """

    workers: int
    layers: int
    p_split: str
    t_groups: tuple[tuple[int, ...], ...]
    p_groups: tuple[tuple[int, ...], ...]
    t_layers: tuple[tuple[int, int], ...]
    p_layers: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if self.p_split not in P_SPLITS:
            raise ValueError(f"p_split must be one of {', '.join(P_SPLITS)}, got {self.p_split!r}")
        ranks = [r for g in (*self.t_groups, *self.p_groups) for r in g]
        if ranks != list(range(self.workers)):
            raise ValueError(f"the T groups then the P groups must hold ranks 0..{self.workers - 1} in order, "
                             f"got {self.t_groups} and {self.p_groups}")
        for kind, groups, ranges in (("T", self.t_groups, self.t_layers), ("P", self.p_groups, self.p_layers)):
            if not groups or any(not g for g in groups):
                raise ValueError(f"every {kind} stage needs at least one rank, got {groups}")
            if len(ranges) != len(groups):
                raise ValueError(f"{len(groups)} {kind} groups but {len(ranges)} {kind} layer ranges")
            bounds = [b for r in ranges for b in r]
            if (bounds[0] != 0 or bounds[-1] != self.layers or any(a >= b for a, b in ranges)
                    or any(ranges[i][1] != ranges[i + 1][0] for i in range(len(ranges) - 1))):
                raise ValueError(f"the {kind} layer ranges must be contiguous, non-empty and cover 0..{self.layers}, "
                                 f"got {ranges}")
        if self.p_split == "subgraphs" and len(self.p_groups) != 1:
            raise ValueError("p_split='subgraphs' has exactly one P stage")

    @property
    def t_ranks(self) -> tuple[int, ...]:
        """Ranks running T tasks (``0..q-1``)."""
        return tuple(r for g in self.t_groups for r in g)

    @property
    def p_ranks(self) -> tuple[int, ...]:
        """Ranks running P tasks (``q..N-1``)."""
        return tuple(r for g in self.p_groups for r in g)

    def role(self, rank: int) -> tuple[str, int, int]:
        """``("T" | "P", stage index, index of rank within its group)``.

        Raises:
            ValueError: ``rank`` outside ``0..workers-1``.
        """
        for kind, groups in (("T", self.t_groups), ("P", self.p_groups)):
            for stage, group in enumerate(groups):
                if rank in group:
                    return kind, stage, group.index(rank)
        raise ValueError(f"rank {rank} is not in the plan's {self.workers} workers")

    def describe(self) -> str:
        """One line: ``T [0] L0-1 | P [1,2] L0 [3,4] L1`` (groups and their layers)."""
        def part(kind, groups, ranges):
            return f"{kind} " + " ".join(f"[{','.join(map(str, g))}] L{a}" + (f"-{b - 1}" if b - a > 1 else "")
                                         for g, (a, b) in zip(groups, ranges))
        return f"{part('T', self.t_groups, self.t_layers)} | {part('P', self.p_groups, self.p_layers)}" + \
            (" (subgraphs round-robin)" if self.p_split == "subgraphs" else "")


def _stages(first: int, ranks: int, layers: int) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...]]:
    """Groups and layer ranges of ``ranks`` ranks (from ``first``) over ``layers`` layers, ``p_split="layers"``."""
    if ranks <= layers:
        base, extra = divmod(layers, ranks)
        sizes = [base + (s >= ranks - extra) for s in range(ranks)]
        starts = [sum(sizes[:s]) for s in range(ranks)]
        return (tuple((first + s,) for s in range(ranks)),
                tuple((a, a + n) for a, n in zip(starts, sizes)))
    size = ranks // layers
    return (tuple(tuple(range(first + s * size, first + (s + 1) * size)) for s in range(layers)),
            tuple((s, s + 1) for s in range(layers)))


def _splits(ranks: int, layers: int) -> bool:
    """Whether ``ranks`` ranks of one type can hold ``layers`` layers (one per rank or equal hybrid groups)."""
    return ranks <= layers or ranks % layers == 0


def feasible_t_workers(workers: int, layers: int, p_split: str = "layers") -> list[int]:
    """The T rank counts ``q`` a plan of ``workers`` workers and ``layers`` layers can take."""
    return [q for q in range(1, workers) if _splits(q, layers) and (p_split == "subgraphs"
                                                                   or _splits(workers - q, layers))]


def _check_args(workers: int, layers: int, p_split: str) -> None:
    for name, value in (("--workers", workers), ("--layers", layers)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    if workers < 2:
        raise ValueError(f"strategy 'task-parallel' needs --workers >= 2 (at least one T and one P worker), "
                         f"got {workers}")
    if layers < 1:
        raise ValueError(f"--layers must be >= 1, got {layers}")
    if p_split not in P_SPLITS:
        raise ValueError(f"--p-split must be one of {', '.join(P_SPLITS)}, got {p_split!r}")


def make_plan(workers: int, layers: int, *, t_workers: int | None = None, p_split: str = "layers",
              costs: tuple[float, float] | None = None) -> TaskPlan:
    """The plan of ``workers`` workers for an ``layers``-layer model (module docstring).

    Args:
        workers: ``N >= 2``.
        layers: ``L >= 1``.
        t_workers: ``q``, the T ranks (``--t-workers``); ``None``: from the scheduling model with ``costs``.
        p_split: ``"layers"`` or ``"subgraphs"`` (``--p-split``).
        costs: ``(T_t, T_p)`` from :func:`task_costs`, needed exactly when ``t_workers`` is ``None``.

    Raises:
        ValueError: fewer than 2 workers, an unknown ``p_split``, a ``t_workers`` that leaves a type without ranks
            or whose groups cannot be equal, ``costs`` missing or given next to ``t_workers``.
    """
    _check_args(workers, layers, p_split)
    feasible = feasible_t_workers(workers, layers, p_split)
    if t_workers is not None:
        if costs is not None:
            raise ValueError("give the T worker count (--t-workers) or the costs of the scheduling model, not both")
        if isinstance(t_workers, bool) or not isinstance(t_workers, int):
            raise TypeError(f"--t-workers must be an integer, got {t_workers!r}")
        if not 1 <= t_workers <= workers - 1:
            raise ValueError(f"--t-workers {t_workers} leaves " + ("no T" if t_workers < 1 else "no P")
                             + f" worker among --workers {workers}; give 1..{workers - 1} (or leave --t-workers out "
                             "for the scheduling model's choice)")
        if t_workers not in feasible:
            kind, n = ("T", t_workers) if not _splits(t_workers, layers) else ("P", workers - t_workers)
            raise ValueError(
                f"--t-workers {t_workers} with --workers {workers} gives {n} {kind} workers for {layers} layers: more "
                f"workers than layers need equal hybrid groups, one per layer ({n} is not a multiple of {layers}); "
                f"--t-workers {', '.join(map(str, feasible))} would work"
                + (", or --p-split subgraphs" if kind == "P" else ""))
        q = t_workers
    else:
        if costs is None:
            raise ValueError("without --t-workers the plan needs the costs (T_t, T_p) of the scheduling model")
        n_t, _ = schedule(workers, *costs)
        t_t, t_p = (float(c) for c in costs)
        ideal = workers * t_t / (t_t + t_p)
        q = min(feasible, key=lambda f: (abs(f - n_t), abs(f - ideal), f))
    t_groups, t_layers = _stages(0, q, layers)
    if p_split == "subgraphs":
        p_groups, p_layers = (tuple(range(q, workers)),), ((0, layers),)
    else:
        p_groups, p_layers = _stages(q, workers - q, layers)
    return TaskPlan(workers=workers, layers=layers, p_split=p_split, t_groups=t_groups, p_groups=p_groups,
                    t_layers=t_layers, p_layers=p_layers)


# --------------------------------------------------------------------------------------- the scheduling model


def schedule(workers: int, t_t: float, t_p: float) -> tuple[int, int]:
    """Eqs. 7-8: ``N_p = round(N T_p / (T_p + T_t))`` (half up), ``N_t = N - N_p``, both clamped to ``>= 1``.

    Raises:
        ValueError: fewer than 2 workers, a negative cost, or both costs zero.
    """
    if workers < 2:
        raise ValueError(f"strategy 'task-parallel' needs --workers >= 2, got {workers}")
    if t_t < 0 or t_p < 0 or t_t + t_p <= 0 or not math.isfinite(t_t + t_p):
        raise ValueError(f"the task costs must be finite, >= 0 and not both zero, got T_t={t_t}, T_p={t_p}")
    n_p = math.floor(workers * t_p / (t_p + t_t) + 0.5)
    n_p = min(max(n_p, 1), workers - 1)
    return workers - n_p, n_p


def task_costs(num_vertices: int, num_edges: int, widths: Sequence[int], *, attention: bool = False,
               decoupled: bool = True, gamma: float = DEFAULT_GAMMA, flops: float | None = None,
               bandwidth: float | None = None, dtype_bytes: int = 4) -> tuple[float, float]:
    """``(T_t, T_p)`` in seconds, Eqs. 5-6 (module docstring): the sums of :func:`layer_costs`.

    Args:
        num_vertices, num_edges: ``|V|``, ``|E|`` (stored records).
        widths: ``(d^1, ..., d^{L+1})``: the T stack's input, hidden and output widths.
        attention: add Eq. 5's edge term (GAT).
        decoupled: P layers run at the T output width (``Y = A^L MLP(X)``); ``False``: the coupled order, P layer
            ``l`` at ``d^{l+1}``.
        gamma: Eq. 6's compute / memory weight, in ``[0, 1]`` (``--task-gamma``).
        flops: compute rate in FLOP/s (``--device-flops``); default this machine's (:func:`cpu_speeds`).
        bandwidth: memory bandwidth in bytes/s (``--device-bandwidth``); default this machine's.
        dtype_bytes: ``b``, bytes per element.

    Raises:
        ValueError: fewer than two widths, a non-positive width, vertex count, rate or ``dtype_bytes``, a
            ``gamma`` outside ``[0, 1]``.
    """
    t, p = layer_costs(num_vertices, num_edges, widths, attention=attention, decoupled=decoupled, gamma=gamma,
                       flops=flops, bandwidth=bandwidth, dtype_bytes=dtype_bytes)
    return sum(t), sum(p)


def layer_costs(num_vertices: int, num_edges: int, widths: Sequence[int], *, attention: bool = False,
                decoupled: bool = True, gamma: float = DEFAULT_GAMMA, flops: float | None = None,
                bandwidth: float | None = None, dtype_bytes: int = 4) -> tuple[list[float], list[float]]:
    """The terms of Eqs. 5-6 per layer: ``([T layer 0, ..., T layer L-1], [P layer 0, ..., P layer L-1])`` in
    seconds (arguments as :func:`task_costs`; Eq. 5's edge term, computed once from the final T output, is
    counted with the last T layer). ``num_vertices`` / ``num_edges`` may be a subgraph's: its rows and the edges
    into them."""
    widths = [int(w) for w in widths]
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths must be the T stack's L + 1 >= 2 positive widths, got {widths}")
    if num_vertices < 1 or num_edges < 0:
        raise ValueError(f"need |V| >= 1 and |E| >= 0, got {num_vertices} and {num_edges}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"--task-gamma must lie in [0, 1], got {gamma}")
    if dtype_bytes < 1:
        raise ValueError(f"dtype_bytes must be >= 1, got {dtype_bytes}")
    if flops is None or bandwidth is None:
        measured_flops, measured_bandwidth = cpu_speeds()
        flops = measured_flops if flops is None else flops
        bandwidth = measured_bandwidth if bandwidth is None else bandwidth
    for name, value in (("--device-flops", flops), ("--device-bandwidth", bandwidth)):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{name} must be a positive rate, got {value}")
    n, e, layers = float(num_vertices), float(num_edges), len(widths) - 1
    t = [2 * n * widths[i] * widths[i + 1] / flops for i in range(layers)]
    if attention:
        d_e = widths[layers - 1]
        t[-1] += 2 * e * d_e * d_e / flops
    d_bar = e / n
    p_widths = [widths[-1]] * layers if decoupled else widths[1:]
    p = [gamma * 2 * n * d_bar * w / flops + (1 - gamma) * (n * d_bar * (1 + 2 * w) + n) * dtype_bytes / bandwidth
         for w in p_widths]
    return t, p


def cpu_speeds() -> tuple[float, float]:
    """This machine's ``(FLOP/s, bytes/s)`` at the current ``torch.get_num_threads()``, measured once per thread
    count in this process (:func:`measure_flops`, :func:`measure_bandwidth`)."""
    return _speeds(torch.get_num_threads())


@functools.cache
def _speeds(threads: int) -> tuple[float, float]:  # the thread count is the cache key
    return measure_flops(), measure_bandwidth()


def _best_rate(fn, amount: float, seconds: float) -> float:
    """``amount`` / the fastest of the calls of ``fn`` that fit in ``seconds`` (after one warm-up call)."""
    fn()
    best, deadline = math.inf, time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        best = min(best, end - start)
        if end >= deadline:
            return amount / max(best, 1e-9)


def measure_flops(n: int = 384, seconds: float = MEASURE_SECONDS) -> float:
    """FLOP/s of a float32 ``n x n`` GEMM (``2 n^3`` operations), best of the repetitions in ``seconds``."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    out = torch.empty(n, n)
    return _best_rate(lambda: torch.mm(a, b, out=out), 2.0 * n ** 3, seconds)


def measure_bandwidth(elements: int = 1 << 23, seconds: float = MEASURE_SECONDS) -> float:
    """Bytes/s of a float32 copy of ``elements`` elements (read + write: ``2 * 4 * elements`` bytes), best of the
    repetitions in ``seconds`` (32 MiB each way by default: past the last-level cache of most machines)."""
    src, dst = torch.ones(elements), torch.empty(elements)
    return _best_rate(lambda: dst.copy_(src), 2.0 * src.element_size() * elements, seconds)


# --------------------------------------------------------------------------------------- hybrid P groups


def replication_alpha(graph, parts: int, *, partitioner: str = "metis", seed: int = 0) -> float:
    """``alpha = 1 + sum_i |B_i| / |V|`` of a ``parts``-way partition of ``graph`` by ``partitioner``
    (``--partitioner`` syntax, ``NAME[:key=value,...]``): the vertex rows a P group of ``parts`` ranks holds per
    vertex (its own plus the mirrors of §3.3; ``1`` for one rank).

    ``sum_i |B_i| / |V|`` is :func:`graphscale.partition.base.replication_factor`, the halo count graph
    parallelism exchanges, so ``alpha`` of ``N`` parts is graph parallelism's replication on ``N`` workers.
    """
    from graphscale.partition.base import replication_factor
    from graphscale.partition.build import build_vertex_partitioner

    owner = build_vertex_partitioner(partitioner).partition(graph, parts, seed=seed)
    return 1.0 + replication_factor(graph, owner, parts)


def p_group_alphas(plan: TaskPlan, graph, *, partitioner: str = "metis", seed: int = 0) -> list[float]:
    """:func:`replication_alpha` of every P group of ``plan`` (1 for groups of one rank)."""
    return [replication_alpha(graph, len(g), partitioner=partitioner, seed=seed) for g in plan.p_groups]

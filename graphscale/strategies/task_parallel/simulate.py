"""A discrete-event model of NeutronTask's subgraph pipeline (Algorithm 2, Fig. 5c), and the same figures from
measured per-stage timestamps.

**What is simulated.** One training epoch of the decoupled chain of a :class:`~.plan.TaskPlan`: the T stages then
the P stages, ``S`` subgraphs, every layer of every subgraph a *task* on its stage's device, every hand-over
between stages a *transfer* on the directed link between them (links are full duplex: one resource per direction;
host -> first T stage is the ``host`` link). Per subgraph ``s``:

* forward: host load, T layers ``0..L-1`` (chained over the T stages), T -> P transfer, P layers ``0..L-1``
  (chained over the P stages; the last computes the loss);
* backward: P layers ``L-1..0`` in reverse chain order, the gradient to the last T stage, T-backward
  ``L-1..0``; T stage ``0`` sends nothing back (the features need no gradient);
* with ``recompute`` (§3.4) the T stages keep nothing from the forward: once the loss of ``s`` is computed they
  re-run T-forward of ``s`` (host load again, transfers between T stages again), concurrently with P-backward, and
  T-backward of a layer waits for its recomputed activations.

**Dependencies between subgraphs** follow the dependency mode (§3.2): P layer ``l`` of subgraph ``s`` reads the
layer's input rows of the subgraphs ``s'`` whose blocks it aggregates (``block_diag``: ``s' = s``; ``causal``:
``s' <= s`` in the epoch's order, cached rows; ``full``: every ``s'``) and, in backward, the gradients of the
subgraphs that read ``s`` (``block_diag``: ``s``; ``causal``: ``s' >= s``, hence the reverse order; ``full``:
all). T layers are row-wise: subgraph ``s`` only.

**Schedules.** Every device and link runs one task at a time, never pre-empted. When several are ready it takes
backward before recompute before forward (frees memory first, as the artifact's P thread runs forward, loss and
backward of a subgraph back to back), then the earliest subgraph (in ``causal`` backward the latest: the strategy
runs P-backward in reverse subgraph order, §3.2), then the lowest layer. ``pipelined`` lets the
subgraphs overlap (T of ``s + 1`` while P of ``s``, Fig. 5c); ``serial`` runs one subgraph through every stage
before the next starts (no two subgraphs' tasks at once; recompute still overlaps P-backward of the same
subgraph).

**Costs** (:func:`modelled_costs`). Per subgraph, Eqs. 5-6 per layer (:func:`~.plan.layer_costs`) with the
subgraph's rows and the edges into them; T-backward takes ``t_backward`` times T-forward (two GEMMs, ``dX`` and
``dW``, against one: 2 by default), P-backward ``p_backward`` times P-forward (the same SpMM on the transpose: 1);
a stage of ``g`` ranks splitting rows (hybrid, §3.3) takes ``1 / g`` of its stage's time (its mirror exchange is
not modelled); with ``p_split="subgraphs"`` subgraph ``s`` runs on member ``s % g`` alone. A transfer takes its rows
x width x bytes per element / the link's bandwidth, host loads the same over the host link.

**Measured timestamps** (:func:`analyse`): ``(rank, subgraph, phase, start, end)`` records, from a run or from
:meth:`Schedule.records`; their makespan, each rank's busy time, the *concurrency* (busy time / makespan: the
average number of busy ranks), the *overlap* (the time at least two subgraphs are in flight at once, / makespan)
and the *serial estimate* (sum over subgraphs of the time that subgraph has a task running: the makespan the same
task times would give without overlap between subgraphs).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from graphscale.strategies.task_parallel.plan import DEFAULT_GAMMA, TaskPlan, layer_costs

MODES = ("full", "causal", "block_diag")
#: the task kinds: compute on a T or P stage, a transfer between stages, a load from the host
ALL_KINDS = ("T", "P", "send", "host")
#: phase order of the ready-task choice: backward first, then recompute, then forward (transfers inherit theirs)
PHASE_RANK = {"bwd": 0, "recompute": 1, "fwd": 2}


@dataclass(frozen=True)
class Costs:
    """Seconds of every task of an epoch, ``[layer][subgraph]`` (``L x S``), and of every transfer.

    Attributes:
        t_forward, t_backward, p_forward, p_backward: seconds of T / P layer ``l`` on subgraph ``s``, for the whole
            stage (a hybrid stage's members share it; :func:`simulate` divides by the group size).
        link: ``[boundary][subgraph]`` seconds of the hand-over after chain stage ``c`` (T stages then P stages:
            ``len(t_groups) + len(p_groups) - 1`` boundaries); the gradient back over the same boundary takes as
            long.
        host: ``[subgraph]`` seconds of the host -> T stage 0 load.
    """

    t_forward: tuple[tuple[float, ...], ...]
    t_backward: tuple[tuple[float, ...], ...]
    p_forward: tuple[tuple[float, ...], ...]
    p_backward: tuple[tuple[float, ...], ...]
    link: tuple[tuple[float, ...], ...]
    host: tuple[float, ...]

    @property
    def subgraphs(self) -> int:
        return len(self.host)


@dataclass(frozen=True)
class Task:
    """One unit of work on one resource (a stage member or a link)."""

    resource: Hashable
    subgraph: int
    phase: str  # "fwd" | "bwd" | "recompute"
    kind: str  # "T" | "P" | "send" | "host"
    layer: int  # the layer (for a transfer: the chain boundary)
    duration: float
    deps: tuple[int, ...] = ()
    position: int = 0  # the subgraph's turn among the ready tasks of its phase (lower first)


@dataclass
class Schedule:
    """The simulated epoch: every task with its start and end."""

    tasks: list[Task]
    start: list[float]
    end: list[float]
    makespan: float = field(init=False)

    def __post_init__(self) -> None:
        self.makespan = max(self.end, default=0.0) - min(self.start, default=0.0)

    def records(self, kinds: Iterable[str] = ("T", "P")) -> list[tuple]:
        """``(resource, subgraph, phase, start, end)`` of the tasks of ``kinds`` (default the compute tasks), the
        format :func:`analyse` reads."""
        kinds = set(kinds)
        return [(t.resource, t.subgraph, f"{t.kind}_{t.phase}", s, e)
                for t, s, e in zip(self.tasks, self.start, self.end) if t.kind in kinds]


# --------------------------------------------------------------------------------------- the task graph


def epoch_tasks(plan: TaskPlan, costs: Costs, *, mode: str = "causal", recompute: bool = True,
                order: Sequence[int] | None = None) -> list[Task]:
    """The tasks of one epoch of ``plan`` (module docstring), in a topological order.

    Args:
        plan: stages and their layers (T stages, then P stages).
        costs: seconds of every task (:class:`Costs`; ``L x S``).
        mode: ``full`` | ``causal`` | ``block_diag``, the subgraph dependencies of the P layers.
        recompute: re-run T-forward in backward (T keeps no activations).
        order: the position of every subgraph in the epoch (default ``0..S-1``); ``causal`` reads earlier ones.

    Raises:
        ValueError: an unknown mode, or costs whose shape does not match the plan.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    layers, subgraphs = plan.layers, costs.subgraphs
    for name in ("t_forward", "t_backward", "p_forward", "p_backward"):
        table = getattr(costs, name)
        if len(table) != layers or any(len(row) != subgraphs for row in table):
            raise ValueError(f"costs.{name} must be {layers} x {subgraphs} (layers x subgraphs)")
    stages = [("T", g, r) for g, r in zip(plan.t_groups, plan.t_layers)] + \
             [("P", g, r) for g, r in zip(plan.p_groups, plan.p_layers)]
    if len(costs.link) != len(stages) - 1 or any(len(row) != subgraphs for row in costs.link):
        raise ValueError(f"costs.link must be {len(stages) - 1} x {subgraphs} (chain boundaries x subgraphs)")
    order = list(range(subgraphs)) if order is None else [int(s) for s in order]
    if sorted(order) != list(range(subgraphs)):
        raise ValueError(f"order must be a permutation of 0..{subgraphs - 1}, got {order}")
    pos = {s: i for i, s in enumerate(order)}
    round_robin = plan.p_split == "subgraphs"

    tasks: list[Task] = []

    def add(resource, s, phase, kind, layer, duration, deps) -> int:
        turn = subgraphs - 1 - pos[s] if phase == "bwd" and mode == "causal" else pos[s]
        tasks.append(Task(resource, s, phase, kind, layer, float(duration), tuple(d for d in deps if d is not None),
                          turn))
        return len(tasks) - 1

    def member(c: int, s: int):
        kind, group, _ = stages[c]
        name = f"{kind}{c if kind == 'T' else c - len(plan.t_groups)}"
        return f"{name}.{s % len(group)}" if kind == "P" and round_robin and len(group) > 1 else name

    def share(c: int, seconds: float) -> float:
        kind, group, _ = stages[c]
        return seconds if kind == "P" and round_robin else seconds / len(group)

    def link(a: int, b: int, s: int) -> str:
        return f"{member(a, s)}>{member(b, s)}"

    stage_of = {}  # (kind, layer) -> chain index
    for c, (kind, _, (lo, hi)) in enumerate(stages):
        for layer in range(lo, hi):
            stage_of[kind, layer] = c

    def t_chain(phase: str, s: int, first_dep) -> dict[int, int]:
        """T-forward (or its recompute) of ``s``: host load, layers, transfers between T stages."""
        out = {}
        prev = add("host", s, phase, "host", -1, costs.host[s], [first_dep])
        for layer in range(layers):
            c = stage_of["T", layer]
            if layer > 0 and stage_of["T", layer - 1] != c:
                prev = add(link(c - 1, c, s), s, phase, "send", c - 1, costs.link[c - 1][s], [prev])
            prev = out[layer] = add(member(c, s), s, phase, "T", layer, share(c, costs.t_forward[layer][s]), [prev])
        return out

    t_fwd = {s: t_chain("fwd", s, None) for s in order}
    # P forward: layer by layer, since a layer's dependencies span subgraphs
    p_fwd: dict[tuple[int, int], int] = {}
    arrived: dict[tuple[int, int], int] = {}  # (layer, s) -> the task after which s's input of P layer l is there
    q_last = len(plan.t_groups) - 1
    for s in order:
        arrived[0, s] = add(link(q_last, q_last + 1, s), s, "fwd", "send", q_last, costs.link[q_last][s],
                            [t_fwd[s][layers - 1]])
    for layer in range(layers):
        c = stage_of["P", layer]
        for s in order:
            reads = [x for x in order if _reads(mode, pos[s], pos[x])]
            p_fwd[layer, s] = add(member(c, s), s, "fwd", "P", layer, share(c, costs.p_forward[layer][s]),
                                  [arrived[layer, x] for x in reads] + [p_fwd.get((layer - 1, s))])
        if layer + 1 < layers:
            nxt = stage_of["P", layer + 1]
            for s in order:
                arrived[layer + 1, s] = (p_fwd[layer, s] if nxt == c else
                                         add(link(c, nxt, s), s, "fwd", "send", c, costs.link[c][s], [p_fwd[layer, s]]))
    # P backward: layer L-1 first; a layer's gradient rows of s need those of the subgraphs that read s
    p_bwd: dict[tuple[int, int], int] = {}
    grad_in: dict[tuple[int, int], int] = {(layers - 1, s): p_fwd[layers - 1, s] for s in order}  # the loss
    for layer in reversed(range(layers)):
        c = stage_of["P", layer]
        for s in reversed(order):
            readers = [x for x in order if _reads(mode, pos[x], pos[s])]
            p_bwd[layer, s] = add(member(c, s), s, "bwd", "P", layer, share(c, costs.p_backward[layer][s]),
                                  [grad_in[layer, x] for x in readers] + [p_fwd[layer, s]])
        if layer > 0:
            prv = stage_of["P", layer - 1]
            for s in order:
                grad_in[layer - 1, s] = (p_bwd[layer, s] if prv == c else
                                         add(link(c, prv, s), s, "bwd", "send", prv, costs.link[prv][s],
                                             [p_bwd[layer, s]]))
    # recompute (from the loss of s on), the gradient to the last T stage, T backward
    for s in reversed(order):
        again = t_chain("recompute", s, p_fwd[layers - 1, s]) if recompute else None
        prev = add(link(q_last + 1, q_last, s), s, "bwd", "send", q_last, costs.link[q_last][s], [p_bwd[0, s]])
        for layer in reversed(range(layers)):
            c = stage_of["T", layer]
            if layer < layers - 1 and stage_of["T", layer + 1] != c:
                prev = add(link(c + 1, c, s), s, "bwd", "send", c, costs.link[c][s], [prev])
            prev = add(member(c, s), s, "bwd", "T", layer, share(c, costs.t_backward[layer][s]),
                       [prev, again[layer] if again else t_fwd[s][layer]])
    return tasks


def _reads(mode: str, dst_pos: int, src_pos: int) -> bool:
    """Whether the subgraph at position ``dst_pos`` aggregates rows of the one at ``src_pos`` in ``mode``."""
    if mode == "full":
        return True
    return src_pos <= dst_pos if mode == "causal" else src_pos == dst_pos


# --------------------------------------------------------------------------------------- the event loop


def run_tasks(tasks: Sequence[Task], *, serial: bool = False) -> Schedule:
    """List-schedule ``tasks`` (module docstring): one task per resource at a time, ready tasks by (phase,
    subgraph, layer); ``serial``: no two subgraphs' tasks at once, the subgraph in flight continuing first.

    Raises:
        ValueError: a dependency on a later or unknown task (the list must be topologically ordered).
    """
    n = len(tasks)
    waiting = [len(set(t.deps)) for t in tasks]
    dependants: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(tasks):
        for d in set(t.deps):
            if not 0 <= d < i:
                raise ValueError(f"task {i} depends on task {d}: the tasks must be in a topological order")
            dependants[d].append(i)
    def key(i: int) -> tuple:
        t = tasks[i]
        return PHASE_RANK[t.phase], t.position, t.layer, i

    ready = [i for i in range(n) if waiting[i] == 0]
    busy: set = set()
    running: dict[int, int] = {}  # subgraph -> tasks of it running
    events: list[tuple[float, int]] = []
    start, end = [0.0] * n, [0.0] * n
    now, done, last = 0.0, 0, None
    while done < n:
        ready.sort(key=lambda i, last=last: (serial and tasks[i].subgraph != last, key(i)))
        for i in list(ready):
            t = tasks[i]
            if t.resource in busy or (serial and running and t.subgraph not in running):
                continue
            ready.remove(i)
            busy.add(t.resource)
            running[t.subgraph] = running.get(t.subgraph, 0) + 1
            start[i], last = now, t.subgraph
            heapq.heappush(events, (now + t.duration, i))
        if not events:
            raise RuntimeError("the task graph has a cycle: no task can start")  # pragma: no cover - a bug
        now, i = heapq.heappop(events)
        finished = [i]
        while events and events[0][0] == now:
            finished.append(heapq.heappop(events)[1])
        for i in finished:
            end[i] = now
            busy.discard(tasks[i].resource)
            running[tasks[i].subgraph] -= 1
            if not running[tasks[i].subgraph]:
                del running[tasks[i].subgraph]
            done += 1
            for j in dependants[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    ready.append(j)
    return Schedule(list(tasks), start, end)


def simulate(plan: TaskPlan, costs: Costs, *, mode: str = "causal", recompute: bool = True, serial: bool = False,
             order: Sequence[int] | None = None) -> Schedule:
    """One epoch of ``plan`` with ``costs``, pipelined or ``serial`` (arguments as :func:`epoch_tasks`)."""
    return run_tasks(epoch_tasks(plan, costs, mode=mode, recompute=recompute, order=order), serial=serial)


# --------------------------------------------------------------------------------------- costs from Eqs. 5-6


def modelled_costs(plan: TaskPlan, subgraph_vertices: Sequence[int], subgraph_edges: Sequence[int],
                   widths: Sequence[int], *, flops: float, bandwidth: float, link_bandwidth: float,
                   host_bandwidth: float | None = None, gamma: float = DEFAULT_GAMMA, attention: bool = False,
                   dtype_bytes: int = 4, t_backward: float = 2.0, p_backward: float = 1.0) -> Costs:
    """:class:`Costs` of the decoupled chain from Eqs. 5-6 (module docstring).

    Args:
        plan: the stages (their layer ranges give the widths crossing each boundary).
        subgraph_vertices, subgraph_edges: rows of every subgraph and the edges into them.
        widths: ``(d^1, ..., d^{L+1})`` of the T stack; P runs at ``d^{L+1}``.
        flops, bandwidth: a device's compute rate (FLOP/s) and memory bandwidth (bytes/s).
        link_bandwidth: bytes/s of a link between two devices; ``host_bandwidth`` of the host link (default the
            same).
        gamma, attention, dtype_bytes: as :func:`~.plan.layer_costs`.
        t_backward, p_backward: backward time over forward time of a T / P layer.

    Raises:
        ValueError: subgraph lists of different lengths or empty, widths not ``L + 1`` long, a non-positive rate.
    """
    if len(subgraph_vertices) != len(subgraph_edges) or not len(subgraph_vertices):
        raise ValueError("need the vertices and edges of every subgraph (two lists of the same, non-zero length)")
    if len(widths) != plan.layers + 1:
        raise ValueError(f"widths must hold the {plan.layers + 1} widths of the T stack, got {list(widths)}")
    host_bandwidth = link_bandwidth if host_bandwidth is None else host_bandwidth
    for name, value in (("link_bandwidth", link_bandwidth), ("host_bandwidth", host_bandwidth)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    per = [layer_costs(int(v), int(e), widths, attention=attention, gamma=gamma, flops=flops, bandwidth=bandwidth,
                       dtype_bytes=dtype_bytes) for v, e in zip(subgraph_vertices, subgraph_edges)]
    layers = plan.layers

    def table(which: int, factor: float) -> tuple[tuple[float, ...], ...]:
        return tuple(tuple(factor * per[s][which][layer] for s in range(len(per))) for layer in range(layers))

    ends = [hi for _, hi in plan.t_layers] + [layers] * len(plan.p_layers)  # T stage c hands over d^{stop}
    link = tuple(tuple(int(v) * int(widths[ends[c]]) * dtype_bytes / link_bandwidth for v in subgraph_vertices)
                 for c in range(len(ends) - 1))
    host = tuple(int(v) * int(widths[0]) * dtype_bytes / host_bandwidth for v in subgraph_vertices)
    return Costs(table(0, 1.0), table(0, t_backward), table(1, 1.0), table(1, p_backward), link, host)


# --------------------------------------------------------------------------------------- measured timestamps


def analyse(records: Iterable[tuple]) -> dict:
    """Makespan and overlap of ``(rank, subgraph, phase, start, end)`` records (module docstring).

    Returns:
        ``makespan``, ``busy`` (rank -> seconds with a task running), ``concurrency``, ``overlap`` (fraction of
        the makespan with two or more subgraphs in flight) and ``serial_estimate`` (seconds).

    Raises:
        ValueError: no records, or a record ending before it starts.
    """
    records = [(r, int(s), str(p), float(a), float(b)) for r, s, p, a, b in records]
    if not records:
        raise ValueError("no timestamps to analyse")
    if any(b < a for *_, a, b in records):
        raise ValueError("a timestamp record ends before it starts")
    t0 = min(a for *_, a, _ in records)
    makespan = max(b for *_, b in records) - t0
    by_rank: dict = {}
    by_subgraph: dict[int, list] = {}
    for r, s, _, a, b in records:
        by_rank.setdefault(r, []).append((a, b))
        by_subgraph.setdefault(s, []).append((a, b))
    busy = {r: _union_length(iv) for r, iv in by_rank.items()}
    spans = {s: _union(iv) for s, iv in by_subgraph.items()}
    # time with >= 2 subgraphs in flight: sweep over the subgraphs' busy spans
    edges = sorted([(a, 1) for iv in spans.values() for a, _ in iv] + [(b, -1) for iv in spans.values() for _, b in iv],
                   key=lambda x: (x[0], x[1]))
    overlap, depth, prev = 0.0, 0, t0
    for x, step in edges:
        if depth >= 2:
            overlap += x - prev
        depth, prev = depth + step, x
    return {"makespan": makespan, "busy": busy,
            "concurrency": sum(busy.values()) / makespan if makespan > 0 else 0.0,
            "overlap": overlap / makespan if makespan > 0 else 0.0,
            "serial_estimate": sum(b - a for iv in spans.values() for a, b in iv)}


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _union(intervals))

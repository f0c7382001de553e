"""Private stand-in for ``plan.py`` (branch ``nt-plan``) with its agreed interface; removed when that merges.

Only what the strategy needs: ranks ``0..q-1`` do T tasks, ``q..N-1`` P tasks; a task type with at most as many
ranks as layers gets one stage per rank (contiguous layers, the remainder on the first stages), one with more
forms ``L`` equal groups (hybrid), ``p_split="subgraphs"`` one P group of every P rank. ``t_workers=None`` takes
``costs=(T_t, T_p)`` through Eqs. 7-8 (rounded, clamped to ``[1, N-1]``), or ``N // 2`` without costs.
"""

from __future__ import annotations

from dataclasses import dataclass

P_SPLITS = ("layers", "subgraphs")


@dataclass(frozen=True)
class TaskPlan:
    workers: int
    layers: int
    p_split: str
    t_groups: tuple[tuple[int, ...], ...]
    p_groups: tuple[tuple[int, ...], ...]
    t_layers: tuple[tuple[int, int], ...]
    p_layers: tuple[tuple[int, int], ...]

    def role(self, rank: int) -> tuple[str, int, int]:
        for kind, groups in (("T", self.t_groups), ("P", self.p_groups)):
            for stage, group in enumerate(groups):
                if rank in group:
                    return kind, stage, group.index(rank)
        raise ValueError(f"rank {rank} is not in the plan of {self.workers} workers")

    @property
    def t_ranks(self) -> tuple[int, ...]:
        return tuple(r for g in self.t_groups for r in g)

    @property
    def p_ranks(self) -> tuple[int, ...]:
        return tuple(r for g in self.p_groups for r in g)


def _stages(ranks: list[int], layers: int, kind: str) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...]]:
    n = len(ranks)
    if n <= layers:
        sizes = [layers // n + (1 if i < layers % n else 0) for i in range(n)]
        bounds, start = [], 0
        for size in sizes:
            bounds.append((start, start + size))
            start += size
        return tuple((r,) for r in ranks), tuple(bounds)
    if n % layers:
        raise ValueError(f"{n} {kind} ranks do not divide into {layers} equal groups (one per layer)")
    width = n // layers
    return (tuple(tuple(ranks[i * width:(i + 1) * width]) for i in range(layers)),
            tuple((l, l + 1) for l in range(layers)))


def make_plan(workers: int, layers: int, *, t_workers: int | None = None, p_split: str = "layers",
              costs: tuple[float, float] | None = None) -> TaskPlan:
    if p_split not in P_SPLITS:
        raise ValueError(f"--p-split must be one of {', '.join(P_SPLITS)}, got {p_split!r}")
    if workers < 2:
        raise ValueError(f"task parallelism needs >= 2 workers (T and P), got {workers}")
    if t_workers is None:
        if costs is not None:
            t_t, t_p = costs
            t_workers = workers - min(max(round(workers * t_p / (t_p + t_t)), 1), workers - 1)
        else:
            t_workers = workers // 2
    if not 1 <= t_workers <= workers - 1:
        raise ValueError(f"--t-workers {t_workers} leaves a task type without ranks: it must lie in "
                         f"[1, {workers - 1}] with {workers} workers")
    t_groups, t_layers = _stages(list(range(t_workers)), layers, "T")
    p_ranks = list(range(t_workers, workers))
    if p_split == "subgraphs":
        p_groups, p_layers = (tuple(p_ranks),), ((0, layers),)
    else:
        p_groups, p_layers = _stages(p_ranks, layers, "P")
    return TaskPlan(workers, layers, p_split, t_groups, p_groups, t_layers, p_layers)

"""Worker groups inside a run: a :class:`~graphscale.distributed.comm.Comm` for each group of ranks a worker belongs
to (a pipeline stage's hybrid group, a task-parallel T or P group), over the worker's own Ledger."""

from __future__ import annotations

from graphscale.distributed.comm import Comm
from graphscale.distributed.env import DistEnv


def subgroup_comms(env: DistEnv, groups: list[list[int]]) -> dict[int, Comm]:
    """The Comm of every group of more than one rank that holds ``env.rank``, by the group's index in ``groups``.

    Collective: every rank calls it with the same ``groups``, because ``torch.distributed.new_group`` must be
    called by every rank for every group, in the same order (also for the groups a rank is not in). Groups of one
    rank get neither a process group nor a Comm. A worker's rank in a group is its position in the group's list.
    """
    comms = {}
    for index, group in enumerate(groups):
        if len(group) == 1:
            continue
        import torch.distributed as dist

        handle = dist.new_group(list(group))
        if env.rank in group:
            comms[index] = Comm(DistEnv(rank=list(group).index(env.rank), world_size=len(group), device=env.device,
                                        backend=env.backend, group=handle, timeout=env.timeout, ledger=env.ledger))
    return comms

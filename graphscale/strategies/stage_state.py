"""One stage-state gathering for checkpoints: the parameters (and their Adam state) that the stage leaders own,
gathered to worker 0, and a stage's share of a whole-model state loaded back.

A strategy that splits the model's training over stages (pipeline, task-parallel) names, for every leader rank, the
indices (in ``model.parameters()``) of the parameters its stage trains (:data:`Owners`). Each leader other than
worker 0 sends worker 0 one flat tensor per parameter it owns, tagged :data:`STAGE_STATE_TAG` ``+`` its index, under
the Ledger category :data:`CHECKPOINT`: the ``n`` values and, with the optimiser state, Adam's ``exp_avg``,
``exp_avg_sq`` and ``step`` (zeros and step 0 where the parameter has no state yet). Worker 0 knows every shape from
its own copy of the model, so nothing else is sent: :func:`stage_state_bytes` is the closed form,
``b * sum(3 n + 1)`` over the parameters of leaders other than worker 0 (``b * sum(n)`` for values only).

Each strategy keeps what is its own: when it gathers (task-parallel after every epoch, pipeline when a checkpoint is
written) and what it adds (pipeline's history rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from graphscale.distributed.comm import Comm

#: Ledger category of the stages' states gathered to worker 0 for a checkpoint.
CHECKPOINT = "checkpoint"
#: tag of parameter ``i``'s message: ``STAGE_STATE_TAG + i`` (apart from every strategy's own tags)
STAGE_STATE_TAG = 3 << 26
#: Adam's per-parameter tensors, in packing order (``step`` follows them)
ADAM_TENSORS = ("exp_avg", "exp_avg_sq")

#: leader rank -> indices (in ``model.parameters()``) of the parameters its stage trains
Owners = Mapping[int, Sequence[int]]


@dataclass
class GatheredState:
    """What worker 0 received: ``values[i]`` and (when gathered, and the parameter had Adam state) ``optimizer[i]``
    (``exp_avg``, ``exp_avg_sq``, ``step`` as ``optimizer.state_dict()`` holds them) of every parameter ``i`` owned
    by a leader other than worker 0."""

    values: dict[int, torch.Tensor]
    optimizer: dict[int, dict]


def stage_state_bytes(numels: Iterable[int], element_size: int, with_optimizer: bool) -> int:
    """Bytes that :func:`gather_stage_state` sends, in closed form: ``numels`` are the sizes of the parameters owned
    by leaders other than worker 0; each is sent once, with Adam's two moments and its step when
    ``with_optimizer``."""
    return sum(3 * n + 1 if with_optimizer else n for n in numels) * element_size


def adam_states(optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]) -> list[dict]:
    """Adam's state of each of ``params`` (``{}`` where it has none yet), for :func:`gather_stage_state`.

    Raises:
        ValueError: the optimiser keeps other per-parameter state than Adam's moments and step.
    """
    out = []
    for p in params:
        state = optimizer.state.get(p, {})
        extra = set(state) - {*ADAM_TENSORS, "step"}
        if extra:
            raise ValueError(f"stage state: the optimiser keeps {sorted(extra)} per parameter; only Adam's "
                             f"{[*ADAM_TENSORS, 'step']} can be gathered")
        out.append(state)
    return out


def _pack(value: torch.Tensor, state: dict | None) -> torch.Tensor:
    flat = value.detach().flatten()
    if state is None:
        return flat
    if not state:
        return torch.cat([flat, torch.zeros(2 * flat.numel() + 1, dtype=flat.dtype, device=flat.device)])
    step = torch.as_tensor(state["step"], dtype=flat.dtype, device=flat.device).reshape(1)
    return torch.cat([flat, *(state[k].flatten() for k in ADAM_TENSORS), step])


def gather_stage_state(comm: Comm, owners: Owners, values: Sequence[torch.Tensor],
                       states: Sequence[dict] | None = None) -> GatheredState | None:
    """Collective over ``comm``: every parameter owned by a leader other than worker 0, on worker 0.

    Args:
        comm: the run's communicator (worker 0 is its rank 0).
        owners: leader rank -> indices of the parameters it owns (the same on every worker; worker 0's entry, if
            any, sends nothing).
        values: this worker's value of every parameter, by index (a live parameter, or a saved state's tensor).
        states: this worker's Adam state of every parameter, by index (:func:`adam_states`); ``None``: values only.

    Returns:
        On worker 0 the received :class:`GatheredState`; ``None`` on the others.
    """
    rank, pending = comm.rank, []
    if rank != 0 and rank in owners:
        pending = [comm.send(_pack(values[i], None if states is None else states[i]), 0, CHECKPOINT,
                             tag=STAGE_STATE_TAG + i) for i in owners[rank]]
    for work in pending:
        work.wait()
    if rank != 0:
        return None
    out = GatheredState({}, {})
    for leader, indices in owners.items():
        if leader == 0:
            continue
        for i in indices:
            like = values[i]
            n = like.numel()
            buf = torch.empty(n if states is None else 3 * n + 1, dtype=like.dtype, device=like.device)
            comm.recv(buf, leader, tag=STAGE_STATE_TAG + i).wait()
            out.values[i] = buf[:n].view_as(like).clone()
            if states is not None and float(buf[-1]) > 0:
                out.optimizer[i] = {"step": buf[-1].to(torch.float32).reshape(()),
                                    **{k: buf[(j + 1) * n:(j + 2) * n].view_as(like).clone()
                                       for j, k in enumerate(ADAM_TENSORS)}}
    return out


def load_stage_share(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
                     mine: Iterable[int]) -> None:
    """Load a whole-model checkpoint state (``model``, ``optimizer``) on one worker: the whole model, and the Adam
    state of its own stage's parameters (indices ``mine``) only."""
    model.load_state_dict(state["model"])
    keep = set(mine)
    optimizer.load_state_dict({"state": {i: st for i, st in state["optimizer"]["state"].items() if i in keep},
                               "param_groups": state["optimizer"]["param_groups"]})

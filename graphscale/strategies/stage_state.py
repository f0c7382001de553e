"""One stage-state gathering for checkpoints: the parameters (and their optimiser state) that the stage leaders own,
gathered to worker 0, and a stage's share of a whole-model state loaded back.

A strategy that splits the model's training over stages (pipeline, task-parallel) names, for every leader rank, the
indices (in ``model.parameters()``) of the parameters its stage trains (:data:`Owners`). Each leader other than
worker 0 sends worker 0 one flat tensor per parameter it owns, tagged :data:`STAGE_STATE_TAG` ``+`` its index, under
the Ledger category :data:`CHECKPOINT`: the ``n`` values and, with the optimiser state, the ``k`` tensors the
optimiser keeps per parameter (:func:`~graphscale.strategies.optimizers.state_layout`: Adam's and AdamW's
``exp_avg`` and ``exp_avg_sq``, ``k = 2``; SGD's ``momentum_buffer``, ``k = 1``, none without momentum) and one
more element: Adam's ``step``, or 1 for an SGD parameter with state (zeros and 0 where the parameter has no state
yet). Worker 0 knows every shape from its own copy of the model, so nothing else is sent: :func:`stage_state_bytes`
is the closed form, ``b * sum((k + 1) n + 1)`` over the parameters of leaders other than worker 0 (``b * sum(n)``
for values only).

Each strategy keeps what is its own: when it gathers (task-parallel after every epoch, pipeline when a checkpoint is
written) and what it adds (pipeline's history rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from graphscale.distributed.comm import Comm
from graphscale.strategies.optimizers import StateLayout, state_layout

#: Ledger category of the stages' states gathered to worker 0 for a checkpoint.
CHECKPOINT = "checkpoint"
#: tag of parameter ``i``'s message: ``STAGE_STATE_TAG + i`` (apart from every strategy's own tags)
STAGE_STATE_TAG = 3 << 26
#: Adam's per-parameter state (the default layout of :func:`stage_state_bytes`)
ADAM = StateLayout(("exp_avg", "exp_avg_sq"), True)

#: leader rank -> indices (in ``model.parameters()``) of the parameters its stage trains
Owners = Mapping[int, Sequence[int]]


@dataclass
class GatheredState:
    """What worker 0 received: ``values[i]`` and (when gathered, and the parameter had optimiser state)
    ``optimizer[i]`` (its state as ``optimizer.state_dict()`` holds it: ``exp_avg``, ``exp_avg_sq``, ``step``;
    ``momentum_buffer``) of every parameter ``i`` owned by a leader other than worker 0."""

    values: dict[int, torch.Tensor]
    optimizer: dict[int, dict]


def stage_state_bytes(numels: Iterable[int], element_size: int, with_optimizer: bool,
                      layout: StateLayout = ADAM) -> int:
    """Bytes that :func:`gather_stage_state` sends, in closed form: ``numels`` are the sizes of the parameters owned
    by leaders other than worker 0; each is sent once, with the optimiser's ``layout`` tensors and one more element
    (the step, or the state's presence) when ``with_optimizer``."""
    k = len(layout.tensors)
    return sum((k + 1) * n + 1 if with_optimizer else n for n in numels) * element_size


@dataclass
class OptimizerStates:
    """The optimiser state of each parameter (``{}`` where it has none yet) and what it holds."""

    layout: StateLayout
    states: list[dict]


def optimizer_states(optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]) -> OptimizerStates:
    """``optimizer``'s state of each of ``params``, for :func:`gather_stage_state`.

    Raises:
        ValueError: the optimiser keeps other per-parameter state than its layout's
            (:func:`~graphscale.strategies.optimizers.state_layout`).
    """
    layout = state_layout(optimizer)
    known = {*layout.tensors, *(("step",) if layout.step else ())}
    out = []
    for p in params:
        state = optimizer.state.get(p, {})
        extra = set(state) - known
        if extra:
            raise ValueError(f"stage state: the optimiser keeps {sorted(extra)} per parameter; only "
                             f"{sorted(known)} can be gathered")
        out.append(state)
    return OptimizerStates(layout, out)


def _pack(value: torch.Tensor, state: dict | None, layout: StateLayout) -> torch.Tensor:
    flat = value.detach().flatten()
    if state is None:
        return flat
    k = len(layout.tensors)
    if not state:
        return torch.cat([flat, torch.zeros(k * flat.numel() + 1, dtype=flat.dtype, device=flat.device)])
    last = state["step"] if layout.step else 1.0
    last = torch.as_tensor(last, dtype=flat.dtype, device=flat.device).reshape(1)
    return torch.cat([flat, *(state[name].flatten() for name in layout.tensors), last])


def gather_stage_state(comm: Comm, owners: Owners, values: Sequence[torch.Tensor],
                       states: OptimizerStates | None = None) -> GatheredState | None:
    """Collective over ``comm``: every parameter owned by a leader other than worker 0, on worker 0.

    Args:
        comm: the run's communicator (worker 0 is its rank 0).
        owners: leader rank -> indices of the parameters it owns (the same on every worker; worker 0's entry, if
            any, sends nothing).
        values: this worker's value of every parameter, by index (a live parameter, or a saved state's tensor).
        states: this worker's optimiser state of every parameter, by index (:func:`optimizer_states`); ``None``:
            values only.

    Returns:
        On worker 0 the received :class:`GatheredState`; ``None`` on the others.
    """
    rank, pending = comm.rank, []
    if rank != 0 and rank in owners:
        pending = [comm.send(_pack(values[i], None if states is None else states.states[i],
                                   None if states is None else states.layout), 0, CHECKPOINT,
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
            tensors = () if states is None else states.layout.tensors
            buf = torch.empty(n if states is None else (len(tensors) + 1) * n + 1, dtype=like.dtype,
                              device=like.device)
            comm.recv(buf, leader, tag=STAGE_STATE_TAG + i).wait()
            out.values[i] = buf[:n].view_as(like).clone()
            if states is not None and float(buf[-1]) > 0:
                step = {"step": buf[-1].to(torch.float32).reshape(())} if states.layout.step else {}
                out.optimizer[i] = {**step, **{k: buf[(j + 1) * n:(j + 2) * n].view_as(like).clone()
                                               for j, k in enumerate(tensors)}}
    return out


def load_stage_share(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict,
                     mine: Iterable[int]) -> None:
    """Load a whole-model checkpoint state (``model``, ``optimizer``) on one worker: the whole model, and the
    optimiser state of its own stage's parameters (indices ``mine``) only."""
    model.load_state_dict(state["model"])
    keep = set(mine)
    optimizer.load_state_dict({"state": {i: st for i, st in state["optimizer"]["state"].items() if i in keep},
                               "param_groups": state["optimizer"]["param_groups"]})

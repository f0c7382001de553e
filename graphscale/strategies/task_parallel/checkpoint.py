"""Checkpoints of a task-parallel run (:mod:`.strategy`): with several T stages, rank 0 gathers every other stage's
parameters and optimiser state after each epoch (:func:`~graphscale.strategies.stage_state.gather_stage_state`, category
``checkpoint``, on the run's device), so its model and checkpoint hold the whole model; a resumed rank loads the model
and keeps its own stage's optimiser state (:func:`~graphscale.strategies.stage_state.load_stage_share`). What is this
strategy's own: the leaders (the first member of every T stage) and when it gathers (after every epoch)."""

from __future__ import annotations

import torch

from graphscale.strategies.stage_state import gather_stage_state, load_stage_share, optimizer_states
from graphscale.strategies.task_parallel.tasks import T


class StageCheckpoint:
    """The checkpoint methods of :class:`~.strategy.TaskParallelStrategy` (a mixin: it uses the strategy's
    ``model``, ``optimizer``, ``plan``, ``segments``, ``mine``, ``split`` and ``comm``)."""

    def _stage_state(self, stage: int) -> list[int]:
        """Indices (in ``model.parameters()``) of T stage ``stage``'s parameters, sorted."""
        index = {id(p): i for i, p in enumerate(self.model.parameters())}
        return sorted({index[id(p)] for seg in self.segments if seg.kind == T and seg.stage == stage
                       for op in seg.ops for p in self.split.t_params(op.index)})

    def _gather_stages(self) -> None:
        """Every T stage's parameters and optimiser state to rank 0 (which writes checkpoints; its model then holds
        every weight, and :meth:`state_dict` every stage's optimiser state); the first member of each T stage leads
        it."""
        params = list(self.model.parameters())
        owners = {group[0]: self._stage_state(stage) for stage, group in enumerate(self.plan.t_groups)}
        gathered = gather_stage_state(self.comm, owners, params, optimizer_states(self.optimizer, params))
        if gathered is None:
            return
        with torch.no_grad():
            for i, value in gathered.values.items():
                params[i].copy_(value)
        self.gathered_optimizer = gathered.optimizer

    def state_dict(self) -> dict:
        """The model and the optimiser state of every parameter (rank 0, which writes checkpoints: with several T stages
        the other stages' come from :meth:`_gather_stages` after every epoch)."""
        state = super().state_dict()
        for i, st in getattr(self, "gathered_optimizer", {}).items():
            state["optimizer"]["state"][i] = st
        return state

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the whole model and keeps the optimiser state of its own stage's parameters only."""
        load_stage_share(self.model, self.optimizer, state,
                         {i for seg in self.mine if seg.kind == T for i in self._stage_state(seg.stage)})

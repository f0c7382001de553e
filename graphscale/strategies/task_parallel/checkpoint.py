"""Checkpoints of a task-parallel run (:mod:`.strategy`): with several T stages, rank 0 gathers every other stage's
parameters and Adam state after each epoch (category ``checkpoint``, on the run's device), so its checkpoint holds
the whole model; a resumed rank loads the model and keeps its own stage's Adam state."""

from __future__ import annotations

import torch

from graphscale.strategies.task_parallel.chain import _CKPT, CHECKPOINT, _tag
from graphscale.strategies.task_parallel.tasks import T


class StageCheckpoint:
    """The checkpoint methods of :class:`~.strategy.TaskParallelStrategy` (a mixin: it uses the strategy's
    ``model``, ``optimizer``, ``plan``, ``segments``, ``mine``, ``split``, ``comm`` and ``env``)."""

    def _stage_state(self, stage: int) -> list[tuple[int, torch.nn.Parameter]]:
        """``(index in model.parameters(), parameter)`` of T stage ``stage``'s parameters."""
        index = {id(p): i for i, p in enumerate(self.model.parameters())}
        params = {id(p): p for seg in self.segments if seg.kind == T and seg.stage == stage for op in seg.ops
                  for p in self.split.t_params(op.index)}
        return sorted((index[k], p) for k, p in params.items())

    def _gather_stages(self) -> None:
        """Every T stage's parameters and Adam state to rank 0 (which writes checkpoints; its model then holds every
        weight, and :meth:`state_dict` every stage's optimiser state). The first member of each other T stage sends
        one flat tensor per parameter: its values, ``exp_avg``, ``exp_avg_sq`` and ``step`` (0: no state yet)."""
        def pack(p: torch.nn.Parameter) -> torch.Tensor:
            st = self.optimizer.state.get(p, {})
            if not st:
                return torch.cat([p.detach().flatten(), torch.zeros(2 * p.numel() + 1, dtype=p.dtype,
                                                                     device=p.device)])
            step = torch.as_tensor(st["step"], dtype=p.dtype, device=p.device).reshape(1)
            return torch.cat([p.detach().flatten(), st["exp_avg"].flatten(), st["exp_avg_sq"].flatten(), step])

        self.gathered_optimizer: dict[int, dict] = {}
        pending = []
        for stage, group in enumerate(self.plan.t_groups[1:], start=1):
            owned = self._stage_state(stage)
            if self.env.rank == group[0]:
                pending += [self.comm.send(pack(p), 0, CHECKPOINT, tag=_tag(_CKPT, 0, i)) for i, p in owned]
            elif self.env.rank == 0:
                for i, p in owned:
                    buf = torch.empty(3 * p.numel() + 1, dtype=p.dtype, device=p.device)
                    self.comm.recv(buf, group[0], tag=_tag(_CKPT, 0, i)).wait()
                    n = p.numel()
                    with torch.no_grad():
                        p.copy_(buf[:n].view_as(p))
                    if float(buf[-1]) > 0:
                        self.gathered_optimizer[i] = {"step": buf[-1].to(torch.float32).reshape(()),
                                                      "exp_avg": buf[n:2 * n].view_as(p).clone(),
                                                      "exp_avg_sq": buf[2 * n:3 * n].view_as(p).clone()}
        for work in pending:
            work.wait()

    def state_dict(self) -> dict:
        """The model and the Adam state of every parameter (rank 0, which writes checkpoints: with several T stages
        the other stages' come from :meth:`_gather_stages` after every epoch)."""
        state = super().state_dict()
        for i, st in getattr(self, "gathered_optimizer", {}).items():
            state["optimizer"]["state"][i] = st
        return state

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the whole model and keeps the Adam state of its own stage's parameters only."""
        self.model.load_state_dict(state["model"])
        mine = {i for seg in self.mine if seg.kind == T for i, _ in self._stage_state(seg.stage)}
        optimizer = {"state": {i: st for i, st in state["optimizer"]["state"].items() if i in mine},
                     "param_groups": state["optimizer"]["param_groups"]}
        self.optimizer.load_state_dict(optimizer)

"""GNNPipe's collective checkpoints: every stage's parameters and optimiser state gathered to worker 0 by the shared
stage-state gathering (:mod:`graphscale.strategies.stage_state`: the members 0 of the groups lead their stages), and
what is the pipeline's own: every member's history rows, gathered with :meth:`Comm.gather_object`; each stage's share
loaded back from the whole state."""

from __future__ import annotations

import torch

from graphscale.strategies.optimizers import state_layout
from graphscale.strategies.stage_state import (
    CHECKPOINT,
    gather_stage_state,
    load_stage_share,
    optimizer_states,
    stage_state_bytes,
)


class StageCheckpoint:
    """Checkpoints of :class:`~graphscale.strategies.pipeline.strategy.PipelineStrategy` (a mixin: it reads the
    stage state that ``setup`` builds, ``stage_owners`` among it: each stage's leader -> its parameters' indices)."""

    def checkpoint_param_bytes(self, with_optimizer: bool) -> int:
        """The bytes (category ``checkpoint``, all from members 0 of stages 1..S-1) that gathering the stages'
        parameters moves: :func:`~graphscale.strategies.stage_state.stage_state_bytes` of their sizes."""
        params = list(self.model.parameters())
        numels = [params[i].numel() for leader, idx in self.stage_owners.items() if leader != 0 for i in idx]
        return stage_state_bytes(numels, params[0].element_size(), with_optimizer, state_layout(self.optimizer))

    def _gather_owned(self, values: list[torch.Tensor], with_optimizer: bool) -> tuple[dict, dict] | None:
        """The stages' parameters (and optimiser state) on worker 0 by name: ``(model state, optimizer state by index)``
        with worker 0's own parameters taken from ``values``; ``None`` on the others."""
        params = list(self.model.parameters())
        owners = self.stage_owners
        gathered = gather_stage_state(self.comm, owners, values,
                                      optimizer_states(self.optimizer, params) if with_optimizer else None)
        if gathered is None:
            return None
        names = [n for n, _ in self.model.named_parameters()]
        return {names[i]: v for i, v in gathered.values.items()}, gathered.optimizer

    def _gather_rows(self) -> list[dict] | None:
        """Collective: every member's own rows of ``view``, ``hist`` and ``late`` (with their global ids), by rank,
        on worker 0 (:meth:`Comm.gather_object`, category ``checkpoint``); ``None`` on the others."""
        own, ids = self.own_local, self.local_ids[self.own_local]
        mine = {"rows": {l: (ids, v[own]) for l, v in self.view.items()},
                "hist": None if self.hist is None else {l: (ids, v[own]) for l, v in self.hist.items()},
                "late": {l: (ids, v[own]) for l, v in self.late.items()}}
        return self.comm.gather_object(mine, 0, CHECKPOINT)

    def full_model_state(self, state: dict | None) -> dict | None:
        """Collective: the whole model (each stage's parameters from that stage) on worker 0."""
        if state is None:
            return None
        names = [n for n, _ in self.model.named_parameters()]
        got = self._gather_owned([state[n] for n in names], with_optimizer=False)
        return None if got is None else {**state, **got[0]}

    def state_dict(self) -> dict:
        """Collective (every worker calls it): on worker 0 the whole run's state, ``{}`` on the others.

        ``model``: every parameter from the stage that trains it; ``optimizer``: the optimiser's state of every
        parameter
        (the same indices on every stage: every worker builds the whole model); ``rows``, ``hist``, ``late``: per
        layer, the ``N`` rows of ``view`` (the historical embeddings, from the stage holding the layer, each
        member's own rows in a hybrid), of the fixed history and of the stale-edge gradients kept for the next
        epoch, so that a resumed run continues exactly as an uninterrupted one; ``initialised``: the initial
        history forward ran.
        """
        names = [n for n, _ in self.model.named_parameters()]
        opt = self.optimizer.state_dict()
        got = self._gather_owned([p.detach() for p in self.model.parameters()], with_optimizer=True)
        parts = self._gather_rows()
        if parts is None or got is None:
            return {}
        model, gathered_opt = got

        def rows(key: str) -> dict | None:
            if any(p[key] is None for p in parts):
                return None
            out: dict[int, torch.Tensor] = {}
            for part in parts:
                for layer, (ids, values) in part[key].items():
                    if layer not in out:
                        out[layer] = torch.zeros(self.num_nodes, values.shape[1], dtype=values.dtype)
                    out[layer][ids.cpu()] = values.cpu()
            return out

        own_opt = {i: st for i, st in opt["state"].items() if names[i] in self.owned}
        return {"model": {**self.model.state_dict(), **model},
                "optimizer": {"state": {**own_opt, **gathered_opt}, "param_groups": opt["param_groups"]},
                "rows": rows("rows"), "hist": rows("hist"), "late": rows("late"), "initialised": self.initialised}

    def load_state_dict(self, state: dict) -> None:
        """Every worker takes its stage's part of :meth:`state_dict`'s whole-run state."""
        names = [n for n, _ in self.model.named_parameters()]
        load_stage_share(self.model, self.optimizer, state, [i for i, n in enumerate(names) if n in self.owned])
        device, ids = self.env.device, self.local_ids.cpu()
        for layer, v in self.view.items():
            v.copy_(state["rows"][layer][ids].to(device))
        if state["hist"] is not None:
            self.hist = {l: state["hist"][l][ids].to(device) for l in self.view}
            self.tracker.track("history", *self.hist.values())
        for layer, v in self.late.items():
            v.copy_(state["late"][layer][ids].to(device))
        self.initialised = bool(state["initialised"])

"""GNNPipe's collective checkpoints: every stage's parameters, Adam state and history rows gathered to worker 0,
and each stage's share loaded back from the full state."""

from __future__ import annotations

import torch

#: Ledger category of the stages' states gathered to worker 0 for a checkpoint.
CHECKPOINT = "checkpoint"


class StageCheckpoint:
    """Checkpoints of :class:`~graphscale.strategies.pipeline.strategy.PipelineStrategy` (a mixin: it reads the
    stage state that ``setup`` builds)."""

    def _gather_owned(self, model_state: dict) -> dict | None:
        """``model_state`` (a ``model.state_dict()`` of this worker) with every parameter taken from the stage that
        trains it (the members 0 of the groups send theirs), on worker 0; ``None`` on the others."""
        mine = {n: t for n, t in model_state.items() if n in self.owned} if self.member == 0 else {}
        parts = self.comm.gather_object(mine, 0, CHECKPOINT)
        if parts is None:
            return None
        merged = dict(model_state)
        for part in parts:
            merged.update(part)
        return merged

    def full_model_state(self, state: dict | None) -> dict | None:
        """Collective: the whole model (each stage's parameters from that stage) on worker 0."""
        return None if state is None else self._gather_owned(state)

    def state_dict(self) -> dict:
        """Collective (every worker calls it): on worker 0 the whole run's state, ``{}`` on the others.

        ``model``: every parameter from the stage that trains it; ``optimizer``: Adam's state of every parameter
        (the same indices on every stage: every worker builds the whole model); ``rows``, ``hist``, ``late``: per
        layer, the ``N`` rows of ``view`` (the historical embeddings, from the stage holding the layer, each
        member's own rows in a hybrid), of the fixed history and of the stale-edge gradients kept for the next
        epoch, so that a resumed run continues exactly as an uninterrupted one; ``initialised``: the initial
        history forward ran.
        """
        names = [n for n, _ in self.model.named_parameters()]
        opt = self.optimizer.state_dict()
        own, ids = self.own_local, self.local_ids[self.own_local]
        mine = {"optimizer": {i: st for i, st in opt["state"].items() if names[i] in self.owned}
                if self.member == 0 else {},
                "rows": {l: (ids, v[own]) for l, v in self.view.items()},
                "hist": None if self.hist is None else {l: (ids, v[own]) for l, v in self.hist.items()},
                "late": {l: (ids, v[own]) for l, v in self.late.items()}}
        model = self._gather_owned(self.model.state_dict())
        parts = self.comm.gather_object(mine, 0, CHECKPOINT)
        if parts is None:
            return {}

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

        return {"model": model, "optimizer": {"state": {i: st for p in parts for i, st in p["optimizer"].items()},
                                              "param_groups": opt["param_groups"]},
                "rows": rows("rows"), "hist": rows("hist"), "late": rows("late"), "initialised": self.initialised}

    def load_state_dict(self, state: dict) -> None:
        """Every worker takes its stage's part of :meth:`state_dict`'s whole-run state."""
        names = [n for n, _ in self.model.named_parameters()]
        self.model.load_state_dict(state["model"])
        opt = state["optimizer"]
        self.optimizer.load_state_dict({"state": {i: st for i, st in opt["state"].items() if names[i] in self.owned},
                                        "param_groups": opt["param_groups"]})
        device, ids = self.env.device, self.local_ids.cpu()
        for layer, v in self.view.items():
            v.copy_(state["rows"][layer][ids].to(device))
        if state["hist"] is not None:
            self.hist = {l: state["hist"][l][ids].to(device) for l in self.view}
            self.tracker.track("history", *self.hist.values())
        for layer, v in self.late.items():
            v.copy_(state["late"][layer][ids].to(device))
        self.initialised = bool(state["initialised"])

"""Checkpoints: what one records, where ``--repeat`` puts them, and the parent's check before a resume.

A checkpoint (written by :class:`graphscale.trainer.Trainer` on worker 0 after every epoch) is one ``torch.save``
file holding the epoch, the strategy's state (model and optimiser), the best epoch so far, the history, and the
run's *identity* (:func:`identity`): everything strategy-independent that changes the model's parameters, its
training data or its optimisation -- the dataset spec (canonical: absolute paths), ``--feature-norm``, every
``[model]`` field, ``--dtype``, ``--seed``, the optimiser and its schedule (:func:`optimizer_identity`:
``--optimizer``, ``--lr``, ``--weight-decay``, ``--momentum``, ``--lr-schedule`` and its settings) -- plus the
strategy's name, the strategy options that change what an approximate strategy computes
(:meth:`~graphscale.strategies.base.Strategy.resume_identity`: ``pipeline``'s chunks and history options) and the
graph's counts (nodes, edges, features, classes).

Resuming continues *the same run*: :func:`check_resume` (in the parent, before any data is prepared or worker
started) refuses a run whose identity differs, with one line naming every differing option and both values. A run
that gives no ``--hidden`` takes the checkpoint's width (:func:`adopt_width`: the default width depends on the
dataset). The
optimiser settings are part of it: ``--optimizer``, ``--lr``, ``--weight-decay``, ... on resume must equal the
checkpoint's (a run that resumes with other settings would otherwise either keep the checkpoint's silently, since the
optimiser's state holds its learning rate, or change the trajectory that ``--resume`` promises to continue); a
checkpoint of another optimiser is refused so. A checkpoint also records the learning-rate schedule's state
(``schedule``: its kind, settings, the next epoch and its rate); the rate of an epoch depends on the epoch alone
(:class:`~graphscale.strategies.optimizers.LRSchedule`), so a resumed run continues the schedule bit for bit.
``--lr-schedule cosine`` anneals over ``--epochs``, so with it ``--epochs`` cannot change on resume. Any exact strategy
resumes a checkpoint of any exact strategy (they train the same model with the same optimiser); an approximate
one (``model-averaging``) only its own.

The identity also records how the optimisation walks (:func:`training_identity`): ``training`` (``full-graph`` or
``mini-batch``) and, for mini-batch training, ``--fanouts`` and ``--batch-size``; a full-graph checkpoint does not
resume under ``--minibatch`` or ``data-parallel``, nor a mini-batch one with other fan-outs or batch size.

Every checkpoint carries a checksum of its contents (:func:`checksum`: SHA-256 over every tensor's bytes, dtype and
shape and every other value, in order), written with it (:func:`write_checkpoint`) and verified on load: a
checkpoint whose bytes changed since (a flipped bit, a partial copy) is refused with one line naming the file.

``--repeat N --checkpoint P`` keeps one checkpoint per seed, :func:`seed_path` (``ckpt.pt`` ->
``ckpt.seed3.pt``), and ``--repeat N --resume`` resumes each seed from its own.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig, model_dict

#: what an identity key meant before a checkpoint recorded it (a checkpoint written before ``--optimizer`` and
#: ``--lr-schedule`` existed trained with Adam at a constant rate)
RECORDED_DEFAULTS = {"optimizer": "adam", "lr_schedule": "none"}
#: graph counts a checkpoint records and a resumed run must match
GRAPH_COUNTS = ("nodes", "edges", "features", "classes")
#: keys every checkpoint holds
REQUIRED = ("epoch", "strategy", "best", "history", "identity", "graph", "checksum")


def seed_path(path: str | Path, seed: int) -> str:
    """The checkpoint of seed ``seed`` in a ``--repeat`` run: ``.seedS`` before the extension
    (``runs/ckpt.pt`` -> ``runs/ckpt.seed3.pt``; ``ckpt`` -> ``ckpt.seed3``)."""
    path = Path(path)
    return str(path.with_name(f"{path.stem}.seed{seed}{path.suffix}"))


def identity(config: RunConfig) -> dict:
    """The strategy-independent configuration a checkpoint was trained with (module docstring); flat, keyed by
    option name (``hidden``, ``lr``, ...). ``config.data.dataset`` must be resolved (:mod:`graphscale.prepare`)."""
    from graphscale.data.specs import canonical_spec
    from graphscale.registry import STRATEGIES

    model = model_dict(config.model)  # a factory as its name; a registered model without the user-model fields
    return {"dataset": canonical_spec(config.data.dataset) if config.data.dataset else "",
            "feature_norm": config.data.feature_norm, "features": config.data.features,
            "feature_dtype": config.data.feature_dtype,
            "model": model.pop("name"), **model,
            "dtype": config.dtype, "seed": config.seed, **optimizer_identity(config), "strategy": config.strategy.name,
            **training_identity(config), **STRATEGIES.get(config.strategy.name).resume_identity(config),
            **task_identity(config)}


def task_identity(config: RunConfig) -> dict:
    """``--task link``'s options that change what training computes (the decoder's parameters, the split);
    nothing for node classification (its checkpoints' identity is as before the task existed)."""
    if config.task != "link":
        return {}
    return {"task": config.task, "decoder": config.decoder, "link_split": list(config.link_split)}


def optimizer_identity(config: RunConfig) -> dict:
    """The optimiser and its schedule (:mod:`graphscale.strategies.optimizers`): ``optimizer``, ``lr``,
    ``weight_decay``, ``momentum`` (sgd), ``lr_schedule`` and its settings (step: ``lr_step_size``, ``lr_gamma``;
    cosine: ``lr_t_max``, the ``--epochs`` it anneals over)."""
    from graphscale.strategies.optimizers import lr_gamma_of, momentum_of

    optim = config.optim
    out = {"optimizer": optim.optimizer, "lr": optim.lr, "weight_decay": optim.weight_decay}
    if optim.optimizer == "sgd":
        out["momentum"] = momentum_of(optim)
    out["lr_schedule"] = optim.lr_schedule
    if optim.lr_schedule == "step":
        out.update(lr_step_size=optim.lr_step_size, lr_gamma=lr_gamma_of(optim))
    elif optim.lr_schedule == "cosine":
        out["lr_t_max"] = optim.epochs
    return out


def training_identity(config: RunConfig) -> dict:
    """How the optimisation walks: ``training`` (``mini-batch`` for a strategy that samples mini-batches with this
    configuration: it reads ``--batch-size``; else ``full-graph``) and, for mini-batch training, ``fanouts`` and
    ``batch_size``."""
    from graphscale.registry import STRATEGIES

    strategy = STRATEGIES.get(config.strategy.name)
    sampled = "batch_size" in strategy.options and "batch_size" not in strategy.unused_options(config)
    if not sampled:
        return {"training": "full-graph"}
    return {"training": "mini-batch", "fanouts": list(config.strategy.fanouts),
            "batch_size": config.strategy.batch_size}


def _digest(value, sha) -> None:
    """Feed ``value`` (nested dicts, lists, tuples, tensors, arrays, scalars) into ``sha`` in a fixed order."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        sha.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        sha.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, np.ndarray):
        sha.update(f"A{value.dtype}{value.shape}".encode())
        sha.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        sha.update(f"D{len(value)}".encode())
        for key, item in value.items():
            _digest(key, sha)
            _digest(item, sha)
    elif isinstance(value, (list, tuple)):
        sha.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)}".encode())
        for item in value:
            _digest(item, sha)
    else:
        sha.update(f"S{type(value).__name__}:{value!r};".encode())


def checksum(payload: dict) -> str:
    """SHA-256 (hex) of a checkpoint's contents: every entry but ``checksum`` (module docstring)."""
    sha = hashlib.sha256()
    _digest({k: v for k, v in payload.items() if k != "checksum"}, sha)
    return sha.hexdigest()


def write_checkpoint(path: str | Path, payload: dict) -> None:
    """Write ``payload`` with its :func:`checksum` to ``path`` through
    :func:`graphscale.data.outputs.write_output` (atomically; a FIFO or device in place; a failure is one line
    naming ``--checkpoint``, the path, the cause and the bytes)."""
    from graphscale.data.outputs import write_output

    buffer = io.BytesIO()
    torch.save({**payload, "checksum": checksum(payload)}, buffer)
    write_output(path, buffer.getbuffer(), option="--checkpoint")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by this version.

    Raises:
        ValueError: one line naming the file: it cannot be read (damaged, truncated, not a checkpoint) or it lacks
            what this version records.
    """
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except FileNotFoundError:
        raise ValueError(f"--resume: checkpoint {path} does not exist") from None
    except Exception as err:  # noqa: BLE001 - unpickling, zip and storage errors all mean "cannot be read"
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"--resume: checkpoint {path} cannot be read (damaged or not a graphscale checkpoint: "
                         f"{type(err).__name__}{': ' + reason if reason else ''})") from None
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED):
        raise ValueError(f"--resume: checkpoint {path} is not a graphscale checkpoint of this version (it does not "
                         "record its run's configuration and checksum); train again without --resume")
    if checksum(state) != state["checksum"]:
        raise ValueError(f"--resume: checkpoint {path} is damaged: its contents do not match the checksum written "
                         "with it; train again without --resume (or resume from an intact copy)")
    return state


def adopt_width(config: RunConfig, saved: dict) -> None:
    """A resumed run that gives no ``--hidden`` (``config.model.hidden_auto``) continues with the width its checkpoint
    recorded, in place: the default width depends on the dataset's class count
    (:func:`~graphscale.config.resolve_hidden`) and on the version that chose it, so a checkpoint trained before that
    rule, or on a dataset that resolved it otherwise, resumes as it was trained. A width the user gave, or a
    checkpoint of another model, is compared as every other option is."""
    recorded = saved["identity"].get("hidden")
    same_model = saved["identity"].get("model") == config.model.name  # another model's width is not its default
    if config.model.hidden_auto and same_model and isinstance(recorded, int) and not isinstance(recorded, bool):
        config.model.hidden = recorded
        config.model.hidden_auto = False


def _show(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def check_resume(config: RunConfig, saved: dict, summary: dict | None = None) -> None:
    """Refuse to resume ``saved`` (a :func:`read_checkpoint` result) into a run with another identity (an unset
    ``--hidden`` takes the checkpoint's width first: :func:`adopt_width`).

    Args:
        config: the resuming run; an empty ``config.data.dataset`` (not resolved yet) is not compared.
        saved: the checkpoint.
        summary: the prepared data's counts (``DataHandle.summary``), compared with the checkpoint's when given.

    Raises:
        ValueError: one line naming every differing option with the checkpoint's and this run's values.
    """
    from graphscale.registry import STRATEGIES

    adopt_width(config, saved)
    recorded, current, recorded_graph = saved["identity"], identity(config), saved.get("graph")
    differing = []
    before, now = recorded.get("strategy"), current["strategy"]
    if before != now and not (before in STRATEGIES.names() and STRATEGIES.get(before).exact
                              and STRATEGIES.get(now).exact):
        differing.append(f"--strategy {before!r} (checkpoint) vs {now!r} (only exact strategies resume each "
                         "other's checkpoints)")
    for key in current:
        if key == "dataset" and not current[key]:
            continue
        if key == "strategy":
            continue
        if key not in recorded and before != now:  # an option of this run's strategy only: not a difference
            continue
        before_value = recorded.get(key, RECORDED_DEFAULTS.get(key))
        if key == "lr_t_max" and before_value is not None and before_value != current[key]:
            differing.append(f"--epochs {before_value} (checkpoint) vs {current[key]} (--lr-schedule cosine anneals "
                             "to 0 over --epochs: resume with the checkpoint's)")
        elif key == "training" and recorded.get(key) != current[key]:
            differing.append(f"training {_show(recorded.get(key))} (checkpoint) vs {_show(current[key])} "
                             "(--minibatch, or a strategy that samples mini-batches, changes it)")
        elif before_value != current[key]:
            differing.append(f"--{key.replace('_', '-')} {_show(before_value)} (checkpoint) vs "
                             f"{_show(current[key])}")
    if summary is not None and recorded_graph is not None:
        for key in GRAPH_COUNTS:
            if key in recorded_graph and recorded_graph[key] != summary.get(key):
                differing.append(f"graph {key} {recorded_graph[key]} (checkpoint) vs {summary.get(key)}")
    if differing:
        raise ValueError(f"--resume: checkpoint {config.checkpoint} was trained with another configuration: "
                         f"{'; '.join(differing)}; resume with the checkpoint's options (only --epochs and how the "
                         "run is executed may change) or train again without --resume")

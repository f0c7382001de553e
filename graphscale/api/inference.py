"""A trained model back in the user's hands: :func:`load_model` (a checkpoint into the user's module) and
:func:`predict` (full-graph inference under an exact strategy, returning the outputs).

**The checkpoint's layout** (one ``torch.save`` file, written by worker 0 after every epoch; ``torch.load(path,
weights_only=False)`` reads it): ``epoch`` (the last epoch written, 0-based), ``best`` (``epoch``, ``val_acc``,
``test_acc``, ``by`` and ``state``: the best epoch's parameters), ``strategy`` (``model``: the last epoch's
parameters, ``optimizer``: its state), ``history`` (one record per epoch), ``identity`` (the options that define
the run, :func:`graphscale.checkpoint.identity`) and ``graph`` (its counts). The parameter dictionaries are
*graphscale's* model's: for a graphscale model (``--model gcn``) its own ``state_dict()``; for a PyG model the
wrapper's that runs it (a layer-sequential model's convs as ``layers.<i>.conv.*`` and its other modules as
``head.*`` / ``tails.<i>.*`` / ``out.*``; a model with its own forward as ``net.*``). They do not load into your
module directly (``model.load_state_dict(sd, strict=False)`` would match no key and load nothing):
:func:`load_model` maps them onto your module, checking that every parameter is loaded.
"""

from __future__ import annotations

from pathlib import Path

#: the strategies :func:`predict` runs: those whose workers compute the exact full-graph outputs of the rows they own
#: (:meth:`~graphscale.strategies.base.Strategy.outputs`)
PREDICT_STRATEGIES = ("single", "graph-parallel", "offload", "pipeline")


def load_model(checkpoint: str | Path, model, which: str = "best"):
    """Load the parameters of a checkpoint (``checkpoint=`` of :func:`graphscale.train`, ``--checkpoint``) into
    ``model``, the module the run trained (a new instance of your PyG model's class built as for training, or a
    graphscale model), and return it in eval mode.

    Args:
        checkpoint: the checkpoint file.
        model: a ``torch.nn.Module`` of the trained architecture; its parameters are overwritten. A link-prediction
            checkpoint's (``task="link"``) decoder is loaded into ``model.link_decoder``, added when the module has
            none.
        which: ``"best"`` (the best epoch's parameters) or ``"last"`` (the last epoch written).

    Raises:
        ValueError: one line: the file cannot be read, ``which`` is neither, or ``model`` does not have the
            checkpoint's parameters (the missing or unexpected names).
    """
    import torch

    from graphscale.checkpoint import read_checkpoint
    from graphscale.data.features import input_width
    from graphscale.nn.gnn import GNN

    if which not in ("best", "last"):
        raise ValueError(f"load_model: which={which!r}; expected 'best' or 'last'")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"load_model: model must be a torch.nn.Module, got {type(model).__name__}")
    try:
        saved = read_checkpoint(checkpoint)
    except ValueError as err:
        raise ValueError(str(err).replace("--resume: ", "load_model: ", 1)) from None
    state = saved["best"].get("state") if which == "best" else saved["strategy"].get("model")
    if state is None:
        raise ValueError(f"load_model: checkpoint {checkpoint} holds no {which} parameters (no epoch finished)")
    identity, graph = saved["identity"], saved.get("graph") or {}
    target = model
    if not isinstance(model, GNN):  # a PyG model: graphscale's wrapper around it names the parameters
        from graphscale.nn.pyg import as_gnn

        in_dim = input_width(identity.get("features", ""), int(graph.get("features") or 0))
        # (the dropout choice changes no parameter name; "torch" refuses no module)
        classes = None if identity.get("task") == "link" else graph.get("classes")  # link: embeddings, any width
        target = as_gnn(model, in_dim, classes, dropout="torch", label=type(model).__qualname__)
    if identity.get("task") == "link":  # the decoder's parameters are the checkpoint's too
        if not hasattr(model, "link_decoder"):
            from graphscale.tasks.link import decoder_from_state

            model.link_decoder = decoder_from_state(identity.get("decoder", "dot"), state, identity.get("seed", 0))
        if target is not model:
            target.link_decoder = model.link_decoder
    missing, unexpected = _mismatch(target, state)
    if missing or unexpected:
        parts = ([f"missing {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}"] if missing else []) + \
            ([f"unexpected {', '.join(unexpected[:3])}{', ...' if len(unexpected) > 3 else ''}"] if unexpected else [])
        raise ValueError(f"load_model: checkpoint {checkpoint} holds the parameters of model {identity.get('model')!r}"
                         f", not of this {type(model).__qualname__} ({'; '.join(parts)})")
    try:
        target.load_state_dict(state)
    except RuntimeError as err:  # same names, other shapes
        first = str(err).strip().splitlines()
        raise ValueError(f"load_model: checkpoint {checkpoint} does not fit this {type(model).__qualname__}: "
                         f"{first[-1].strip() if first else err}") from None
    return model.eval()


def _mismatch(module, state: dict) -> tuple[list[str], list[str]]:
    own = set(module.state_dict())
    return sorted(own - set(state)), sorted(set(state) - own)


def predict(model, data, /, *, strategy: str = "single", workers: int = 1, **options):
    """Full-graph inference: ``model``'s outputs for every vertex of ``data``, computed under ``strategy``:
    ``single``; ``graph-parallel`` on ``workers`` processes, each computing its partition's rows layer by layer with
    the halo exchange of training (no worker holds more than its rows and their halo); ``offload``, layer by layer
    over chunks streamed through the device (the evaluation's chunked inference); ``pipeline``, the stages' exact
    forward chunk by chunk (the last stage's workers return the outputs). Every one gives the same outputs.

    Args:
        model: a trained ``torch.nn.Module`` (``report.model``, or :func:`load_model`'s), or anything
            :func:`graphscale.train` accepts as a model (a name or a factory predict with their initial weights).
        data: as :func:`graphscale.train`'s (a dataset spec, a ``Graph``, a PyG ``Data``, ...).
        strategy: one of :data:`PREDICT_STRATEGIES` (another is refused in one line naming why).
        workers: worker processes.
        **options: :func:`graphscale.train`'s keywords that shape the data and the model (``dtype=``,
            ``feature_norm=``, ``features=``, ``partitioner=``, ``seed=``, ``pyg_dropout=``, ...).

    Returns:
        the outputs (logits) as a CPU tensor ``[N, C]``, row ``v`` for vertex ``v``; the model in eval mode
        (dropout off).

    Raises:
        ValueError: ``strategy`` is not one of :data:`PREDICT_STRATEGIES`, and every error of :func:`train`'s
            configuration (one line, before any worker starts).
    """
    import torch

    from graphscale.api.training import configure
    from graphscale.data.features import input_width
    from graphscale.distributed.launch import launch, resolve_device
    from graphscale.prepare import prepare_data
    from graphscale.validation import check_edge_weights, check_strategy_weights, check_user_model, validate

    if strategy not in PREDICT_STRATEGIES:
        from graphscale.registry import STRATEGIES

        why = (f" (it {STRATEGIES.get(strategy).predict_refusal})" if strategy in STRATEGIES.names() else "")
        raise ValueError(f"predict: strategy={strategy!r} cannot predict{why}; predict runs "
                         f"{', '.join(PREDICT_STRATEGIES)} (the outputs of a trained model are the same under each)")
    for key in ("epochs", "json", "checkpoint", "resume", "minibatch"):
        if key in options:
            raise ValueError(f"predict: {key}= is a training option; predict takes the trained model")
    config, _ = configure(model, data, {**options, "strategy": strategy, "workers": workers, "progress": False})
    validate(config)
    handle = prepare_data(config)
    weighted = bool(handle.summary.get("weighted"))
    check_edge_weights(config, weighted)
    check_user_model(config, input_width(config.data.features, handle.num_features), handle.num_classes, weighted)
    check_strategy_weights(config, weighted, int(handle.summary.get("halo_hops", 1)))
    backend = None if config.backend == "auto" else config.backend
    results = launch(predict_worker, workers, config, handle, device=resolve_device(config.device, workers, backend),
                     backend=backend, timeout_s=config.strategy.timeout, allocator_mode=config.allocator or None)
    results = [r for r in results if r[0].numel()]  # a worker that computes no output row (pipeline's first stage)
    ids = torch.cat([r[0] for r in results])
    rows = torch.cat([r[1] for r in results])
    out = torch.empty(handle.num_nodes, rows.shape[1], dtype=rows.dtype)
    out[ids] = rows
    return out


def predict_worker(env, config, data) -> tuple:
    """One worker of :func:`predict`: the strategy set up on its rows, one forward in eval mode; ``(global ids,
    outputs)`` of the rows it owns."""
    import torch

    from graphscale.data.features import input_width
    from graphscale.nn.models import build_model, is_decoupled
    from graphscale.registry import STRATEGIES

    torch.manual_seed(config.seed)
    model = build_model(config.model, input_width(config.data.features, data.num_features), data.num_classes,
                        seed=config.seed, dtype=getattr(torch, config.dtype), decoupled=is_decoupled(config))
    model = model.to(env.device)
    strategy = STRATEGIES.get(config.strategy.name)()
    strategy.setup(data, model, env, config)
    try:
        with torch.no_grad():
            ids, logits = strategy.outputs()
    finally:
        strategy.teardown()
    return ids.cpu(), logits.detach().cpu()

"""``graphscale.train(model, data, **options) -> Report``: ``graphscale train`` from Python (package docstring)."""

from __future__ import annotations

import sys
from pathlib import Path

from graphscale.api.keywords import convert_keyword, keyword_overrides
from graphscale.api.models import check_user_model_options, model_factory
from graphscale.api.report import Report


def train(model, data, /, **options) -> Report:
    """Train ``model`` on ``data`` with a strategy and return the run's :class:`~graphscale.api.Report`.

    Args:
        model: a graphscale model name (``"gcn"``, ``"sage"``, ``"gat"``, ``"gcnii"``, ``"resgcn"``) or
            ``"module.path:factory"`` (as ``--model``), a ``torch.nn.Module`` (a graphscale ``GNN``, a PyG model), or a zero-argument callable returning one,
            defined at a module's top level (module docstring).
        data: a dataset spec string, a graphscale ``Graph``, a PyG ``Data``, RandomLinkSplit's ``(train, val,
            test)`` triple of ``Data`` (``task="link"``: its pairs are the run's split), an OGB node-property
            dataset object, or ``None`` (the dataset of ``partitions=``, else ``"cora"``).
        **options: the options of ``graphscale train``, spelled as keywords (``--batch-size 256`` is
            ``batch_size=256``; ``strategy=``, ``workers=``, ``epochs=``, ``lr=``, ``fanouts=[10, 5]``,
            ``partitioner="metis"``, ``json="r.json"``, ...); ``config="run.toml"`` reads a TOML file first, which
            the keywords override, as the command line's flags do.

    Returns:
        the report (``report.final.test_acc``, ``report.epochs[-1].bytes``, ``report.to_json(path)``,
        ``report.plot(path)``).

    Raises:
        TypeError: an unknown keyword (naming the closest valid one), a value of the wrong type, a ``model`` or
            ``data`` of an unsupported kind.
        ValueError: bad input (a keyword that conflicts with ``model`` or ``data``, an option the strategy does not
            read, a model that cannot be sent to workers, data without labels or a training split, ...): one line,
            before any worker starts.
        graphscale.distributed.launch.WorkerError: a worker failed during training (``err.one_line()``).
    """
    from graphscale.run import run

    config, advice = configure(model, data, options)
    report = run(config, keep_model=True)
    models = report.pop("models", None)
    if advice is not None:  # the prediction next to the measurement, in the report and its --json file
        from graphscale.advise.auto import record
        from graphscale.run import write_json

        record(report, advice)
        if config.json:
            write_json(report, config.json)
    return Report.from_dict(report, models)


def configure(model, data, options: dict) -> tuple:
    """``(config, advice)``: :func:`train`'s run configuration from its arguments, checked, with in-memory data
    written (:func:`graphscale.prepare.input_dataset`); ``advice`` is ``strategy="auto"``'s (else ``None``).

    Raises:
        TypeError, ValueError: as :func:`train`.
    """
    from graphscale.config import build_config
    from graphscale.distributed.main_module import refuse_while_importing_main
    from graphscale.validation import announce_default_features, check_path_conflicts, validate

    refuse_while_importing_main()  # a worker importing the script never trains itself
    options = dict(options)
    config_file = options.pop("config", None)
    if config_file is not None:
        config_file = convert_keyword("config", config_file, str)
    repeat = convert_keyword("repeat", options.pop("repeat", 1), int)
    if repeat != 1:
        raise ValueError(f"repeat={repeat}: train() runs one seed and returns its Report; call it once per seed "
                         "(seed=s) for several")
    for key, argument in (("model", "model"), ("dataset", "data")):
        if key in options:
            raise ValueError(f"{key}= conflicts with the {argument} argument: give the {argument} once, as "
                             f"train's {'first' if argument == 'model' else 'second'} argument")
    overrides = keyword_overrides(options)
    auto = overrides.get("strategy", {}).get("name") == "auto"
    if auto and not isinstance(model, str):
        raise ValueError("strategy='auto' predicts for graphscale's own models (a model name such as \"gcn\"); "
                         "with your own model, run `graphscale advise` with the closest model name and pass the "
                         "strategy it recommends")

    factory, label = None, None
    if isinstance(model, str):
        overrides.setdefault("model", {})["name"] = model
    else:
        factory, label = model_factory(model)
        check_user_model_options(overrides, config_file)

    graph = None
    if isinstance(data, str):
        overrides.setdefault("data", {})["dataset"] = data
    elif data is not None:
        from graphscale.data.convert import to_graph
        from graphscale.data.link_inputs import from_link_data

        graph = from_link_data(data) if isinstance(data, (tuple, list)) else to_graph(data)
        if not _given(overrides, config_file, "data", "feature_norm"):  # the user's features as they are
            overrides.setdefault("data", {})["feature_norm"] = "none"
    if auto:  # graphscale advise's recommendation, as `graphscale train --strategy auto` runs it
        overrides, advice = _resolve_auto(overrides, graph, config_file)
        graph = None  # written by _resolve_auto; the overrides name its directory
    config = build_config(overrides, config_file, factory)  # pyg_dropout: the user model's, in a TOML file too
    _check_features(graph, config)
    _check_link_data(graph, config, overrides)
    if factory is not None:
        from graphscale.distributed.launch import torchrun_detected
        from graphscale.distributed.main_module import check_guard

        config.model.name = label
        if not torchrun_detected():  # spawned workers import the script only for what is defined there
            check_guard(factory, config.strategy.workers)
    given = config.data.features
    validate(config)  # (run validates again, with the dataset) before the graph is written
    announce_default_features(config, given)
    check_path_conflicts(config, None, config_file)
    if graph is not None:
        from graphscale.prepare import input_dataset

        config.data.dataset = input_dataset(graph, config)
    return config, (advice if auto else None)


def _resolve_auto(overrides: dict, graph, config_file) -> tuple[dict, dict]:
    """``strategy="auto"``: the recommended configuration's overrides and the advice
    (:func:`graphscale.advise.auto.resolve`); in-memory data is written first so the advice reads its statistics."""
    from graphscale.advise.auto import resolve

    if graph is not None:
        from graphscale.config import build_config
        from graphscale.prepare import input_dataset

        # the candidates' shared options, as resolve() reads them (the strategy and its workers left out)
        shared = build_config({**overrides, "strategy": {k: v for k, v in overrides["strategy"].items()
                                                        if k not in ("name", "workers")}}, config_file)
        _check_features(graph, shared)
        overrides = {**overrides, "data": {**overrides.get("data", {}), "dataset": input_dataset(graph, shared)}}
    return resolve(overrides, config_file)


def _given(overrides: dict, config_file, section: str, key: str) -> bool:
    """Whether option ``[section] key`` was given, as a keyword or in the TOML file."""
    if key in overrides.get(section, {}):
        return True
    if config_file is None:
        return False
    import tomllib

    try:
        table = tomllib.loads(Path(config_file).read_text()).get(section, {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        return False  # build_config has reported what is wrong with the file
    return isinstance(table, dict) and key in table


def _check_features(graph, config) -> None:
    """In-memory data without node features and without ``features=`` trains on
    :data:`~graphscale.data.features.DEFAULT_FEATURELESS` (said on stderr)."""
    from graphscale.data.features import DEFAULT_FEATURELESS, default_notice

    if graph is not None and graph.x is None and not config.data.features:
        config.data.features = DEFAULT_FEATURELESS
        print(f"graphscale: {default_notice('data (no x)', 'features=')}", file=sys.stderr)


def _check_link_data(graph, config, overrides: dict) -> None:
    """In-memory data carrying its own link split (RandomLinkSplit's triple) trains ``task="link"`` only."""
    from graphscale.data.link_pairs import has_given_pairs

    if graph is not None and has_given_pairs(graph.meta) and config.task != "link":
        raise ValueError(f"data is a link split (RandomLinkSplit's train, val, test triple), which trains "
                         f"task=\"link\"; this run's task is {config.task!r}")
    if graph is not None and has_given_pairs(graph.meta) and "link_split" in overrides:
        raise ValueError("link_split= is not read with data that brings its own split (RandomLinkSplit's triple)")

"""Every ``graphscale train`` option works from ``gs.train`` for every kind of model: a walk over the option
declarations (:func:`graphscale.config.declared_options`) with a graphscale model name, a PyG model object and a
factory, each option given a value other than its default (with the options that make it read: ``minibatch=True``
for ``fanouts=``, ...). Each is accepted and reaches its configuration field (the run configuration ``gs.train``
hands the workers, checked as before any worker starts), or is refused in one line for a reason of that model kind:
the options that describe a graphscale model by name conflict with a model object, a PyG model's ``pyg_dropout``
is not a graphscale model's, a graphscale model's options apply to it only, and task-parallel trains no PyG model.
A TOML file's ``[model] pyg_dropout`` reaches a model object as the keyword does."""

from __future__ import annotations

import dataclasses
import re

import pytest

from graphscale.api.training import configure
from graphscale.config import BUILTIN_MODEL_FIELDS, declared_options
from graphscale.registry import STRATEGIES

pyg_models = pytest.importorskip("graphscale.testing.pyg_models")

#: values for options whose type or meaning needs one (paths are made under the test's folder: ``{tmp}``)
VALUES = {"features": "degree", "feature_dtype": "bfloat16", "partitions": "{tmp}/store", "partitioner": "random",
          "device_memory": "1GiB", "state_dir": "{tmp}/state", "memory_budget": "1GiB", "shm_dir": "{tmp}",
          "cache_dir": "{tmp}/cache", "host_memory": "2GiB", "json": "{tmp}/r.json", "tensorboard": "{tmp}/tb",
          "checkpoint": "{tmp}/c.pt", "device": "cpu", "backend": "gloo", "strategy": "graph-parallel", "workers": 2,
          "chunks": 2, "fanouts": [3, 3], "eval_fanouts": [3, 3], "evaluation": "truncated", "halo_hops": 2, "momentum": 0.5,
          "lr_step_size": 2, "lr_gamma": 0.5, "resume": True, "decoupled": "on", "dtype": "float64",
          "allocator": "retain", "task_chunks": 8, "hits_k": [10, 50], "link_split": [0.8, 0.1, 0.1]}
TASK = {"strategy": "task-parallel", "workers": 2}
#: the options that make an option read (or valid)
ENABLING = {"cache_fraction": {"strategy": "data-parallel", "cache": "pagraph"}, "fanouts": {"minibatch": True},
            "eval_fanouts": {"minibatch": True}, "batch_size": {"minibatch": True}, "hybrid_width": {"workers": 2},
            "hybrid_split": {"workers": 2, "hybrid_width": 2}, "schedule": {"cross_chunk_grad": "none"},
            "momentum": {"optimizer": "sgd"}, "lr_step_size": {"lr_schedule": "step"},
            "lr_gamma": {"lr_schedule": "step", "lr_step_size": 2}, "resume": {"checkpoint": "{tmp}/c.pt"},
            "workers": {"strategy": "graph-parallel"}, "chunks": {"strategy": "offload"},
            "heads": {"model_name": "gat"}, "alpha": {"model_name": "gcnii"}, "theta": {"model_name": "gcnii"},
            "last_relu": {"decoupled": "on"}, **{k: {"task": "link"} for k in ("decoder", "hits_k", "link_split")},
            **{k: TASK for k in ("task_chunks", "t_workers", "p_split", "subgraphs", "chunking", "dependency",
                                 "t_recompute", "pipelined", "loss_norm", "task_gamma", "device_flops",
                                 "device_bandwidth")}}
#: the strategies in the order the walk picks the first that reads an option
ORDER = ("single", "graph-parallel", "data-parallel", "split-parallel", "offload", "pipeline", "task-parallel",
         "model-averaging")
USER_KINDS = ("object", "factory")


def expected_refusal(key: str, kind: str) -> str | None:
    """The refusal (a regular expression) of option ``key`` for model ``kind``, or ``None``: accepted."""
    if key == "dataset":
        return r"^dataset= conflicts with the data argument"
    if key == "model":
        return r"^model= conflicts with the model argument"
    if kind == "name":
        return r"^--pyg-dropout is not used by model 'gcn'" if key == "pyg_dropout" else None
    if key in BUILTIN_MODEL_FIELDS:
        return rf"^{key}= conflicts with the model argument: a model object or factory defines its own"
    if ENABLING.get(key) is TASK:
        return r"^strategy 'task-parallel' does not train PyG models .*: it trains decoupled models"
    return None


def value(key: str, f: dataclasses.Field, tmp) -> object:
    """A valid value of option ``key`` other than its default."""
    if key in VALUES:
        v = VALUES[key]
        return v.format(tmp=tmp) if isinstance(v, str) else v
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    choices = f.metadata.get("choices")
    if choices:
        return next(c for c in choices if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default * 0.5 if default else 0.25
    if default is None and str(f.type) == "int | None":
        return 2
    raise AssertionError(f"option {key}: give the walk a value for it (VALUES)")


def options_for(key: str, path: tuple[str, ...], v, tmp, kind: str) -> tuple[dict, str]:
    """The keywords that give option ``key`` the value ``v`` where it is read (for a model object or factory without
    the options of graphscale's models), and the model name to use."""
    out = {}
    if path[0] in ("strategy", "data") and key not in ("strategy", "workers", "chunks", "timeout"):
        readers = [n for n in ORDER if path[-1] in STRATEGIES.get(n).options]
        if readers:
            out["strategy"] = readers[0]
    extra = {k: (e.format(tmp=tmp) if isinstance(e, str) else e) for k, e in ENABLING.get(key, {}).items()}
    name = extra.pop("model_name", "gcn")
    if kind != "name":
        extra = {k: e for k, e in extra.items() if k not in BUILTIN_MODEL_FIELDS}
    return {**out, **extra, key: v, "progress": False}, name


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["name", *USER_KINDS])
def test_every_train_option_is_accepted_or_refused_for_the_model_kind_in_one_line(kind, tmp_path):
    (tmp_path / "c.pt").write_bytes(b"")  # --resume needs the file (its content is checked when the run starts)
    walked = []
    for key, (path, f) in declared_options().items():
        v = value(key, f, tmp_path) if key not in ("dataset", "model") else ("cora" if key == "dataset" else "sage")
        options, name = options_for(key, path, v, tmp_path, kind)
        model = {"name": name, "object": pyg_models.gcn(), "factory": pyg_models.gcn}[kind]
        refusal = expected_refusal(key, kind)
        if key == "tensorboard":
            try:
                import tensorboard  # noqa: F401
            except ImportError:
                refusal = r"^--tensorboard needs the 'tensorboard' package"
        walked.append(key)
        if refusal is not None:
            with pytest.raises(ValueError, match=refusal) as err:
                configure(model, None, options)
            assert "\n" not in str(err.value), key
            continue
        try:
            config, _ = configure(model, None, options)
        except (ValueError, TypeError) as err:
            raise AssertionError(f"{key}={v!r} with a model {kind}: {err}") from None
        got = config
        for part in path:
            got = getattr(got, part)
        assert got == v, (key, kind, got)
    assert {"optimizer", "lr_schedule", "pyg_dropout", "fanouts", "chunks", "workers"} <= set(walked)


@pytest.mark.parametrize("kind", USER_KINDS)
def test_a_toml_pyg_dropout_reaches_a_model_object_or_factory(kind, tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[model]\npyg_dropout = "torch"\n')
    model = {"object": pyg_models.gcn(), "factory": pyg_models.gcn}[kind]
    config, _ = configure(model, None, {"config": str(toml), "progress": False})
    assert config.model.pyg_dropout == "torch" and config.model.factory is not None
    toml.write_text('[model]\nhidden = 32\n')
    with pytest.raises(ValueError, match=re.escape(f"{toml}: [model] hidden conflicts with the model argument")):
        configure(model, None, {"config": str(toml), "progress": False})

"""Name -> object registries for strategies, partitioners, models and datasets.

Registration happens where the registered thing is defined, via a decorator;
:func:`load_builtins` imports those modules (nothing is imported at package
import time). Unknown names raise an error that lists the choices.

:data:`_BUILTIN_NAMES` lists the names each built-in module registers, so that
:meth:`Registry.names` answers without importing any of them (``graphscale info``
and error messages stay fast: the strategies pull in numba and scipy), and
:meth:`Registry.get` imports only the module of the name asked for. A test checks
that the list equals what the modules register.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

#: kind -> built-in module -> the names it registers (checked against the modules by a test)
_BUILTIN_NAMES = {
    "strategy": {"graphscale.strategies.single": ("single",),
                 "graphscale.strategies.graph_parallel": ("graph-parallel",),
                 "graphscale.strategies.offload": ("offload",),
                 "graphscale.strategies.data_parallel": ("data-parallel",),
                 "graphscale.strategies.split_parallel": ("split-parallel",),
                 "graphscale.strategies.model_averaging": ("model-averaging",),
                 "graphscale.strategies.pipeline": ("pipeline",),
                 "graphscale.strategies.task_parallel": ("task-parallel",)},
    "model": {"graphscale.nn.models": ("gcn", "sage", "gat", "gcnii", "resgcn")},
    "partitioner": {"graphscale.partition.random": ("random",), "graphscale.partition.metis": ("metis",),
                    "graphscale.partition.vertex_stream": ("ldg", "fennel", "restream"),
                    "graphscale.partition.edge_stream": ("hash", "dbh", "greedy", "hdrf"),
                    "graphscale.partition.twops": ("2ps-l",),
                    "graphscale.partition.spring": ("spring",)},
}


#: kind -> the modules that register its built-in entries
_BUILTIN_MODULES = {kind: list(modules) for kind, modules in _BUILTIN_NAMES.items()}


class Registry:
    """A named collection of factories of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable] = {}

    def register(self, name: str) -> Callable:
        def decorator(obj):
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = obj
            return obj
        return decorator

    def get(self, name: str) -> Callable:
        if name not in self._items:
            module = next((m for m, names in _BUILTIN_NAMES.get(self.kind, {}).items() if name in names), None)
            if module is not None:
                importlib.import_module(module)
            else:
                load_builtins(self.kind)
        if name not in self._items:
            raise KeyError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        """Every registered name and every built-in one (without importing the built-in modules)."""
        builtin = {n for names in _BUILTIN_NAMES.get(self.kind, {}).values() for n in names}
        return sorted(builtin | set(self._items))


STRATEGIES = Registry("strategy")
MODELS = Registry("model")
PARTITIONERS = Registry("partitioner")


def load_builtins(kind: str) -> None:
    """Import the modules that register the built-in entries of ``kind``."""
    for module in _BUILTIN_MODULES.get(kind, []):
        importlib.import_module(module)


#: strategy name -> "module:function" of its ``predict(data, model, config, machine) -> Prediction`` (next to the
#: strategy's code; :mod:`graphscale.cost`)
PREDICTORS = {
    "single": "graphscale.strategies.single:predict",
    "graph-parallel": "graphscale.strategies.graph_parallel:predict",
    "data-parallel": "graphscale.strategies.data_parallel:predict",
    "split-parallel": "graphscale.strategies.split_parallel.predict:predict",
    "offload": "graphscale.strategies.offload.predict:predict",
    "pipeline": "graphscale.strategies.pipeline.predict:predict",
    "task-parallel": "graphscale.strategies.task_parallel.predict:predict",
    "model-averaging": "graphscale.strategies.model_averaging.predict:predict",
}


def predictor(name: str):
    """The ``predict`` function of strategy ``name``."""
    if name not in PREDICTORS:
        raise ValueError(f"no prediction for strategy {name!r}; strategies with one: {', '.join(PREDICTORS)}")
    module, func = PREDICTORS[name].split(":")
    return getattr(importlib.import_module(module), func)

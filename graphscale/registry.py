"""Name -> object registries for strategies, partitioners, models and datasets.

Registration happens where the registered thing is defined, via a decorator;
:func:`load_builtins` imports those modules (nothing is imported at package
import time). Unknown names raise an error that lists the choices.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

_BUILTIN_MODULES = {
    "strategy": ["graphscale.strategies.single", "graphscale.strategies.graph_parallel",
                 "graphscale.strategies.offload", "graphscale.strategies.data_parallel",
                 "graphscale.strategies.split_parallel", "graphscale.strategies.model_averaging",
                 "graphscale.strategies.pipeline"],
    "model": ["graphscale.nn.models"],
    "partitioner": ["graphscale.partition.random", "graphscale.partition.metis", "graphscale.partition.vertex_stream",
                    "graphscale.partition.edge_stream", "graphscale.partition.spring"],
}


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
        load_builtins(self.kind)
        if name not in self._items:
            raise KeyError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        load_builtins(self.kind)
        return sorted(self._items)


STRATEGIES = Registry("strategy")
MODELS = Registry("model")
PARTITIONERS = Registry("partitioner")


def load_builtins(kind: str) -> None:
    """Import the modules that register the built-in entries of ``kind``."""
    for module in _BUILTIN_MODULES.get(kind, []):
        importlib.import_module(module)

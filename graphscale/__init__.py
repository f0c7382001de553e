"""graphscale: train graph neural networks past the memory and speed of one device.

``import graphscale as gs; report = gs.train(model, data, strategy="graph-parallel", workers=2)``: the Python
API (:mod:`graphscale.api`: ``train``, the report types, ``predict`` and ``load_model``), imported on first use so that
``import graphscale`` stays light (no torch).
"""

__version__ = "0.1.0"

#: the names this package exposes lazily -> the module defining them
_LAZY = {"train": "graphscale.api", "Report": "graphscale.api", "EpochRecord": "graphscale.api",
         "Final": "graphscale.api", "load_model": "graphscale.api", "predict": "graphscale.api"}
__all__ = ["EpochRecord", "Final", "Report", "__version__", "load_model", "predict", "train"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'graphscale' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

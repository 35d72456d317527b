"""xdex: extreme multi-label classification with label text.

``import xdex`` is enough for the Python API: ``xdex.Model`` (train, load, predict, add labels),
``xdex.Predictor`` (the thread-safe serving wrapper), ``xdex.data`` (datasets) and ``xdex.metrics``.
They are imported on first use, so ``xdex.__version__`` alone does not import torch.
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {"Model": "xdex.model", "Predictions": "xdex.inference.predictor", "Predictor": "xdex.inference.predictor",
            "ScoredLabel": "xdex.inference.predictor"}
_SUBPACKAGES = ("data", "metrics")


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"xdex.{name}")
    raise AttributeError(f"module 'xdex' has no attribute {name!r}")


__all__ = ["Model", "Predictions", "Predictor", "ScoredLabel", "__version__", "data", "metrics"]

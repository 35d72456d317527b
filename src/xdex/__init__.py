"""xdex: extreme multi-label classification with label text."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``xdex.Predictor`` without importing torch when only the package version is needed."""
    if name in ("Predictor", "ScoredLabel"):
        from xdex.inference import predictor

        return getattr(predictor, name)
    raise AttributeError(f"module 'xdex' has no attribute {name!r}")

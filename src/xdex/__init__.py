"""xdex: extreme multi-label classification with label text."""

__version__ = "0.1.0"

"""Networks built on an encoder: the dual encoder (and, in recipes, their heads)."""

from xdex.modules.dual_encoder import DualEncoder

__all__ = ["DualEncoder"]

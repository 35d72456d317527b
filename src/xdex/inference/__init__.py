"""Retrieval of labels for queries: encode, search, rank."""

from xdex.index.retrieval import retrieve
from xdex.inference.model import DualEncoderModel
from xdex.inference.predictor import Predictor, ScoredLabel

__all__ = ["DualEncoderModel", "Predictor", "ScoredLabel", "retrieve"]

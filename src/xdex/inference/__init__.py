"""Retrieval of labels for queries: encode, search, rank."""

from xdex.inference.model import DualEncoderModel
from xdex.inference.predictor import Predictor, ScoredLabel
from xdex.inference.retrieval import retrieve

__all__ = ["DualEncoderModel", "Predictor", "ScoredLabel", "retrieve"]

"""A predictor for applications: load a model directory once, then rank labels for texts.

``Predictor(model_dir).predict(texts, k)`` gives, for each text, its ``k`` best labels with their
row, key, text and score, best first. Texts are encoded in batches of ``batch_size``; a text's result
does not depend on the other texts of the call (up to floating-point rounding). Several threads may
call ``predict`` at once: the model is in eval mode and is only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdex.inference.model import DualEncoderModel
from xdex.metrics.ranking import Ranking


@dataclass(frozen=True)
class ScoredLabel:
    """One predicted label: its row in the model's catalogue, its key (the dataset's label id), text, score."""

    index: int
    key: str
    text: str
    score: float


class Predictor:
    """Ranks the labels of a trained model directory for texts (see the module docstring)."""

    def __init__(self, model_dir: str | Path, batch_size: int = 1024, search: str | None = None):
        """``search``: another search mode of the model (e.g. ``"de"``), else the model's own."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        model = DualEncoderModel.load(model_dir)
        self.model = model if search is None else model.with_search(search)
        self.model.net.eval()
        self.batch_size = batch_size

    @property
    def n_labels(self) -> int:
        return len(self.model.label_ids)

    def rank(self, texts: Sequence[str], k: int = 10) -> Ranking:
        """Top-``k`` label rows and scores of every text (rows ``-1`` when fewer labels exist)."""
        texts = _check_texts(texts)
        if not 1 <= k:
            raise ValueError(f"k must be at least 1, got {k}")
        if not texts:
            return Ranking(np.zeros((0, k), np.int64), np.zeros((0, k), np.float32))
        parts = [self.model.predict(list(texts[i : i + self.batch_size]), k)
                 for i in range(0, len(texts), self.batch_size)]
        return Ranking(np.concatenate([p.indices for p in parts]), np.concatenate([p.scores for p in parts]))

    def predict(self, texts: Sequence[str], k: int = 10) -> list[list[ScoredLabel]]:
        """For each text, its ``k`` best labels, best first."""
        ranking = self.rank(texts, k)
        keys, label_texts = self.model.label_ids, self.model.label_texts
        return [
            [ScoredLabel(int(j), keys[j], label_texts[j], float(s)) for j, s in zip(row, scores) if j >= 0]
            for row, scores in zip(ranking.indices, ranking.scores)
        ]


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string (wrap it in a list)")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is a {type(text).__name__}, not a string")
    return out

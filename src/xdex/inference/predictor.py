"""A predictor for applications: load a model directory once, then rank labels for texts, and add labels.

``Predictor(model_dir).predict(texts, k)`` gives, for each text, its ``k`` best labels with their
row, key, text and score, best first. Texts are encoded in batches of ``batch_size``; a text's result
does not depend on the other texts of the call (up to floating-point rounding).

``add_labels(texts)`` adds labels known by their texts alone (zero-shot, see
:mod:`xdex.inference.added_labels`): they are searchable at once and saved in the model directory, so a
predictor loaded later has them too.

Several threads may predict and add labels at once. Each call reads one snapshot of the model (its
catalogue and index), taken when it starts; an addition builds the next snapshot under a lock, saves it,
then swaps it in, so a prediction never sees a half-added label and concurrent additions all survive.
Only one process should add labels to a model directory (a second one would not see the first one's
labels, and the last to write would win).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xdex.inference.added_labels import check_texts
from xdex.inference.model import DualEncoderModel
from xdex.metrics.ranking import Ranking


@dataclass(frozen=True)
class ScoredLabel:
    """One predicted label: its row in the model's catalogue, its key (the dataset's label id), text, score."""

    index: int
    key: str
    text: str
    score: float


@dataclass(frozen=True)
class _Snapshot:
    """A model and the row of each label key; never changed once published."""

    model: DualEncoderModel
    rows: dict[str, int] = field(repr=False)


class Predictor:
    """Ranks the labels of a trained model directory for texts (see the module docstring)."""

    def __init__(self, model_dir: str | Path, batch_size: int = 1024, search: str | None = None):
        """``search``: another search mode of the model (e.g. ``"de"``), else the model's own."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model_dir = Path(model_dir)
        model = DualEncoderModel.load(model_dir)
        model = model if search is None else model.with_search(search)
        model.net.eval()
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._snapshot = _Snapshot(model, {key: row for row, key in enumerate(model.label_ids)})

    @property
    def model(self) -> DualEncoderModel:
        """The model as of now (a later addition of labels gives a new one)."""
        return self._snapshot.model

    @property
    def n_labels(self) -> int:
        return len(self.model.label_ids)

    def rank(self, texts: Sequence[str], k: int = 10) -> Ranking:
        """Top-``k`` label rows and scores of every text (rows ``-1`` when fewer labels exist)."""
        return self._rank(self.model, texts, k)

    def predict(self, texts: Sequence[str], k: int = 10) -> list[list[ScoredLabel]]:
        """For each text, its ``k`` best labels, best first."""
        model = self.model
        ranking = self._rank(model, texts, k)
        keys, label_texts = model.label_ids, model.label_texts
        return [
            [ScoredLabel(int(j), keys[j], label_texts[j], float(s)) for j, s in zip(row, scores) if j >= 0]
            for row, scores in zip(ranking.indices, ranking.scores)
        ]

    def label(self, key: str) -> tuple[int, str]:
        """Row and text of the label with ``key``; ``KeyError`` when there is none."""
        snapshot = self._snapshot
        row = snapshot.rows[key]
        return row, snapshot.model.label_texts[row]

    def add_labels(self, texts: Sequence[str], keys: Sequence[str] | None = None) -> list[str]:
        """Add labels known by their texts alone and return their keys (``keys`` when given, else generated).

        They are saved to the model directory before they become searchable; bad texts or keys raise
        ``TypeError``/``ValueError`` (``KeyConflict`` for a key that is taken or repeated) and add nothing.
        """
        with self._lock:
            current = self._snapshot
            first = len(current.model.label_ids)
            model = current.model.with_labels(texts, keys, self.batch_size)
            added = model.label_ids[first:]
            if added:
                model.save_added(self.model_dir)
                self._snapshot = _Snapshot(model, {**current.rows, **{key: first + i for i, key in enumerate(added)}})
        return added

    def _rank(self, model: DualEncoderModel, texts: Sequence[str], k: int) -> Ranking:
        texts = check_texts(texts, blank_ok=True)
        if not 1 <= k:
            raise ValueError(f"k must be at least 1, got {k}")
        if not texts:
            return Ranking(np.zeros((0, k), np.int64), np.zeros((0, k), np.float32))
        parts = [model.predict(texts[i : i + self.batch_size], k) for i in range(0, len(texts), self.batch_size)]
        return Ranking(np.concatenate([p.indices for p in parts]), np.concatenate([p.scores for p in parts]))

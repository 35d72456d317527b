"""A predictor for applications: load a model directory once, then rank labels for texts, and add labels.

``Predictor(model_dir).predict(texts, k)`` gives, for each text, its ``k`` best labels with their
row, key, text and score, best first. Texts are encoded in batches of ``batch_size`` texts and at most
``BATCH_CHARS`` characters (the tokenizer holds every token of a text, also those past the encoder's
``max_length``, while it encodes a batch: long texts in large batches would cost hundreds of MB); a text's
result does not depend on the other texts of the call (up to floating-point rounding).

``add_labels(texts)`` adds labels known by their texts alone (zero-shot, see
:mod:`xdex.inference.added_labels`): they are searchable at once and saved in the model directory, so a
predictor loaded later has them too.

Several threads may predict and add labels at once. Each call reads one snapshot of the model (its
catalogue and index), taken when it starts; an addition builds the next snapshot under a lock, saves it,
then swaps it in, so a prediction never sees a half-added label and concurrent additions all survive.

One predictor at a time adds labels to a model directory (a second writer would not see the first one's
labels, and the last to write would win). The first addition (or :meth:`Predictor.claim_writer`) takes an
exclusive lock on ``MODEL_DIR/.xdex-writer.lock`` (``flock``, released when the predictor is closed or its
process ends, however it ends) and checks that the labels added on disk are still those this predictor
loaded. Any other predictor of the directory, in this process or another, then predicts but cannot add:
:class:`ReadOnlyError` says why. Predicting takes no lock and writes nothing. Where ``fcntl`` is missing
(Windows), there is no lock and the rule is the user's to keep.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from xdex.inference.added_labels import ADDED_LABELS, check_new_labels, check_texts, read_added_labels
from xdex.inference.model import DualEncoderModel
from xdex.metrics.ranking import PAD, Ranking

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no advisory locks (docs/serving.md)
    fcntl = None

logger = logging.getLogger(__name__)

WRITER_LOCK = ".xdex-writer.lock"
BATCH_CHARS = 1 << 18  # characters per batch of texts to encode: about 20 MB of tokens
BATCH_TEXTS = 4096  # texts per batch: more texts share a batch's fixed costs (hand-overs between threads, passes over
# the label table). 12,000 titles: 22,300 texts/s through the network alone and 8,300 fused in batches of 1,024,
# 27,400 and 9,300 in batches of 4,096, and hardly more in 8,192 (docs/benchmarks.md, "Ranking stage: prediction cost")
WARM_UP_BATCHES = (1, 4, 32, 64)  # texts of warm_up's calls: a served text, micro-batches of a few requests (through an
# exact index's int8 codes from 4 MB of vectors) and of more (int8 products on a CPU with VNNI, whose codes are made
# then, else float32 products merged item by item), and a batch long enough for the paths of many texts (the lexical
# shortlist beside the dense search, products in two shares, merges row by row)


class ReadOnlyError(RuntimeError):
    """This predictor cannot add labels: it was opened read-only, another predictor adds labels to its model
    directory, or the directory changed since it was loaded."""


class _WriterLock:
    """An exclusive advisory lock on ``folder/.xdex-writer.lock``, held until :meth:`close` or the end of the
    process; the file holds the holder's process id, for messages."""

    def __init__(self, folder: Path):
        self.path = folder / WRITER_LOCK
        self._file = None
        if fcntl is None:
            logger.warning("no file locks on this platform: make sure that only one process adds labels to %s",
                           folder)
            return
        try:
            file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (open as long as the lock is held)
        except OSError as e:
            raise ReadOnlyError(f"cannot open the writer lock {self.path} ({e.strerror}), so no label can be "
                                "added") from None
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.seek(0)
            holder = file.read(20).strip()
            file.close()
            who = "another process"
            if holder.isdigit():
                who = "this process (another predictor)" if holder == str(os.getpid()) else f"process {holder}"
            raise ReadOnlyError(f"{folder} is read-only here: labels are added to it by {who}, which holds "
                                f"{self.path}; only one writer at a time, so that no added label is lost") from None
        file.truncate(0)
        file.write(str(os.getpid()))
        file.flush()
        self._file = file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()  # releases the lock
            self._file = None


@dataclass(frozen=True, slots=True)
class ScoredLabel:
    """One predicted label: its row in the model's catalogue, its key (the dataset's label id), text, score."""

    index: int
    key: str
    text: str
    score: float


@dataclass
class Predictions(Ranking):
    """A ranking (label rows and scores, best first, as arrays: what the metrics take) that also names its
    labels: ``labels[i]`` is text ``i``'s list of :class:`~xdex.ScoredLabel` (row, key, text, score)."""

    label_ids: Sequence[str] = field(default=(), repr=False, compare=False)
    label_texts: Sequence[str] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, ranking: Ranking, label_ids: Sequence[str], label_texts: Sequence[str]) -> Predictions:
        """``ranking`` (already checked) with the catalogue that names its rows."""
        return cls(ranking.indices, ranking.scores, label_ids, label_texts)

    @property
    def labels(self) -> list[list[ScoredLabel]]:
        ids, texts = self.label_ids, self.label_texts  # rows and scores as Python numbers: one conversion each
        with _collector_paused():
            return [[_scored_label(j, ids[j], texts[j], s) for j, s in zip(row, scores, strict=True) if j != PAD]
                    for row, scores in zip(self.indices.tolist(), self.scores.tolist(), strict=True)]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector paused (then as it was).

    Naming a batch's labels makes tens of thousands of objects, and every 700 of them start a collection. Some
    of those collections go through every object of the process (300,000 with a model and its data loaded).
    The labels of 2,000 texts took 48-61 ms on average, and up to 196 ms, against 12-14 ms with the collector
    paused. The objects made here hold no cycles, so there is nothing for it to find.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_SET_INDEX, _SET_KEY, _SET_TEXT, _SET_SCORE = (getattr(ScoredLabel, name).__set__ for name in ScoredLabel.__slots__)


def _scored_label(index: int, key: str, text: str, score: float) -> ScoredLabel:
    """``ScoredLabel(index, key, text, score)``, its slots filled directly: a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``, and took a fifth of a batch's prediction naming 20,000 labels."""
    label = object.__new__(ScoredLabel)
    _SET_INDEX(label, index)
    _SET_KEY(label, key)
    _SET_TEXT(label, text)
    _SET_SCORE(label, score)
    return label


@dataclass(frozen=True)
class _Snapshot:
    """A model and the row of each label key; never changed once published."""

    model: DualEncoderModel
    rows: dict[str, int] = field(repr=False)


class Predictor:
    """Ranks the labels of a trained model directory for texts (see the module docstring)."""

    def __init__(
        self, model_dir: str | Path, batch_size: int = BATCH_TEXTS, search: str | None = None, read_only: bool = False
    ):
        """``search``: another search mode of the model (e.g. ``"de"``), else the model's own; ``read_only``: never
        add labels (nor take the writer lock)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model_dir = Path(model_dir)
        model = DualEncoderModel.load(model_dir)
        model = model if search is None else model.with_search(search)
        model.net.eval()
        self.batch_size = batch_size
        self.read_only = read_only
        self._lock = threading.Lock()
        self._writer: _WriterLock | None = None
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
        return Predictions.of(ranking, model.label_ids, model.label_texts).labels

    def warm_up(self, k: int = 10) -> float:
        """Rank a few of the model's own label texts in batches of ``WARM_UP_BATCHES`` (one alone, then more), so
        that the compiled loops of each path are built, or read from numba's cache, before the first real call;
        returns the seconds taken.
        With an empty cache the first text of a process took 13 s (the loops compiled), with the cache 0.4 s
        (docs/serving.md, "The first call")."""
        start = time.perf_counter()
        texts = [text for text in self.model.label_texts[:WARM_UP_BATCHES[-1]] if text.strip()] or ["warm up"]
        for size in WARM_UP_BATCHES:
            self.rank([texts[i % len(texts)] for i in range(size)], k)
        return time.perf_counter() - start

    def label(self, key: str) -> tuple[int, str]:
        """Row and text of the label with ``key``; ``KeyError`` when there is none."""
        snapshot = self._snapshot
        row = snapshot.rows[key]
        return row, snapshot.model.label_texts[row]

    def add_labels(self, texts: Sequence[str], keys: Sequence[str] | None = None) -> list[str]:
        """Add labels known by their texts alone and return their keys (``keys`` when given, else generated).

        They are saved to the model directory before they become searchable; bad texts or keys raise
        ``TypeError``/``ValueError`` (``KeyConflict`` for a key that is taken or repeated; see
        :func:`~xdex.inference.added_labels.check_new_labels` for the rules) and add nothing, and so does a
        predictor that cannot write (:class:`ReadOnlyError`, see the module docstring).
        """
        texts, keys = check_new_labels(texts, keys)
        if not texts:
            return []
        with self._lock:
            self._claim_writer()
            current = self._snapshot
            first = len(current.model.label_ids)
            model = current.model
            for start, end in _batches(texts, self.batch_size, BATCH_CHARS):  # all published at once, below
                model = model.with_labels(texts[start:end], None if keys is None else keys[start:end], self.batch_size)
            added = model.label_ids[first:]
            if added:
                model.save_added(self.model_dir)
                self._snapshot = _Snapshot(model, {**current.rows, **{key: first + i for i, key in enumerate(added)}})
        return added

    @property
    def is_writer(self) -> bool:
        """Whether this predictor holds its model directory's writer lock (it has added labels, or claimed it)."""
        return self._writer is not None

    def claim_writer(self) -> None:
        """Become the one predictor that adds labels to the model directory, as the first :meth:`add_labels` does;
        :class:`ReadOnlyError` when it cannot (module docstring). Holding the lock from the start saves a server
        from finding out at its first addition."""
        with self._lock:
            self._claim_writer()

    def close(self) -> None:
        """Release the writer lock, if held: another predictor may then add labels; this one is read-only."""
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self.read_only = True

    def _claim_writer(self) -> None:
        """:meth:`claim_writer`, under ``self._lock``."""
        if self._writer is not None:
            return
        if self.read_only:
            raise ReadOnlyError(f"this predictor of {self.model_dir} is read-only: it adds no labels")
        writer = _WriterLock(self.model_dir)
        model = self.model
        try:
            on_disk = read_added_labels(self.model_dir)
        except ValueError:
            writer.close()
            raise
        if on_disk != (model.label_ids[model.n_trained :], model.label_texts[model.n_trained :]):
            writer.close()
            raise ReadOnlyError(f"{self.model_dir / ADDED_LABELS} was changed by another process since this "
                                "predictor loaded it; load the model again to add labels")
        self._writer = writer

    def _rank(self, model: DualEncoderModel, texts: Sequence[str], k: int) -> Ranking:
        texts = check_texts(texts, blank_ok=True)
        if not 1 <= k:
            raise ValueError(f"k must be at least 1, got {k}")
        if not texts:
            return Ranking(np.zeros((0, k), np.int64), np.zeros((0, k), np.float32))
        return Ranking.stacked([model.predict(texts[start:end], k)
                                for start, end in _batches(texts, self.batch_size, BATCH_CHARS)])


def _batches(texts: Sequence[str], size: int, chars: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` slices of ``texts``, each of at most ``size`` texts and, unless it is one
    text, at most ``chars`` characters."""
    out, start, total = [], 0, 0
    for i, text in enumerate(texts):
        if i > start and (i - start == size or total + len(text) > chars):
            out.append((start, i))
            start, total = i, 0
        total += len(text)
    if start < len(texts):
        out.append((start, len(texts)))
    return out

"""The lexical channel: TF-IDF features of the texts and per-label sparse linear classifiers on them.

What is implemented:

* **Features.** scikit-learn's ``TfidfVectorizer`` fitted on the training texts: sublinear tf (``1 + ln tf``),
  smoothed idf (``ln((1 + n) / (1 + df)) + 1``), unit-length rows; word unigrams and bigrams (words of one or
  more letters or digits, lower-cased), and character n-grams within word boundaries (``char_wb``) where the
  words of the data are mostly unique (headword-like titles, whose words occur in one text only). With both,
  the two blocks are put side by side (:meth:`FeatureRows.stacked`: the values of ``scipy.sparse.hstack``) and
  each row is scaled to unit length again. Character n-grams are cut once per distinct word and added up per text
  (:mod:`xdex.ranking.char_ngrams`: the same vocabulary, idf and rows as scikit-learn's, several times faster on
  long texts).
* **The rule for character n-grams** (``analyzer="auto"``, :func:`choose_analyzer`): the *unique-word
  share* of the training texts is the share of their word occurrences whose word occurs in one training
  text only (:func:`unique_word_share`). At or above ``LexicalConfig.unique_word_threshold`` (0.2) the
  features are words + characters, below it words only. On the shared datasets the share is 0.03-0.05 for
  the long-text sets (foldoc-links, debian-debtags, gcide-links) and 0.37 / 0.89 for the title sets
  (foldoc-links-titles, gcide-links-titles), where 44% / 95% of validation texts have no word feature at
  ``min_df=2``; docs/benchmarks.md ("Lexical channel") measures both feature sets on every dataset.
* **The choice on validation documents** (``analyzer="validation"``; :func:`fit_choosing_features`): where the
  rule gives words alone, words + characters are fitted too, and the one whose ranking of the caller's validation
  documents is better is kept (the ranking stage hands it its validation documents); without them, the rule alone
  decides. On long texts character n-grams lift the lexical channel (+1 to +3 P@1 on the shared long-text sets)
  and, where that channel leads the ranking (package descriptions full of names such as ``libfoo-dev``), the
  ranking served; they also make its fit and its prediction several times slower. So ``auto``, the default, makes
  this choice only where labels have many training documents each (``LexicalConfig.head_label_documents``, 20 on
  average), where the lexical channel leads (docs/benchmarks.md, "Ranking stage: choices on validation splits").
* **Classifiers**, trained by a maintained XMC library on the TF-IDF matrix (no hand-written tree):
  ``omikuji-bonsai`` (default), Omikuji's Bonsai (Khandagale et al., 2020: shallow trees of 100-way unbalanced
  label clusters, depth 3, one tree, L2-regularised hinge-loss node classifiers by LIBLINEAR's dual solver,
  weights below ``weight_threshold`` pruned, beam search); ``omikuji-parabel``, Omikuji's Parabel (Prabhu et
  al., 2018: balanced binary trees); ``napkinxc-plt``, napkinXC's probabilistic label tree (Jasinska-Kobus et
  al., 2020: hierarchical 2-means tree, logistic or squared-hinge nodes, exact top-k search).
  **The choice** was made by measurement on validation splits carved from the training data of the five shared
  datasets (``python -m benchmarks.bench_lexical``; table in docs/benchmarks.md, section "Lexical channel"):
  Bonsai has the best PSP@5 on all five and the best P@1 on three (foldoc-links +3.0 over Parabel, gcide-links
  +1.6, gcide-links-titles +1.8 over napkinXC), within 0.9 P@1 of Parabel on the other two; napkinXC's PLT
  trails the best by 0.4-8.5 P@1 with its defaults (log loss, C=10) and is not better with squared hinge, C=1.
  That comparison ran Omikuji's three trees; in the fused ranking one Bonsai tree scores as three do (held-out
  training documents of three datasets, within ±0.9 P@1 either way) and trains and predicts three times
  faster, so the default is one tree. ``omikuji-parabel`` is the faster choice still; ``napkinxc-plt`` with
  ``threads=1`` is the repeatable one.
* **Scores** are in [0, 1] and comparable across texts and labels: a label's score is the product of the
  node scores on its path from the root, averaged over the trees. Omikuji's node score is
  ``exp(-max(0, 1 - w.x)^2)`` with hinge loss (a monotone squashing of the margin, not a calibrated
  probability) or ``sigmoid(w.x)`` with log loss; napkinXC's PLT with ``loss="log"`` gives estimates of
  ``P(label relevant | text)``.
  A text with no feature in the vocabulary gets an empty row: ids ``-1`` and scores ``-inf``, as the
  padding of :class:`xdex.metrics.Ranking`.
* **Determinism.** TF-IDF is deterministic. napkinXC's label tree is deterministic given ``seed``; its node
  classifiers (LIBLINEAR) shuffle with the C library's ``rand()``, which is seeded from ``seed`` before
  training, so a fit with ``threads=1`` (napkinXC's default here) is repeatable; with more threads the nodes
  draw from that one generator in a racing order and the weights differ slightly between fits. Omikuji has no
  seed: its k-means starts from random points, so two fits may differ slightly; it trains on every core.
* **Files** (:meth:`LexicalModel.save`): ``meta.json`` (format name and version, the config, the chosen
  analyzers, counts, SHA-256 of every other file and of the training data), per analyzer
  ``vocab_<name>.json`` (the terms, in column order) and ``idf_<name>.npz`` (numpy, no pickle), and
  ``classifier/`` in the library's own binary format (napkinXC: ``args.bin``, ``tree.bin``,
  ``weights.bin``; Omikuji: ``settings.json`` and ``tree*.cbor``), which neither library reads with pickle.
  The folder is written beside the target and renamed into place. Nothing is ever unpickled: the
  vectorizers are rebuilt from their vocabulary and idf at load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import numba
import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from xdex.atomic import atomic_write_bytes
from xdex.data.errors import UNREADABLE_NPZ
from xdex.hardware import cores, thread_pool
from xdex.jsonfile import read_json, write_json
from xdex.ranking.char_ngrams import CharNgramCounter, fit_char_idf
from xdex.ranking.xc_file import write_xc_file

logger = logging.getLogger(__name__)

FORMAT = "xdex-lexical"
FORMAT_VERSION = 1
"""Version of the folder format written by :meth:`LexicalModel.save`; loading another version is refused."""

ANALYZERS = ("auto", "validation", "word", "char", "word+char")
CLASSIFIERS = ("omikuji-bonsai", "omikuji-parabel", "napkinxc-plt")
META = "meta.json"
CLASSIFIER_DIR = "classifier"
MIN_ROWS_PER_THREAD = 64  # a batch is split over threads in parts of at least this many texts
TOKEN_PATTERN = r"(?u)\b\w+\b"
"""Words: runs of one or more word characters (scikit-learn's default drops one-character words)."""

# (loss, C, trees) for the settings left at None in LexicalConfig: the libraries' defaults, except one Bonsai tree
# instead of Omikuji's three (as good in the fused ranking at a third of the time: docs/benchmarks.md)
_PRESETS: dict[str, tuple[str, float, int]] = {
    "napkinxc-plt": ("log", 10.0, 1),
    "omikuji-parabel": ("hinge", 1.0, 3),
    "omikuji-bonsai": ("hinge", 1.0, 1),
}


@dataclass
class LexicalConfig:
    """Settings of a :class:`LexicalModel`; the defaults are the measured choice (docs/benchmarks.md)."""

    analyzer: str = "auto"
    """``word``, ``char`` (``char_wb`` n-grams), ``word+char`` (both, stacked), ``auto``: words + characters
    when the training texts' unique-word share is at least ``unique_word_threshold``, else words (and, where the
    labels average ``head_label_documents`` training documents or more, the choice of ``validation``); or
    ``validation``: ``auto``, except that where it gives words alone, words + characters are fitted too and the
    better on validation documents kept (:func:`fit_choosing_features`; a plain :meth:`LexicalModel.fit` follows
    the unique-word rule alone)."""
    word_ngrams: tuple[int, int] = (1, 2)
    """Smallest and largest word n-gram."""
    char_ngrams: tuple[int, int] = (2, 5)
    """Smallest and largest character n-gram (within word boundaries, ``char_wb``)."""
    min_df: int = 2
    """A term is kept when it occurs in at least this many training texts."""
    char_max_df: float = 1.0
    """A character n-gram is kept when it occurs in at most this share of the training texts (never fewer than
    ``min_df`` texts); the n-grams of common words, which the word block carries anyway, are most of a long text's
    character nonzeros and of the classifier's training time. 1.0 keeps them all: 0.05 halved a long-text fit and
    lost up to 2 P@1 on validation (docs/benchmarks.md, "Character n-grams of too many texts")."""
    max_features: int | None = None
    """At most this many terms per analyzer (the most frequent), or no limit."""
    unique_word_threshold: float = 0.2
    """The ``auto`` rule's threshold on :func:`unique_word_share`."""
    head_label_documents: float | None = 20.0
    """With ``auto``, labels with at least this many training documents each on average (:func:`documents_per_label`)
    have their feature set chosen on validation documents, as ``validation`` chooses it; None: never. There the
    lexical channel leads the ranking served, and characters lifted it by 1.1-1.9 P@1 (debian-debtags: 139
    documents a label); on the other shared datasets (2.2-4.6) they moved it by 0.2-0.4 for four times the training
    time (docs/benchmarks.md, "debian-debtags again" and "Character n-grams on long texts, chosen on validation")."""
    classifier: str = "omikuji-bonsai"
    """``omikuji-bonsai``, ``omikuji-parabel`` or ``napkinxc-plt`` (the choice: the module's docstring)."""
    loss: str | None = None
    """Node loss, ``log`` or ``hinge`` (napkinXC: squared hinge); None: the library's default (napkinXC log,
    Omikuji hinge)."""
    c: float | None = None
    """LIBLINEAR's C (inverse regularisation) of the node classifiers; None: the library's default (napkinXC 10,
    Omikuji 1)."""
    trees: int | None = None
    """Trees in the ensemble; None: one for Bonsai and napkinXC, three for Parabel (Omikuji's default)."""
    weight_threshold: float = 0.1
    """Node weights of smaller magnitude are pruned (both libraries' default)."""
    max_leaf: int = 100
    """Most labels under one pre-leaf node (napkinXC ``max_leaves``, Omikuji ``min_branch_size``)."""
    cluster_eps: float = 0.01
    """Omikuji's k-means stops when an iteration improves its objective by less than this (its own default:
    1e-4). Bonsai's 100-way clustering ran most of its fit to that tolerance: with 0.01 it fitted 1.3-2.9 times
    faster on the five shared datasets, with the same validation P@1 and PSP@5 within run-to-run noise
    (docs/benchmarks.md, "Omikuji's clustering tolerance")."""
    beam: int = 10
    """Omikuji's beam width at prediction, widened to the number of labels asked for (napkinXC's search is exact);
    the ranking stage's shortlist has a width of its own, ``ranker.lexical_beam``."""
    threads: int | None = None
    """Threads of the classifier library's training; None: every core for Omikuji (which has no seed anyway), one
    for napkinXC (repeatable). Prediction splits a batch over every core."""
    seed: int = 0
    """Seed of napkinXC (Omikuji has none)."""

    def __post_init__(self) -> None:
        self.word_ngrams = _pair(self.word_ngrams, "word_ngrams")
        self.char_ngrams = _pair(self.char_ngrams, "char_ngrams")
        if self.analyzer not in ANALYZERS:
            raise ValueError(f"analyzer {self.analyzer!r}: expected one of {', '.join(ANALYZERS)}")
        if self.classifier not in CLASSIFIERS:
            raise ValueError(f"classifier {self.classifier!r}: expected one of {', '.join(CLASSIFIERS)}")
        if self.loss not in (None, "log", "hinge"):
            raise ValueError(f"loss {self.loss!r}: expected 'log', 'hinge' or None")
        if self.min_df < 1 or (self.threads or 1) < 1 or self.max_leaf < 2 or self.beam < 1:
            raise ValueError("min_df, threads and beam must be at least 1, max_leaf at least 2")
        if (self.max_features is not None and self.max_features < 1) or (self.trees is not None and self.trees < 1):
            raise ValueError("max_features and trees must be positive (or None)")
        if (self.c is not None and not self.c > 0) or not 0 <= self.unique_word_threshold <= 1:
            raise ValueError("c must be positive, unique_word_threshold in [0, 1]")
        if self.head_label_documents is not None and not self.head_label_documents > 0:
            raise ValueError(f"head_label_documents {self.head_label_documents!r}: expected a positive number or None")
        if not self.cluster_eps > 0:
            raise ValueError(f"cluster_eps {self.cluster_eps!r}: expected a positive number")
        if not 0 < self.char_max_df <= 1:
            raise ValueError(f"char_max_df {self.char_max_df!r}: expected a share of the texts, in (0, 1]")

    def training_threads(self) -> int:
        """``threads``, or its default for the classifier (``threads``' docstring)."""
        if self.threads is not None:
            return self.threads
        return 1 if self.classifier == "napkinxc-plt" else cores()

    def resolved(self) -> tuple[str, float, int]:
        """(loss, C, trees) with the library's defaults in place of None."""
        loss, c, trees = _PRESETS[self.classifier]
        return (self.loss or loss, self.c if self.c is not None else c, self.trees or trees)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LexicalConfig:
        """The config of a ``to_dict`` record (a ``meta.json``); unknown names are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown lexical settings: {', '.join(unknown)}")
        return cls(**values)


def _pair(value: Sequence[int], name: str) -> tuple[int, int]:
    lo, hi = (int(v) for v in value)
    if not 1 <= lo <= hi:
        raise ValueError(f"{name} {tuple(value)}: expected (smallest, largest) with 1 <= smallest <= largest")
    return lo, hi


# --- the character n-gram rule -------------------------------------------------------------------------

def unique_word_share(texts: Sequence[str]) -> float:
    """Share of the word occurrences of ``texts`` whose word (scikit-learn's word tokens, lower-cased) occurs in
    exactly one of the texts; 1.0 when the texts have no word at all."""
    if not texts:
        raise ValueError("no texts")
    try:
        counts = CountVectorizer(token_pattern=TOKEN_PATTERN, dtype=np.int64).fit_transform(texts).tocsc()
    except ValueError:  # an empty vocabulary: no word at all
        return 1.0
    df = np.diff(counts.indptr)
    per_word = np.asarray(counts.sum(axis=0)).ravel()
    total = per_word.sum()
    return float(per_word[df == 1].sum() / total) if total else 1.0


def choose_analyzer(texts: Sequence[str], config: LexicalConfig) -> tuple[list[str], float | None]:
    """The feature blocks (``word``, ``char``) for ``texts`` under ``config`` and the unique-word share (None
    when ``config.analyzer`` is neither ``auto`` nor ``validation`` and the share is not needed). ``validation``
    follows ``auto`` here: the choice on validation documents is :func:`fit_choosing_features`."""
    if config.analyzer not in ("auto", "validation"):
        return config.analyzer.split("+"), None
    share = unique_word_share(texts)
    blocks = ["word", "char"] if share >= config.unique_word_threshold else ["word"]
    return blocks, share


class TfidfTransform:
    """A fitted ``TfidfVectorizer``'s ``transform`` (sublinear tf, idf, unit rows) without its per-call checks.

    The same analyzer, vocabulary and idf, so the same rows (tested against scikit-learn); written here because
    scikit-learn's input validation and sparse-matrix assembly cost more than the transform of one short text,
    which is what a served prediction asks for.
    """

    def __init__(self, vectorizer: TfidfVectorizer) -> None:
        self.analyze = vectorizer.build_analyzer()
        self.vocabulary: dict[str, int] = vectorizer.vocabulary_
        self.idf = np.asarray(vectorizer.idf_, np.float64)
        self.n_features = len(self.vocabulary)
        self._char = (CharNgramCounter(self.vocabulary, vectorizer.ngram_range)
                      if vectorizer.analyzer == "char_wb" else None)  # character n-grams: counted word by word

    def rows(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, columns, values)`` of the unit-length TF-IDF rows of ``texts``: CSR arrays (int64, int64,
        float32), each row's columns in no particular order."""
        offsets, columns, counts = self._char.count(texts) if self._char is not None else self._count(texts)
        return offsets, columns, _unit_tfidf(offsets, columns, np.log(counts.astype(np.float64)), self.idf)

    def _count(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, columns, counts)`` of the texts' terms, through the vectorizer's analyzer."""
        indptr: list[int] = [0]
        indices: list[int] = []
        counts: list[int] = []
        lookup, analyze = self.vocabulary.get, self.analyze
        for text in texts:
            row: dict[int, int] = {}
            for term in analyze(text):
                j = lookup(term)
                if j is not None:
                    row[j] = row.get(j, 0) + 1
            indices.extend(row)
            counts.extend(row.values())
            indptr.append(len(indices))
        return np.asarray(indptr, np.int64), np.asarray(indices, np.int64), np.asarray(counts, np.int64)

    def __call__(self, texts: Sequence[str]) -> sp.csr_matrix:
        """The TF-IDF rows of ``texts`` (float32 CSR, sorted indices)."""
        return FeatureRows.stacked([self.rows(texts)], [self.n_features]).csr()


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _unit_tfidf(indptr: np.ndarray, columns: np.ndarray, log_counts: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """The float32 TF-IDF values of CSR rows with term columns ``columns`` and ``ln(count)`` ``log_counts``:
    ``(1 + ln tf) * idf`` (float64), each row scaled to unit length (:func:`_scale_rows`)."""
    values = np.empty(log_counts.shape[0], np.float64)
    for e in range(log_counts.shape[0]):
        values[e] = (1.0 + log_counts[e]) * idf[columns[e]]
    out = np.empty(values.shape[0], np.float32)
    _scale_rows(indptr, values, out)
    return out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _scale_rows(indptr: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """``out`` = ``values`` with each CSR row divided by its length, as float32: the squares summed in float64 in
    entry order, as ``np.bincount`` sums them, then the float64 quotient rounded (``out`` may be ``values``)."""
    for i in range(indptr.shape[0] - 1):
        total = 0.0
        for e in range(indptr[i], indptr[i + 1]):
            value = np.float64(values[e])
            total += value * value
        norm = np.sqrt(total)
        for e in range(indptr[i], indptr[i + 1]):
            out[e] = np.float32(np.float64(values[e]) / norm)


@dataclass
class FeatureRows:
    """Feature rows as CSR arrays, each row's columns ascending: ``indptr`` (int64, ``n + 1``), ``indices``
    (int64), ``data`` (float32); ``n_features`` columns."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_features: int

    @classmethod
    def stacked(cls, blocks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], widths: Sequence[int]
                ) -> FeatureRows:
        """The blocks' rows side by side (``widths``: their column counts), each row's columns sorted; more than one
        block: each row scaled to unit length again (:func:`_scale_rows`). The same float32 values as stacking the
        blocks' sorted rows with scipy and scaling the stacked rows (tested)."""
        indptr, columns, values = blocks[0]
        offset = widths[0]
        for (more_indptr, more_columns, more_values), width in zip(blocks[1:], widths[1:], strict=True):
            indptr, columns, values = _side_by_side(indptr, columns, values, more_indptr, more_columns + offset,
                                                    more_values)
            offset += width
        if len(blocks) == 1:  # the caller's arrays are left as they are
            columns, values = columns.copy(), values.copy()
        _sort_rows(indptr, columns, values, len(blocks) > 1)
        return cls(indptr, columns, values, int(sum(widths)))

    def csr(self) -> sp.csr_matrix:
        out = sp.csr_matrix((self.data, self.indices, self.indptr), shape=(len(self.indptr) - 1, self.n_features))
        out.has_sorted_indices = True
        return out


@numba.njit(cache=True, nogil=True)
def _side_by_side(indptr_a: np.ndarray, columns_a: np.ndarray, values_a: np.ndarray, indptr_b: np.ndarray,
                  columns_b: np.ndarray, values_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two CSR blocks of the same rows as one: each row's entries of ``a``, then those of ``b``."""
    n = indptr_a.shape[0] - 1
    indptr = indptr_a + indptr_b
    columns = np.empty(indptr[n], np.int64)
    values = np.empty(indptr[n], values_a.dtype)
    for i in range(n):
        at = indptr[i]
        for e in range(indptr_a[i], indptr_a[i + 1]):
            columns[at], values[at] = columns_a[e], values_a[e]
            at += 1
        for e in range(indptr_b[i], indptr_b[i + 1]):
            columns[at], values[at] = columns_b[e], values_b[e]
            at += 1
    return indptr, columns, values


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _sort_rows(indptr: np.ndarray, columns: np.ndarray, values: np.ndarray, unit: bool) -> None:
    """Sort each CSR row's entries by column, in place (a row's columns are distinct); ``unit``: then scale each row
    to unit length (:func:`_scale_rows`)."""
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        if end - start > 1:
            order = np.argsort(columns[start:end])
            columns[start:end] = columns[start:end][order]
            values[start:end] = values[start:end][order]
    if unit:
        _scale_rows(indptr, values, values)


def _vectorizer(block: str, config: LexicalConfig, vocabulary: list[str] | None = None) -> TfidfVectorizer:
    return TfidfVectorizer(
        analyzer="word" if block == "word" else "char_wb",
        token_pattern=TOKEN_PATTERN if block == "word" else None,
        ngram_range=config.word_ngrams if block == "word" else config.char_ngrams,
        min_df=config.min_df,
        max_features=config.max_features,
        sublinear_tf=True,
        norm="l2",
        dtype=np.float32,
        vocabulary=None if vocabulary is None else {term: i for i, term in enumerate(vocabulary)},
    )


# --- classifier back ends -----------------------------------------------------------------------------

class _Classifier(Protocol):
    def top_k(self, x: FeatureRows, k: int, beam: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The library's top-``k`` labels of each row of ``x`` in its own order: ids (int64 ``[n, k]``) and
        scores (float32), padded with ``-1`` / ``-inf`` (an empty row stays padded). ``beam``: the width of a
        beam search (None: the classifier's own), ignored by an exact search."""
        ...


class _NapkinPLT:
    """napkinXC's PLT, trained from a CSR matrix into a folder of its own binary files.

    napkinXC reads some files of a model when it predicts (the trees of an ensemble), so the model keeps a
    private copy of its folder for as long as it lives.
    """

    def __init__(self, model: Any, folder: tempfile.TemporaryDirectory[str]) -> None:
        self.model = model
        self._folder = folder

    @classmethod
    def fit(cls, x: sp.csr_matrix, y: list[list[int]], config: LexicalConfig) -> _NapkinPLT:
        folder = tempfile.TemporaryDirectory(prefix="xdex-napkinxc-")
        model = cls._plt(folder.name, config)
        _seed_c_rand(config.seed)
        model.fit(x, y)
        model.load()
        return cls(model, folder)

    @classmethod
    def load(cls, source: Path, config: LexicalConfig) -> _NapkinPLT:
        folder = tempfile.TemporaryDirectory(prefix="xdex-napkinxc-")
        shutil.copytree(source, folder.name, dirs_exist_ok=True)
        model = cls._plt(folder.name, config)  # napkinXC reads the layout (e.g. the ensemble) from these settings
        model.load()
        return cls(model, folder)

    @staticmethod
    def _plt(folder: str, config: LexicalConfig) -> Any:
        from napkinxc.models import PLT

        loss, c, trees = config.resolved()
        return PLT(folder, loss="log" if loss == "log" else "l2", liblinear_c=c, ensemble=trees,
                   weights_threshold=config.weight_threshold, max_leaves=config.max_leaf,
                   seed=config.seed, threads=config.training_threads(), verbose=0)

    @property
    def path(self) -> Path:
        return Path(self._folder.name)

    def top_k(self, x: FeatureRows, k: int, beam: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = _padded(x.indptr.size - 1, k)
        rows = np.flatnonzero(np.diff(x.indptr) > 0)
        if rows.size:
            for row, predicted in zip(rows, self.model.predict_proba(x.csr()[rows], top_k=k), strict=True):
                for j, (label, score) in enumerate(predicted[:k]):
                    ids[row, j], scores[row, j] = label, score
        return ids, scores


class _Omikuji:
    """Omikuji's Parabel / Bonsai forest, trained from a file in the Extreme Classification Repository format
    (:mod:`xdex.ranking.xc_file`)."""

    def __init__(self, model: Any, config: LexicalConfig) -> None:
        self.model = model
        self.beam = config.beam
        self.threads = cores()  # prediction: the texts of a batch split over every core

    @classmethod
    def fit(cls, x: sp.csr_matrix, y: sp.csr_matrix, config: LexicalConfig, folder: Path) -> _Omikuji:
        import omikuji

        path = folder / "train.txt"
        write_xc_file(path, x, y)
        loss, c, trees = config.resolved()
        hp = omikuji.Model.default_hyper_param()
        hp.linear_loss_type = omikuji.LossType.LOG.value if loss == "log" else omikuji.LossType.HINGE.value
        hp.linear_c, hp.n_trees = c, trees
        hp.linear_weight_threshold = config.weight_threshold
        hp.min_branch_size = config.max_leaf
        hp.cluster_eps = config.cluster_eps
        if config.classifier == "omikuji-bonsai":  # the Bonsai settings of Omikuji's README
            hp.cluster_k, hp.cluster_balanced, hp.max_depth = 100, False, 3
        with _library_output_to_log("omikuji"):
            model = omikuji.Model.train_on_data(str(path), hp, n_threads=config.training_threads())
            model.save(str(folder / CLASSIFIER_DIR))
        path.unlink()
        # the saved forest: a loaded model averages its trees in another order than the trained one
        return cls.load(folder / CLASSIFIER_DIR, config)

    @classmethod
    def load(cls, folder: Path, config: LexicalConfig) -> _Omikuji:
        import omikuji

        with _library_output_to_log("omikuji"):
            return cls(omikuji.Model.load(str(folder)), config)

    def top_k(self, x: FeatureRows, k: int, beam: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Omikuji's ``Model.predict`` of each row with beam width ``beam`` (None: ``max(config.beam, k)``); a batch
        is split over the cores, on threads kept for the next batch (Omikuji's C call releases Python's lock)."""
        beam = max(self.beam, k) if beam is None else beam
        n = x.indptr.size - 1
        labels = np.zeros((n, k), np.uint32)
        scores = np.full((n, k), -np.inf, np.float32)
        found = np.zeros(n, np.int64)
        parts = min(self.threads, n // MIN_ROWS_PER_THREAD)
        if parts <= 1:
            self._predict_rows(x, k, beam, 0, n, labels, scores, found)
        else:
            bounds = [int(b) for b in np.linspace(0, n, parts + 1)]
            pool = thread_pool("omikuji")
            done = [pool.submit(self._predict_rows, x, k, beam, bounds[b], bounds[b + 1], labels, scores, found)
                    for b in range(parts)]
            for future in done:
                future.result()
        return _found_labels(labels, scores, found)

    def _predict_rows(self, x: FeatureRows, k: int, beam: int, start: int, end: int, labels: np.ndarray,
                      scores: np.ndarray, found: np.ndarray) -> None:
        """``Model.predict`` of rows ``start .. end - 1`` into those rows of ``labels``, ``scores`` and ``found``
        (how many labels each got). Omikuji's C function is called on the arrays directly: the Python wrapper
        sorts, checks and copies each feature in a Python loop (the rows of ``x`` have sorted, distinct,
        in-range columns already). It is given no thread pool, so it searches on the calling thread (Omikuji's
        C API runs on the caller when the pool is null, and a forest of several trees goes to rayon's own pool),
        instead of handing every text to a pool thread and waiting."""
        from omikuji._libomikuji import ffi, lib

        indices = np.ascontiguousarray(x.indices, np.uint32)
        values = np.ascontiguousarray(x.data, np.float32)
        if not indices.size:
            return
        index_ptr, value_ptr = ffi.from_buffer("uint32_t[]", indices), ffi.from_buffer("float[]", values)
        label_ptr, score_ptr = ffi.from_buffer("uint32_t[]", labels), ffi.from_buffer("float[]", scores)
        model, predict, null = self.model._model_ptr, lib.omikuji_predict, ffi.NULL
        offsets = x.indptr[start:end + 1].tolist()
        for i, (first, last) in enumerate(zip(offsets[:-1], offsets[1:], strict=True), start):
            if last > first:
                found[i] = predict(model, beam, last - first, index_ptr + first, value_ptr + first, k,
                                   label_ptr + i * k, score_ptr + i * k, null)


@numba.njit(cache=True, nogil=True)
def _found_labels(labels: np.ndarray, scores: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first ``found[i]`` labels (uint32) and scores of each row ``i`` as int64 ids and float32 scores, the rest
    of the row padded with ``-1`` / ``-inf``."""
    n, k = labels.shape
    ids = np.full((n, k), -1, np.int64)
    out = np.full((n, k), -np.inf, np.float32)
    for i in range(n):
        for j in range(min(found[i], k)):
            ids[i, j], out[i, j] = labels[i, j], scores[i, j]
    return ids, out


@numba.njit(cache=True, nogil=True)
def _best_first(ids: np.ndarray, scores: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's labels in ``0 .. n_labels - 1`` (the others dropped) by descending score, ties to the lower id, then
    padding (``-1`` / ``-inf``): ``np.lexsort((ids, -scores, ~valid))``'s order (scores are never NaN), by an
    insertion sort of each short row."""
    n, k = ids.shape
    out_ids = np.full((n, k), -1, np.int64)
    out_scores = np.full((n, k), -np.inf, np.float32)
    for i in range(n):
        size = 0
        for j in range(k):
            label, score = ids[i, j], scores[i, j]
            if label < 0 or label >= n_labels:
                continue
            at = size
            while at > 0 and (out_scores[i, at - 1] < score
                              or (out_scores[i, at - 1] == score and out_ids[i, at - 1] > label)):
                out_ids[i, at], out_scores[i, at] = out_ids[i, at - 1], out_scores[i, at - 1]
                at -= 1
            out_ids[i, at], out_scores[i, at] = label, score
            size += 1
    return out_ids, out_scores


def _padded(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``k`` padding ids (``-1``) and scores (``-inf``)."""
    return np.full((n, k), -1, np.int64), np.full((n, k), -np.inf, np.float32)


# --- the model ----------------------------------------------------------------------------------------------

class LexicalModel:
    """TF-IDF features and per-label sparse linear classifiers, with a scikit-learn-like API.

    ``fit(texts, labels)`` with ``labels`` an ``N x L`` CSR matrix (nonzero = relevant); ``predict(texts, k)``
    gives the top-``k`` label ids (int64, ``-1`` padding) and scores (float32, ``-inf`` padding) of each text.
    """

    def __init__(self, config: LexicalConfig | None = None) -> None:
        self.config = config or LexicalConfig()
        self.blocks: list[str] = []
        self.vectorizers: list[TfidfVectorizer] = []
        self.n_labels = 0
        self.share: float | None = None
        self.training: dict[str, Any] = {}
        self._classifier: _Classifier | None = None
        self._files: dict[str, bytes] = {}  # the classifier's files, relative to classifier/
        self._transforms: list[TfidfTransform] = []  # the fitted vectorizers' transforms, built at first use

    # --- features

    @property
    def n_features(self) -> int:
        return sum(len(v.vocabulary_) for v in self.vectorizers)

    def features(self, texts: Sequence[str]) -> sp.csr_matrix:
        """The TF-IDF rows of ``texts`` (float32 CSR, unit length or empty, sorted indices)."""
        return self.feature_rows(texts).csr()

    def feature_rows(self, texts: Sequence[str]) -> FeatureRows:
        """:meth:`features` as CSR arrays, without building a sparse matrix (what prediction reads)."""
        if not self.vectorizers:
            raise RuntimeError("the lexical model is not fitted")
        if len(self._transforms) != len(self.vectorizers):
            self._transforms = [TfidfTransform(v) for v in self.vectorizers]
        return FeatureRows.stacked([t.rows(texts) for t in self._transforms], [t.n_features for t in self._transforms])

    def _fit_features(self, texts: Sequence[str]) -> sp.csr_matrix:
        blocks, self.share = choose_analyzer(texts, self.config)
        if self.share is not None:
            logger.info("unique-word share %.3f (threshold %.2f): features %s", self.share,
                        self.config.unique_word_threshold, "+".join(blocks))
        self.blocks, self.vectorizers, self._transforms = [], [], []
        for block in blocks:
            vectorizer = _vectorizer(block, self.config)
            if block == "char" and self.config.char_max_df < 1:
                vectorizer.max_df = max(int(self.config.char_max_df * len(texts)), self.config.min_df)
            try:
                if block == "char" and self.config.max_features is None:
                    terms, idf = fit_char_idf(texts, vectorizer)  # scikit-learn's fit, word by word
                    vectorizer = _vectorizer(block, self.config, terms)
                    vectorizer.idf_ = idf
                else:
                    vectorizer.fit(texts)
            except ValueError as e:  # no term left after min_df
                logger.warning("no %s feature kept (%s); that block is left out", block, e)
                continue
            self.blocks.append(block)
            self.vectorizers.append(vectorizer)
        if not self.vectorizers:
            raise ValueError(f"no TF-IDF feature occurs in at least min_df={self.config.min_df} training texts")
        return self.features(texts)

    # --- training and prediction

    def fit(self, texts: Sequence[str], labels: sp.csr_matrix | sp.csr_array) -> LexicalModel:
        """Fit the TF-IDF vocabulary and idf on ``texts``, then the classifiers on their rows and ``labels``.

        Texts without a label or without a feature carry nothing to learn from and are left out of the
        classifier's training.
        """
        start = time.perf_counter()
        y = sp.csr_matrix(labels)
        if y.shape[0] != len(texts):
            raise ValueError(f"{len(texts)} texts but {y.shape[0]} label rows")
        y.eliminate_zeros()
        y.sort_indices()
        x = self._fit_features(texts)
        keep = np.flatnonzero((np.diff(y.indptr) > 0) & (np.diff(x.indptr) > 0))
        if keep.size == 0:
            raise ValueError("no training text has both a label and a feature")
        if keep.size < len(texts):
            logger.info("%d of %d training texts have no label or no feature; left out of the classifier",
                        len(texts) - keep.size, len(texts))
        x, y = x[keep], y[keep]
        self.n_labels = y.shape[1]
        with tempfile.TemporaryDirectory(prefix="xdex-lexical-") as tmp:
            work = Path(tmp)
            if self.config.classifier == "napkinxc-plt":
                rows = [y.indices[y.indptr[i]:y.indptr[i + 1]].tolist() for i in range(y.shape[0])]
                plt = _NapkinPLT.fit(x, rows, self.config)
                self._classifier, self._files = plt, _read_tree(plt.path)
            else:
                self._classifier = _Omikuji.fit(x, y, self.config, work)
                self._files = _read_tree(work / CLASSIFIER_DIR)
        self.training = {"documents": len(texts), "used": int(keep.size), "fingerprint": _fingerprint(texts, y),
                         "seconds": round(time.perf_counter() - start, 2)}
        logger.info("lexical model: %d features (%s), %d labels, %s", self.n_features, "+".join(self.blocks),
                    self.n_labels, self.config.classifier)
        return self

    def refit(self, texts: Sequence[str], labels: sp.csr_matrix | sp.csr_array) -> LexicalModel:
        """A new model with this one's settings and feature blocks (not chosen again), fitted on other documents."""
        return LexicalModel(self.refit_config()).fit(texts, labels)

    def refit_config(self) -> LexicalConfig:
        """This model's settings with its feature blocks fixed: what :meth:`refit` fits with."""
        if not self.blocks:
            raise RuntimeError("the lexical model is not fitted")
        return dataclasses.replace(self.config, analyzer="+".join(self.blocks))

    def predict(self, texts: Sequence[str], k: int, beam: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` labels of each text: ids (int64 ``[n, k]``, ``-1`` padding) and scores (float32, ``-inf``
        padding), best first. A text with no feature in the vocabulary gets an empty row. ``beam``: Omikuji's beam
        width (None: ``max(config.beam, k)``; napkinXC's search is exact)."""
        if self._classifier is None:
            raise RuntimeError("the lexical model is not fitted")
        if k < 1 or (beam is not None and beam < 1):
            raise ValueError(f"k and beam must be positive, got {k} and {beam}")
        ids, scores = self._classifier.top_k(self.feature_rows(texts), k, beam)
        return _best_first(ids, scores.astype(np.float32, copy=False), self.n_labels)

    # --- files

    def save(self, folder: str | Path) -> None:
        """Write the model into ``folder`` (see the module's docstring), replacing a lexical model there."""
        if self._classifier is None:
            raise RuntimeError("the lexical model is not fitted")
        folder = Path(folder)
        if folder.exists() and any(folder.iterdir()) and not (folder / META).is_file():
            raise FileExistsError(f"{folder} is not empty and holds no lexical model ({META}); save elsewhere")
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        try:
            names = []
            for block, vectorizer in zip(self.blocks, self.vectorizers, strict=True):
                terms = [""] * len(vectorizer.vocabulary_)
                for term, column in vectorizer.vocabulary_.items():
                    terms[column] = term
                write_json(staging / f"vocab_{block}.json", terms)
                _write_npz(staging / f"idf_{block}.npz", idf=np.asarray(vectorizer.idf_, dtype=np.float64))
                names += [f"vocab_{block}.json", f"idf_{block}.npz"]
            for name, data in self._files.items():
                atomic_write_bytes(staging / CLASSIFIER_DIR / name, data)
                names.append(f"{CLASSIFIER_DIR}/{name}")
            write_json(staging / META, {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "config": self.config.to_dict(),
                "blocks": self.blocks,
                "n_labels": self.n_labels,
                "n_features": [len(v.vocabulary_) for v in self.vectorizers],
                "unique_word_share": self.share,
                "training": self.training,
                "library": _library_version(self.config.classifier),
                "files": {name: _file_digest(staging / name) for name in sorted(names)},
            })
            old = None
            if folder.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
                folder.rename(old / "model")
            staging.rename(folder)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @classmethod
    def load(cls, folder: str | Path, threads: int | None = None) -> LexicalModel:
        """The model saved in ``folder``; ``threads`` overrides the saved thread count. A missing or altered
        file, or another format version, raises ``ValueError`` naming the file and what is wrong."""
        folder = Path(folder)
        meta_path = folder / META
        if not meta_path.is_file():
            raise ValueError(f"{meta_path}: missing; {folder} holds no lexical model")
        meta = read_json(meta_path)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: not a lexical model's {META} (format is not {FORMAT!r})")
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{meta_path}: format version {meta.get('format_version')!r}; this xdex reads version "
                             f"{FORMAT_VERSION} only")
        try:
            config = LexicalConfig.from_dict(dict(meta["config"]))
            blocks, files = list(meta["blocks"]), dict(meta["files"])
            n_labels = int(meta["n_labels"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{meta_path}: invalid ({e})") from None
        if threads is not None:
            config = dataclasses.replace(config, threads=threads)
        for name, digest in files.items():
            path = folder / name
            if not path.is_file():
                raise ValueError(f"{path}: missing (listed in {META})")
            if _file_digest(path) != digest:
                raise ValueError(f"{path}: content differs from its SHA-256 in {META} (altered or damaged)")
        model = cls(config)
        model.n_labels, model.share, model.training = n_labels, meta.get("unique_word_share"), meta.get("training", {})
        for block in blocks:
            if block not in ("word", "char"):
                raise ValueError(f"{meta_path}: unknown feature block {block!r}")
            for name in (f"vocab_{block}.json", f"idf_{block}.npz"):
                if name not in files:
                    raise ValueError(f"{folder / name}: not listed in {META}")
            terms = read_json(folder / f"vocab_{block}.json")
            idf = _read_npz(folder / f"idf_{block}.npz", "idf")
            distinct = isinstance(terms, list) and all(isinstance(t, str) for t in terms)
            if not distinct or len(set(terms)) != len(terms):
                raise ValueError(f"{folder / f'vocab_{block}.json'}: expected a list of distinct terms")
            if idf.shape != (len(terms),):
                raise ValueError(f"{folder / f'idf_{block}.npz'}: {idf.shape[0]} idf values for {len(terms)} terms")
            vectorizer = _vectorizer(block, config, terms)
            vectorizer.idf_ = idf  # scikit-learn's setter: the fitted state, rebuilt without pickle
            model.blocks.append(block)
            model.vectorizers.append(vectorizer)
        classifier_files = sorted(n.split("/", 1)[1] for n in files if n.startswith(f"{CLASSIFIER_DIR}/"))
        if not classifier_files:
            raise ValueError(f"{folder / CLASSIFIER_DIR}: no classifier file listed in {META}")
        model._files = {name: (folder / CLASSIFIER_DIR / name).read_bytes() for name in classifier_files}
        try:
            if config.classifier == "napkinxc-plt":
                model._classifier = _NapkinPLT.load(folder / CLASSIFIER_DIR, config)
            else:
                model._classifier = _Omikuji.load(folder / CLASSIFIER_DIR, config)
        except (RuntimeError, ValueError, OSError) as e:
            raise ValueError(f"{folder / CLASSIFIER_DIR}: {config.classifier} cannot read it ({e})") from None
        return model


# --- helpers -------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _library_output_to_log(library: str) -> Any:
    """Send what a compiled library writes to the process's stdout and stderr (Omikuji's Rust logger and progress
    bars: thousands of frames in a redirected log) to this module's debug log instead."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            lines = [line.rsplit("\r", 1)[-1].strip() for line in text.splitlines()]  # a bar's last frame
            for line in filter(None, lines):
                logger.debug("%s: %s", library, line)


def _seed_c_rand(seed: int) -> None:
    """Seed the C library's ``rand()``, from which LIBLINEAR (inside napkinXC) draws its coordinate order; napkinXC
    seeds only its own generators. Without it two fits in one process differ; where there is no C library to
    reach (not Linux or macOS), nothing is done."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).srand(ctypes.c_uint(seed & 0xFFFFFFFF))


def _fingerprint(texts: Sequence[str], labels: sp.csr_matrix) -> str:
    """SHA-256 of the training texts and label matrix (first 16 hex digits)."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode("utf-8", "surrogatepass") + b"\0")
    h.update(np.asarray(labels.indptr, dtype=np.int64).tobytes())
    h.update(np.asarray(labels.indices, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path relative to it."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_npz(path: Path, idf: np.ndarray) -> None:
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        plain = Path(tmp) / "a.npz"
        np.savez(plain, idf=idf)  # a numeric array: readable with allow_pickle=False
        atomic_write_bytes(path, plain.read_bytes())


def _read_npz(path: Path, name: str) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as data:
            array = np.asarray(data[name], dtype=np.float64)
    except UNREADABLE_NPZ as e:
        raise ValueError(f"{path}: not a numpy .npz holding {name!r} ({e})") from None
    if array.ndim != 1 or not np.isfinite(array).all():
        raise ValueError(f"{path}: {name} must be a vector of finite numbers")
    return array


def _library_version(classifier: str) -> dict[str, str]:
    package = classifier.split("-")[0]
    out = {"name": package}
    with contextlib.suppress(PackageNotFoundError):
        out["version"] = version(package)
    with contextlib.suppress(PackageNotFoundError):
        out["scikit-learn"] = version("scikit-learn")
    return out


def documents_per_label(labels: sp.csr_matrix | sp.csr_array) -> float:
    """The mean number of training documents of the labels that have any: (document, label) pairs per such label."""
    used = int(np.count_nonzero(np.diff(sp.csc_matrix(labels).indptr)))
    return float(labels.nnz) / max(used, 1)


def fit_choosing_features(config: LexicalConfig, texts: Sequence[str], labels: sp.csr_matrix | sp.csr_array,
                          rank: Callable[[LexicalModel], tuple[float, ...]]) -> tuple[LexicalModel, dict[str, tuple]]:
    """A model fitted on ``texts`` and ``labels``; with ``analyzer="validation"``, where the ``auto`` rule gives words
    alone, a second model on words + characters too, and the one of higher ``rank`` kept (words on a tie: the
    cheaper). ``rank`` scores a fitted model on the caller's validation documents (e.g. its P@1, then tie-breakers).
    Returns the model kept and the ranks of the feature sets tried (empty where the rule decided alone).

    With ``analyzer="auto"`` the choice is made where the labels average at least ``config.head_label_documents``
    training documents (:func:`documents_per_label`), and the rule decides alone elsewhere."""
    model = LexicalModel(config).fit(texts, labels)
    head = config.head_label_documents
    chosen = config.analyzer == "validation" or (
        config.analyzer == "auto" and head is not None and documents_per_label(labels) >= head)
    if not chosen or model.share is None or model.share >= config.unique_word_threshold:
        return model, {}
    tried = {"word": rank(model)}
    both = LexicalModel(dataclasses.replace(config, analyzer="word+char")).fit(texts, labels)
    tried["word+char"] = rank(both)
    kept = "word+char" if tried["word+char"] > tried["word"] else "word"
    logger.info("lexical features chosen on validation documents: %s (%s)", kept,
                "; ".join(f"{name} {values[0]:.2f}" for name, values in tried.items()))
    return (both if kept == "word+char" else model), tried


__all__ = ["ANALYZERS", "CLASSIFIERS", "FORMAT_VERSION", "LexicalConfig", "LexicalModel", "choose_analyzer",
           "documents_per_label", "fit_choosing_features", "unique_word_share"]

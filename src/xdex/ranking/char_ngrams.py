"""Character n-grams within word boundaries (scikit-learn's ``char_wb``), cut once per distinct word.

A text's ``char_wb`` n-grams are the n-grams of each of its words (lower-cased, split at whitespace) padded with
one space on each side, so a text's counts are the sum of its words' counts. A corpus has far fewer distinct
words than word occurrences, so cutting each distinct word once and adding up its columns per text
(:func:`_count_rows`, a compiled loop) gives scikit-learn's vocabulary, idf and rows (tested to the bit) several
times faster than its analyzer, which cuts every occurrence again in Python: the character block of long texts
took longer to compute than the word block's classifier took to train (docs/benchmarks.md, "Character n-grams
counted word by word").
Written here because scikit-learn has no such path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

import numba
import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer

CACHED_WORDS = 1 << 20
"""Distinct words whose columns a transform keeps; past this the cache starts again (served texts are unbounded)."""


def words(text: str) -> list[str]:
    """The words ``char_wb`` cuts: the lower-cased text split at whitespace."""
    return text.lower().split()


def word_ngrams(word: str, lo: int, hi: int) -> list[str]:
    """The ``lo``- to ``hi``-grams of `` word `` in scikit-learn's ``char_wb`` order, repeats kept; a padded word no
    longer than an n is one n-gram, itself, and ends the list."""
    padded = f" {word} "
    grams: list[str] = []
    for n in range(lo, hi + 1):
        if len(padded) <= n:
            grams.append(padded)
            break
        grams.extend(padded[i:i + n] for i in range(len(padded) - n + 1))
    return grams


def fit_char_idf(texts: Sequence[str], vectorizer: TfidfVectorizer) -> tuple[list[str], np.ndarray]:
    """The terms (in column order) and idf that ``vectorizer.fit(texts)`` would give, for an unfitted ``char_wb``
    vectorizer with an integer ``min_df``, any ``max_df`` and no ``max_features``; ``ValueError`` where
    scikit-learn raises one (no term kept, ``max_df`` below ``min_df``)."""
    if vectorizer.analyzer != "char_wb" or vectorizer.max_features is not None:
        raise ValueError("fit_char_idf: a char_wb vectorizer without max_features is expected")
    if not isinstance(vectorizer.min_df, int) or vectorizer.min_df < 1:
        raise ValueError(f"fit_char_idf: min_df must be a positive integer, got {vectorizer.min_df!r}")
    max_df = vectorizer.max_df if isinstance(vectorizer.max_df, int) else vectorizer.max_df * len(texts)
    if max_df < vectorizer.min_df:
        raise ValueError("max_df corresponds to < documents than min_df")
    lo, hi = vectorizer.ngram_range
    grams: dict[str, int] = {}
    table = _WordTable(lambda word: [grams.setdefault(g, len(grams)) for g in word_ngrams(word, lo, hi)])
    indptr, columns, counts = table.count(texts)
    if not grams:
        raise ValueError("empty vocabulary; the texts have no word")
    df = np.bincount(columns, minlength=len(grams))
    names = list(grams)
    terms = sorted(names[j] for j in np.flatnonzero((df >= vectorizer.min_df) & (df <= max_df)))
    if not terms:
        raise ValueError(f"no term occurs in at least min_df={vectorizer.min_df} and at most max_df={max_df:g} texts")
    position = np.full(len(grams), -1, np.int64)
    position[[grams[t] for t in terms]] = np.arange(len(terms))
    kept = position[columns] >= 0
    rows = np.repeat(np.arange(len(texts)), np.diff(indptr))[kept]
    x = sp.csr_matrix((counts[kept].astype(vectorizer.dtype), (rows, position[columns][kept])),
                      shape=(len(texts), len(terms)))
    idf = TfidfTransformer(norm=vectorizer.norm, use_idf=True, smooth_idf=vectorizer.smooth_idf,
                           sublinear_tf=vectorizer.sublinear_tf).fit(x).idf_
    return terms, idf


class CharNgramCounter:
    """Each text's counts of the ``lo``- to ``hi``-grams in ``vocabulary`` (term -> column), each distinct word cut
    once and its columns kept for the next texts (at most :data:`CACHED_WORDS` words)."""

    def __init__(self, vocabulary: dict[str, int], ngram_range: tuple[int, int]) -> None:
        lo, hi = ngram_range
        lookup = vocabulary.get
        self._table = _WordTable(
            lambda word: [j for j in map(lookup, word_ngrams(word, lo, hi)) if j is not None], CACHED_WORDS)

    def count(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, columns, counts)`` (int64 CSR arrays), each row's columns ascending."""
        return self._table.count(texts)


class _WordTable:
    """Each distinct word's columns (repeats kept), computed once by ``columns_of`` and kept; ``count`` adds them
    up per text. Safe to share between threads (a word computed twice at once gets the same columns)."""

    def __init__(self, columns_of: Callable[[str], list[int]], limit: int | None = None) -> None:
        self._columns_of = columns_of
        self._limit = limit
        self._columns: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def _word(self, word: str) -> np.ndarray:
        columns = self._columns.get(word)
        if columns is None:
            columns = np.asarray(self._columns_of(word), np.int64)
            with self._lock:
                if self._limit is not None and len(self._columns) >= self._limit:
                    self._columns = {}
                self._columns[word] = columns
        return columns

    def count(self, texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(indptr, columns, counts)`` (int64 CSR arrays) of each text's column counts, columns ascending."""
        slot: dict[str, int] = {}
        text_words: list[int] = []
        indptr = [0]
        for text in texts:
            text_words.extend(slot.setdefault(w, len(slot)) for w in words(text))
            indptr.append(len(text_words))
        tables = [self._word(w) for w in slot]
        lengths = np.fromiter((len(t) for t in tables), np.int64, len(tables))
        word_indptr = np.zeros(len(tables) + 1, np.int64)
        np.cumsum(lengths, out=word_indptr[1:])
        word_columns = np.concatenate(tables) if tables else np.zeros(0, np.int64)
        return _count_rows(np.asarray(indptr, np.int64), np.asarray(text_words, np.int64), word_indptr, word_columns)


@numba.njit(cache=True, nogil=True)
def _count_rows(text_indptr: np.ndarray, text_words: np.ndarray, word_indptr: np.ndarray, word_columns: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each text's columns and their counts, columns ascending: the multiset union of the column lists of its words
    (text i's words are ``text_words[text_indptr[i]:text_indptr[i + 1]]``, word w's columns
    ``word_columns[word_indptr[w]:word_indptr[w + 1]]``). Entries are counted in a table indexed by column when
    there are at least as many as columns (large batches), else each row's entries are sorted (one short text).

    Every sort here is ``np.argsort``: numba names its sort and argsort helpers alike, and a process that loads one
    kernel from numba's cache and compiles another can link a cached kernel's ``np.sort`` to a fresh kernel's argsort
    helper (numba issue 10486: symbol ids repeat across processes), which returns the rows unsorted."""
    n = text_indptr.shape[0] - 1
    total = 0
    for e in range(text_indptr[n]):
        total += word_indptr[text_words[e] + 1] - word_indptr[text_words[e]]
    width = word_columns.max() + 1 if word_columns.shape[0] else 0
    columns = np.empty(total, np.int64)
    counts = np.empty(total, np.int64)
    indptr = np.zeros(n + 1, np.int64)
    by_column = total >= width
    slot = np.full(width if by_column else 0, -1, np.int64)  # where a column sits in the current row
    buffer = np.empty(0 if by_column else total, np.int64)
    at = 0
    for i in range(n):
        start = at
        size = 0
        for e in range(text_indptr[i], text_indptr[i + 1]):
            w = text_words[e]
            for f in range(word_indptr[w], word_indptr[w + 1]):
                c = word_columns[f]
                if not by_column:
                    buffer[size] = c
                    size += 1
                elif slot[c] >= start:
                    counts[slot[c]] += 1
                else:
                    slot[c] = at
                    columns[at] = c
                    counts[at] = 1
                    at += 1
        if by_column:
            order = np.argsort(columns[start:at])
            columns[start:at] = columns[start:at][order]
            counts[start:at] = counts[start:at][order]
        else:
            entries = buffer[:size]
            row = entries[np.argsort(entries)]  # not np.sort: see _count_rows' docstring
            for f in range(size):
                if f > 0 and row[f] == row[f - 1]:
                    counts[at - 1] += 1
                else:
                    columns[at] = row[f]
                    counts[at] = 1
                    at += 1
        indptr[i + 1] = at
    return indptr, columns[:at].copy(), counts[:at].copy()


__all__ = ["CACHED_WORDS", "CharNgramCounter", "fit_char_idf", "word_ngrams", "words"]

"""Top-k rankings: the predicted labels of each document, best first.

A :class:`Ranking` holds ``indices`` (int64, ``N x K``, ``-1`` pads rows with fewer than ``K``
predictions, always at the end of the row) and ``scores`` (float32, ``N x K``, ``-inf`` at padded
positions). It is built from per-document lists (:meth:`Ranking.from_lists`, the order given is
the ranking) or from a score matrix (:func:`top_k`, ties broken by the lower label id).

Filtering (:func:`remove_pairs`) deletes given (document, label) pairs from the predictions and
moves the labels below them up; a row then holds fewer than ``K`` predictions, so rank more than
the largest ``k`` to be evaluated (``k`` plus the most filter pairs of any row keeps ``k`` per row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from xdex.sparse import SparseMatrix

PAD = -1
"""Label id of a padded (empty) position."""

_ROW_PROBLEMS = {
    1: "has a label id below -1",
    2: "has a label after a padded (-1) position",
    3: "predicts the same label twice",
}


@dataclass(eq=False)
class Ranking:
    """Predicted labels (best first) and their scores for ``N`` documents."""

    indices: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        self.indices = np.ascontiguousarray(self.indices, dtype=np.int64)
        self.scores = np.ascontiguousarray(self.scores, dtype=np.float32)
        if self.indices.ndim != 2:
            raise ValueError(f"ranking indices must be a 2-D array, got shape {self.indices.shape}")
        if self.scores.shape != self.indices.shape:
            raise ValueError(f"ranking scores have shape {self.scores.shape}, indices {self.indices.shape}")
        row, code = _first_bad_row(self.indices)
        if code:
            raise ValueError(f"ranking row {row} {_ROW_PROBLEMS[code]}")

    @property
    def n_rows(self) -> int:
        return self.indices.shape[0]

    @property
    def k(self) -> int:
        """Number of positions per row (some may be padding)."""
        return self.indices.shape[1]

    @classmethod
    def from_lists(cls, labels: Sequence[Sequence[int]], scores: Sequence[Sequence[float]]) -> Ranking:
        """Ranking from per-document label lists, best first, with their scores (same lengths)."""
        if len(labels) != len(scores):
            raise ValueError(f"{len(labels)} label lists but {len(scores)} score lists")
        lengths = np.fromiter((len(row) for row in labels), dtype=np.int64, count=len(labels))
        for i, (row, row_scores) in enumerate(zip(labels, scores, strict=True)):
            if len(row) != len(row_scores):
                raise ValueError(f"document {i}: {len(row)} labels but {len(row_scores)} scores")
        k = int(lengths.max(initial=0))
        indices = np.full((len(labels), k), PAD, dtype=np.int64)
        values = np.full((len(labels), k), -np.inf, dtype=np.float32)
        mask = np.arange(k) < lengths[:, None]
        if mask.any():
            indices[mask] = np.concatenate([np.asarray(row, dtype=np.int64) for row in labels])
            values[mask] = np.concatenate([np.asarray(row, dtype=np.float32) for row in scores])
        return cls(indices, values)

    @classmethod
    def stacked(cls, parts: Sequence[Ranking]) -> Ranking:
        """The rows of ``parts`` (rankings of the same ``k``) one after another; one part is returned as it is."""
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.indices for p in parts]), np.concatenate([p.scores for p in parts]))

    def to_csr(self, n_labels: int) -> sp.csr_matrix:
        """The predictions as an ``N x n_labels`` sparse score matrix (padding dropped)."""
        keep = self.indices >= 0
        if keep.any() and int(self.indices.max()) >= n_labels:
            raise ValueError(f"ranking has label id {int(self.indices.max())} but there are {n_labels} labels")
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        matrix = sp.csr_matrix((self.scores[keep], self.indices[keep], indptr), shape=(self.n_rows, n_labels))
        matrix.sort_indices()
        return matrix


def top_k(scores: SparseMatrix | np.ndarray, k: int) -> Ranking:
    """The ``k`` highest-scoring labels of each row of an ``N x L`` score matrix, ties by lower id.

    In a sparse matrix the stored entries are the candidates (rows with fewer than ``k`` are
    padded; duplicate entries are summed, as scipy does); in a dense array every label is.
    NaN scores are rejected.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if sp.issparse(scores):
        matrix = sp.csr_matrix(scores)
        if not matrix.has_canonical_format:  # the stable sort relies on sorted indices for ties
            matrix = matrix.copy()
            matrix.sum_duplicates()
        data = matrix.data.astype(np.float64, copy=False)
        if np.isnan(data).any():
            raise ValueError("the score matrix contains NaN")
        n = matrix.shape[0]
        indices = np.full((n, k), PAD, dtype=np.int64)
        values = np.full((n, k), -np.inf, dtype=np.float32)
        _top_k_csr(matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64), data, indices, values)
        return Ranking(indices, values)
    dense = np.asarray(scores)
    if dense.ndim != 2:
        raise ValueError(f"scores must be a 2-D array or sparse matrix, got shape {dense.shape}")
    if np.isnan(dense).any():
        raise ValueError("the score matrix contains NaN")
    k = min(k, dense.shape[1])
    order = np.argsort(-dense, axis=1, kind="stable")[:, :k]
    return Ranking(order, np.take_along_axis(dense, order, axis=1))


def depth_with_filter(k: int, pairs: SparseMatrix | None) -> int:
    """Predictions to retrieve per row so that ``k`` remain after removing ``pairs``: ``k`` plus the
    most filter pairs of any row."""
    return k + (0 if pairs is None else int(sp.csr_matrix(pairs).getnnz(axis=1).max(initial=0)))


def remove_pairs(ranking: Ranking, pairs: SparseMatrix) -> Ranking:
    """Drop the (document, label) pairs stored in ``pairs`` (``N x L``) from the ranking.

    The labels below a removed one move up; the freed positions at the end become padding.
    """
    matrix = positive_csr(pairs)
    if matrix.shape[0] != ranking.n_rows:
        raise ValueError(f"the filter has {matrix.shape[0]} rows but the ranking has {ranking.n_rows}")
    indices = np.full_like(ranking.indices, PAD)
    values = np.full_like(ranking.scores, -np.inf)
    _remove_pairs(ranking.indices, ranking.scores, matrix.indptr.astype(np.int64),
                  matrix.indices.astype(np.int64), indices, values)
    return Ranking(indices, values)


def positive_csr(matrix: SparseMatrix) -> sp.csr_matrix:
    """Canonical CSR copy (summed duplicates, sorted indices) keeping only entries > 0."""
    out = sp.csr_matrix(matrix, copy=True)
    out.sum_duplicates()
    out.data = (out.data > 0).astype(np.float32)
    out.eliminate_zeros()
    return out


@numba.njit(cache=True)
def contains(sorted_row: np.ndarray, label: np.int64) -> bool:
    """Whether ``label`` is in the ascending array ``sorted_row`` (binary search)."""
    lo, hi = 0, sorted_row.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if sorted_row[mid] < label:
            lo = mid + 1
        else:
            hi = mid
    return lo < sorted_row.shape[0] and sorted_row[lo] == label


@numba.njit(cache=True, parallel=True)
def _top_k_csr(indptr, indices, data, out_indices, out_values):
    k = out_indices.shape[1]
    for i in numba.prange(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        order = np.argsort(-data[start:end], kind="mergesort")  # stable: lower id first among ties
        for j in range(min(k, end - start)):
            out_indices[i, j] = indices[start + order[j]]
            out_values[i, j] = data[start + order[j]]


@numba.njit(cache=True, parallel=True)
def _remove_pairs(indices, values, indptr, pair_labels, out_indices, out_values):
    for i in numba.prange(indices.shape[0]):
        row = pair_labels[indptr[i]:indptr[i + 1]]
        kept = 0
        for j in range(indices.shape[1]):
            label = indices[i, j]
            if label < 0:
                break
            if not contains(row, label):
                out_indices[i, kept] = label
                out_values[i, kept] = values[i, j]
                kept += 1


@numba.njit(cache=True)
def _codes_of_rows(indices, start, stop, codes):
    """Problem code of rows ``start .. stop - 1`` into ``codes`` (0 = well formed); repeats are found with a
    per-row hash set."""
    k = indices.shape[1]
    bits = 1
    while (1 << bits) < 2 * k:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    keys = np.empty(mask + 1, dtype=np.int64)
    owner = np.full(mask + 1, -1, dtype=np.int64)  # row that last used a slot: no clearing between rows
    for i in range(start, stop):
        padded = False
        for j in range(k):
            label = indices[i, j]
            if label == PAD:
                padded = True
                continue
            if label < PAD:
                codes[i] = 1
                break
            if padded:
                codes[i] = 2
                break
            slot = np.int64((np.uint64(label) * np.uint64(0x9E3779B97F4A7C15)) >> shift)  # Fibonacci hashing
            while owner[slot] == i and keys[slot] != label:
                slot = (slot + 1) & mask
            if owner[slot] == i:
                codes[i] = 3
                break
            owner[slot] = i
            keys[slot] = label


@numba.njit(cache=True, parallel=True)
def _codes_in_parallel(indices, codes):
    n = indices.shape[0]
    size = (n + 63) // 64
    for c in numba.prange(64):
        _codes_of_rows(indices, c * size, min(n, (c + 1) * size), codes)


PARALLEL_ROWS = 4096  # below this many rows the check runs on one thread (no thread-pool cost per request)


def _row_codes(indices: np.ndarray) -> np.ndarray:
    """Problem code of every row (0 = well formed)."""
    codes = np.zeros(indices.shape[0], dtype=np.int8)
    if indices.shape[0] < PARALLEL_ROWS:
        _codes_of_rows(indices, 0, indices.shape[0], codes)
    else:
        _codes_in_parallel(indices, codes)
    return codes


def _first_bad_row(indices: np.ndarray) -> tuple[int, int]:
    """(row, problem code) of the first malformed row, or (-1, 0) when all rows are well formed."""
    if indices.size == 0:
        return -1, 0
    codes = _row_codes(indices)
    bad = np.flatnonzero(codes)
    return (int(bad[0]), int(codes[bad[0]])) if bad.size else (-1, 0)

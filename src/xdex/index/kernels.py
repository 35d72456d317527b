"""The compiled loops of the exact searches: one row's top-k merged in a pass, and small products."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

SKIP = 64  # scores a merge looks over at once: a span with none above the row's k-th best is passed in one test


@numba.njit(cache=True, nogil=True)
def _insert(top_scores: np.ndarray, top_columns: np.ndarray, size: int, score: float, column: int) -> int:
    """Put ``score`` (above the k-th best, or the row not yet full) in its place among the ``size`` entries, moved up
    past every strictly lower score; returns the new size."""
    k = len(top_scores)
    at = size if size < k else k - 1
    while at > 0 and top_scores[at - 1] < score:
        top_scores[at], top_columns[at] = top_scores[at - 1], top_columns[at - 1]
        at -= 1
    top_scores[at], top_columns[at] = score, column
    return min(size + 1, k)


@numba.njit(cache=True, nogil=True)
def _none_above(span: np.ndarray, threshold: float | np.integer[Any]) -> bool:
    """Whether no value of ``span`` is above ``threshold`` (NaN never is). ``span`` is a slice indexed from 0: the
    compiler turns this count into vector instructions, and did not for indices running from a span's start inside
    a row (a sixth of the speed)."""
    above = 0
    for j in range(len(span)):
        above += span[j] > threshold
    return above == 0


@numba.njit(cache=True, nogil=True)
def merge_row(scores: np.ndarray, offset: int, top_scores: np.ndarray, top_columns: np.ndarray, size: int) -> int:
    """Merge one row of scores (its columns numbered from ``offset``) into that row's best so far, in place: the
    ``size`` entries of ``top_scores`` / ``top_columns``, score descending; returns the new size. The columns are
    scanned in order and an entry takes a place only from a strictly lower score, so among equal scores the lower
    column stays first, within a block and, as blocks come in column order, across them.

    Once the row holds k entries, most scores are below its k-th: each span of ``SKIP`` scores is first counted
    for scores above the k-th (:func:`_none_above`) and passed over when it has none, as the scan one score at a
    time would pass over each of them."""
    k = len(top_scores)
    for start in range(0, len(scores), SKIP):
        span = scores[start : start + SKIP]
        if size == k and _none_above(span, top_scores[k - 1]):
            continue
        for j in range(len(span)):
            if size < k or span[j] > top_scores[k - 1]:
                size = _insert(top_scores, top_columns, size, span[j], start + j + offset)
    return size


@numba.njit(cache=True, nogil=True)
def merge_top_k(scores: np.ndarray, offset: int, top_scores: np.ndarray, top_columns: np.ndarray,
                 sizes: np.ndarray) -> None:
    """:func:`merge_row` for every row of a block of float32 scores; ``sizes`` holds each row's count."""
    for i in range(scores.shape[0]):
        sizes[i] = merge_row(scores[i], offset, top_scores[i], top_columns[i], sizes[i])


@numba.njit(cache=True, nogil=True)
def merge_top_k_columns(scores: np.ndarray, offset: int, top_scores: np.ndarray, top_columns: np.ndarray,
                        sizes: np.ndarray) -> None:
    """:func:`merge_top_k` for a block given item by query (``scores[j, i]``: item ``j + offset``, query ``i``),
    as a BLAS computes ``items @ queries.T``."""
    for i in range(scores.shape[1]):
        sizes[i] = merge_row(scores[:, i], offset, top_scores[i], top_columns[i], sizes[i])


@numba.njit(cache=True, nogil=True)
def merge_top_k_bf16(bits: np.ndarray, offset: int, top_scores: np.ndarray, top_columns: np.ndarray,
                     sizes: np.ndarray) -> None:
    """:func:`merge_top_k` for bf16 scores given as their bit patterns (int16), widened to float32 (exactly: bf16 is
    float32's upper half) span by span and merged by :func:`merge_row`. Where a row's k-th best is ``+0`` or above,
    a bf16 score is above it only if its bits, read as int16, exceed the k-th's upper 16 bits (both orders agree on
    scores of that sign): a span with none above is passed over on its bits, unwidened."""
    widened = np.empty(SKIP, np.uint32)
    values = widened.view(np.float32)
    k = top_scores.shape[1]
    for i in range(bits.shape[0]):
        row, best, columns, size = bits[i], top_scores[i], top_columns[i], sizes[i]
        for start in range(0, len(row), SKIP):
            span = row[start : start + SKIP]
            if size == k:
                values[0] = best[k - 1]
                limit = np.int16(np.uint16(widened[0] >> np.uint32(16)))
                if limit >= 0 and _none_above(span, limit):
                    continue
            for j in range(len(span)):
                widened[j] = np.uint32(np.uint16(span[j])) << np.uint32(16)
            size = merge_row(values[: len(span)], start + offset, best, columns, size)
        sizes[i] = size


@numba.njit(cache=True, nogil=True, fastmath=True)
def row_products(items: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``queries @ items.T`` (float32), one item row at a time; the sums in another order than a BLAS product
    (the scores may differ in the last bits)."""
    out = np.empty((queries.shape[0], items.shape[0]), np.float32)
    for i in range(items.shape[0]):
        for r in range(queries.shape[0]):
            total = np.float32(0.0)
            for j in range(items.shape[1]):
                total += items[i, j] * queries[r, j]
            out[r, i] = total
    return out


@numba.njit(cache=True, nogil=True, fastmath=True)
def candidate_products(items: np.ndarray, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``out[i, c] = <queries[i], items[rows[i, c]]>`` in float32 (the sums in another order than a BLAS
    product: the scores may differ in the last bits)."""
    out = np.empty(rows.shape, np.float32)
    for i in range(rows.shape[0]):
        for c in range(rows.shape[1]):
            total = np.float32(0.0)
            for j in range(items.shape[1]):
                total += items[rows[i, c], j] * queries[i, j]
            out[i, c] = total
    return out

"""Exact search of a few queries through int8 codes: a quarter of the bytes read, then the few candidates rescored.

One query's exact search reads every item vector once and does one multiply-add per 4 bytes, so it runs at the
rate the machine reads memory (docs/benchmarks.md, "Prediction at 10^5 and 10^6 labels"). Each item is kept
again as int8 codes with a scale of its own, ``x ~ scale * codes`` (``scale = max |x_j| / 127``), a quarter of
float32's bytes. The query is rounded to integers too, ``q ~ step * q_int`` (``step = max |q_j| / Q``, ``Q`` up to
32,767 and small enough that no sum of ``d`` products leaves int32), and the approximate scores
``scale * step * <codes, q_int>`` are integer sums, exact, in the instructions that multiply pairs of 16-bit
integers and add in 32 bits (1.4 times the speed of the same loop over a float32 query on 10^5 x 256 codes). They
are off by at most

    b = max(scale) * ||q||_1 * (1/2 + 254 gamma_d) + max(scale * ||codes||_1) * step / 2
        + 2 gamma_d ||q||_2 max ||x||_2 + 2^-22 ||q||_2 max ||x||_2,    gamma_d ~ d 2^-24

(half a code step per component and the rounding of ``x / scale``, half a query step per component, float32's
sums of the rescored candidates, and the rounding of each approximate score to float32). The items of the true
top-k (float32 scores) all score at least ``s_k - 2 b`` approximately, where ``s_k`` is the k-th best approximate
score: those candidates are scored again in float32 and ordered as :func:`xdex.index.exact.exact_search` orders
(ties to the lower row), so the ranking is the float32 search's, whatever the data. Written here because the index
libraries' int8 indexes (faiss's scalar quantizer) return approximate scores and rankings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from xdex.hardware import in_parts, numba_parallel_is_thread_safe, numba_threads
from xdex.index.kernels import SKIP, candidate_products, merge_row

CODE_MAX = 127
QUERY_MAX = 32767  # the query's integers are int16
SCAN_BLOCK = 256  # items scanned by every query in turn: 64 KB of codes of dimension 256, in a core's own cache
SPLIT_FROM_ITEMS = 2 * 16384  # items from which a scan is split between threads (fewer: one part's work is short)


@numba.njit(cache=True, nogil=True)
def _encode(vectors: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> None:
    """Each row's int8 codes and scale (``max |x_j| / 127``; 0 for a zero row), rounded to nearest."""
    for i in range(vectors.shape[0]):
        largest = np.float32(0.0)
        for j in range(vectors.shape[1]):
            largest = max(largest, abs(vectors[i, j]))
        scale = largest / np.float32(CODE_MAX)
        scales[i] = scale
        for j in range(vectors.shape[1]):
            codes[i, j] = np.int8(round(vectors[i, j] / scale)) if scale > 0 else np.int8(0)


@numba.njit(cache=True, nogil=True, fastmath=True)
def _scan(codes: np.ndarray, scales: np.ndarray, queries: np.ndarray, steps: np.ndarray, out: np.ndarray,
          start: int, end: int) -> None:
    """``out[r, i] = scales[i] * steps[r] * <codes[i], queries[r]>`` for items ``start .. end - 1``: the sum of the
    products of codes and int16 integers exact in int32 (the query's step keeps it there; read as int32, the
    compiler sums in 32-bit lanes), the scaling in float64, rounded once to float32. Items go in blocks that stay in
    a core's cache while every query reads them."""
    for first in range(start, end, SCAN_BLOCK):
        last = min(first + SCAN_BLOCK, end)
        for r in range(queries.shape[0]):
            query, step = queries[r], steps[r]
            for i in range(first, last):
                row = codes[i]
                total = 0
                for j in range(row.shape[0]):
                    total += np.int32(row[j]) * np.int32(query[j])
                out[r, i] = np.float32(np.float64(np.int32(total)) * (np.float64(scales[i]) * step))


@numba.njit(cache=True, nogil=True, parallel=True)
def _approximate_scores(codes: np.ndarray, scales: np.ndarray, queries: np.ndarray, steps: np.ndarray,
                        out: np.ndarray, parts: int) -> None:
    """:func:`_scan` of every item, the items split into ``parts`` consecutive ranges scanned side by side on
    numba's threads: one query's scan of 10^5 x 256 codes took 0.05-0.25 ms less than with each range handed to a
    Python thread and waited for (docs/benchmarks.md, "The scan on numba's threads")."""
    n = codes.shape[0]
    for part in numba.prange(parts):
        _scan(codes, scales, queries, steps, out, n * part // parts, n * (part + 1) // parts)


@numba.njit(cache=True, nogil=True)
def _query_integers(queries: np.ndarray, top: int, integers: np.ndarray, steps: np.ndarray) -> None:
    """Each query's step ``max |q_j| / top`` (1 for a zero query) and its integers ``rint(q_j / step)``, each off by
    at most half a step."""
    for r in range(queries.shape[0]):
        largest = 0.0
        for j in range(queries.shape[1]):
            largest = max(largest, abs(np.float64(queries[r, j])))
        step = largest / top if largest > 0 else 1.0
        steps[r] = step
        for j in range(queries.shape[1]):
            integers[r, j] = np.int16(np.rint(np.float64(queries[r, j]) / step))


@numba.njit(cache=True, nogil=True)
def _error_bounds(queries: np.ndarray, steps: np.ndarray, largest_scale: float, largest_mass: float,
                  largest_norm: float, out: np.ndarray) -> None:
    """``b`` of the module docstring for each query, its sums in float64."""
    d = queries.shape[1]
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24)
    for r in range(queries.shape[0]):
        mass = squares = 0.0
        for j in range(d):
            value = np.float64(queries[r, j])
            mass += abs(value)
            squares += value * value
        out[r] = (largest_scale * mass * (0.5 + 2 * CODE_MAX * gamma) + largest_mass * steps[r] * (0.5 + 2.0**-40)
                  + (2 * gamma + 2.0**-22) * np.sqrt(squares) * largest_norm)


@numba.njit(cache=True, nogil=True)
def _count_at_least(values: np.ndarray, threshold: float) -> int:
    """How many ``values`` are at least ``threshold`` (a loop over an array indexed from 0: vector instructions)."""
    count = 0
    for i in range(len(values)):
        count += values[i] >= threshold
    return count


@numba.njit(cache=True, nogil=True)
def _rescored(items: np.ndarray, queries: np.ndarray, approximate: np.ndarray, bounds: np.ndarray,
              scores: np.ndarray, rows: np.ndarray) -> None:
    """The float32 top-``k`` of each query into its row of ``scores`` / ``rows`` (``k`` their width): every item
    whose approximate score is at least the ``k``-th best approximate score less twice the query's bound, scored
    again in float32 and ordered by score, ties to the lower row."""
    k = scores.shape[1]
    best, columns = np.empty(k, np.float32), np.empty(k, np.int64)
    for r in range(queries.shape[0]):
        row_scores = approximate[r]
        merge_row(row_scores, 0, best, columns, 0)
        threshold = best[k - 1] - np.float32(2.0 * bounds[r])
        candidates, count = np.empty(_count_at_least(row_scores, threshold), np.int64), 0
        for start in range(0, len(row_scores), SKIP):  # a span with no candidate is passed over in one count
            span = row_scores[start : start + SKIP]
            if _count_at_least(span, threshold):
                for j in range(len(span)):
                    if span[j] >= threshold:
                        candidates[count] = start + j
                        count += 1
        exact = candidate_products(items, queries[r : r + 1], candidates.reshape(1, -1))[0]
        merge_row(exact, 0, scores[r], columns, 0)  # candidates in row order: among equal scores the lower row first
        for c in range(k):
            rows[r, c] = candidates[columns[c]]


@dataclass(frozen=True)
class Int8Codes:
    """Items as int8 codes and per-item scales, with what the error bound needs of them."""

    codes: np.ndarray  # int8 [n, d]
    scales: np.ndarray  # float32 [n]
    largest_scale: float  # max scale
    largest_norm: float  # max ||x||_2 over the items
    largest_mass: float  # max scale * ||codes||_1 over the items

    @classmethod
    def of(cls, vectors: np.ndarray, chunk: int = 65536) -> Int8Codes:
        codes = np.empty(vectors.shape, np.int8)
        scales = np.empty(len(vectors), np.float32)
        largest = mass = 0.0
        for start in range(0, len(vectors), chunk):  # memory-mapped vectors are read block by block
            block = np.ascontiguousarray(vectors[start : start + chunk], dtype=np.float32)
            _encode(block, codes[start : start + chunk], scales[start : start + chunk])
            largest = max(largest, float(np.linalg.norm(block, axis=1).max()))
            l1 = np.abs(codes[start : start + chunk]).sum(axis=1, dtype=np.int64)
            mass = max(mass, float((scales[start : start + chunk].astype(np.float64) * l1).max()))
        return cls(codes, scales, float(scales.max()) if len(scales) else 0.0, largest, mass)

    def query_integers(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The queries ``[m, d]`` as int16 integers and their steps ``[m]`` (float64): ``q ~ step * q_int`` with
        ``step = max |q_j| / Q``, ``Q = (2^31 - 1) // (127 d)`` at most 32,767 (int16), so that no item's sum of
        ``d`` products leaves int32; a zero query has step 1."""
        top = min(QUERY_MAX, (2**31 - 1) // (CODE_MAX * max(1, self.codes.shape[1])))
        integers, steps = np.empty(queries.shape, np.int16), np.empty(len(queries), np.float64)
        _query_integers(queries, top, integers, steps)
        return integers, steps

    def error_bounds(self, queries: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """``b`` of the module docstring for each query ``[m, d]`` with its step: how far an approximate score may
        be from the float32 score."""
        out = np.empty(len(queries), np.float64)
        _error_bounds(queries, steps, self.largest_scale, self.largest_mass, self.largest_norm, out)
        return out


def approximate_scores(coded: Int8Codes, queries: np.ndarray, threads: int = 1) -> np.ndarray:
    """Every item's approximate score for one query ``[d]`` (scores ``[n]``) or several ``[m, d]`` (``[m, n]``),
    the items split between ``threads`` threads."""
    integers, steps = coded.query_integers(np.atleast_2d(queries))
    out = _scores(coded, integers, steps, threads)
    return out if queries.ndim == 2 else out[0]


def _scores(coded: Int8Codes, integers: np.ndarray, steps: np.ndarray, threads: int) -> np.ndarray:
    """:func:`approximate_scores` of queries given as their integers and steps."""
    out = np.empty((len(integers), len(coded.scales)), np.float32)
    n, parts = len(coded.scales), max(1, threads) if len(coded.scales) >= SPLIT_FROM_ITEMS else 1
    if parts > 1 and numba_parallel_is_thread_safe():
        with numba_threads(parts):
            _approximate_scores(coded.codes, coded.scales, integers, steps, out, parts)
    else:
        in_parts("scan", lambda a, b: _scan(coded.codes, coded.scales, integers, steps, out, a, b), n, parts)
    return out


def int8_search(items: np.ndarray, coded: Int8Codes, queries: np.ndarray, k: int,
                threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The float32 exact top-``k`` of one query ``[d]`` (scores and rows ``[k]``) or several ``[m, d]``
    (``[m, k]``) over ``items``, found through ``coded`` (the same items as int8 codes): best first, ties to the
    lower row."""
    if not 0 < k <= len(items):
        raise ValueError(f"k must be between 1 and the {len(items)} items, got {k}")
    many = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    integers, steps = coded.query_integers(many)
    approximate = _scores(coded, integers, steps, threads)
    scores, rows = np.empty((len(many), k), np.float32), np.empty((len(many), k), np.int64)
    _rescored(items, many, approximate, coded.error_bounds(many, steps), scores, rows)
    return (scores, rows) if queries.ndim == 2 else (scores[0], rows[0])

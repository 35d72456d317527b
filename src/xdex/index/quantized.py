"""Exact search of a few queries through int8 codes: a quarter of the bytes read, then the few candidates rescored.

One query's exact search reads every item vector once and does one multiply-add per 4 bytes, so it runs at the
rate the machine reads memory (docs/benchmarks.md, "Prediction at 10^5 and 10^6 labels"). Each item is kept
again as int8 codes with a scale of its own, ``x ~ scale * codes`` (``scale = max |x_j| / 127``), a quarter of
float32's bytes. The query is rounded to integers too, ``q ~ step * q_int`` (``step = max |q_j| / Q``, ``Q`` up to
32,767 and small enough that no sum of ``d`` products leaves int32), and the approximate scores
``scale * step * <codes, q_int>`` are integer sums, exact, in the instructions that multiply pairs of 16-bit
integers and add in 32 bits (1.4 times the speed of the same loop over a float32 query on 10^5 x 256 codes). They
are off by at most

    b = ||q||_2 max ||e_x||_2 + ||e_q||_2 max ||scale * codes||_2 + (2 gamma_d + 2^-22) ||q||_2 max ||x||_2,
    gamma_d ~ d 2^-24

where ``e_x = x - scale * codes`` and ``e_q = q - step * q_int`` are the rounding errors themselves, measured when
the codes are made (``q.x - q^.x^ = q.e_x + e_q.x^``, each bounded by Cauchy-Schwarz: about 0.7 of the bound by
half a step per component), and the last terms cover float32's sums of the rescored candidates and the rounding of
each approximate score to float32. The items of the true
top-k (float32 scores) all score at least ``s_k - 2 b`` approximately, where ``s_k`` is the k-th best approximate
score: those candidates are scored again in float32 and ordered as :func:`xdex.index.exact.exact_search` orders
(ties to the lower row), so the ranking is the float32 search's, whatever the data. Written here because the index
libraries' int8 indexes (faiss's scalar quantizer) return approximate scores and rankings.

Many queries go through int8 products instead (:func:`int8_products_search`): the queries rounded to int8 as well
(``Q = 127``), each block of items multiplied by a share of them at once in the CPU's int8 instructions (torch's
``_int_mm``; with AVX-512 VNNI about four times float32's rate), then the block merged into each query's k best and
every item within ``2 b`` of the k-th best so far collected, in one compiled pass; the argument and the rescoring
are the scan's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import torch

from xdex.hardware import in_parts, numba_parallel_is_thread_safe, numba_threads
from xdex.index.kernels import SKIP, _none_above, candidate_products, merge_row

CODE_MAX = 127
QUERY_MAX = 32767  # the query's integers are int16
SCAN_BLOCK = 256  # items scanned by every query in turn: 64 KB of codes of dimension 256, in a core's own cache
SPLIT_FROM_ITEMS = 2 * 16384  # items from which a scan is split between threads (fewer: one part's work is short)
PRODUCT_QUERY_MAX = 127  # queries multiplied in int8: the products' 8-bit operands
PRODUCT_SHARE_QUERIES = 32  # queries a thread of our own multiplies at least: a product of fewer rows runs below
# the int8 rate (10^5 codes: 0.65 ms for one query, 2.7 for 8, 5.9 for 32), so a smaller chunk is one share, on
# torch's threads alone (16 queries over 10^5 items: 5-7 ms in one share against 8.5-9 ms in two)


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


@numba.njit(cache=True, nogil=True)
def _encode_shared(vectors: np.ndarray, scale: float, codes: np.ndarray) -> None:
    """Every row's int8 codes at one ``scale`` (positive), rounded to nearest."""
    for i in range(vectors.shape[0]):
        for j in range(vectors.shape[1]):
            codes[i, j] = np.int8(round(vectors[i, j] / scale))


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
def _rounding_norms(vectors: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> tuple[float, float]:
    """The largest ``||x - scale * codes||_2`` and ``||scale * codes||_2`` over the rows, in float64 (each product
    of a float32 scale and a code is exact there), widened by 2^-30 for float64's own rounding."""
    error = coded = 0.0
    for i in range(vectors.shape[0]):
        error_squares = coded_squares = 0.0
        for j in range(vectors.shape[1]):
            value = np.float64(scales[i]) * codes[i, j]
            error_squares += (np.float64(vectors[i, j]) - value) ** 2
            coded_squares += value * value
        error, coded = max(error, np.sqrt(error_squares)), max(coded, np.sqrt(coded_squares))
    return error * (1 + 2.0**-30), coded * (1 + 2.0**-30)


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
def _error_bounds(queries: np.ndarray, integers: np.ndarray, steps: np.ndarray, largest_error: float,
                  largest_coded_norm: float, largest_norm: float, out: np.ndarray) -> None:
    """``b`` of the module docstring for each query, its sums in float64 (widened by 2^-30 of each term: float64's
    own rounding)."""
    d = queries.shape[1]
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24)
    for r in range(queries.shape[0]):
        squares = error_squares = 0.0
        for j in range(d):
            value = np.float64(queries[r, j])
            squares += value * value
            error_squares += (value - steps[r] * integers[r, j]) ** 2
        norm = np.sqrt(squares)
        out[r] = ((norm * largest_error + np.sqrt(error_squares) * largest_coded_norm) * (1 + 2.0**-30)
                  + (2 * gamma + 2.0**-22) * norm * largest_norm)


@numba.njit(cache=True, nogil=True)
def _count_at_least(values: np.ndarray, threshold: float) -> int:
    """How many ``values`` are at least ``threshold`` (a loop over an array indexed from 0: vector instructions)."""
    count = 0
    for i in range(len(values)):
        count += values[i] >= threshold
    return count


@numba.njit(cache=True, nogil=True)
def _rescore(items: np.ndarray, query: np.ndarray, candidates: np.ndarray, scores: np.ndarray, rows: np.ndarray,
             columns: np.ndarray) -> None:
    """One query's (``[1, d]``) float32 top-``k`` (``k`` the width of ``scores``) among ``candidates``, item rows in
    increasing order: each scored again in float32, the best into ``scores`` / ``rows``, among equal scores the
    lower row first (``columns``: ``k`` entries of room)."""
    exact = candidate_products(items, query, candidates.reshape(1, -1))[0]
    merge_row(exact, 0, scores, columns, 0)
    for c in range(len(scores)):
        rows[c] = candidates[columns[c]]


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
        _rescore(items, queries[r : r + 1], candidates, scores[r], rows[r], columns)


@dataclass(frozen=True)
class Int8Codes:
    """Items as int8 codes and per-item scales, with what the error bound needs of them."""

    codes: np.ndarray  # int8 [n, d]
    scales: np.ndarray  # float32 [n]
    largest_scale: float  # max scale
    largest_norm: float  # max ||x||_2 over the items
    largest_error: float  # max ||x - scale * codes||_2 over the items (in float64, widened by 2^-30)
    largest_coded_norm: float  # max ||scale * codes||_2 over the items (the same)

    @classmethod
    def of(cls, vectors: np.ndarray, chunk: int = 65536, shared_scale: bool = False) -> Int8Codes:
        """The codes of ``vectors`` ``[n, d]``, read ``chunk`` rows at a time (memory-mapped vectors block by
        block): each row at a scale of its own, or every row at the largest (``shared_scale``: the scale
        :func:`int8_products_search` needs, for the same error bound)."""
        codes = np.empty(vectors.shape, np.int8)
        scales = np.empty(len(vectors), np.float32)
        largest = error = coded_norm = shared = 0.0
        if shared_scale:
            for start in range(0, len(vectors), chunk):
                shared = max(shared, float(np.abs(vectors[start : start + chunk]).max(initial=0.0)))
            shared = float(np.float32(shared) / np.float32(CODE_MAX))
        for start in range(0, len(vectors), chunk):  # memory-mapped vectors are read block by block
            block = np.ascontiguousarray(vectors[start : start + chunk], dtype=np.float32)
            if shared > 0:
                _encode_shared(block, shared, codes[start : start + chunk])
                scales[start : start + chunk] = shared
            else:
                _encode(block, codes[start : start + chunk], scales[start : start + chunk])
            largest = max(largest, float(np.linalg.norm(block, axis=1).max()))
            block_error, block_coded = _rounding_norms(block, codes[start : start + chunk],
                                                       scales[start : start + chunk])
            error, coded_norm = max(error, block_error), max(coded_norm, block_coded)
        return cls(codes, scales, float(scales.max()) if len(scales) else 0.0, largest, error, coded_norm)

    def query_integers(self, queries: np.ndarray, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The queries ``[m, d]`` as int16 integers and their steps ``[m]`` (float64): ``q ~ step * q_int`` with
        ``step = max |q_j| / Q``; ``Q`` is ``top`` where given (the products' ``PRODUCT_QUERY_MAX``), else
        ``(2^31 - 1) // (127 d)`` at most 32,767 (int16), so that no item's sum of ``d`` products leaves int32; a
        zero query has step 1."""
        if top is None:
            top = min(QUERY_MAX, (2**31 - 1) // (CODE_MAX * max(1, self.codes.shape[1])))
        integers, steps = np.empty(queries.shape, np.int16), np.empty(len(queries), np.float64)
        _query_integers(queries, top, integers, steps)
        return integers, steps

    def error_bounds(self, queries: np.ndarray, integers: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """``b`` of the module docstring for each query ``[m, d]`` with its integers and step: how far an approximate
        score may be from the float32 score."""
        out = np.empty(len(queries), np.float64)
        _error_bounds(queries, integers, steps, self.largest_error, self.largest_coded_norm, self.largest_norm, out)
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
    _rescored(items, many, approximate, coded.error_bounds(many, integers, steps), scores, rows)
    return (scores, rows) if queries.ndim == 2 else (scores[0], rows[0])


@numba.njit(cache=True, nogil=True)
def _keep_at_least(found: np.ndarray, values: np.ndarray, count: int, threshold: int) -> int:
    """Keep, in order, the first ``count`` entries of ``found`` / ``values`` whose value is at least ``threshold``;
    returns how many."""
    kept = 0
    for c in range(count):
        if values[c] >= threshold:
            found[kept], values[kept] = found[c], values[c]
            kept += 1
    return kept


@numba.njit(cache=True, nogil=True)
def _below(kth: np.int32, margin: np.int64) -> np.int32:
    """The largest product not collected: ``kth - margin - 1``, as an int32 (at least int32's smallest), so that
    spans are counted in 32-bit lanes."""
    return np.int32(max(np.int64(kth) - margin - 1, -(2**31)))


@numba.njit(cache=True, nogil=True)
def _merge_and_collect(products: np.ndarray, offset: int, margins: np.ndarray, best: np.ndarray,
                       best_rows: np.ndarray, sizes: np.ndarray, found: np.ndarray, values: np.ndarray,
                       counts: np.ndarray) -> None:
    """One block of integer products (query by item, the items numbered from ``offset``) into each query's state:
    its ``k`` best products so far (``best`` / ``best_rows`` / ``sizes``, merged by
    :func:`xdex.index.kernels.merge_row`), then, in item order, every item of the block whose product is at least
    the k-th best less the query's ``margins`` (``found`` / ``values`` / ``counts``; every item while the query has
    fewer than ``k``), a span of ``SKIP`` products below that passed over in one count. A full buffer is cut to the
    current threshold; a query whose buffer is still full gets count -1 and is left (searched again by the
    caller). The threshold only rises, so every item at least the final k-th best less the margin is collected."""
    k, room = best.shape[1], found.shape[1]
    for i in range(products.shape[0]):
        count = counts[i]
        if count < 0:
            continue
        row = products[i]
        sizes[i] = merge_row(row, offset, best[i], best_rows[i], sizes[i])
        limit = _below(best[i, k - 1], margins[i]) if sizes[i] == k else np.int32(-(2**31))
        for start in range(0, len(row), SKIP):
            span = row[start : start + SKIP]
            if _none_above(span, limit):
                continue
            for j in range(len(span)):
                if span[j] > limit:
                    if count == room:
                        count = _keep_at_least(found[i], values[i], count, np.int64(limit) + 1)
                        if count == room:
                            count = -1
                            break
                    found[i, count], values[i, count] = start + j + offset, span[j]
                    count += 1
            if count < 0:
                break
        counts[i] = count


@numba.njit(cache=True, nogil=True)
def _rescore_found(items: np.ndarray, queries: np.ndarray, found: np.ndarray, values: np.ndarray,
                   counts: np.ndarray, best: np.ndarray, margins: np.ndarray, scores: np.ndarray,
                   rows: np.ndarray) -> None:
    """Each query's float32 top-``k`` (``k`` the width of ``scores``) from its collected items: those at least its
    final k-th best product less its margin, scored again in float32 and ordered by score, ties to the lower row
    (they are in row order). Queries with count -1 are left."""
    k = scores.shape[1]
    columns = np.empty(k, np.int64)
    for r in range(queries.shape[0]):
        if counts[r] < 0:
            continue
        count = _keep_at_least(found[r], values[r], counts[r], np.int64(_below(best[r, k - 1], margins[r])) + 1)
        _rescore(items, queries[r : r + 1], found[r, :count], scores[r], rows[r], columns)


class _Shortlists(NamedTuple):
    """Each query's state in :func:`int8_products_search`: its k best products so far, and the items collected."""

    best: np.ndarray  # int32 [m, k]
    best_rows: np.ndarray  # int64 [m, k]
    sizes: np.ndarray  # int64 [m]: entries of best so far
    found: np.ndarray  # int64 [m, room]: items collected, in row order
    values: np.ndarray  # int32 [m, room]: their products
    counts: np.ndarray  # int64 [m]: items collected; -1 for a query left

    @classmethod
    def empty(cls, m: int, k: int, room: int) -> _Shortlists:
        return cls(np.empty((m, k), np.int32), np.empty((m, k), np.int64), np.zeros(m, np.int64),
                   np.empty((m, room), np.int64), np.empty((m, room), np.int32), np.zeros(m, np.int64))

    def rows(self, start: int, end: int) -> _Shortlists:
        return _Shortlists(*(array[start:end] for array in self))


def _search_rows(items: np.ndarray, codes: torch.Tensor, integers: np.ndarray, queries: np.ndarray,
                 margins: np.ndarray, lists: _Shortlists, scores: np.ndarray, rows: np.ndarray, chunk_items: int,
                 start: int, end: int) -> None:
    """Queries ``start .. end - 1`` of a chunk: their products with each block of ``chunk_items`` codes (torch's
    ``_int_mm``, into a buffer of their own), each merged and collected (:func:`_merge_and_collect`), then their
    candidates rescored (:func:`_rescore_found`) into ``scores`` / ``rows``."""
    chunk, part, m = torch.from_numpy(integers[start:end].astype(np.int8)), lists.rows(start, end), end - start
    # one buffer for every block's products: a new 16 MB array each time cost more than the product
    buffer = torch.empty(m * min(chunk_items, len(codes)), dtype=torch.int32)
    for i0 in range(0, len(codes), chunk_items):
        block = codes[i0 : i0 + chunk_items]
        products = torch._int_mm(chunk, block.T, out=buffer[: m * len(block)].view(m, len(block))).numpy()
        _merge_and_collect(products, i0, margins[start:end], *part)
    _rescore_found(items, queries[start:end], part.found, part.values, part.counts, part.best, margins[start:end],
                   scores[start:end], rows[start:end])


def int8_products_search(items: np.ndarray, coded: Int8Codes, queries: np.ndarray, k: int, chunk_queries: int,
                         chunk_items: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float32 exact top-``k`` of many queries ``[m, d]`` over ``items`` through int8 products with ``coded``
    (the same items as int8 codes at one scale, :meth:`Int8Codes.of` with ``shared_scale``): scores and rows
    ``[m, k]``, best first, ties to the lower row, and the positions of the queries it left (more items near their
    k-th best than it keeps, ``4 k + 512``), which the caller searches in float32. The queries go in chunks of
    ``chunk_queries``, each split between up to ``threads`` threads of our own (a share of at least
    ``PRODUCT_SHARE_QUERIES`` queries each) that run their share's products (on torch's threads) and merges in turn,
    over blocks of ``chunk_items`` items: one share's merges overlap the other's products, where products of the
    whole chunk then merges left the cores to torch's threads spinning after each product (2,000 texts over 27,879
    labels: 54-68 against 70-80 ms; docs/benchmarks.md)."""
    if not 0 < k <= len(items):
        raise ValueError(f"k must be between 1 and the {len(items)} items, got {k}")
    if len(coded.scales) and coded.scales.min() != coded.largest_scale:
        raise ValueError("int8 products need codes at one scale (Int8Codes.of(..., shared_scale=True))")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    scores, rows = np.empty((len(queries), k), np.float32), np.empty((len(queries), k), np.int64)
    left: list[np.ndarray] = [np.empty(0, np.int64)]
    codes, room = torch.from_numpy(coded.codes), 4 * k + 512
    integers, steps = coded.query_integers(queries, PRODUCT_QUERY_MAX)
    # a product p approximates a score by p * scale * step: the 2 b of the module docstring as a whole number of
    # products, rounded up (a wider margin only collects more)
    scale = coded.largest_scale or 1.0
    margins = np.floor(2 * coded.error_bounds(queries, integers, steps) / (scale * steps) * (1 + 2.0**-40))
    margins = margins.astype(np.int64) + 1
    for q0 in range(0, len(queries), chunk_queries):
        at = slice(q0, q0 + chunk_queries)
        m = len(queries[at])
        lists = _Shortlists.empty(m, k, room)
        in_parts("int8", functools.partial(_search_rows, items, codes, integers[at], queries[at], margins[at], lists,
                                           scores[at], rows[at], chunk_items), m,
                 min(threads, max(1, m // PRODUCT_SHARE_QUERIES)))
        left.append(q0 + np.flatnonzero(lists.counts < 0))
    return scores, rows, np.concatenate(left)

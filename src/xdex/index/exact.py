"""Exact (brute-force) search: chunked matrix products with a top-k merged across item blocks.

The products of several queries are numpy's (the BLAS it ships, OpenBLAS), on as many threads as torch's intra-op
setting: on the AMD EPYC machines we measure on, torch's CPU build multiplies with Intel's MKL at about half
OpenBLAS's rate (a block of 1,024 x 8,192 x 256: 46 against 79 GFLOP/s on one thread; docs/benchmarks.md, "Exact
search at mining sizes"). Fewer than ``FEW_QUERIES`` queries (a served batch) are multiplied as ``block @ queries.T``,
which OpenBLAS computed in half the time of ``queries @ block.T`` (16 queries x 7,155 x 256: 1.1 against 2.0 ms, one
thread); their scores come item by item, which merges more slowly from 64 queries on.

Many queries for a short top-k over many items, on a CPU with int8 dot-product instructions (VNNI), go through
int8 products (:func:`xdex.index.quantized.int8_products_search`: about four times float32's rate, the candidates
near each query's k-th best rescored in float32, the same ranking). Elsewhere, many queries on a CPU with bf16
instructions take a certified shortcut (:func:`_bf16_top_k`): bf16 products,
about three times faster than float32 ones there, keep ``k + margin`` candidates per query; these are scored
again in float32, and a query's top-``k`` is kept only where a bound on bf16's rounding proves that no item left
out could have entered it. The other queries are searched again in float32, so the ranking is the float32
search's either way (a candidate's score may differ in the last bits: its sum is taken in another order).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from xdex.hardware import cpu_has_bf16, cpu_has_vnni, in_parts
from xdex.index.base import Index, Metric
from xdex.index.kernels import (
    candidate_products,
    merge_top_k,
    merge_top_k_bf16,
    merge_top_k_columns,
    row_products,
)
from xdex.index.quantized import Int8Codes, int8_products_search, int8_search
from xdex.index.storage import load_array, save_array, write_meta

CHUNK_QUERIES = 1024
CHUNK_ITEMS = 8192
BF16_FROM_QUERIES = 256  # fewer queries than this: rounding the items to bf16 costs more than it saves
BF16_FROM_ITEMS = 65536  # fewer items: float32 products are cheap, the wider merge dearer (2,000 x 7,155: 83 vs 144 ms)
BF16_MARGIN = 64  # candidates beyond k kept by the bf16 pass (the certificate failed for 0-2% of queries)
BF16_UNIT_ROUNDOFF = 2.0**-8  # bf16 keeps 8 significant bits
INT8_FROM_BYTES = 4 << 20  # float32 vectors beyond a core's own cache (1-2 MB): a quarter of the bytes pays off
INT8_QUERIES = ((64 << 20, 16), (16 << 20, 8), (0, 4))  # (float32 bytes from, queries at most through int8 codes):
# each query costs its own pass over the codes (about 0.5 ms at 10^5 x 256 on 2 cores), while float32 products read
# the vectors once for all, and read them from memory, not from a processor's shared cache, once they are large
# (`python -m benchmarks.bench_few_queries`, docs/benchmarks.md: at 7,155 / 30,000 / 10^5 labels of 256 dimensions,
# 4 queries 0.34 / 1.25 / 2.5 ms through the codes against 0.35-0.45 / 4.2 / 9.6 in float32, 8 queries 0.67 / 2.5 /
# 5.0 against 0.43-0.51 / 3.3 / 11.6, 16 queries 1.4-2.1 / 5.2 / 9.3 against 0.56-0.86 / 3.8 / 13.0)
FEW_QUERIES = 64  # fewer queries (a served batch): products as block @ q.T, whose item-major scores merge slower
INT8_PRODUCTS_FROM_QUERIES = ((64 << 20, 16), (0, 8))  # (float32 bytes from, queries from which int8 products
# pay) where the codes are kept (ExactIndex), over INT8_PRODUCTS_FROM_ITEMS items or more, for a top-k of at most
# INT8_PRODUCTS_MAX_K (a longer top-k has more candidates to rescore): `python -m benchmarks.bench_few_queries` and
# `python -m benchmarks.bench_int8_products` (docs/benchmarks.md). 8 queries over 27,879-30,000 labels: 1.5-1.9 ms
# against 2.9-3.4 through the codes and 3.4-4.4 in float32; over 10^5 labels the codes stay faster below 16 queries
# (8: 5.6 against 7.3 ms), where a product of few rows runs far below the int8 rate
INT8_PRODUCTS_CODING_FROM_QUERIES = 128  # the same where the codes are made for the one search: making them takes
# about 0.5 us a vector (25-50 ms at 10^5 of 256), more than the products save for fewer queries
INT8_PRODUCTS_FROM_ITEMS = 4096
INT8_PRODUCTS_MAX_K = 40

log = logging.getLogger(__name__)


_BLAS: ThreadpoolController | None = None  # found at the first search: it looks through the loaded libraries
_BLAS_LOCK = threading.Lock()  # the BLAS's thread count is the process's: searches that set it take turns


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """Run the block with numpy's BLAS on ``threads`` threads (then as before), one such block at a time."""
    global _BLAS
    with _BLAS_LOCK:
        if _BLAS is None:
            _BLAS = ThreadpoolController()
        with _BLAS.limit(limits=threads, user_api="blas"):
            yield


def _bf16_error_bound(query_norms: np.ndarray, item_norm: float, dim: int) -> np.ndarray:
    """How far a bf16 score may be from the float32 score of the same pair, per query: rounding both vectors to
    bf16 moves the product by at most (2u + u^2)|q||x| (Cauchy-Schwarz, u = 2^-8), summing the d exact products
    in float32 by gamma_d |q||x| (gamma_d ~ d 2^-24), rounding the sum to bf16 by u |q||x|, and the float32 score
    itself is gamma_d from the true product; components below float32's normal range may be flushed to zero."""
    u = BF16_UNIT_ROUNDOFF
    gamma = dim * 2.0**-24 / (1 - dim * 2.0**-24)
    relative = 3 * u + 4 * u * u + 3 * gamma
    return relative * query_norms.astype(np.float64) * item_norm + dim * 2.0**-100


def _blocked_top_k(items: np.ndarray, queries: np.ndarray, k: int, chunk_queries: int, chunk_items: int,
                   threads: int, bf16: bool) -> tuple[np.ndarray, np.ndarray]:
    """The top-``k`` of each query, block by block: float32 products (numpy's) or bf16 products (torch's) on
    ``threads`` threads, each block merged into the best so far.

    Float32 products of at least ``2 * FEW_QUERIES`` queries are split between threads of our own, each running
    the BLAS on one thread over its share of the queries and merging its own scores. OpenBLAS's own threads wait
    for more work, spinning, for a while after every product. In a prediction, the ranking stage's work that
    follows the search then ran beside them: a batch of 2,000 fused texts took a fifth longer than with the BLAS
    on one thread. Split this way, the merges run side by side too. bf16 products stay torch's, on its threads
    (merging their rows side by side measured no faster: torch's threads spin after a product too).
    """
    scores = np.empty((len(queries), k), dtype=np.float32)
    rows = np.empty((len(queries), k), dtype=np.int64)
    parts = 1 if bf16 else min(threads, len(queries) // FEW_QUERIES)
    if parts > 1:
        with blas_threads(1):
            in_parts("exact", lambda start, end: _scan(items, queries[start:end], chunk_queries, chunk_items, False,
                                                       scores[start:end], rows[start:end]), len(queries), parts)
        return scores, rows
    with blas_threads(threads) if len(queries) > 1 else contextlib.nullcontext():
        _scan(items, queries, chunk_queries, chunk_items, bf16, scores, rows)
    return scores, rows


def _scan(items: np.ndarray, queries: np.ndarray, chunk_queries: int, chunk_items: int, bf16: bool,
          scores: np.ndarray, rows: np.ndarray) -> None:
    """:func:`_blocked_top_k`'s loop over query chunks and item blocks, on the BLAS threads as set, into the
    ``[len(queries), k]`` arrays ``scores`` and ``rows``."""
    for q0 in range(0, len(queries), chunk_queries):
        q = queries[q0 : q0 + chunk_queries]
        q_bf16 = torch.tensor(q, dtype=torch.bfloat16) if bf16 else None  # a copy: read-only queries are fine
        sizes = np.zeros(len(q), np.int64)
        for i0 in range(0, len(items), chunk_items):
            block = np.ascontiguousarray(items[i0 : i0 + chunk_items], dtype=np.float32)
            top = (scores[q0 : q0 + len(q)], rows[q0 : q0 + len(q)], sizes)
            if q_bf16 is not None:
                block_bf16 = torch.tensor(block, dtype=torch.bfloat16)
                merge_top_k_bf16((q_bf16 @ block_bf16.T).view(torch.int16).numpy(), i0, *top)
            elif len(q) == 1:  # a served text: a compiled pass, faster than a BLAS product of one row
                merge_top_k(row_products(block, q), i0, *top)
            elif len(q) < FEW_QUERIES:  # the block as the BLAS's left operand: half the time of q @ block.T
                merge_top_k_columns(block @ q.T, i0, *top)
            else:
                merge_top_k(q @ block.T, i0, *top)


def _bf16_top_k(items: np.ndarray, queries: np.ndarray, k: int, item_norm: float, chunk_items: int,
                threads: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact top-``k`` of a chunk of queries through bf16 products: scores, rows, and how many queries the
    bound did not prove (searched again in float32). bf16 products keep ``k + BF16_MARGIN`` candidates per query;
    these are scored in float32 and ordered (ties to the lower row). An item left out scores at most the last
    candidate's bf16 score plus :func:`_bf16_error_bound` in float32; where that is below the k-th float32
    score, no item left out could have entered the top-``k``."""
    wide = k + BF16_MARGIN
    bf16_scores, candidates = _blocked_top_k(items, queries, wide, len(queries), chunk_items, threads, bf16=True)
    exact = candidate_products(items, queries, candidates)
    order = np.lexsort((candidates, -exact), axis=-1)[:, :k]
    scores, rows = np.take_along_axis(exact, order, axis=1), np.take_along_axis(candidates, order, axis=1)
    bound = _bf16_error_bound(np.linalg.norm(queries, axis=1), item_norm, items.shape[1])
    again = np.flatnonzero(~(scores[:, k - 1] > bf16_scores[:, -1] + bound))
    if len(again):
        scores[again], rows[again] = _blocked_top_k(items, queries[again], k, len(queries), chunk_items, threads,
                                                    bf16=False)
    return scores, rows, len(again)


def int8_products_pay(queries: int, items: np.ndarray, k: int, codes_kept: bool = False) -> bool:
    """Whether a search of ``queries`` queries for their top-``k`` of the float32 vectors ``items`` goes through int8
    products by default: enough of both (``INT8_PRODUCTS_FROM_QUERIES`` by the vectors' size where the caller keeps
    the codes, else ``INT8_PRODUCTS_CODING_FROM_QUERIES``), a short top-k, and a CPU with int8 dot-product
    instructions."""
    if len(items) < INT8_PRODUCTS_FROM_ITEMS or k > INT8_PRODUCTS_MAX_K:
        return False
    fewest = (next(fewest for start, fewest in INT8_PRODUCTS_FROM_QUERIES if items.nbytes >= start) if codes_kept
              else INT8_PRODUCTS_CODING_FROM_QUERIES)
    return queries >= fewest and _cpu_has_vnni()


def exact_search(
    items: np.ndarray, queries: np.ndarray, k: int, chunk_queries: int = CHUNK_QUERIES, chunk_items: int = CHUNK_ITEMS,
    bf16: bool | None = None, int8: bool | None = None, coded: Int8Codes | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of ``items`` by inner product for each query: scores and row positions, best first, ties
    to the lower row.

    Queries go in chunks of ``chunk_queries`` and items in blocks of ``chunk_items``, so the
    extra memory is O(chunk_queries x chunk_items), also for memory-mapped ``items``, which are read
    block by block. Each block's scores are merged into the best so far in one compiled pass
    (:func:`merge_top_k`). ``k`` must not exceed ``len(items)``. ``int8`` searches through int8 products
    (:func:`xdex.index.quantized.int8_products_search`, with ``coded``, the items' codes at one scale, where the
    caller keeps them; the queries it leaves are searched in float32): by default where :func:`int8_products_pay`
    and ``bf16`` is not named. Otherwise ``bf16`` takes the certified bf16 shortcut
    (:func:`_bf16_top_k`; the same ranking): by default for at least ``BF16_FROM_QUERIES`` queries over at
    least ``BF16_FROM_ITEMS`` items on a CPU with bf16 instructions; once it proves less than half of
    a chunk of queries (scores crowded at the cut, as with untrained vectors), the remaining chunks go in float32.
    """
    if not 0 <= k <= len(items):
        raise ValueError(f"k must be between 0 and the {len(items)} items, got {k}")
    if k == 0:
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    threads = torch.get_num_threads() if len(queries) > 1 else 1
    if int8 is None:  # a caller that names bf16 asks for that search
        int8 = bf16 is None and int8_products_pay(len(queries), items, k, codes_kept=coded is not None)
    if bf16 is None:
        bf16 = len(queries) >= BF16_FROM_QUERIES and len(items) >= BF16_FROM_ITEMS and _cpu_has_bf16()
    bf16 = bool(bf16) and not int8 and k + BF16_MARGIN <= len(items)
    if not int8 and not bf16:
        return _blocked_top_k(items, queries, k, chunk_queries, chunk_items, threads, bf16=False)
    if int8 and coded is None:
        coded = Int8Codes.of(items, chunk_items, shared_scale=True)
    item_norm = max(float(np.linalg.norm(items[i0 : i0 + chunk_items], axis=1).max())
                    for i0 in range(0, len(items), chunk_items)) if bf16 else 0.0
    scores = np.empty((len(queries), k), dtype=np.float32)
    rows = np.empty((len(queries), k), dtype=np.int64)
    for q0 in range(0, len(queries), chunk_queries):
        q, at = queries[q0 : q0 + chunk_queries], slice(q0, q0 + chunk_queries)
        if int8 or bf16:
            if int8 and coded is not None:
                scores[at], rows[at], unproven = _int8_top_k(items, coded, q, k, chunk_items, threads)
            else:
                scores[at], rows[at], unproven = _bf16_top_k(items, q, k, item_norm, chunk_items, threads)
            if 2 * unproven > len(q):  # scores crowded at the cut (untrained vectors): the rest goes in float32
                log.debug("%s shortlists unproven for %d of %d queries: the rest searched in float32",
                          "int8" if int8 else "bf16", unproven, len(q))
                int8 = bf16 = False
        else:
            scores[at], rows[at] = _blocked_top_k(items, q, k, chunk_queries, chunk_items, threads, bf16=False)
    return scores, rows


def _int8_top_k(items: np.ndarray, coded: Int8Codes, queries: np.ndarray, k: int, chunk_items: int,
                threads: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The exact top-``k`` of a chunk of queries through int8 products (the items' ``coded`` at one scale):
    scores, rows, and how many queries had more candidates than it keeps (searched again in float32)."""
    scores, rows, left = int8_products_search(items, coded, queries, k, len(queries), chunk_items, threads)
    if len(left):
        scores[left], rows[left] = _blocked_top_k(items, queries[left], k, len(queries), chunk_items, threads,
                                                  bf16=False)
    return scores, rows, len(left)


_BF16: bool | None = None
_VNNI: bool | None = None


def _cpu_has_bf16() -> bool:
    """:func:`xdex.hardware.cpu_has_bf16`, asked once."""
    global _BF16
    if _BF16 is None:
        _BF16 = cpu_has_bf16()
    return _BF16


def _cpu_has_vnni() -> bool:
    """:func:`xdex.hardware.cpu_has_vnni`, asked once."""
    global _VNNI
    if _VNNI is None:
        _VNNI = cpu_has_vnni()
    return _VNNI


def _int8_max_queries(nbytes: int) -> int:
    """How many queries at most a search of ``nbytes`` of float32 vectors sends through their int8 codes (0: none,
    below ``INT8_FROM_BYTES``; then as ``INT8_QUERIES`` says)."""
    if nbytes < INT8_FROM_BYTES:
        return 0
    return next(most for start, most in INT8_QUERIES if nbytes >= start)


class ExactIndex(Index):
    """Brute-force index: exact top-k, deterministic, ties broken by the lower id.

    Vectors added in several calls are joined (and ordered by id) once, at the next search
    or save, so adding in many small batches costs no repeated copies. Searches may run from
    several threads at once (the join is done by one of them); adding while searching is not safe.
    From ``INT8_FROM_BYTES`` bytes of vectors on, a few queries (4 to 16, more for more vectors: ``INT8_QUERIES``) are
    searched through int8 codes of the vectors (:mod:`xdex.index.quantized`: the same ranking, a quarter of the bytes
    read), made at the first such search and kept in memory (a quarter of the vectors' size); more queries (from 8
    or 16 on a CPU with int8 dot-product instructions) for a short top-k go through int8 products
    (:func:`int8_products_pay`) with codes of their own, at one scale, made and kept alike.
    """

    kind = "exact"

    def __init__(
        self, dim: int, metric: Metric = "ip", chunk_queries: int = CHUNK_QUERIES, chunk_items: int = CHUNK_ITEMS
    ):
        super().__init__(dim, metric)
        for name, value in (("chunk_queries", chunk_queries), ("chunk_items", chunk_items)):
            if operator.index(value) < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        self.chunk_queries = operator.index(chunk_queries)
        self.chunk_items = operator.index(chunk_items)
        self._stored = np.empty((0, dim), dtype=np.float32)  # rows ordered by id, matching sorted ids
        self._pending: list[np.ndarray] = []  # vectors added since, their ids at the end of self._ids
        self._int8: Int8Codes | None = None  # of self._stored, made at the first search it serves
        self._int8_shared: Int8Codes | None = None  # the same at one scale, for int8 products
        self._join_lock = threading.Lock()

    @property
    def params(self) -> dict[str, Any]:
        return {"chunk_queries": self.chunk_queries, "chunk_items": self.chunk_items}

    def __getstate__(self) -> dict[str, Any]:  # copies and pickles get a lock of their own
        state = dict(self.__dict__)
        del state["_join_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._join_lock = threading.Lock()

    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        x = np.array(self._vectors(vectors, "vectors"))  # a private copy
        new = self._new_ids(ids, len(x))
        if len(new):
            self._pending.append(x)
            self._ids = np.concatenate([self._ids, new])

    def _consolidated(self) -> tuple[np.ndarray, np.ndarray]:
        """All vectors in id order, and their sorted ids."""
        with self._join_lock:
            if self._pending:
                vectors = np.concatenate([self._stored, *self._pending])
                order = np.argsort(self._ids, kind="stable")
                self._stored = vectors if (np.diff(self._ids) > 0).all() else vectors[order]
                self._ids = self._ids[order]
                self._pending = []
                self._int8 = self._int8_shared = None
            return self._stored, self._ids

    def vectors(self) -> np.ndarray:
        """Every vector added, in id order (the index's own array: not to be written to)."""
        return self._consolidated()[0]

    def _codes(self, shared_scale: bool = False) -> Int8Codes:
        """The int8 codes of the joined vectors, each at its own scale or all at one, made once (by one of the
        threads that ask)."""
        with self._join_lock:
            if shared_scale:
                if self._int8_shared is None:
                    self._int8_shared = Int8Codes.of(self._stored, shared_scale=True)
                return self._int8_shared
            if self._int8 is None:
                self._int8 = Int8Codes.of(self._stored)
            return self._int8

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._vectors(queries, "queries")
        k = self._check_k(k)
        vectors, ids = self._consolidated()
        scores, out_ids = self._padded(len(q), k)
        found = min(k, len(ids))
        products = found > 0 and int8_products_pay(len(q), vectors, found, codes_kept=True)
        if found and not products and 0 < len(q) <= _int8_max_queries(vectors.nbytes):
            scores[:, :found], rows = int8_search(vectors, self._codes(), q, found, torch.get_num_threads())
            out_ids[:, :found] = ids[rows]
        elif found and len(q):
            scores[:, :found], rows = exact_search(vectors, q, found, self.chunk_queries, self.chunk_items,
                                                   int8=products, coded=self._codes(True) if products else None)
            out_ids[:, :found] = ids[rows]
        return scores, out_ids

    def save(self, folder: str | os.PathLike[str]) -> None:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        vectors, ids = self._consolidated()
        save_array(path / "vectors.npy", vectors)
        save_array(path / "ids.npy", ids)
        meta = {"dim": self.dim, "metric": self.metric, "count": len(ids), "params": self.params}
        write_meta(path, self.kind, meta, ["vectors.npy", "ids.npy"])

    @classmethod
    def load(cls, folder: str | os.PathLike[str], verify: bool = True) -> ExactIndex:
        index, count = cls._from_meta(folder, verify)
        index._stored = load_array(Path(folder) / "vectors.npy", np.float32, (count, index.dim), mmap=True)
        index._ids = load_array(Path(folder) / "ids.npy", np.int64, (count,))
        return index

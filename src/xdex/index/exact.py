"""Exact (brute-force) search: chunked matrix products with a top-k merged across item blocks.

The products of several queries are numpy's (the BLAS it ships, OpenBLAS), on as many threads as torch's intra-op
setting: on the AMD EPYC machines we measure on, torch's CPU build multiplies with Intel's MKL at about half
OpenBLAS's rate (a block of 1,024 x 8,192 x 256: 46 against 79 GFLOP/s on one thread; docs/benchmarks.md, "Exact
search at mining sizes").
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from xdex.index.base import Index, Metric
from xdex.index.storage import load_array, save_array, write_meta

CHUNK_QUERIES = 1024
CHUNK_ITEMS = 8192


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


@numba.njit(cache=True, nogil=True)
def _merge_top_k(scores: np.ndarray, offset: int, top_scores: np.ndarray, top_columns: np.ndarray,
                 sizes: np.ndarray) -> None:
    """Merge a block of scores (its columns numbered from ``offset``) into each row's best so far, in place: the
    ``sizes[i]`` entries of ``top_scores[i]`` / ``top_columns[i]``, score descending. The columns are scanned in
    order and an entry takes a place only from a strictly lower score, so among equal scores the lower column
    stays first, within a block and, as blocks come in column order, across them. Once a row holds k entries most
    scores cost one comparison with its k-th."""
    n, width = scores.shape
    k = top_scores.shape[1]
    for i in range(n):
        size = sizes[i]
        for j in range(width):
            s = scores[i, j]
            if size == k and not s > top_scores[i, k - 1]:
                continue
            at = size if size < k else k - 1  # the slot it takes, moved up past every lower score
            while at > 0 and top_scores[i, at - 1] < s:
                top_scores[i, at], top_columns[i, at] = top_scores[i, at - 1], top_columns[i, at - 1]
                at -= 1
            top_scores[i, at], top_columns[i, at] = s, j + offset
            size = min(size + 1, k)
        sizes[i] = size


@numba.njit(cache=True, nogil=True, fastmath=True)
def _row_products(items: np.ndarray, queries: np.ndarray) -> np.ndarray:
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


def exact_search(
    items: np.ndarray, queries: np.ndarray, k: int, chunk_queries: int = CHUNK_QUERIES, chunk_items: int = CHUNK_ITEMS
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of ``items`` by inner product for each query: scores and row positions, best first, ties
    to the lower row.

    Queries go in chunks of ``chunk_queries`` and items in blocks of ``chunk_items``, so the
    extra memory is O(chunk_queries x chunk_items), also for memory-mapped ``items``, which are read
    block by block. Each block's scores are merged into the best so far in one compiled pass
    (:func:`_merge_top_k`). ``k`` must not exceed ``len(items)``.
    """
    scores = np.empty((len(queries), k), dtype=np.float32)
    rows = np.empty((len(queries), k), dtype=np.int64)
    if not 0 <= k <= len(items):
        raise ValueError(f"k must be between 0 and the {len(items)} items, got {k}")
    if k == 0:
        return scores, rows
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    products = blas_threads(torch.get_num_threads()) if len(queries) > 1 else contextlib.nullcontext()
    with products:
        for q0 in range(0, len(queries), chunk_queries):
            q = queries[q0 : q0 + chunk_queries]
            sizes = np.zeros(len(q), np.int64)
            for i0 in range(0, len(items), chunk_items):
                block = np.ascontiguousarray(items[i0 : i0 + chunk_items], dtype=np.float32)
                # a served text: a compiled pass, faster than a BLAS product of one row
                block_scores = _row_products(block, q) if len(q) == 1 else q @ block.T
                _merge_top_k(block_scores, i0, scores[q0 : q0 + len(q)], rows[q0 : q0 + len(q)], sizes)
    return scores, rows


class ExactIndex(Index):
    """Brute-force index: exact top-k, deterministic, ties broken by the lower id.

    Vectors added in several calls are joined (and ordered by id) once, at the next search
    or save, so adding in many small batches costs no repeated copies. Searches may run from
    several threads at once (the join is done by one of them); adding while searching is not safe.
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
            return self._stored, self._ids

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._vectors(queries, "queries")
        k = self._check_k(k)
        vectors, ids = self._consolidated()
        scores, out_ids = self._padded(len(q), k)
        found = min(k, len(ids))
        if found and len(q):
            scores[:, :found], rows = exact_search(vectors, q, found, self.chunk_queries, self.chunk_items)
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

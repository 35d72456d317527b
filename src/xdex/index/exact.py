"""Exact (brute-force) search: chunked matrix products with a top-k merged across item blocks."""

from __future__ import annotations

import operator
import os
import threading
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch

from xdex.index.base import Index, Metric
from xdex.index.storage import load_array, save_array, write_meta

CHUNK_QUERIES = 1024
CHUNK_ITEMS = 8192
FEW_QUERIES = 256  # up to this many queries (a served text, a micro-batch, a chunk of the ranking stage), each
# row's top k is picked in one compiled pass (top_k_few): 0.4 / 1.9 ms against torch's 8 ms for 64 / 256 rows of
# 7,155 scores on a busy 2-core machine; larger chunks (mining) keep torch's parallel top-k


def top_k(scores: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest scores of each row of a CPU tensor and their columns, best first, ties to the lower
    column (numpy arrays).

    ``torch.topk`` may cut anywhere among scores equal to the k-th largest; it is asked for ``k + 1`` items to
    spot such rows, whose cut is then redone in column order. The order within the k is set by numpy: torch's
    parallel sorts of many short rows cost more than the search itself on a busy 2-core machine
    (docs/benchmarks.md, "Exact search at mining sizes").
    """
    values, columns = torch.topk(scores, min(k + 1, scores.shape[1]), dim=1)
    if values.shape[1] > k:
        rows = (values[:, k] == values[:, k - 1]).nonzero()[:, 0]
        columns = columns[:, :k]
        if len(rows):
            columns[rows] = _first_columns(scores[rows], values[rows, k - 1 : k], k)
    ascending = np.sort(columns.numpy(), axis=1)
    return best_first(np.take_along_axis(scores.numpy(), ascending, axis=1), ascending)


def top_k_few(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` of a float32 numpy array in one pass over each row (compiled): the same ``k`` scores and
    columns (all of them where a row is shorter), ties to the lower column, best first. For one row it saves
    ``top_k``'s dozen small calls, which cost more than the pass itself (a served single text); for a few hundred
    rows it is faster than torch's parallel top-k on a busy machine (:data:`FEW_QUERIES`)."""
    return _top_k_rows(np.ascontiguousarray(scores, np.float32), min(k, scores.shape[1]))


@numba.njit(cache=True, nogil=True)
def _top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best (score descending, then column ascending): the columns scanned in order, a sorted
    buffer of the best so far, an entry taking a place only from a strictly lower score."""
    n, width = scores.shape
    top_scores = np.empty((n, k), np.float32)
    top_columns = np.empty((n, k), np.int64)
    for i in range(n):
        size = 0
        for j in range(width):
            s = scores[i, j]
            if size == k and not s > top_scores[i, k - 1]:
                continue
            at = size if size < k else k - 1  # the slot it takes, moved up past every lower score
            while at > 0 and top_scores[i, at - 1] < s:
                top_scores[i, at], top_columns[i, at] = top_scores[i, at - 1], top_columns[i, at - 1]
                at -= 1
            top_scores[i, at], top_columns[i, at] = s, j
            size = min(size + 1, k)
    return top_scores, top_columns


@numba.njit(cache=True, nogil=True, fastmath=True)
def _row_products(items: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``queries @ items.T`` (float32), one item row at a time; the sums in another order than torch's product
    (the scores may differ in the last bits)."""
    out = np.empty((queries.shape[0], items.shape[0]), np.float32)
    for i in range(items.shape[0]):
        for r in range(queries.shape[0]):
            total = np.float32(0.0)
            for j in range(items.shape[1]):
                total += items[i, j] * queries[r, j]
            out[r, i] = total
    return out


def best_first(scores: np.ndarray, rows: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's entries by score, best first, keeping the first ``k`` (all by default); equal scores keep
    their order, so entries given in ascending ``rows`` order break ties by the lower row."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def _first_columns(scores: torch.Tensor, kth: torch.Tensor, k: int) -> torch.Tensor:
    """Columns of the scores above ``kth`` plus the lowest columns equal to it, ``k`` per row, ascending."""
    above = scores > kth
    tied = scores == kth
    room = k - above.sum(dim=1, keepdim=True)
    keep = above | (tied & (tied.cumsum(dim=1) <= room))
    return keep.nonzero()[:, 1].view(-1, k)  # row-major, so columns ascend within a row


def exact_search(
    items: np.ndarray, queries: np.ndarray, k: int, chunk_queries: int = CHUNK_QUERIES, chunk_items: int = CHUNK_ITEMS
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of ``items`` by inner product for each query: scores and row positions.

    Queries go in chunks of ``chunk_queries`` and items in blocks of ``chunk_items``, so the
    extra memory is O(chunk_queries x chunk_items), also for memory-mapped ``items``, which are read
    block by block. Each block's top-k is merged with the best so far; as earlier blocks hold lower
    rows, equal scores keep the lower row. ``k`` must not exceed ``len(items)``.
    """
    scores = np.empty((len(queries), k), dtype=np.float32)
    rows = np.empty((len(queries), k), dtype=np.int64)
    queries = np.require(queries, requirements=["C", "W"])  # torch wraps only writeable arrays
    with torch.inference_mode():
        for q0 in range(0, len(queries), chunk_queries):
            q = torch.from_numpy(queries[q0 : q0 + chunk_queries])
            best_scores, best_rows = np.empty((len(q), 0), dtype=np.float32), np.empty((len(q), 0), dtype=np.int64)
            for i0 in range(0, len(items), chunk_items):
                block = torch.from_numpy(np.require(items[i0 : i0 + chunk_items], requirements=["C", "W"]))
                width = min(k, len(items) - i0)
                if len(q) == 1:  # a served text: a compiled pass, faster than torch's product of one row
                    block_scores, block_rows = top_k_few(_row_products(block.numpy(), q.numpy()), width)
                elif len(q) <= FEW_QUERIES:
                    block_scores, block_rows = top_k_few((q @ block.T).numpy(), width)
                else:
                    block_scores, block_rows = top_k(q @ block.T, width)
                if i0 == 0:
                    best_scores, best_rows = block_scores, block_rows
                else:  # the best so far hold lower rows than this block: first among equal scores
                    best_scores, best_rows = best_first(np.concatenate([best_scores, block_scores], axis=1),
                                                        np.concatenate([best_rows, block_rows + i0], axis=1), k)
            scores[q0 : q0 + len(q)] = best_scores
            rows[q0 : q0 + len(q)] = best_rows
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

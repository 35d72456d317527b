"""Top-k retrieval of labels by inner product of embeddings, and the merge of a ranking with labels searched
exactly beside it (labels added after training)."""

from __future__ import annotations

import numpy as np

from xdex.index.base import Index
from xdex.index.exact import exact_search
from xdex.index.vectors import as_matrix
from xdex.metrics.ranking import Ranking


def retrieve(queries: np.ndarray, labels: np.ndarray | Index, k: int) -> Ranking:
    """The ``k`` labels of highest inner product for each query, ``-1``-padded beyond the labels there are;
    ``labels`` are an index, or vectors searched exactly as they are (:func:`xdex.index.exact.exact_search`: no
    copy, and no int8 codes kept for later searches, as an :class:`~xdex.index.exact.ExactIndex` would keep)."""
    if isinstance(labels, Index):
        scores, ids = labels.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        return Ranking(ids.astype(np.int64), scores.astype(np.float32))
    vectors = as_matrix(labels, "labels")
    q = as_matrix(queries, "queries", vectors.shape[1])
    scores, ids = Index._padded(len(q), Index._check_k(k))
    found = min(k, len(vectors))
    if found and len(q):
        scores[:, :found], ids[:, :found] = exact_search(vectors, q, found)
    return Ranking(ids, scores)


def with_added(ranking: Ranking, queries: np.ndarray, vectors: np.ndarray, first_row: int, k: int) -> Ranking:
    """``ranking`` of the trained labels (``k`` per row, ``-1``-padded) merged with an exact inner-product search
    of ``queries`` over ``vectors``, those of the added labels, whose rows start at ``first_row``: the ``k`` best
    of both, ties to the lower row."""
    if not len(vectors) or not len(queries):
        return ranking
    scores, rows = exact_search(vectors, np.ascontiguousarray(queries, dtype=np.float32), min(k, len(vectors)))
    all_scores = np.concatenate([ranking.scores, scores], axis=1)
    all_rows = np.concatenate([ranking.indices, rows + first_row], axis=1)
    order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]  # trained rows first among equal scores
    return Ranking(np.take_along_axis(all_rows, order, axis=1), np.take_along_axis(all_scores, order, axis=1))

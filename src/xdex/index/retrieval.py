"""Top-k retrieval of labels by inner product of embeddings."""

from __future__ import annotations

import numpy as np

from xdex.index.base import Index
from xdex.index.exact import ExactIndex
from xdex.metrics.ranking import Ranking


def retrieve(queries: np.ndarray, labels: np.ndarray | Index, k: int) -> Ranking:
    """The ``k`` labels of highest inner product for each query; ``labels`` are vectors or an index."""
    if isinstance(labels, np.ndarray):
        index = ExactIndex(labels.shape[1], metric="ip")
        index.add(np.ascontiguousarray(labels, dtype=np.float32))
        labels = index
    scores, ids = labels.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return Ranking(ids.astype(np.int64), scores.astype(np.float32))

"""From a cluster id per point to the points of each cluster."""

from __future__ import annotations

import operator

import numpy as np


def clusters_to_lists(assignments: np.ndarray, num_clusters: int | None = None) -> list[np.ndarray]:
    """Ascending point indices of clusters ``0 .. K-1``, ``K`` = ``num_clusters`` or the largest id + 1."""
    a = np.asarray(assignments)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"assignments must be a 1-D array of integer cluster ids, got {a.dtype} {a.shape}")
    if a.size and a.min() < 0:
        raise ValueError(f"cluster ids must be non-negative, got {a.min()}")
    largest = int(a.max()) + 1 if a.size else 0
    k = largest if num_clusters is None else operator.index(num_clusters)
    if k < largest:
        raise ValueError(f"cluster id {largest - 1} is not below num_clusters={k}")
    if k == 0:
        return []
    counts = np.bincount(a.astype(np.int64), minlength=k)
    return np.split(np.argsort(a, kind="stable"), np.cumsum(counts)[:-1])

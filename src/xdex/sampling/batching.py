"""Negative-mining-aware query batches (NGAME): clusters of similar queries form a batch."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClusterSchedule:
    """Cluster size used at the r-th refresh: ``initial * growth**r``, capped at ``maximum``.

    Larger clusters gather more similar queries, hence harder in-batch negatives, as training
    progresses (NGAME's curriculum).
    """

    initial: int = 8
    growth: float = 2.0
    maximum: int = 64

    def size(self, refresh: int) -> int:
        return int(min(self.maximum, max(1, round(self.initial * self.growth**refresh))))

    def num_clusters(self, n_queries: int, refresh: int) -> int:
        """A power of two (what balanced 2-means produces) giving clusters of about ``size``."""
        return 2 ** max(0, math.ceil(math.log2(max(1, n_queries / self.size(refresh)))))


class QueryBatcher:
    """Splits the training queries into batches for one epoch.

    Without clusters the order is a random permutation; with clusters (lists of query ids)
    the clusters are shuffled and concatenated, then cut into batches of ``batch_size``, so
    each batch holds a few whole clusters of similar queries. The order of epoch ``e`` depends
    only on (seed, e), so an interrupted run resumes to the same batches.
    """

    def __init__(self, n_queries: int, batch_size: int, seed: int = 0, drop_last: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.n_queries = n_queries
        self.batch_size = batch_size
        self.seed = seed
        self.drop_last = drop_last

    def rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch])

    def epoch(self, epoch: int, clusters: list[np.ndarray] | None = None) -> list[np.ndarray]:
        rng = self.rng(epoch)
        if clusters is None:
            order = rng.permutation(self.n_queries)
        else:
            shuffled = [rng.permutation(clusters[c]) for c in rng.permutation(len(clusters))]
            order = np.concatenate(shuffled) if shuffled else np.zeros(0, np.int64)
        n_full = len(order) // self.batch_size
        cut = n_full * self.batch_size if self.drop_last else len(order)
        return [order[i : i + self.batch_size] for i in range(0, cut, self.batch_size)]

    def __len__(self) -> int:
        full, rest = divmod(self.n_queries, self.batch_size)
        return full + (0 if self.drop_last or rest == 0 else 1)

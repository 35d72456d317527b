"""Label pools and positive masks (UniDEC Sec. 3.1, Fig. 2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from xdex.sampling.negatives import HardNegatives


@dataclass
class Batch:
    """``query_ids`` [B], ``label_ids`` [P] (sorted, unique), ``positives`` bool [B, P]."""

    query_ids: np.ndarray
    label_ids: np.ndarray
    positives: np.ndarray

    @property
    def avg_positives_in_pool(self) -> float:
        """Avg(|P_i^B|): positives per query present in the pool (UniDEC Table 6)."""
        return float(self.positives.sum(axis=1).mean()) if len(self.query_ids) else 0.0


def positives_mask(labels: sp.csr_matrix, query_ids: np.ndarray, pool_ids: np.ndarray) -> np.ndarray:
    """M[i, j] = label ``pool_ids[j]`` is a positive of query ``query_ids[i]``; ``pool_ids`` sorted."""
    sub = labels[query_ids]
    rows = np.repeat(np.arange(len(query_ids)), np.diff(sub.indptr))
    cols = sub.indices
    pos = np.searchsorted(pool_ids, cols)
    pos_clipped = np.minimum(pos, len(pool_ids) - 1)
    hit = (pos < len(pool_ids)) & (pool_ids[pos_clipped] == cols) if len(pool_ids) else np.zeros(0, bool)
    mask = np.zeros((len(query_ids), len(pool_ids)), dtype=bool)
    mask[rows[hit], pos[hit]] = True
    return mask


def sample_positives(
    labels: sp.csr_matrix, query_ids: np.ndarray, beta: int, rng: np.random.Generator
) -> np.ndarray:
    """Up to ``beta`` positives per query, uniformly without replacement (β = 1 is POL, β > 1 PSL).

    Returns the concatenated sampled label ids (queries without labels contribute none).
    """
    if beta < 1:
        raise ValueError(f"beta must be >= 1, got {beta}")
    sub = labels[query_ids]
    counts = np.diff(sub.indptr)
    total = int(counts.sum())
    # random keys sorted within each row; the first beta of a row are a uniform sample of it
    row = np.repeat(np.arange(len(query_ids)), counts)
    order = np.lexsort((rng.random(total), row))
    rank = np.arange(total) - np.repeat(sub.indptr[:-1], counts)
    flat = sub.indices
    return flat[order][rank < beta]


def build_batch(
    labels: sp.csr_matrix,
    query_ids: np.ndarray,
    rng: np.random.Generator,
    beta: int = 1,
    negatives: np.ndarray | None = None,
) -> Batch:
    """Label pool L_B = ∪_i (P̂_i ∪ Ĥ_i) and the mask of P_i^B = P_i ∩ L_B (extra positives included).

    ``negatives`` are hard negatives already sampled for these queries (any shape), or None for
    in-batch negatives only.
    """
    query_ids = np.asarray(query_ids, dtype=np.int64)
    pool = sample_positives(labels, query_ids, beta, rng)
    if negatives is not None:
        neg = np.asarray(negatives).ravel()
        pool = np.concatenate([pool, neg[neg >= 0]])
    pool_ids = np.unique(pool).astype(np.int64)
    return Batch(query_ids, pool_ids, positives_mask(labels, query_ids, pool_ids))


def seeded_batch(
    labels: sp.csr_matrix,
    query_ids: np.ndarray,
    key: list[int],
    beta: int = 1,
    shortlists: HardNegatives | None = None,
    eta: int = 0,
) -> Batch:
    """:func:`build_batch` with η hard negatives per query drawn from ``shortlists`` (none when η = 0 or
    there are no shortlists); all its randomness comes from ``key``, e.g. (seed, epoch, batch)."""
    rng = np.random.default_rng(key)
    negatives = shortlists.sample(query_ids, eta, rng) if shortlists is not None and eta > 0 else None
    return build_batch(labels, query_ids, rng, beta=beta, negatives=negatives)


class PoolStats:
    """An epoch's label pools: average pool size |L_B| and Avg(|P_i^B|) (UniDEC Table 6)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._sizes: list[int] = []
        self._positives: list[float] = []

    def add(self, batch: Batch) -> None:
        self._sizes.append(len(batch.label_ids))
        self._positives.append(batch.avg_positives_in_pool)

    def summary(self) -> dict[str, float]:
        """``avg_pool_size`` and ``avg_positives_in_pool`` (empty before the first batch)."""
        if not self._sizes:
            return {}
        return {"avg_pool_size": float(np.mean(self._sizes)), "avg_positives_in_pool": float(np.mean(self._positives))}

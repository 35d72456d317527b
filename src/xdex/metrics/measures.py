"""Ranking metrics at k: P@k, nDCG@k, PSP@k, PSnDCG@k and R@k, as defined by pyxclib.

With ``y_i`` the binarised ground truth of document ``i`` (relevance > 0), ``r_ij`` its ``j``-th
predicted label, ``q`` the inverse propensities and ``N`` the number of documents (OAK, Appendix D):

* P@k      = mean_i (1/k) sum_{j<=k} y_i[r_ij]
* nDCG@k   = mean_i DCG@k_i / IDCG@k_i, DCG@k_i = sum_{j<=k} y_i[r_ij] / log2(j+1),
  IDCG@k_i = sum_{j=1}^{min(k, |y_i|)} 1 / log2(j+1)
* PSP@k    = [mean_i (1/k) sum_{j<=k} y_i[r_ij] q_{r_ij}] / [mean_i (1/k) sum of the min(k, |y_i|)
  largest q of y_i's labels]  (a ratio of means; the denominator is the best achievable value)
* PSnDCG@k = [mean_i PSDCG@k_i / IDCG@k_i] / [mean_i best PSDCG@k_i / IDCG@k_i], with
  PSDCG@k_i = sum_{j<=k} y_i[r_ij] q_{r_ij} / log2(j+1) and its best value from y_i's largest q
* R@k      = mean_i |top-k of i and y_i| / |y_i|

Documents without labels add 0 to every numerator (and denominator) and count in every mean.
Values are returned in percent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numba
import numpy as np
import scipy.sparse as sp

from xdex.metrics.ranking import Ranking, contains, positive_csr
from xdex.sparse import SparseMatrix

logger = logging.getLogger(__name__)

_CHUNKS = 64  # fixed so that the floating-point sums do not depend on the number of threads
# rows of the accumulator: P, nDCG, R, PSP numerator, PSP best, PSnDCG numerator, PSnDCG best
_P, _NDCG, _R, _PSP, _PSP_BEST, _PSNDCG, _PSNDCG_BEST = range(7)


def compute_metrics(
    ranking: Ranking,
    truth: SparseMatrix,
    ks: Iterable[int] = (1, 3, 5),
    inv_propensity: np.ndarray | None = None,
    recall_ks: Iterable[int] | None = None,
) -> dict[str, float]:
    """Metrics in percent: ``P@k``, ``nDCG@k`` (and ``PSP@k``, ``PSnDCG@k`` when ``inv_propensity``
    is given) for each k in ``ks``, then ``R@k`` for each k in ``recall_ks`` (default ``ks``).

    ``truth`` is the ``N x L`` ground truth; ``inv_propensity`` the ``L`` values ``q_l = 1/p_l``.
    Positions beyond the ranking's width count as misses.
    """
    ks = _check_ks(ks, "ks")
    recall_ks = ks if recall_ks is None else _check_ks(recall_ks, "recall_ks")
    y = positive_csr(truth)
    n, n_labels = y.shape
    if ranking.n_rows != n:
        raise ValueError(f"the ranking has {ranking.n_rows} rows but the ground truth has {n}")
    if n == 0:
        raise ValueError("there are no documents to evaluate")
    if ranking.indices.size and int(ranking.indices.max()) >= n_labels:
        raise ValueError(f"the ranking has label id {int(ranking.indices.max())} but there are {n_labels} labels")
    q = np.zeros(n_labels) if inv_propensity is None else np.asarray(inv_propensity, dtype=np.float64)
    if q.shape != (n_labels,):
        raise ValueError(f"inv_propensity has shape {q.shape}, expected ({n_labels},)")
    all_ks = np.array(sorted(set(ks) | set(recall_ks)), dtype=np.int64)
    if all_ks[-1] > ranking.k:
        logger.warning("the ranking has %d predictions per document; positions beyond count as misses up to k=%d",
                       ranking.k, all_ks[-1])
    partial = np.zeros((_CHUNKS, 7, len(all_ks)))
    discount = 1.0 / np.log2(np.arange(2, all_ks[-1] + 2))
    _accumulate(ranking.indices, y.indptr.astype(np.int64), y.indices.astype(np.int64), q, _best_q(y, q), all_ks,
                discount, partial)
    sums = partial.sum(axis=0)
    column = {int(k): c for c, k in enumerate(all_ks)}
    out: dict[str, float] = {}
    for name, row in (("P", _P), ("nDCG", _NDCG)):
        out.update({f"{name}@{k}": float(100.0 * sums[row, column[k]] / n) for k in ks})
    if inv_propensity is not None:
        for name, num, best in (("PSP", _PSP, _PSP_BEST), ("PSnDCG", _PSNDCG, _PSNDCG_BEST)):
            out.update({f"{name}@{k}": _ratio(sums[num, column[k]], sums[best, column[k]]) for k in ks})
    out.update({f"R@{k}": float(100.0 * sums[_R, column[k]] / n) for k in recall_ks})
    return out


def hit_mask(ranking: Ranking, truth: SparseMatrix, k: int) -> np.ndarray:
    """Boolean ``N x min(k, K)`` array: whether the ``j``-th predicted label of row ``i`` is relevant."""
    y = positive_csr(truth)
    if ranking.n_rows != y.shape[0]:
        raise ValueError(f"the ranking has {ranking.n_rows} rows but the ground truth has {y.shape[0]}")
    return _hits(ranking.indices[:, :k], y.indptr.astype(np.int64), y.indices.astype(np.int64))


def _ratio(numerator: float, best: float) -> float:
    """Percent of the best achievable value; 0 when nothing is achievable (no document has labels)."""
    return float(100.0 * numerator / best) if best > 0 else 0.0


def _check_ks(ks: Iterable[int], name: str) -> list[int]:
    values = sorted({int(k) for k in ks})
    if not values or values[0] < 1:
        raise ValueError(f"{name} must be a non-empty list of positive integers, got {list(ks)}")
    return values


@numba.njit(cache=True, parallel=True)
def _hits(indices, indptr, labels):
    out = np.zeros(indices.shape, dtype=np.bool_)
    for i in numba.prange(indices.shape[0]):
        row = labels[indptr[i]:indptr[i + 1]]
        for j in range(indices.shape[1]):
            out[i, j] = indices[i, j] >= 0 and contains(row, indices[i, j])
    return out


def _best_q(y: sp.csr_matrix, q: np.ndarray) -> np.ndarray:
    """q of each row's true labels, largest first within the row (aligned with ``y.indices``)."""
    rows = np.repeat(np.arange(y.shape[0]), np.diff(y.indptr))
    values = q[y.indices]
    return values[np.lexsort((-values, rows))]


@numba.njit(cache=True, parallel=True)
def _accumulate(indices, indptr, labels, q, best_q, ks, discount, partial):
    """Add to ``partial[chunk, term, k]`` the seven per-document terms (see the module docstring)."""
    n, width = indices.shape
    chunks = partial.shape[0]
    k_max = ks[-1]
    size = (n + chunks - 1) // chunks
    for c in numba.prange(chunks):
        acc = partial[c]
        for i in range(c * size, min(n, (c + 1) * size)):
            start = indptr[i]
            row = labels[start:indptr[i + 1]]
            n_true = row.shape[0]
            if n_true == 0:
                continue  # adds 0 everywhere
            hits = dcg = psp = psdcg = ideal = psp_best = psdcg_best = 0.0
            m = 0
            for j in range(k_max):
                if j < width:
                    label = indices[i, j]
                    if label >= 0 and contains(row, label):
                        hits += 1.0
                        dcg += discount[j]
                        psp += q[label]
                        psdcg += q[label] * discount[j]
                if j < n_true:
                    ideal += discount[j]
                    psp_best += best_q[start + j]
                    psdcg_best += best_q[start + j] * discount[j]
                if j + 1 == ks[m]:
                    k = j + 1.0
                    acc[_P, m] += hits / k
                    acc[_NDCG, m] += dcg / ideal
                    acc[_R, m] += hits / n_true
                    acc[_PSP, m] += psp / k
                    acc[_PSP_BEST, m] += psp_best / k
                    acc[_PSNDCG, m] += psdcg / ideal
                    acc[_PSNDCG_BEST, m] += psdcg_best / ideal
                    m += 1

"""Recall of approximate neighbours against exact ones."""

from __future__ import annotations

import operator

import numpy as np


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, k: int) -> float:
    """Mean over queries of ``|A_k ∩ E_k| / |E_k|``, with ``A_k``, ``E_k`` the first ``k`` ids of a row.

    Padding ids (``-1``) do not count; queries whose exact row is all padding are skipped.
    """
    k = operator.index(k)
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2 or len(approx) != len(exact):
        raise ValueError(f"approx_ids {approx.shape} and exact_ids {exact.shape} must be [q, k] with the same q")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k must be between 1 and the number of ids per row, got {k}")
    approx, exact = approx[:, :k], exact[:, :k]
    found = np.zeros(len(exact), dtype=np.int64)
    rows = max(1, (1 << 22) // (k * k))  # bounds the [rows, k, k] comparison
    for r0 in range(0, len(exact), rows):
        a, e = approx[r0 : r0 + rows], exact[r0 : r0 + rows]
        hit = (e[:, :, None] == a[:, None, :]).any(axis=2) & (e >= 0)
        found[r0 : r0 + rows] = hit.sum(axis=1)
    relevant = (exact >= 0).sum(axis=1)
    if not relevant.any():
        raise ValueError("exact_ids hold no neighbours (all padding)")
    return float(np.mean(found[relevant > 0] / relevant[relevant > 0]))

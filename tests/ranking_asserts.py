"""Ranking comparisons that do not depend on float rounding order.

Two computations of the same scores (in memory and memory-mapped, one batch size and another, a blocked
and a plain matrix product) may differ in the last bits, so labels whose scores tie up to rounding can come
out in either order, and the one cut at position k may differ. These checks accept exactly that and
nothing else: equal scores position by position, a label's score the same wherever it appears, and a label
missing from one ranking only when it ties with that ranking's last kept score.
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-5
ATOL = 1e-6


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    return a == b or abs(a - b) <= atol + rtol * abs(b)  # equal: also the -inf of padding


def assert_same_ranking(a_indices, a_scores, b_indices, b_scores, rtol: float = RTOL, atol: float = ATOL) -> None:
    """The rankings ``a`` and ``b`` (rows of label ids and scores, best first) are equal up to ties."""
    a_indices, b_indices = np.asarray(a_indices), np.asarray(b_indices)
    a_scores, b_scores = np.asarray(a_scores, np.float64), np.asarray(b_scores, np.float64)
    assert a_indices.shape == b_indices.shape == a_scores.shape == b_scores.shape
    np.testing.assert_allclose(a_scores, b_scores, rtol=rtol, atol=atol)  # position by position
    for row in range(len(a_indices)):
        _check_row(row, a_indices[row], a_scores[row], b_indices[row], b_scores[row], rtol, atol)
        _check_row(row, b_indices[row], b_scores[row], a_indices[row], a_scores[row], rtol, atol)


def _check_row(row: int, ai, asc, bi, bsc, rtol: float, atol: float) -> None:
    """Every label of ``a`` has its score in ``b``, or ties with ``b``'s last kept score."""
    b_score_of = dict(zip(bi.tolist(), bsc.tolist(), strict=False))
    for label, score in zip(ai.tolist(), asc.tolist(), strict=False):
        if label in b_score_of:
            assert _close(score, b_score_of[label], rtol, atol), (row, label, score, b_score_of[label])
        else:  # cut at k in b: only a label tied with b's last kept score
            assert _close(score, float(bsc[-1]), rtol, atol), f"row {row}: label {label} ({score}) missing"

def assert_is_top_k(scores, indices, top_scores, rtol: float = RTOL, atol: float = ATOL) -> None:
    """``indices`` / ``top_scores`` (best first) are a top-k of the full score matrix ``scores`` up to ties."""
    scores = np.asarray(scores, np.float64)
    indices, top_scores = np.asarray(indices), np.asarray(top_scores, np.float64)
    k = indices.shape[1]
    expected = -np.sort(-scores, axis=1)[:, :k]
    np.testing.assert_allclose(top_scores, expected, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.take_along_axis(scores, indices, axis=1), top_scores, rtol=rtol, atol=atol)
    for row in indices:
        assert len(set(row.tolist())) == k, "a label appears twice"

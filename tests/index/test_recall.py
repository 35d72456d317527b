"""recall_at_k on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.index import recall_at_k


def test_hand_computed_recall():
    approx = np.array([[1, 2, 3], [4, 5, 6]])
    exact = np.array([[1, 2, 9], [4, -1, -1]])
    # row 0: {1, 2} of {1, 2, 9} -> 2/3; row 1: {4} of {4} -> 1; mean 5/6
    assert recall_at_k(approx, exact, 3) == pytest.approx(5 / 6)
    # k = 1: row 0 has 1 of {1}, row 1 has 4 of {4}
    assert recall_at_k(approx, exact, 1) == 1.0


def test_order_within_the_first_k_does_not_matter_and_rows_of_padding_are_skipped():
    approx = np.array([[3, 2, 1, 8], [7, 7, 7, 7]])
    exact = np.array([[1, 2, 3, 4], [-1, -1, -1, -1]])
    assert recall_at_k(approx, exact, 3) == 1.0
    assert recall_at_k(approx, exact, 4) == pytest.approx(3 / 4)


def test_bad_input():
    with pytest.raises(ValueError, match="same q"):
        recall_at_k(np.zeros((2, 3)), np.zeros((3, 3)), 1)
    with pytest.raises(ValueError, match="k must be between"):
        recall_at_k(np.zeros((2, 3)), np.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match="no neighbours"):
        recall_at_k(np.zeros((1, 2)), -np.ones((1, 2)), 2)

"""clusters_to_lists on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.cluster import clusters_to_lists


def test_members_by_hand():
    lists = clusters_to_lists(np.array([2, 0, 2, 1, 0]))
    assert [m.tolist() for m in lists] == [[1, 4], [3], [0, 2]]
    lists = clusters_to_lists(np.array([2, 0, 2, 1, 0]), num_clusters=4)
    assert [m.tolist() for m in lists] == [[1, 4], [3], [0, 2], []]
    assert clusters_to_lists(np.array([], dtype=np.int64)) == []


def test_bad_assignments():
    with pytest.raises(ValueError, match="non-negative"):
        clusters_to_lists(np.array([0, -1]))
    with pytest.raises(ValueError, match="integer cluster ids"):
        clusters_to_lists(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="not below num_clusters=2"):
        clusters_to_lists(np.array([0, 2]), num_clusters=2)

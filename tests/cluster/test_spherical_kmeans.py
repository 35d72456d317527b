"""kmeans: hand-computed clusterings on the circle, empty clusters, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.cluster import kmeans


def on_circle(degrees: list[float], scale: float = 1.0) -> np.ndarray:
    a = np.deg2rad(degrees)
    return (scale * np.stack([np.cos(a), np.sin(a)], axis=1)).astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_two_arcs(seed):
    # e.g. start at 0 and 10 degrees: 80 and 90 join 10; the centroid moves to about 60 degrees,
    # where 10 degrees is now closer to 0 (cos 10 > cos 50): the arcs {0, 10} and {80, 90} result
    x = on_circle([0, 10, 80, 90], scale=3.0)  # lengths do not matter: similarity is cosine
    labels = kmeans(x, 2, seed=seed)
    assert labels[0] == labels[1] != labels[2] == labels[3]


def test_each_point_goes_to_its_most_similar_centroid_at_convergence():
    x = np.random.default_rng(0).standard_normal((300, 5)).astype(np.float32)
    labels = kmeans(x, 6, seed=1, iters=100)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    sums = np.stack([unit[labels == j].sum(axis=0) for j in range(6)])
    centroids = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    np.testing.assert_array_equal(labels, np.argmax(unit @ centroids.T, axis=1))


@pytest.mark.parametrize("seed", range(6))
def test_duplicate_starts_leave_an_empty_cluster_without_failing(seed):
    # three copies of (1, 0) and one (0, 1), k = 3: at least two starting centroids coincide,
    # ties go to the lower centroid, and the emptied centroid keeps its place
    x = np.array([[1, 0], [1, 0], [1, 0], [0, 1]], dtype=np.float32)
    labels = kmeans(x, 3, seed=seed)
    assert labels[0] == labels[1] == labels[2] != labels[3]
    assert labels.min() >= 0 and labels.max() < 3


def test_deterministic_for_a_seed():
    x = np.random.default_rng(2).standard_normal((400, 6)).astype(np.float32)
    np.testing.assert_array_equal(kmeans(x, 10, seed=4), kmeans(x, 10, seed=4))


def test_bad_arguments():
    x = np.ones((5, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="k must be between 1 and the number of embeddings"):
        kmeans(x, 6)
    with pytest.raises(ValueError, match="iters"):
        kmeans(x, 2, iters=0)
    with pytest.raises(ValueError, match="embeddings must be a 2-D array"):
        kmeans(np.ones(5), 2)

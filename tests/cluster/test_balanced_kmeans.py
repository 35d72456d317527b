"""balanced_kmeans: hand-computed splits, balance at every level, blob recovery, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.cluster import balanced_kmeans


def assert_balanced_at_every_level(labels: np.ndarray, num_clusters: int) -> None:
    """Cluster ``i`` splits into ``2i`` and ``2i + 1``: at level j every node holds floor or ceil of n / 2**j."""
    n = len(labels)
    depth = num_clusters.bit_length() - 1
    for level in range(depth + 1):
        sizes = np.bincount(labels >> (depth - level), minlength=2**level)
        assert len(sizes) == 2**level
        assert set(sizes.tolist()) <= {n // 2**level, -(-n // 2**level)}


def test_hand_computed_two_groups():
    x = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    for seed in range(6):  # whichever two points start as centroids, the groups come out
        labels = balanced_kmeans(x, num_clusters=2, seed=seed)
        assert labels[0] == labels[1] != labels[2] == labels[3]


@pytest.mark.parametrize("n", [1000, 1024, 1001, 37])
@pytest.mark.parametrize("num_clusters", [1, 2, 4, 8, 32])
def test_sizes_differ_by_at_most_one_at_every_split(n, num_clusters):
    x = np.random.default_rng(n).standard_normal((n, 6)).astype(np.float32)
    labels = balanced_kmeans(x, num_clusters=num_clusters, seed=0)
    assert labels.dtype == np.int64 and labels.min() == 0 and labels.max() == num_clusters - 1
    assert_balanced_at_every_level(labels, num_clusters)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300), dim=st.integers(1, 5), log_k=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_property_balance(n, dim, log_k, seed):
    num_clusters = 2 ** min(log_k, n.bit_length() - 1)
    x = np.random.default_rng(seed).integers(-2, 3, size=(n, dim)).astype(np.float32)  # duplicates, zeros
    labels = balanced_kmeans(x, num_clusters=num_clusters, seed=seed, iters=3)
    assert_balanced_at_every_level(labels, num_clusters)


def test_cluster_size_picks_the_fewest_clusters_that_fit():
    x = np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32)
    labels = balanced_kmeans(x, cluster_size=16, seed=0)
    # 100 / 4 = 25 > 16, 100 / 8 = 12.5 <= 16: 8 clusters of 12 or 13 points
    assert sorted(np.bincount(labels).tolist()) == [12, 12, 12, 12, 13, 13, 13, 13]
    assert (balanced_kmeans(x, cluster_size=100, seed=0) == 0).all()


@pytest.mark.parametrize("seed", range(5))
def test_well_separated_blobs_are_recovered(seed):
    rng = np.random.default_rng(100 + seed)
    # four blobs of 50 points in two well-separated pairs: directions e0, e0+e1 and e2, e2+e3
    centres = np.array([[4, 0, 0, 0], [4, 2, 0, 0], [0, 0, 4, 0], [0, 0, 4, 2]], dtype=np.float32)
    truth = np.repeat(np.arange(4), 50)
    x = centres[truth] + 0.1 * rng.standard_normal((200, 4)).astype(np.float32)
    order = rng.permutation(200)
    labels = balanced_kmeans(x[order], num_clusters=4, seed=seed)
    truth = truth[order]
    for blob in range(4):
        assert len(set(labels[truth == blob].tolist())) == 1
    assert len(set(labels.tolist())) == 4
    # the first split separates the pairs: clusters {0, 1} and {2, 3} share a parent
    assert len(set((labels[truth < 2] >> 1).tolist())) == 1 and len(set((labels[truth >= 2] >> 1).tolist())) == 1


def test_deterministic_for_a_seed():
    x = np.random.default_rng(5).standard_normal((500, 8)).astype(np.float32)
    first = balanced_kmeans(x, num_clusters=16, seed=7)
    np.testing.assert_array_equal(first, balanced_kmeans(x, num_clusters=16, seed=7))
    np.testing.assert_array_equal(first, balanced_kmeans(x.astype(np.float64), num_clusters=16, seed=7))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"num_clusters": 4, "cluster_size": 2}, "exactly one of"),
        ({"num_clusters": 6}, "power of two"),
        ({"num_clusters": 16}, "exceeds the number of embeddings"),
        ({"cluster_size": 0}, "positive"),
        ({"cluster_size": 1}, "needs 16 clusters"),
        ({"num_clusters": 2, "iters": 0}, "iters"),
    ],
)
def test_bad_arguments(kwargs, message):
    x = np.ones((10, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        balanced_kmeans(x, **kwargs)


def test_bad_embeddings():
    with pytest.raises(ValueError, match="embeddings is empty"):
        balanced_kmeans(np.empty((0, 3)), num_clusters=1)
    with pytest.raises(ValueError, match="embeddings row 2 holds NaN"):
        balanced_kmeans(np.array([[1.0], [2.0], [np.inf]]), num_clusters=2)

"""cluster_labels: head label partitioning, balance, centroids by hand, errors; clusters_for_ratio."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.cluster import balanced_kmeans
from xdex.cluster.label_clusters import cluster_labels, clusters_for_ratio, label_centroids


def random_problem(n_docs: int, n_labels: int, dim: int, density: float, seed: int):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_labels, dim)).astype(np.float32)
    y = sp.random(n_docs, n_labels, density=density, format="csr", random_state=seed, dtype=np.float32)
    y.data[:] = 1
    x = rng.standard_normal((n_docs, dim)).astype(np.float32)
    return z, y, x


@pytest.mark.parametrize("method", ["balanced", "centroids"])
@pytest.mark.parametrize(("n_labels", "k"), [(100, 8), (37, 4), (64, 64), (50, 1)])
def test_balanced_methods_give_sizes_within_one(method, n_labels, k):
    z, y, x = random_problem(60, n_labels, 5, 0.05, seed=n_labels)
    ids = cluster_labels(z, y, k, method=method, doc_embeddings=x, seed=3)
    assert ids.dtype == np.int64 and ids.shape == (n_labels,)
    sizes = np.bincount(ids, minlength=k)
    assert len(sizes) == k and set(sizes.tolist()) <= {n_labels // k, -(-n_labels // k)}


def test_kmeans_method_uses_k_ids():
    z, y, _ = random_problem(40, 90, 4, 0.05, seed=1)
    ids = cluster_labels(z, y, 16, method="kmeans", seed=0)
    assert ids.min() >= 0 and ids.max() < 16


def test_head_label_partitioning_by_hand():
    # column counts: label 0 -> 3, label 1 -> 1, label 2 -> 2, label 3 -> 0, label 4 -> 3, labels 5..9 -> 0
    rows = [0, 1, 2, 0, 1, 3, 0, 2, 3]
    cols = [0, 0, 0, 1, 2, 2, 4, 4, 4]
    y = sp.csr_matrix((np.ones(9), (rows, cols)), shape=(4, 10))
    z = np.random.default_rng(0).standard_normal((10, 3))
    ids = cluster_labels(z, y, num_clusters=8, head_threshold=2)
    # K̂ = 3 head labels (0, 2, 4) get ids 0, 1, 2 in label order; the other 7 labels would share 8 - 3 = 5
    # clusters, made from 8 balanced ones, which 7 labels cannot fill: they share the 4 below, ids 3..6
    assert ids[[0, 2, 4]].tolist() == [0, 1, 2]
    tail = ids[[1, 3, 5, 6, 7, 8, 9]]
    assert set(tail.tolist()) == {3, 4, 5, 6}
    assert sorted(np.bincount(tail - 3).tolist()) == [1, 2, 2, 2]


def test_the_other_labels_get_the_k_minus_k_hat_clusters_left():
    # label 0 and label 1 have 2 training points (head labels at 2), labels 2..9 none: K = 8, K̂ = 2, and the
    # 8 other labels share 8 - 2 = 6 clusters: 8 balanced clusters of one label, the first 2 sibling pairs merged
    y = sp.csr_matrix((np.ones(4), ([0, 1, 0, 1], [0, 0, 1, 1])), shape=(2, 10))
    z = np.random.default_rng(1).standard_normal((10, 3))
    ids = cluster_labels(z, y, num_clusters=8, head_threshold=2)
    assert ids[:2].tolist() == [0, 1]
    assert sorted(np.bincount(ids[2:] - 2).tolist()) == [1, 1, 1, 1, 2, 2]
    balanced = balanced_kmeans(z[2:], num_clusters=8)
    merged = np.where(balanced < 4, balanced // 2, balanced - 2)  # pairs (0, 1) and (2, 3) become 0 and 1
    np.testing.assert_array_equal(ids[2:] - 2, merged)


@settings(max_examples=25, deadline=None)
@given(n_labels=st.integers(4, 80), log_k=st.integers(1, 6), threshold=st.integers(1, 6),
       method=st.sampled_from(["balanced", "kmeans", "centroids"]), seed=st.integers(0, 1000))
def test_property_head_labels_have_private_clusters(n_labels, log_k, threshold, method, seed):
    k = 2 ** min(log_k, n_labels.bit_length() - 1)
    z, y, x = random_problem(30, n_labels, 3, 0.1, seed=seed)
    head = np.asarray((y != 0).sum(axis=0)).ravel() >= threshold
    if head.sum() >= k:
        with pytest.raises(ValueError, match="raise head_threshold or num_clusters"):
            cluster_labels(z, y, k, head_threshold=threshold, method=method, doc_embeddings=x, seed=seed)
        return
    ids = cluster_labels(z, y, k, head_threshold=threshold, method=method, doc_embeddings=x, seed=seed)
    n_head = int(head.sum())
    np.testing.assert_array_equal(ids[head], np.arange(n_head))
    n_tail, target = int((~head).sum()), k - n_head
    power = 1 << (target - 1).bit_length()
    if method == "kmeans":  # spherical k-means into K - K̂ clusters may leave an id unused
        assert ids[~head].min() >= n_head and ids[~head].max() < k
    elif power <= n_tail:  # K - K̂ clusters: balanced ones, some pairs of siblings merged
        sizes = np.bincount(ids[~head] - n_head)
        assert len(sizes) == target and sizes.min() >= n_tail // power and sizes.max() <= 2 * -(-n_tail // power)
    else:  # too few labels for the next power of two: the power of two below K - K̂
        sizes = np.bincount(ids[~head] - n_head)
        assert len(sizes) == 1 << (target.bit_length() - 1) and sizes.max() - sizes.min() <= 1


def test_label_centroids_by_hand():
    # docs x0 = (1, 0), x1 = (0, 2), x2 = (3, 4); label 0 <- {x0, x1}, label 1 <- {x2}, label 2 <- none
    y = sp.csr_matrix(np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float32))
    x = np.array([[1, 0], [0, 2], [3, 4]], dtype=np.float32)
    fallback = np.array([[9, 9], [9, 9], [0, -5]], dtype=np.float32)
    c = label_centroids(y, x, fallback)
    # label 0: mean (0.5, 1) -> (1, 2) / sqrt 5; label 1: (0.6, 0.8); label 2 falls back to N(0, -5) = (0, -1)
    expected = np.array([[1 / 5**0.5, 2 / 5**0.5], [0.6, 0.8], [0, -1]], dtype=np.float32)
    np.testing.assert_allclose(c, expected, atol=1e-6)


def test_centroids_method_clusters_by_documents_not_label_text():
    # label embeddings pair labels {0, 1} and {2, 3}; their documents pair {0, 2} and {1, 3}
    z = np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], dtype=np.float32)
    x = np.array([[1, 0], [0, 1], [1, 0.1], [0.1, 1]], dtype=np.float32)
    y = sp.csr_matrix(np.eye(4, dtype=np.float32))
    for seed in range(4):
        by_text = cluster_labels(z, y, 2, seed=seed)
        by_docs = cluster_labels(z, y, 2, method="centroids", doc_embeddings=x, seed=seed)
        assert by_text[0] == by_text[1] != by_text[2] == by_text[3]
        assert by_docs[0] == by_docs[2] != by_docs[1] == by_docs[3]


@pytest.mark.parametrize("method", ["balanced", "kmeans", "centroids"])
def test_deterministic_for_a_seed(method):
    z, y, x = random_problem(50, 200, 6, 0.05, seed=9)
    first = cluster_labels(z, y, 16, head_threshold=6, method=method, doc_embeddings=x, seed=5)
    assert 0 < np.count_nonzero(np.bincount(y.indices, minlength=200) >= 6) < 16  # some head labels
    np.testing.assert_array_equal(first, cluster_labels(z, y, 16, head_threshold=6, method=method,
                                                        doc_embeddings=x, seed=5))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_clusters": 6}, "power of two between 1 and the 10 labels"),
        ({"num_clusters": 0}, "power of two"),
        ({"num_clusters": 16}, "power of two between 1 and the 10 labels"),
        ({"num_clusters": 4, "method": "spectral"}, "must be one of balanced, kmeans, centroids"),
        ({"num_clusters": 4, "method": "centroids"}, "needs the training documents' embeddings"),
        ({"num_clusters": 4, "method": "centroids", "doc_embeddings": np.ones((3, 2))}, "3 document embeddings"),
        ({"num_clusters": 4, "method": "centroids", "doc_embeddings": np.ones((5, 3))}, "dimension 3, expected 2"),
        ({"num_clusters": 4, "head_threshold": -1}, "non-negative"),
        ({"num_clusters": 4, "head_threshold": 1}, "5 head labels .* raise head_threshold or num_clusters"),
    ],
)
def test_bad_arguments(kwargs, message):
    y = sp.csr_matrix(np.eye(5, 10, dtype=np.float32))  # labels 0..4 have one point each
    with pytest.raises(ValueError, match=message):
        cluster_labels(np.ones((10, 2)), y, **kwargs)


def test_bad_label_matrix():
    z = np.ones((4, 2))
    with pytest.raises(ValueError, match="scipy.sparse matrix"):
        cluster_labels(z, np.eye(4), 2)
    with pytest.raises(ValueError, match=r"shape \(3, 5\), expected \[N, 4\]"):
        cluster_labels(z, sp.csr_matrix((3, 5)), 2)
    with pytest.raises(ValueError, match="label embeddings row 1 holds NaN"):
        cluster_labels(np.array([[1.0, 0], [np.nan, 0]]), sp.csr_matrix((3, 2)), 2)


@pytest.mark.parametrize(
    ("n_labels", "ratio", "expected"),
    [
        (1000, 8, 128),  # 125: 128 is 3 away, 64 is 61
        (1000, 40, 32),  # 25: 32 is 7 away, 16 is 9
        (1000, 2, 512),  # 500 -> 512
        (1000, 1, 512),  # 1000 is capped at the largest power of two <= 1000
        (960, 10, 64),  # 96 is halfway between 64 and 128: the smaller
        (100, 0.5, 64),  # 200 labels' worth capped at 64
        (10, 100, 1),  # 0.1 -> at least 1
        (1, 2, 1),
    ],
)
def test_clusters_for_ratio(n_labels, ratio, expected):
    assert clusters_for_ratio(n_labels, ratio) == expected


@pytest.mark.parametrize(("n_labels", "ratio", "message"),
                         [(0, 8, "positive"), (100, 0, "positive number"), (100, float("nan"), "positive number")])
def test_clusters_for_ratio_errors(n_labels, ratio, message):
    with pytest.raises(ValueError, match=message):
        clusters_for_ratio(n_labels, ratio)

"""HNSWIndex: recall against exact search, exact results when tiny, ids, determinism, persistence."""

from __future__ import annotations

import numpy as np
import pytest
from ranking_asserts import assert_same_ranking

from xdex.data.errors import DataFormatError
from xdex.index import ExactIndex, HNSWIndex, Index, recall_at_k


def random_data(n: int, q: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.standard_normal((q, dim)).astype(np.float32)


@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_recall_against_exact_with_a_generous_ef(metric):
    items, queries = random_data(3000, 200, 16, seed=0)
    hnsw = HNSWIndex(16, metric=metric, M=16, ef_construction=100, ef_search=200, num_threads=2)
    exact = ExactIndex(16, metric=metric)
    for index in (hnsw, exact):
        index.add(items)
    approx_scores, approx_ids = hnsw.search(queries, 10)
    exact_scores, exact_ids = exact.search(queries, 10)
    assert recall_at_k(approx_ids, exact_ids, 10) >= 0.95
    # each returned score is the true similarity of the returned item, best first
    assert (np.diff(approx_scores, axis=1) <= 0).all()
    np.testing.assert_allclose(approx_scores[:, 0], exact_scores[:, 0], atol=1e-5, rtol=1e-5)


def test_hand_computed_inner_products():
    index = HNSWIndex(2)
    index.add(np.array([[1, 0], [0, 2], [1, 1]], dtype=np.float32))
    scores, ids = index.search(np.array([[2, 1]], dtype=np.float32), 3)
    np.testing.assert_array_equal(ids, [[2, 0, 1]])  # scores 3, 2, 2: the tie goes to the lower id
    np.testing.assert_allclose(scores, [[3, 2, 2]], atol=1e-6)


def test_tiny_index_is_exact_and_pads():
    items, queries = random_data(40, 9, 6, seed=1)
    hnsw, exact = HNSWIndex(6, metric="cosine", ef_search=50), ExactIndex(6, metric="cosine")
    for index in (hnsw, exact):
        index.add(items)
    for k in (5, 40, 45):
        (s1, i1), (s2, i2) = hnsw.search(queries, k), exact.search(queries, k)
        assert_same_ranking(i1, s1, i2, s2)
    assert (i1[:, 40:] == -1).all() and np.isneginf(s1[:, 40:]).all()


def test_large_k_on_the_graph_path_pads():
    items, queries = random_data(300, 4, 8, seed=2)
    index = HNSWIndex(8, ef_search=10)
    index.add(items)
    scores, ids = index.search(queries, 310)  # k above len: exhaustive, exact, padded
    assert (ids[:, :300] >= 0).all() and (ids[:, 300:] == -1).all()
    assert sorted(ids[0, :300].tolist()) == list(range(300))


def test_custom_ids_and_growth_beyond_the_initial_capacity():
    items, queries = random_data(2500, 5, 8, seed=3)
    ids = np.arange(2500) * 3 + 7
    index = HNSWIndex(8, ef_search=100)
    index.add(items[:1000], ids[:1000])
    index.add(items[1000:], ids[1000:])
    exact = ExactIndex(8)
    exact.add(items, ids)
    _, got = index.search(queries, 5)
    _, want = exact.search(queries, 5)
    assert np.isin(got, ids).all()
    assert recall_at_k(got, want, 5) >= 0.9
    with pytest.raises(ValueError, match="already in the index"):
        index.add(items[:1], ids[:1])


def test_same_seed_single_thread_builds_identical_indexes():
    items, queries = random_data(1500, 30, 8, seed=4)
    results = []
    for _ in range(2):
        index = HNSWIndex(8, M=8, ef_construction=40, ef_search=20, seed=11, num_threads=1)
        index.add(items)
        results.append(index.search(queries, 10))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="ef_search"):
        HNSWIndex(4, ef_search=0)
    with pytest.raises(ValueError, match="M must be"):
        HNSWIndex(4, M=1)
    index = HNSWIndex(4)
    with pytest.raises(ValueError, match="num_threads"):
        index.num_threads = 0


def test_save_load_round_trip_and_overrides(tmp_path):
    items, queries = random_data(1200, 20, 8, seed=5)
    index = HNSWIndex(8, metric="cosine", M=8, ef_construction=50, ef_search=30, seed=3)
    index.add(items, np.arange(1200) + 100)
    index.save(tmp_path / "hnsw")
    loaded = HNSWIndex.load(tmp_path / "hnsw")
    assert isinstance(loaded, Index)
    assert (loaded.dim, loaded.metric, len(loaded), loaded.params) == (8, "cosine", 1200, index.params)
    for a, b in zip(index.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    tuned = HNSWIndex.load(tmp_path / "hnsw", ef_search=300, num_threads=2)
    assert (tuned.ef_search, tuned.num_threads) == (300, 2)
    loaded.ef_search = 300
    for a, b in zip(tuned.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded.add(items[:3])  # a loaded index keeps growing, with ids after the largest (1299)
    assert len(loaded) == 1203
    _, ids = loaded.search(items[:1], 2)  # item 0 is stored twice: equal scores, the lower id first
    assert ids.tolist() == [[100, 1300]]


def test_load_errors_name_the_file(tmp_path):
    index = HNSWIndex(4)
    index.add(np.eye(4, dtype=np.float32))
    index.save(tmp_path / "hnsw")
    with pytest.raises(DataFormatError, match="of kind 'hnsw', not 'exact'"):
        ExactIndex.load(tmp_path / "hnsw")
    graph = tmp_path / "hnsw" / "hnsw.bin"
    graph.write_bytes(graph.read_bytes()[:50])
    with pytest.raises(DataFormatError, match=r"hnsw\.bin: checksum differs"):
        HNSWIndex.load(tmp_path / "hnsw")

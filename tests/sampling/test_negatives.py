import numpy as np
import pytest
import scipy.sparse as sp

from xdex.index.recall import recall_at_k
from xdex.sampling import HardNegatives

Y = sp.csr_matrix(np.array([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=np.float32))


def test_shortlist_drops_positives_and_padding_keeps_order():
    search = np.array([[0, 2, 3, 4], [1, 0, -1, 3], [4, 3, 2, 1]])
    hn = HardNegatives.from_search(search, Y, shortlist_size=3)
    assert hn.shortlist.tolist() == [[2, 3, -1], [0, 3, -1], [4, 3, 2]]


def test_sample_is_uniform_without_replacement_and_never_positive():
    hn = HardNegatives(np.array([[2, 3, -1], [0, 3, 4]]))
    rng = np.random.default_rng(0)
    seen = np.zeros(5)
    for _ in range(2000):
        out = hn.sample(np.array([0, 1]), eta=2, rng=rng)
        assert sorted(out[0].tolist()) == [2, 3]
        assert len(set(out[1].tolist())) == 2 and set(out[1].tolist()) <= {0, 3, 4}
        seen[out[1]] += 1
    # each of the 3 shortlisted labels of query 1 drawn 2/3 of the time
    assert np.all(np.abs(seen[[0, 3, 4]] / 2000 - 2 / 3) < 0.05)


def test_sample_pads_short_lists():
    hn = HardNegatives(np.array([[2, -1, -1]]))
    out = hn.sample(np.array([0]), eta=3, rng=np.random.default_rng(0))
    assert out.tolist() == [[2, -1, -1]]


def _clustered(n_labels: int, n_queries: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """Unit label vectors around 40 centres, queries near random labels, 1-3 positives per query."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    z = centres[rng.integers(0, 40, n_labels)] + 0.5 * rng.normal(size=(n_labels, dim))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    q = z[rng.integers(0, n_labels, n_queries)] + 0.3 * rng.normal(size=(n_queries, dim))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    rows = np.repeat(np.arange(n_queries), rng.integers(1, 4, n_queries))
    y = sp.csr_matrix((np.ones(len(rows)), (rows, rng.integers(0, n_labels, len(rows)))), shape=(n_queries, n_labels))
    y.data[:] = 1.0
    return q.astype(np.float32), z.astype(np.float32), y


HNSW = {"index": "hnsw", "M": 16, "ef_construction": 32, "ef_search": 64}


def test_hnsw_shortlists_keep_the_contract_of_exact_mining():
    q, z, y = _clustered(n_labels=1500, n_queries=200, dim=24, seed=0)
    hn = HardNegatives.mine(q, z, y, shortlist_size=10, **HNSW)
    shortlist = hn.shortlist
    assert shortlist.shape == (200, 10) and shortlist.dtype == np.int64
    assert shortlist.min() >= 0 and shortlist.max() < 1500  # 1,500 labels fill every shortlist
    assert all(len(set(row)) == 10 for row in shortlist.tolist())
    positives = y.toarray() > 0
    assert not positives[np.arange(200)[:, None], shortlist].any()
    scores = np.take_along_axis(q @ z.T, shortlist, axis=1)
    assert np.all(np.diff(scores, axis=1) <= 1e-5)  # best first


def test_hnsw_mining_finds_most_of_the_exact_negatives():
    q, z, y = _clustered(n_labels=3000, n_queries=300, dim=32, seed=1)
    exact = HardNegatives.mine(q, z, y, shortlist_size=12)
    approx = HardNegatives.mine(q, z, y, shortlist_size=12, **HNSW)
    # typically above 0.95 on these clustered vectors; the graph is searched with ef_search = 64 of 3,000 labels
    assert recall_at_k(approx.shortlist, exact.shortlist, 12) > 0.8


def test_hnsw_mining_is_exact_when_the_labels_fit_the_search_list():
    q, z, y = _clustered(n_labels=60, n_queries=50, dim=8, seed=2)
    exact = HardNegatives.mine(q, z, y, shortlist_size=5)
    approx = HardNegatives.mine(q, z, y, shortlist_size=5, **HNSW)  # 60 labels ≤ ef_search: searched exhaustively
    assert np.array_equal(approx.shortlist, exact.shortlist)


def test_hnsw_mining_is_reproducible_for_a_seed():
    q, z, y = _clustered(n_labels=1500, n_queries=100, dim=16, seed=3)
    first = HardNegatives.mine(q, z, y, 8, seed=5, **HNSW).shortlist
    assert np.array_equal(HardNegatives.mine(q, z, y, 8, seed=5, **HNSW).shortlist, first)


def test_unknown_mining_index_or_setting_is_refused():
    q, z, y = _clustered(n_labels=100, n_queries=10, dim=8, seed=4)
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        HardNegatives.mine(q, z, y, 5, index="annoy")
    with pytest.raises(ValueError, match="no setting 'ef'"):
        HardNegatives.mine(q, z, y, 5, index="hnsw", ef=10)


def test_a_graph_that_cannot_fill_the_shortlists_falls_back_to_exact_search(monkeypatch, caplog):
    from xdex.index.hnsw import HNSWIndex

    def short(self, queries, k):
        raise ValueError(f"HNSW search found fewer than {k} items")

    q, z, y = _clustered(n_labels=800, n_queries=40, dim=8, seed=5)
    exact = HardNegatives.mine(q, z, y, 6)
    monkeypatch.setattr(HNSWIndex, "search", short)
    with caplog.at_level("WARNING", logger="xdex.sampling.negatives"):
        approx = HardNegatives.mine(q, z, y, 6, **HNSW)
    assert np.array_equal(approx.shortlist, exact.shortlist)
    assert "searching exactly" in caplog.text


def test_auto_chooses_the_graph_only_where_exact_search_is_the_far_larger_work():
    from xdex.sampling.negatives import HNSW_FROM, mining_index

    assert mining_index("exact", 10**6, 10**6) == "exact" and mining_index("hnsw", 10, 10) == "hnsw"
    # N·L against HNSW_FROM·(N + L): 10^6 of each is 10^12 products for 2·10^6 vectors (a ratio of 500,000)
    assert mining_index("auto", 10**6, 10**6) == "hnsw"
    assert mining_index("auto", 100_000, 100_000) == "exact"  # a ratio of 50,000: the graph gains little there
    n = 2 * HNSW_FROM  # N = L = 2·HNSW_FROM: the ratio is exactly HNSW_FROM
    assert mining_index("auto", n, n) == "hnsw" and mining_index("auto", n, n - 1) == "exact"


def test_auto_mining_searches_exactly_at_small_sizes_and_with_the_graph_past_the_threshold(monkeypatch):
    from xdex.sampling import negatives

    q, z, y = _clustered(n_labels=1500, n_queries=100, dim=16, seed=3)
    small = HardNegatives.mine(q, z, y, 8, seed=5, index="auto", M=16, ef_construction=32, ef_search=64)
    assert small.index == "exact"
    assert np.array_equal(small.shortlist, HardNegatives.mine(q, z, y, 8).shortlist)
    monkeypatch.setattr(negatives, "HNSW_FROM", 50)  # 100·1,500 >= 50·1,600
    large = HardNegatives.mine(q, z, y, 8, seed=5, index="auto", M=16, ef_construction=32, ef_search=64)
    assert large.index == "hnsw"
    graph = HardNegatives.mine(q, z, y, 8, seed=5, index="hnsw", M=16, ef_construction=32, ef_search=64)
    assert np.array_equal(large.shortlist, graph.shortlist)

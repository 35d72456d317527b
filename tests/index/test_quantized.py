"""Exact search through int8 codes, of a few queries (a scan) and of many (int8 products): the codes by hand, the
error bound, and the float32 search's result whatever the data."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from ranking_asserts import assert_same_ranking

from xdex.index import ExactIndex, exact, quantized
from xdex.index.exact import exact_search
from xdex.index.quantized import Int8Codes, approximate_scores, int8_products_search, int8_search


def brute_force(items: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = items.astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((np.arange(len(items)), -scores))[:k]
    return scores[order], order


def error_bound(coded: Int8Codes, query: np.ndarray) -> float:
    """One query's bound ``b`` (``Int8Codes.error_bounds`` with the query's own step)."""
    many = query[None, :]
    return float(coded.error_bounds(many, *coded.query_integers(many))[0])


def test_codes_by_hand():
    coded = Int8Codes.of(np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], np.float32))
    # scale = max |x_j| / 127; codes = x / scale rounded to nearest (63.5 -> 64, half to even; 31.75 -> 32)
    np.testing.assert_allclose(coded.scales, [1 / 127, 0.0, 4 / 127], rtol=1e-6)
    assert coded.codes.tolist() == [[64, -127, 32], [0, 0, 0], [95, 127, 0]]
    assert coded.codes.dtype == np.int8 and coded.largest_norm == pytest.approx(5.0)


def test_error_bound_holds_on_vectors_of_every_scale():
    rng = np.random.default_rng(0)
    items = (rng.standard_normal((2000, 48)) * rng.uniform(0.001, 100.0, (2000, 1))).astype(np.float32)
    items[:10, 0] *= 1000  # one large component: coarse codes for the rest of the row
    coded = Int8Codes.of(items, chunk=300)
    for _ in range(20):
        query = (rng.standard_normal(48) * rng.uniform(0.01, 10.0)).astype(np.float32)
        error = np.abs(approximate_scores(coded, query) - items.astype(np.float64) @ query.astype(np.float64))
        assert error.max() <= error_bound(coded, query)


@pytest.mark.parametrize("dim", [256, 768, 3000])
def test_integer_sums_do_not_overflow_at_the_largest_codes(dim):
    """Every code at 127 and a query of one sign: each item's integer sum is the largest the query's step allows,
    and stays in int32 whatever the dimension (the query's integers shrink as it grows)."""
    rng = np.random.default_rng(dim)
    signs = rng.choice([-1.0, 1.0], dim).astype(np.float32)
    items = np.stack([signs, -signs, 0.5 * signs]).astype(np.float32)
    coded = Int8Codes.of(items)
    assert np.abs(coded.codes).min() == 127
    query = signs * rng.uniform(0.9, 1.0, dim).astype(np.float32)
    query[0] = signs[0]  # the largest component: the query's largest integer
    want = items.astype(np.float64) @ query.astype(np.float64)
    got = approximate_scores(coded, query)
    assert got[0] > 0 > got[1] and got[2] > 0
    assert np.abs(got - want).max() <= error_bound(coded, query)


def test_query_integers_by_hand():
    coded = Int8Codes.of(np.ones((1, 4), np.float32))
    integers, steps = coded.query_integers(np.array([[0.5, -2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], np.float32))
    assert steps[0] == 2.0 / 32767
    assert steps[1] == 1.0  # a zero query: any step, every integer 0
    assert integers.tolist() == [[8192, -32767, 0, 16384], [0, 0, 0, 0]]  # 8191.75 and 16383.5 (half to even)
    assert integers.dtype == np.int16
    wide = Int8Codes.of(np.ones((1, 1000), np.float32))  # 127 * 32767 * 1000 would leave int32
    assert wide.query_integers(np.full((1, 1000), 3.0, np.float32))[1][0] == 3.0 / ((2**31 - 1) // (127 * 1000))


@pytest.mark.parametrize("threads", [1, 2])
def test_int8_search_gives_the_float32_search(threads):
    rng = np.random.default_rng(1)
    items = rng.standard_normal((40_000, 8)).astype(np.float32)  # enough rows for the scan to be split
    coded = Int8Codes.of(items)
    for query in rng.standard_normal((5, 8)).astype(np.float32):
        scores, rows = int8_search(items, coded, query, 25, threads)
        want_scores, want_rows = exact_search(items, query[None, :], 25, bf16=False)
        assert_same_ranking(rows[None, :], scores[None, :], want_rows, want_scores)
        assert scores.dtype == np.float32 and rows.dtype == np.int64


def test_the_scan_split_over_numbas_threads_or_the_pool_gives_the_same_bits(monkeypatch):
    """Where numba's threads may not be entered from several threads (its workqueue layer), the scan's parts go to
    the pool of Python threads instead: the same scores."""
    rng = np.random.default_rng(3)
    items = rng.standard_normal((40_000, 16)).astype(np.float32)
    coded = Int8Codes.of(items)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    on_numba = approximate_scores(coded, queries, threads=2)
    monkeypatch.setattr(quantized, "numba_parallel_is_thread_safe", lambda: False)
    np.testing.assert_array_equal(approximate_scores(coded, queries, threads=2), on_numba)
    np.testing.assert_array_equal(approximate_scores(coded, queries, threads=1), on_numba)


def test_searches_from_several_threads_at_once_each_get_their_own_result():
    rng = np.random.default_rng(4)
    items = rng.standard_normal((40_000, 16)).astype(np.float32)
    coded = Int8Codes.of(items)
    queries = rng.standard_normal((8, 16)).astype(np.float32)
    want = [int8_search(items, coded, query, 10, 2) for query in queries]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda query: int8_search(items, coded, query, 10, 2), [*queries, *queries]))
    for (got_scores, got_rows), (want_scores, want_rows) in zip(got, [*want, *want], strict=True):
        np.testing.assert_array_equal(got_rows, want_rows)
        np.testing.assert_array_equal(got_scores, want_scores)


def test_several_queries_search_as_each_alone():
    rng = np.random.default_rng(9)
    items = rng.standard_normal((3000, 12)).astype(np.float32)
    coded = Int8Codes.of(items)
    queries = rng.standard_normal((5, 12)).astype(np.float32)
    queries[3] = 0.0  # a zero query: every item ties
    scores, rows = int8_search(items, coded, queries, 7, threads=2)
    assert scores.shape == rows.shape == (5, 7)
    np.testing.assert_array_equal(approximate_scores(coded, queries)[2], approximate_scores(coded, queries[2]))
    for query, got_scores, got_rows in zip(queries, scores, rows, strict=True):
        want_scores, want_rows = int8_search(items, coded, query, 7)
        np.testing.assert_array_equal(got_rows, want_rows)
        np.testing.assert_array_equal(got_scores, want_scores)
    np.testing.assert_array_equal(rows[3], np.arange(7))  # ties to the lower row


def test_int8_search_with_ties_everywhere_is_the_float32_search_to_the_bit():
    rng = np.random.default_rng(2)
    items = rng.integers(-2, 3, (3000, 5)).astype(np.float32)  # integer scores: many ties, exact sums
    items[1000:1500] = items[7]  # 501 identical rows: all of them candidates
    coded = Int8Codes.of(items)
    for query in [items[7], *rng.integers(-2, 3, (5, 5)).astype(np.float32)]:
        scores, rows = int8_search(items, coded, query, 30)
        want_scores, want_rows = brute_force(items, query, 30)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(scores, want_scores)


def test_k_out_of_range_is_refused():
    items = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="k must be between 1 and the 3 items"):
        int8_search(items, Int8Codes.of(items), items[0], 4)


def test_index_searches_one_query_through_codes_made_once_and_remade_after_an_add(monkeypatch):
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)
    rng = np.random.default_rng(3)
    index = ExactIndex(6)
    index.add(rng.standard_normal((300, 6)).astype(np.float32))
    queries = rng.standard_normal((4, 6)).astype(np.float32)
    together = index.search(queries, 12)
    one_by_one = [index.search(q[None, :], 12) for q in queries]
    codes = index._int8
    assert codes is not None
    for row, (scores, ids) in enumerate(one_by_one):
        assert_same_ranking(ids, scores, together[1][row : row + 1], together[0][row : row + 1])
    index.search(queries[:1], 3)
    assert index._int8 is codes  # made once
    index.add(queries[:1] * 100, np.array([1000]))  # the best match of the first query, by far
    assert index.search(queries[:1], 1)[1].tolist() == [[1000]]
    assert len(index._int8.scales) == 301


def test_index_searches_a_few_queries_through_codes_and_more_in_float32(monkeypatch):
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)
    searched = []
    monkeypatch.setattr(exact, "int8_search", lambda *a: (searched.append(len(a[2])), int8_search(*a))[1])
    rng = np.random.default_rng(6)
    index = ExactIndex(6)
    index.add(rng.standard_normal((400, 6)).astype(np.float32))
    most = exact._int8_max_queries(index._consolidated()[0].nbytes)
    queries = rng.standard_normal((most + 1, 6)).astype(np.float32)
    few = index.search(queries[:-1], 9)
    many = index.search(queries, 9)
    assert searched == [most]  # the larger batch took the float32 products
    want = exact_search(index._stored, queries, 9, bf16=False)
    assert_same_ranking(few[1], few[0], want[1][:-1], want[0][:-1])
    assert_same_ranking(many[1], many[0], want[1], want[0])


def test_how_many_queries_take_the_codes_follows_the_vectors_size():
    assert exact._int8_max_queries(exact.INT8_FROM_BYTES - 1) == 0  # small vectors: float32 products only
    assert exact._int8_max_queries(exact.INT8_FROM_BYTES) == 4
    assert exact._int8_max_queries((16 << 20) - 1) == 4
    assert exact._int8_max_queries(16 << 20) == 8
    assert exact._int8_max_queries(100_000 * 256 * 4) == 16  # 10^5 vectors of 256: beyond a shared cache


def test_scan_split_between_threads_follows_torch_threads(monkeypatch):
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)
    split = []
    monkeypatch.setattr(exact, "int8_search", lambda *a: (split.append(a[-1]), int8_search(*a))[1])
    rng = np.random.default_rng(4)
    index = ExactIndex(4)
    index.add(rng.standard_normal((200, 4)).astype(np.float32))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        index.search(rng.standard_normal((1, 4)).astype(np.float32), 5)
    finally:
        torch.set_num_threads(threads)
    assert split == [2]


def test_a_loaded_index_searches_one_query_through_codes_of_its_mapped_vectors(tmp_path, monkeypatch):
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)
    rng = np.random.default_rng(5)
    index = ExactIndex(5)
    index.add(rng.integers(-3, 4, (250, 5)).astype(np.float32))
    index.save(tmp_path / "index")
    loaded = ExactIndex.load(tmp_path / "index")
    query = rng.integers(-3, 4, (1, 5)).astype(np.float32)
    for a, b in zip(loaded.search(query, 9), index.search(np.repeat(query, 2, axis=0), 9), strict=True):
        np.testing.assert_array_equal(a[0], b[0])
    assert loaded._int8 is not None


def products_and_bound(coded: Int8Codes, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query's approximate scores through int8 products (codes at one scale, the query rounded to int8), in
    float64, and its bound ``b``."""
    integers, steps = np.empty(queries.shape, np.int16), np.empty(len(queries), np.float64)
    quantized._query_integers(queries, quantized.PRODUCT_QUERY_MAX, integers, steps)
    products = integers.astype(np.int64) @ coded.codes.astype(np.int64).T
    return products * coded.largest_scale * steps[:, None], coded.error_bounds(queries, integers, steps)


def test_codes_at_one_scale_by_hand():
    vectors = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], np.float32)
    coded = Int8Codes.of(vectors, shared_scale=True)
    # one scale, the largest |x_j| / 127 = 4 / 127: 0.5 -> 15.875 -> 16, -1 -> -31.75 -> -32, 0.25 -> 7.94 -> 8
    np.testing.assert_allclose(coded.scales, [4 / 127] * 3, rtol=1e-6)
    assert coded.codes.tolist() == [[16, -32, 8], [0, 0, 0], [95, 127, 0]]
    decoded = coded.scales[:, None].astype(np.float64) * coded.codes
    assert coded.largest_error == pytest.approx(np.linalg.norm(vectors - decoded, axis=1).max(), rel=1e-6)
    assert coded.largest_coded_norm == pytest.approx(np.linalg.norm(decoded, axis=1).max(), rel=1e-6)


@pytest.mark.parametrize("shared_scale", [False, True])
def test_rounding_errors_are_measured_on_the_codes(shared_scale):
    rng = np.random.default_rng(11)
    vectors = (rng.standard_normal((500, 20)) * rng.uniform(0.01, 10.0, (500, 1))).astype(np.float32)
    coded = Int8Codes.of(vectors, chunk=70, shared_scale=shared_scale)
    decoded = coded.scales[:, None].astype(np.float64) * coded.codes
    errors = np.linalg.norm(vectors - decoded, axis=1)
    assert errors.max() <= coded.largest_error <= errors.max() * (1 + 1e-6)
    assert (np.abs(vectors - decoded) <= coded.scales[:, None] * (0.5 + 1e-5)).all()  # half a step at most


def test_error_bound_holds_for_int8_products_on_vectors_of_every_scale():
    rng = np.random.default_rng(12)
    items = (rng.standard_normal((2000, 48)) * rng.uniform(0.001, 100.0, (2000, 1))).astype(np.float32)
    items[:10, 0] *= 1000
    coded = Int8Codes.of(items, chunk=300, shared_scale=True)
    queries = (rng.standard_normal((20, 48)) * rng.uniform(0.01, 10.0, (20, 1))).astype(np.float32)
    approximate, bounds = products_and_bound(coded, queries)
    error = np.abs(approximate - queries.astype(np.float64) @ items.astype(np.float64).T)
    assert (error.max(axis=1) <= bounds).all()


@pytest.mark.parametrize(("threads", "dim", "k"), [(1, 8, 10), (2, 8, 1), (2, 256, 10), (2, 64, 40)])
def test_int8_products_give_the_float32_search(threads, dim, k):
    rng = np.random.default_rng(dim + k)
    items = (rng.standard_normal((3000, dim)) * rng.uniform(0.5, 2.0, (3000, 1))).astype(np.float32)
    queries = np.concatenate([items[:100] + 0.1 * rng.standard_normal((100, dim)),  # near an item, as trained
                              rng.standard_normal((200, dim))]).astype(np.float32)
    coded = Int8Codes.of(items, shared_scale=True)
    scores, rows, left = int8_products_search(items, coded, queries, k, chunk_queries=128, chunk_items=500,
                                              threads=threads)
    want_scores, want_rows = exact_search(items, queries, k, bf16=False)
    kept = np.setdiff1d(np.arange(len(queries)), left)
    assert len(kept) > len(queries) // 2
    assert_same_ranking(rows[kept], scores[kept], want_rows[kept], want_scores[kept])
    assert scores.dtype == np.float32 and rows.dtype == np.int64 and left.dtype == np.int64
    got = exact_search(items, queries, k, chunk_queries=128, chunk_items=500, int8=True, coded=coded)
    assert_same_ranking(got[1], got[0], want_rows, want_scores)  # the queries left searched in float32


def test_int8_products_with_ties_everywhere_are_the_float32_search_to_the_bit():
    rng = np.random.default_rng(2)
    items = rng.integers(-2, 3, (3000, 5)).astype(np.float32)  # integer scores: many ties, exact sums
    items[1000:1500] = items[7]  # 500 identical rows beside row 7
    queries = np.concatenate([items[7:8], rng.integers(-2, 3, (199, 5))]).astype(np.float32)
    scores, rows = exact_search(items, queries, 30, chunk_queries=64, chunk_items=700, int8=True)
    for query, got_scores, got_rows in zip(queries, scores, rows, strict=True):
        want_scores, want_rows = brute_force(items, query, 30)
        np.testing.assert_array_equal(got_rows, want_rows)
        np.testing.assert_array_equal(got_scores, want_scores)


def test_int8_products_leave_crowded_queries_to_float32_and_give_way_after_a_crowded_chunk(monkeypatch):
    """Nearly equal vectors (as untrained ones can be): more items near the k-th best than the products keep
    (4 k + 512), so those queries are left to float32, and once most of a chunk is, the rest goes there too."""
    rng = np.random.default_rng(13)
    items = (1.0 + 1e-4 * rng.standard_normal((900, 8))).astype(np.float32)
    queries = (1.0 + 1e-4 * rng.standard_normal((300, 8))).astype(np.float32)
    coded = Int8Codes.of(items, shared_scale=True)
    assert len(int8_products_search(items, coded, queries, 5, 100, 256, 2)[2]) == len(queries)
    chunks = []
    monkeypatch.setattr(exact, "int8_products_search", lambda *a: (chunks.append(len(a[2])),
                                                                   int8_products_search(*a))[1])
    got = exact_search(items, queries, 5, chunk_queries=100, chunk_items=256, int8=True)
    want = exact_search(items, queries, 5, chunk_queries=100, chunk_items=256, bf16=False)
    assert chunks == [100]  # the first chunk only
    assert_same_ranking(got[1], got[0], want[1], want[0])


def test_int8_products_refuse_codes_at_several_scales_and_k_out_of_range():
    items = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    with pytest.raises(ValueError, match="codes at one scale"):
        int8_products_search(items, Int8Codes.of(items), items, 1, 10, 10, 1)
    with pytest.raises(ValueError, match="k must be between 1 and the 2 items"):
        int8_products_search(items, Int8Codes.of(items, shared_scale=True), items, 3, 10, 10, 1)


def test_int8_products_taken_for_many_queries_a_short_top_k_and_a_cpu_with_int8_instructions(monkeypatch):
    taken = []
    monkeypatch.setattr(exact, "int8_products_search", lambda *a: (taken.append((len(a[2]), a[3])),
                                                                   int8_products_search(*a))[1])
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_ITEMS", 1000)
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_QUERIES", ((0, 5),))  # where the caller keeps the codes
    monkeypatch.setattr(exact, "INT8_PRODUCTS_CODING_FROM_QUERIES", 20)  # where they are made for the search
    monkeypatch.setattr(exact, "_VNNI", True)
    rng = np.random.default_rng(14)
    items = rng.standard_normal((2048, 8)).astype(np.float32)
    many = rng.standard_normal((20, 8)).astype(np.float32)
    exact_search(items, many, exact.INT8_PRODUCTS_MAX_K)
    exact_search(items, many[:5], 2, coded=Int8Codes.of(items, shared_scale=True))  # codes kept: fewer pay
    exact_search(items, many[:-1], 2)  # too few queries to make the codes for
    exact_search(items[:999], many, 2)  # too few items
    exact_search(items, many, exact.INT8_PRODUCTS_MAX_K + 1)  # too long a top-k
    exact_search(items, many, 2, bf16=False)  # another search asked for
    monkeypatch.setattr(exact, "_VNNI", False)
    exact_search(items, many, 2)  # no int8 dot-product instructions
    assert taken == [(len(many), exact.INT8_PRODUCTS_MAX_K), (5, 2)]


def products_from(monkeypatch, queries: int) -> None:
    """An index of 100 vectors or more takes the int8 products from ``queries`` queries, as on a CPU with VNNI."""
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_ITEMS", 100)
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_QUERIES", ((0, queries),))
    monkeypatch.setattr(exact, "_VNNI", True)


def test_index_searches_many_queries_through_products_with_codes_made_once_and_remade_after_an_add(monkeypatch):
    products_from(monkeypatch, 20)
    rng = np.random.default_rng(15)
    index = ExactIndex(6)
    index.add(rng.standard_normal((300, 6)).astype(np.float32))
    queries = rng.standard_normal((25, 6)).astype(np.float32)
    scores, ids = index.search(queries, 1)
    codes = index._int8_shared
    assert codes is not None and codes.scales.min() == codes.largest_scale
    want = exact_search(index._stored, queries, 1, bf16=False)
    assert_same_ranking(ids, scores, want[1], want[0])
    index.search(queries, 1)
    assert index._int8_shared is codes  # made once
    index.add(queries[:1] * 100, np.array([1000]))  # the best match of the first query, by far
    assert index.search(queries, 1)[1][0].tolist() == [1000]
    assert len(index._int8_shared.scales) == 301


@pytest.mark.parametrize("vnni", [True, False])
def test_index_sends_a_served_batch_through_products_from_their_query_count_and_fewer_through_the_codes(
        monkeypatch, vnni):
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_ITEMS", 100)
    monkeypatch.setattr(exact, "INT8_QUERIES", ((0, 20),))  # the codes' bound above the products' first count
    monkeypatch.setattr(exact, "INT8_PRODUCTS_FROM_QUERIES", ((0, 16),))
    monkeypatch.setattr(exact, "_VNNI", vnni)
    routes = []
    monkeypatch.setattr(exact, "int8_search", lambda *a: (routes.append(("codes", len(a[2]))), int8_search(*a))[1])
    monkeypatch.setattr(exact, "int8_products_search",
                        lambda *a: (routes.append(("products", len(a[2]))), int8_products_search(*a))[1])
    rng = np.random.default_rng(17)
    index = ExactIndex(8)
    index.add(rng.standard_normal((500, 8)).astype(np.float32))
    few = 16
    queries = rng.standard_normal((few, 8)).astype(np.float32)
    want = exact_search(index._consolidated()[0], queries, 5, bf16=False, int8=False)
    for m in (few - 1, few):
        scores, ids = index.search(queries[:m], 5)
        assert_same_ranking(ids, scores, want[1][:m], want[0][:m])
    assert routes == [("codes", few - 1), ("products" if vnni else "codes", few)]


def test_how_many_queries_take_the_products_follows_the_vectors_size(monkeypatch):
    monkeypatch.setattr(exact, "_VNNI", True)

    def vectors(n: int, dim: int = 256) -> np.ndarray:  # their size, without the memory
        return np.broadcast_to(np.float32(0), (n, dim))

    def kept(queries: int, items: np.ndarray, k: int = 10) -> bool:  # the codes kept, as ExactIndex does
        return exact.int8_products_pay(queries, items, k, codes_kept=True)

    assert kept(8, vectors(exact.INT8_PRODUCTS_FROM_ITEMS))  # 4 MB
    assert not kept(7, vectors(30_000))
    assert kept(8, vectors(30_000))  # 30 MB
    assert not kept(15, vectors(100_000))  # 102 MB: the scan of the codes is faster below 16
    assert kept(16, vectors(100_000), exact.INT8_PRODUCTS_MAX_K)
    assert not kept(16, vectors(100_000), exact.INT8_PRODUCTS_MAX_K + 1)
    assert not kept(1000, vectors(exact.INT8_PRODUCTS_FROM_ITEMS - 1, 4096))
    many = exact.INT8_PRODUCTS_CODING_FROM_QUERIES  # the codes made for the one search: only for many queries
    assert not exact.int8_products_pay(many - 1, vectors(100_000), 10)
    assert exact.int8_products_pay(many, vectors(100_000), 10)
    monkeypatch.setattr(exact, "_VNNI", False)
    assert not kept(1000, vectors(100_000))


def test_index_searches_through_products_from_several_threads_at_once_each_get_their_own_result(monkeypatch):
    """Batches served side by side: small ones in one share on the caller's thread, larger ones split over the
    shared pool of our threads, all with the index's one set of codes."""
    products_from(monkeypatch, 8)
    rng = np.random.default_rng(19)
    index = ExactIndex(8)
    index.add(rng.standard_normal((3000, 8)).astype(np.float32))
    batches = [rng.standard_normal((m, 8)).astype(np.float32) for m in (8, 20, 64, 100)]
    want = [exact_search(index._consolidated()[0], batch, 6, bf16=False, int8=False) for batch in batches]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda batch: index.search(batch, 6), [*batches, *batches]))
    for (got_scores, got_ids), (want_scores, want_rows) in zip(got, [*want, *want], strict=True):
        assert_same_ranking(got_ids, got_scores, want_rows, want_scores)
    assert index._int8_shared is not None and index._int8 is None  # only the products' codes were made


def test_a_chunk_of_few_queries_is_multiplied_in_one_share(monkeypatch):
    """A product of few rows runs below the int8 rate: fewer than two shares of ``PRODUCT_SHARE_QUERIES`` queries
    are multiplied on the calling thread (torch's threads alone), more are split between our threads."""
    parts = []
    real = quantized.in_parts
    monkeypatch.setattr(quantized, "in_parts", lambda pool, work, n, count: (parts.append(count),
                                                                              real(pool, work, n, count))[1])
    rng = np.random.default_rng(18)
    items = rng.standard_normal((600, 8)).astype(np.float32)
    coded = Int8Codes.of(items, shared_scale=True)
    share = quantized.PRODUCT_SHARE_QUERIES
    for m in (1, 2 * share - 1, 2 * share, 3 * share):
        queries = rng.standard_normal((m, 8)).astype(np.float32)
        scores, rows, left = int8_products_search(items, coded, queries, 3, 1024, 256, threads=2)
        want = exact_search(items, queries, 3, bf16=False, int8=False)
        kept = np.setdiff1d(np.arange(m), left)
        assert_same_ranking(rows[kept], scores[kept], want[1][kept], want[0][kept])
    assert parts == [1, 1, 2, 2]


def test_int8_products_of_zero_vectors_leave_every_query_to_float32():
    """Every product is 0, so every item ties at the k-th best: more candidates than kept, searched in float32,
    ties to the lower row."""
    items = np.zeros((700, 4), np.float32)
    queries = np.random.default_rng(16).standard_normal((130, 4)).astype(np.float32)
    coded = Int8Codes.of(items, shared_scale=True)
    assert len(int8_products_search(items, coded, queries, 3, 64, 256, 2)[2]) == len(queries)
    scores, rows = exact_search(items, queries, 3, int8=True, coded=coded)
    assert (scores == 0).all() and (rows == np.arange(3)).all()

"""ExactIndex: hand-computed cases, brute-force agreement, chunking, ties, padding, ids, persistence."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ranking_asserts import assert_same_ranking

from xdex.data.errors import DataFormatError
from xdex.hardware import in_parts
from xdex.index import ExactIndex, Index, exact
from xdex.index.exact import _bf16_error_bound, exact_search
from xdex.index.kernels import merge_top_k, merge_top_k_bf16, merge_top_k_columns


def brute_force(items: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference: full score matrix, sorted by score descending then id ascending."""
    scores = queries.astype(np.float64) @ items.astype(np.float64).T
    order = np.lexsort((np.broadcast_to(ids, scores.shape), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), ids[order]


def test_inner_product_by_hand():
    index = ExactIndex(2)
    index.add(np.array([[1, 0], [0, 2], [1, 1]], dtype=np.float32))
    scores, ids = index.search(np.array([[2, 1]], dtype=np.float32), 3)
    # <q, x>: 2*1+1*0 = 2, 2*0+1*2 = 2, 2*1+1*1 = 3; items 0 and 1 tie, the lower id first
    np.testing.assert_array_equal(ids, [[2, 0, 1]])
    np.testing.assert_array_equal(scores, [[3, 2, 2]])
    assert scores.dtype == np.float32 and ids.dtype == np.int64


def test_cosine_by_hand():
    index = ExactIndex(2, metric="cosine")
    index.add(np.array([[3, 4], [1, 0], [0, -5]], dtype=np.float32))
    scores, ids = index.search(np.array([[0, 2]], dtype=np.float32), 3)
    # cos((0,1), (3,4)/5) = 0.8, cos((0,1), (1,0)) = 0, cos((0,1), (0,-1)) = -1
    np.testing.assert_array_equal(ids, [[0, 1, 2]])
    np.testing.assert_allclose(scores, [[0.8, 0.0, -1.0]], atol=1e-6)


def merged_top_k(scores: np.ndarray, k: int, split: int, item_major: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best of ``scores``, merged in by the compiled pass as two blocks: columns before ``split``,
    then the rest (numbered from ``split``), as :func:`exact_search` merges its item blocks; ``item_major``: each
    block handed over item by query, as ``block @ queries.T`` gives it (:func:`merge_top_k_columns`)."""
    top_scores, top_columns = np.empty((len(scores), k), np.float32), np.empty((len(scores), k), np.int64)
    sizes = np.zeros(len(scores), np.int64)
    for first, block in ((0, scores[:, :split]), (split, scores[:, split:])):
        if item_major:
            merge_top_k_columns(np.ascontiguousarray(block.T), first, top_scores, top_columns, sizes)
        else:
            merge_top_k(np.ascontiguousarray(block), first, top_scores, top_columns, sizes)
    return top_scores, top_columns


@pytest.mark.parametrize("item_major", [False, True])
@pytest.mark.parametrize("split", [0, 17, 40])
@pytest.mark.parametrize("k", [1, 3, 8, 40])
def test_one_pass_top_k_keeps_the_best_scores_ties_to_the_lower_column(k, split, item_major):
    rng = np.random.default_rng(k)
    scores = rng.integers(-3, 4, (12, 40)).astype(np.float32)  # many ties, at the cut too
    scores[0] = 1.0  # one row all tied
    scores[1, :5] = -np.inf
    values, columns = merged_top_k(scores, k, split, item_major)
    order = np.lexsort((np.broadcast_to(np.arange(40), scores.shape), -scores), axis=1)[:, :k]  # score, column
    np.testing.assert_array_equal(columns, order)
    np.testing.assert_array_equal(values, np.take_along_axis(scores, order, axis=1))
    assert values.dtype == np.float32 and columns.dtype == np.int64


def merged_one_by_one(scores: np.ndarray, k: int) -> tuple[list[float], list[int]]:
    """A row's top ``k`` as :func:`merge_row` defines it, one score at a time in plain Python: a score enters
    while the row is not full, or when strictly above its k-th, and moves up past every lower score."""
    top: list[tuple[float, int]] = []
    for j, s in enumerate(scores.tolist()):
        if len(top) == k and not s > top[-1][0]:
            continue
        if len(top) == k:
            top.pop()
        at = len(top)
        while at > 0 and top[at - 1][0] < s:
            at -= 1
        top.insert(at, (s, j))
    return [s for s, _ in top], [j for _, j in top]


@pytest.mark.parametrize("k", [1, 6, 70])
def test_long_rows_merge_as_one_score_at_a_time(k):
    """Spans of ``SKIP`` scores with none above the k-th are passed over whole: the same top as the scan of one
    score at a time, with ties, infinities and NaN (never above) in the rows, and spans that end mid-row."""
    rng = np.random.default_rng(k)
    scores = rng.integers(-40, 40, (6, 1000)).astype(np.float32)
    scores[0] = 0.0  # one row all tied
    scores[1, ::7] = np.nan
    scores[2, 500:] = np.inf
    scores[3, :20] = np.nan  # NaN among the first scores, before the row is full
    top_scores, top_columns = np.empty((6, k), np.float32), np.empty((6, k), np.int64)
    sizes = np.zeros(6, np.int64)
    merge_top_k(scores, 0, top_scores, top_columns, sizes)
    for row in range(6):
        want_scores, want_columns = merged_one_by_one(scores[row], k)
        assert top_columns[row].tolist() == want_columns
        np.testing.assert_array_equal(top_scores[row], np.array(want_scores, np.float32))


def test_no_best_asked_gives_empty_rows():
    scores, rows = exact_search(np.ones((4, 3), np.float32), np.ones((2, 3), np.float32), 0)
    assert scores.shape == rows.shape == (2, 0)
    with pytest.raises(ValueError, match="k must be between 0 and the 4 items, got 5"):
        exact_search(np.ones((4, 3), np.float32), np.ones((2, 3), np.float32), 5)


def test_one_pass_top_k_by_hand():
    values, columns = merged_top_k(np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [5.0, 4.0, 4.0, 4.0, 0.0]], np.float32), 2, 2)
    assert values.tolist() == [[3.0, 3.0], [5.0, 4.0]]
    assert columns.tolist() == [[1, 2], [0, 1]]


def test_one_query_and_many_rank_alike_in_one_chunk_and_in_small_chunks():
    rng = np.random.default_rng(6)
    items = rng.integers(-2, 3, (90, 6)).astype(np.float32)  # integer scores: ties, exact sums
    queries = rng.integers(-2, 3, (300, 6)).astype(np.float32)
    results = []
    for chunk_queries in (len(queries), 50, 1):
        index = ExactIndex(6, chunk_queries=chunk_queries, chunk_items=40)
        index.add(items)
        results.append(index.search(queries, 7))
    expected_scores, expected_ids = brute_force(items, np.arange(90), queries, 7)
    for scores, ids in results:
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_array_equal(scores, expected_scores)


@pytest.mark.parametrize("metric", ["ip", "cosine"])
@pytest.mark.parametrize("chunks", [(7, 10), (1, 1), (1000, 1000), (4, 103)])
def test_matches_brute_force(metric, chunks):
    rng = np.random.default_rng(0)
    items = rng.standard_normal((103, 9)).astype(np.float32)
    queries = rng.standard_normal((23, 9)).astype(np.float32)
    index = ExactIndex(9, metric=metric, chunk_queries=chunks[0], chunk_items=chunks[1])
    index.add(items)
    scores, ids = index.search(queries, 12)
    if metric == "cosine":
        items = items / np.linalg.norm(items, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    want_scores, want_ids = brute_force(items, np.arange(103), queries, 12)
    assert_same_ranking(ids, scores, want_ids, want_scores, atol=1e-5)


def test_ties_go_to_the_lower_id_across_blocks():
    rng = np.random.default_rng(1)
    items = rng.integers(-1, 2, size=(60, 3)).astype(np.float32)  # few distinct scores: many ties
    ids = rng.permutation(np.arange(100, 160))  # ids not in insertion order
    queries = rng.integers(-1, 2, size=(15, 3)).astype(np.float32)
    index = ExactIndex(3, chunk_queries=4, chunk_items=7)
    index.add(items, ids)
    scores, got = index.search(queries, 20)
    want_scores, want_ids = brute_force(items, ids, queries, 20)
    np.testing.assert_array_equal(got, want_ids)
    np.testing.assert_array_equal(scores, want_scores)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    q=st.integers(1, 9),
    k=st.integers(1, 45),
    chunk_queries=st.integers(1, 10),
    chunk_items=st.integers(1, 50),
    seed=st.integers(0, 2**16),
)
def test_property_equals_sorted_scores(n, q, k, chunk_queries, chunk_items, seed):
    rng = np.random.default_rng(seed)
    items = rng.integers(-2, 3, size=(n, 4)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(q, 4)).astype(np.float32)
    index = ExactIndex(4, chunk_queries=chunk_queries, chunk_items=chunk_items)
    index.add(items)
    scores, ids = index.search(queries, k)
    found = min(k, n)
    want_scores, want_ids = brute_force(items, np.arange(n), queries, found)
    np.testing.assert_array_equal(ids[:, :found], want_ids)
    np.testing.assert_array_equal(scores[:, :found], want_scores)
    assert (ids[:, found:] == -1).all() and np.isneginf(scores[:, found:]).all()


def test_padding_when_k_exceeds_the_items():
    index = ExactIndex(2)
    index.add(np.array([[1, 0], [0, 1]], dtype=np.float32))
    scores, ids = index.search(np.array([[1, 2]], dtype=np.float32), 4)
    np.testing.assert_array_equal(ids, [[1, 0, -1, -1]])
    np.testing.assert_array_equal(scores, [[2, 1, -np.inf, -np.inf]])


def test_empty_index_and_no_queries():
    index = ExactIndex(3)
    scores, ids = index.search(np.ones((2, 3), dtype=np.float32), 2)
    assert (ids == -1).all() and np.isneginf(scores).all()
    index.add(np.ones((4, 3), dtype=np.float32))
    scores, ids = index.search(np.empty((0, 3), dtype=np.float32), 2)
    assert scores.shape == (0, 2) and ids.shape == (0, 2)


def test_custom_ids_and_default_ids_continue_after_the_largest():
    index = ExactIndex(1)
    index.add(np.array([[1.0], [3.0], [2.0]], dtype=np.float32), ids=np.array([10, 5, 7]))
    index.add(np.array([[4.0]], dtype=np.float32))  # gets id 11
    scores, ids = index.search(np.array([[1.0]], dtype=np.float32), 4)
    np.testing.assert_array_equal(ids, [[11, 5, 7, 10]])
    np.testing.assert_array_equal(scores, [[4, 3, 2, 1]])
    assert len(index) == 4


@pytest.mark.parametrize(
    ("ids", "message"),
    [([1, 1], "more than once"), ([0, 9], "already in the index"), ([-3, 4], "non-negative"), ([1], "shape")],
)
def test_bad_ids_are_refused(ids, message):
    index = ExactIndex(1)
    index.add(np.zeros((1, 1), dtype=np.float32), ids=np.array([0]))
    with pytest.raises(ValueError, match=message):
        index.add(np.zeros((2, 1), dtype=np.float32), ids=np.array(ids))
    assert len(index) == 1


def test_bad_vectors_are_refused():
    index = ExactIndex(3)
    with pytest.raises(ValueError, match="vectors have dimension 2, expected 3"):
        index.add(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="queries row 1 holds NaN"):
        index.search(np.array([[0, 0, 0], [0, np.nan, 0]]), 1)
    with pytest.raises(ValueError, match="2-D"):
        index.search(np.zeros(3), 1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        index.search(np.zeros((1, 3)), 0)
    with pytest.raises(ValueError, match="metric"):
        ExactIndex(3, metric="l2")


def test_adding_in_batches_equals_one_add():
    rng = np.random.default_rng(2)
    items = rng.standard_normal((50, 5)).astype(np.float32)
    queries = rng.standard_normal((6, 5)).astype(np.float32)
    whole, parts = ExactIndex(5), ExactIndex(5)
    whole.add(items)
    for start in range(0, 50, 13):
        parts.add(items[start : start + 13])
        parts.search(queries, 3)  # searching between adds must not disturb later ones
    for a, b in zip(whole.search(queries, 8), parts.search(queries, 8), strict=True):
        np.testing.assert_array_equal(a, b)


def test_added_vectors_are_copied():
    items = np.eye(2, dtype=np.float32)
    index = ExactIndex(2)
    index.add(items)
    items[:] = 0
    _, ids = index.search(np.array([[1, 0]], dtype=np.float32), 1)
    assert ids[0, 0] == 0


@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_save_load_round_trip(tmp_path, metric):
    rng = np.random.default_rng(3)
    index = ExactIndex(4, metric=metric, chunk_queries=3, chunk_items=5)
    index.add(rng.standard_normal((20, 4)).astype(np.float32), ids=rng.permutation(40)[:20])
    index.save(tmp_path / "idx")
    loaded = ExactIndex.load(tmp_path / "idx")
    assert isinstance(loaded, Index)
    assert (loaded.dim, loaded.metric, len(loaded), loaded.params) == (4, metric, 20, index.params)
    queries = rng.standard_normal((7, 4)).astype(np.float32)
    for a, b in zip(index.search(queries, 6), loaded.search(queries, 6), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not [p for p in (tmp_path / "idx").iterdir() if p.name.endswith(".tmp")]


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing-folder"):
        ExactIndex.load(tmp_path / "missing-folder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match=r"index\.json: missing"):
        ExactIndex.load(tmp_path / "empty")
    index = ExactIndex(2)
    index.add(np.eye(2, dtype=np.float32))
    index.save(tmp_path / "idx")
    data = bytearray((tmp_path / "idx" / "vectors.npy").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "idx" / "vectors.npy").write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=r"vectors\.npy: checksum differs"):
        ExactIndex.load(tmp_path / "idx")
    (tmp_path / "idx" / "ids.npy").unlink()
    with pytest.raises(DataFormatError, match=r"ids\.npy: missing"):
        ExactIndex.load(tmp_path / "idx")


def test_read_only_inputs_are_accepted_without_warnings():
    items = np.eye(3, dtype=np.float32)
    items.flags.writeable = False
    index = ExactIndex(3)
    index.add(items)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, ids = index.search(items[1:], 1)
    np.testing.assert_array_equal(ids, [[1], [2]])


def test_concurrent_first_searches_after_adds_agree():
    """The first searches after several adds join the pending vectors once, whichever thread gets there first."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    x, q = rng.normal(size=(300, 8)).astype(np.float32), rng.normal(size=(5, 8)).astype(np.float32)
    reference = ExactIndex(8)
    reference.add(x)
    expected = reference.search(q, 4)
    for _ in range(20):
        index = ExactIndex(8)
        for part in np.array_split(x, 30):
            index.add(part)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _, index=index: index.search(q, 4), range(8)))
        assert len(index) == 300 and index._consolidated()[0].shape == (300, 8)
        for scores, ids in results:  # up to ties: a product may round differently on another thread
            assert_same_ranking(ids, scores, expected[1], expected[0])


def test_copies_and_pickles_search_alike():
    import copy
    import pickle

    rng = np.random.default_rng(4)
    index = ExactIndex(4)
    index.add(rng.normal(size=(10, 4)).astype(np.float32))
    q = rng.normal(size=(2, 4)).astype(np.float32)
    for other in (copy.deepcopy(index), pickle.loads(pickle.dumps(index))):
        np.testing.assert_array_equal(other.search(q, 3)[1], index.search(q, 3)[1])


def test_a_deeply_nested_index_description_is_named(tmp_path):
    index = ExactIndex(2)
    index.add(np.eye(2, dtype=np.float32))
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "index.json").write_text("[" * 100_000)
    with pytest.raises(DataFormatError, match=r"index\.json: not valid JSON \(nested too deeply\)"):
        ExactIndex.load(tmp_path / "idx")


# --- the certified bf16 shortcut --------------------------------------------------------------------------------


def test_bf16_error_bound_holds_for_torch_bf16_products():
    """The bound of :func:`_bf16_error_bound` against the error torch's bf16 products make, measured in float64
    on vectors of every scale and on nearly aligned pairs, where Cauchy-Schwarz is tight."""
    rng = np.random.default_rng(3)
    dim = 64
    items = rng.standard_normal((500, dim)) * rng.uniform(0.01, 10.0, (500, 1))
    queries = rng.standard_normal((300, dim)) * rng.uniform(0.01, 10.0, (300, 1))
    items[:300] = queries + 1e-3 * rng.standard_normal((300, dim))  # aligned pairs: the largest products
    items, queries = items.astype(np.float32), queries.astype(np.float32)
    approx = (torch.from_numpy(queries).bfloat16() @ torch.from_numpy(items).bfloat16().T).double().numpy()
    error = np.abs(approx - queries.astype(np.float64) @ items.astype(np.float64).T)
    bound = _bf16_error_bound(np.linalg.norm(queries, axis=1), float(np.linalg.norm(items, axis=1).max()), dim)
    assert (error <= bound[:, None]).all()
    assert bound.max() < 0.02 * float(np.linalg.norm(queries, axis=1).max() * np.linalg.norm(items, axis=1).max())


def test_bf16_shortcut_gives_the_float32_search():
    rng = np.random.default_rng(4)
    items = rng.standard_normal((3000, 16)).astype(np.float32)
    queries = rng.standard_normal((300, 16)).astype(np.float32)
    want = exact_search(items, queries, 10, chunk_queries=64, chunk_items=512, bf16=False)
    got = exact_search(items, queries, 10, chunk_queries=64, chunk_items=512, bf16=True)
    assert_same_ranking(got[1], got[0], want[1], want[0])
    assert got[0].dtype == np.float32 and got[1].dtype == np.int64


def test_bf16_shortcut_searches_again_where_it_cannot_certify(monkeypatch):
    """Ties at the cut (integer scores) and a margin too small to certify: those queries are searched again in
    float32, so the ranking is the float32 search's to the bit, ties to the lower row."""
    rng = np.random.default_rng(5)
    items = rng.integers(-2, 3, (400, 6)).astype(np.float32)
    queries = rng.integers(-2, 3, (200, 6)).astype(np.float32)
    monkeypatch.setattr(exact, "BF16_MARGIN", 3)
    searched_again = []
    blocked = exact._blocked_top_k
    monkeypatch.setattr(exact, "_blocked_top_k", lambda items, queries, *a, bf16: (
        searched_again.append(len(queries)) if not bf16 else None, blocked(items, queries, *a, bf16=bf16))[1])
    scores, rows = exact_search(items, queries, 7, chunk_queries=50, chunk_items=64, bf16=True)
    want_scores, want_rows = brute_force(items, np.arange(400), queries, 7)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(scores, want_scores)
    assert searched_again and 0 < searched_again[0] <= len(queries)


def test_bf16_shortcut_taken_only_for_many_queries_on_a_cpu_with_bf16(monkeypatch):
    taken = []
    top_k = exact._bf16_top_k
    monkeypatch.setattr(exact, "_bf16_top_k", lambda *a: (taken.append(len(a[1])), top_k(*a))[1])
    rng = np.random.default_rng(6)
    items = rng.standard_normal((2000, 8)).astype(np.float32)
    many = rng.standard_normal((exact.BF16_FROM_QUERIES, 8)).astype(np.float32)
    monkeypatch.setattr(exact, "BF16_FROM_ITEMS", 1000)
    monkeypatch.setattr(exact, "_BF16", True)
    exact_search(items, many, 5)
    exact_search(items, many[:-1], 5)  # too few queries
    exact_search(items[:999], many, 5)  # too few items
    monkeypatch.setattr(exact, "_BF16", False)
    exact_search(items, many, 5)  # no bf16 instructions
    assert taken == [len(many)]


@pytest.mark.parametrize("k", [1, 9, 70])
def test_bf16_merge_reads_the_bit_patterns_as_the_float32_merge_reads_their_values(k):
    """Block after block, the bf16 merge (spans counted on the bits) keeps what the one-score-at-a-time merge keeps
    of the widened values: k-th best above and below zero, signed zeros, ties, infinities and NaN."""
    rng = np.random.default_rng(7)
    widened = torch.from_numpy(rng.standard_normal((7, 900)).astype(np.float32)).bfloat16()
    widened[0, 100:] = widened[0, 7]  # ties
    widened[1] = -widened[1].abs().sort(descending=True).values  # all negative, rising: the k-th best below zero
    widened[2, ::2], widened[2, 1::2] = 0.0, -0.0  # signed zeros
    widened[3, ::11] = float("nan")
    widened[4, 600:] = float("inf")
    widened[5, :450] = -widened[5, :450].abs()  # the k-th best crosses zero from one block to the next
    bits = np.ascontiguousarray(widened.view(torch.int16).numpy())
    values = widened.float().numpy()
    top_scores, top_columns, sizes = np.empty((7, k), np.float32), np.empty((7, k), np.int64), np.zeros(7, np.int64)
    for start in range(0, 900, 300):
        merge_top_k_bf16(np.ascontiguousarray(bits[:, start : start + 300]), start, top_scores, top_columns, sizes)
    for row in range(7):
        want_scores, want_columns = merged_one_by_one(values[row], k)
        np.testing.assert_array_equal(top_scores[row], want_scores)
        np.testing.assert_array_equal(top_columns[row], want_columns)


@pytest.mark.parametrize("bf16", [False, True])
def test_two_threads_search_as_one(bf16, monkeypatch):
    rng = np.random.default_rng(8)
    items = rng.integers(-3, 4, (700, 5)).astype(np.float32)
    queries = rng.integers(-3, 4, (260, 5)).astype(np.float32)
    threads = torch.get_num_threads()
    splits = []  # float32 products of many queries: split between threads of our own, not the BLAS's
    monkeypatch.setattr(exact, "in_parts", lambda pool, work, n, parts: splits.append((n, parts)) or in_parts(
        pool, work, n, parts))
    try:
        results = []
        for count in (1, 2):
            torch.set_num_threads(count)
            results.append(exact_search(items, queries, 6, chunk_queries=200, chunk_items=100, bf16=bf16))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(results[0], results[1], strict=True):
        np.testing.assert_array_equal(a, b)
    want_scores, want_rows = brute_force(items, np.arange(700), queries, 6)
    np.testing.assert_array_equal(results[1][1], want_rows)
    assert splits == ([] if bf16 else [(260, 2)])


def test_bf16_shortcut_gives_way_to_float32_where_scores_crowd_at_the_cut(monkeypatch):
    """Nearly equal vectors (as untrained ones can be): the bound proves little of the first chunk, so the later
    chunks go straight to float32; the ranking is the float32 search's throughout."""
    rng = np.random.default_rng(9)
    items = (1.0 + 1e-4 * rng.standard_normal((600, 8))).astype(np.float32)
    queries = (1.0 + 1e-4 * rng.standard_normal((300, 8))).astype(np.float32)
    chunks = []
    top_k = exact._bf16_top_k
    monkeypatch.setattr(exact, "_bf16_top_k", lambda *a: (chunks.append(len(a[1])), top_k(*a))[1])
    got = exact_search(items, queries, 5, chunk_queries=100, chunk_items=256, bf16=True)
    want = exact_search(items, queries, 5, chunk_queries=100, chunk_items=256, bf16=False)
    assert chunks == [100]  # the first chunk only
    assert_same_ranking(got[1], got[0], want[1], want[0])

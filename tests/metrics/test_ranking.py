import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.metrics import Ranking, remove_pairs, top_k


def test_from_lists_pads_at_the_end():
    r = Ranking.from_lists([[3, 1], [], [0]], [[0.9, 0.2], [], [0.5]])
    assert r.indices.tolist() == [[3, 1], [-1, -1], [0, -1]]
    assert r.scores[0].tolist() == pytest.approx([0.9, 0.2])
    assert np.isneginf(r.scores[1]).all() and np.isneginf(r.scores[2, 1])
    assert r.indices.dtype == np.int64 and r.scores.dtype == np.float32
    assert (r.n_rows, r.k) == (3, 2)


def test_from_lists_keeps_the_given_order():
    # the order of the list is the ranking, whatever the scores say
    r = Ranking.from_lists([[2, 0]], [[0.1, 0.9]])
    assert r.indices.tolist() == [[2, 0]]


def test_malformed_rows_are_rejected():
    with pytest.raises(ValueError, match="row 1 predicts the same label twice"):
        Ranking(np.array([[0, 1], [2, 2]]), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="row 0 has a label after a padded"):
        Ranking(np.array([[-1, 1]]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="below -1"):
        Ranking(np.array([[-2, 1]]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="shape"):
        Ranking(np.array([[0, 1]]), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="2 labels but 1 scores"):
        Ranking.from_lists([[0, 1]], [[0.5]])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(-2, 40), max_size=12), min_size=1, max_size=6))
def test_row_checks_agree_with_a_plain_reading(rows):
    width = max(len(r) for r in rows)
    indices = np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int64).reshape(len(rows), width)

    def problem(row):  # the first problem from the left
        seen, padded = set(), False
        for label in row:
            if label == -1:
                padded = True
            elif label < -1:
                return "below -1"
            elif padded:
                return "after a padded"
            elif label in seen:
                return "twice"
            seen.add(label)
        return None

    expected = next(((i, problem(list(r))) for i, r in enumerate(indices.tolist()) if problem(list(r))), None)
    if expected is None:
        assert Ranking(indices, np.zeros(indices.shape)).k == width
    else:
        with pytest.raises(ValueError, match=f"row {expected[0]} .*{expected[1]}"):
            Ranking(indices, np.zeros(indices.shape))


def test_top_k_sparse_breaks_ties_by_lower_id_and_pads():
    # row 0: scores {0: 0.5, 2: 0.5, 3: 0.7, 4: 0.1} -> 3 (0.7), then 0 and 2 tie at 0.5: 0 first
    # row 1: one stored entry, a score of 0 (stored entries are predictions)
    m = sp.csr_matrix(([0.5, 0.5, 0.7, 0.1, 0.0], [2, 0, 3, 4, 1], [0, 4, 5]), shape=(2, 5))
    r = top_k(m, 3)
    assert r.indices.tolist() == [[3, 0, 2], [1, -1, -1]]
    assert r.scores[0].tolist() == pytest.approx([0.7, 0.5, 0.5])
    assert r.scores[1, 0] == 0.0


def test_top_k_dense_breaks_ties_by_lower_id():
    scores = np.array([[0.2, 0.9, 0.2, 0.9], [0.0, 0.0, 0.0, 0.0]])
    r = top_k(scores, 3)
    assert r.indices.tolist() == [[1, 3, 0], [0, 1, 2]]
    assert top_k(scores, 10).k == 4  # never wider than the number of labels


def test_top_k_rejects_nan_and_bad_k():
    with pytest.raises(ValueError, match="NaN"):
        top_k(np.array([[np.nan, 1.0]]), 1)
    with pytest.raises(ValueError, match="NaN"):
        top_k(sp.csr_matrix(np.array([[np.nan, 1.0]])), 1)
    with pytest.raises(ValueError, match="at least 1"):
        top_k(np.ones((1, 2)), 0)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 10), st.integers(0, 2**31 - 1))
def test_top_k_sparse_equals_a_full_sort(n_rows, n_labels, k, seed):
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 3, (n_rows, n_labels)).astype(np.float64)  # few values: many ties
    dense[rng.random(dense.shape) < 0.3] = 0.0
    matrix = sp.csr_matrix(dense)
    r = top_k(matrix, k)
    for i in range(n_rows):
        stored = matrix[i].indices.tolist()
        expected = sorted(stored, key=lambda label: (-dense[i, label], label))[:k]
        assert r.indices[i].tolist() == expected + [-1] * (k - len(expected))


def test_remove_pairs_moves_lower_labels_up():
    r = Ranking.from_lists([[4, 2, 0, 1], [3, 1]], [[0.9, 0.8, 0.7, 0.6], [0.5, 0.4]])
    pairs = sp.csr_matrix(([1.0, 1.0, 1.0], [2, 4, 1], [0, 2, 3]), shape=(2, 5))  # row 0: {2, 4}, row 1: {1}
    out = remove_pairs(r, pairs)
    assert out.indices.tolist() == [[0, 1, -1, -1], [3, -1, -1, -1]]
    assert out.scores[0, :2].tolist() == pytest.approx([0.7, 0.6])
    assert np.isneginf(out.scores[0, 2:]).all()
    assert r.indices.tolist() == [[4, 2, 0, 1], [3, 1, -1, -1]]  # the input is unchanged


def test_remove_pairs_checks_rows():
    r = Ranking.from_lists([[0]], [[1.0]])
    with pytest.raises(ValueError, match="2 rows"):
        remove_pairs(r, sp.csr_matrix((2, 3)))


def test_to_csr_round_trip():
    r = Ranking.from_lists([[4, 2], [], [1]], [[0.9, 0.8], [], [0.3]])
    m = r.to_csr(5)
    assert m.shape == (3, 5)
    assert m.toarray()[0].tolist() == pytest.approx([0, 0, 0.8, 0, 0.9])
    back = top_k(m, 2)
    assert back.indices.tolist() == r.indices.tolist()
    with pytest.raises(ValueError, match="label id 4"):
        r.to_csr(4)


def test_depth_with_filter_adds_the_most_pairs_of_a_row():
    import scipy.sparse as sp

    from xdex.metrics import depth_with_filter

    pairs = sp.csr_matrix(([1.0, 1.0, 1.0], ([0, 2, 2], [1, 0, 3])), shape=(3, 5))
    assert depth_with_filter(5, pairs) == 7  # row 2 has two pairs
    assert depth_with_filter(5, None) == 5


def test_stacked_rankings_keep_their_rows_in_order_and_one_part_as_it_is():
    a = Ranking.from_lists([[3, 1], [2]], [[0.9, 0.5], [0.7]])
    b = Ranking.from_lists([[0, 4]], [[0.8, 0.1]])
    both = Ranking.stacked([a, b])
    assert both.indices.tolist() == [[3, 1], [2, -1], [0, 4]]
    np.testing.assert_array_equal(both.scores, np.concatenate([a.scores, b.scores]))
    assert Ranking.stacked([a]) is a

"""retrieve: the top-k labels by inner product, from vectors or an index."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.index import ExactIndex, exact
from xdex.index.retrieval import retrieve


def test_vectors_are_searched_exactly_ties_to_the_lower_row_and_padded_beyond_them():
    labels = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], np.float32)
    queries = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    ranking = retrieve(queries, labels, 6)
    # scores worked by hand: query 0 -> 1, 0, 1, 0.5; query 1 -> 0, 2, 0, 1
    assert ranking.indices.tolist() == [[0, 2, 3, 1, -1, -1], [1, 3, 0, 2, -1, -1]]
    assert ranking.scores[:, :4].tolist() == [[1.0, 1.0, 0.5, 0.0], [2.0, 1.0, 0.0, 0.0]]
    assert np.isneginf(ranking.scores[:, 4:]).all()
    assert ranking.indices.dtype == np.int64 and ranking.scores.dtype == np.float32


def test_vectors_give_what_an_exact_index_of_them_gives():
    rng = np.random.default_rng(0)
    labels = rng.standard_normal((300, 8)).astype(np.float32)
    queries = rng.standard_normal((40, 8))  # float64: cast as the index casts
    index = ExactIndex(8)
    index.add(labels)
    from_vectors, from_index = retrieve(queries, labels, 7), retrieve(queries, index, 7)
    np.testing.assert_array_equal(from_vectors.indices, from_index.indices)
    np.testing.assert_array_equal(from_vectors.scores, from_index.scores)


def test_vectors_searched_once_make_no_int8_codes_for_a_few_queries(monkeypatch):
    """An index keeps its codes for later searches; vectors searched once would make them for nothing."""
    monkeypatch.setattr(exact, "INT8_FROM_BYTES", 1000)  # an index would scan its codes for these
    made = []
    monkeypatch.setattr(exact.Int8Codes, "of", classmethod(lambda cls, *a, **kw: made.append(1)))
    rng = np.random.default_rng(1)
    labels = rng.standard_normal((500, 8)).astype(np.float32)
    retrieve(rng.standard_normal((3, 8)), labels, 5)
    assert made == []


@pytest.mark.parametrize(("queries", "labels", "k", "message"), [
    (np.zeros((2, 3)), np.zeros(3), 1, "labels must be a 2-D array"),
    (np.zeros((2, 4)), np.zeros((5, 3)), 1, "queries have dimension 4, expected 3"),
    (np.zeros((2, 3)), np.full((5, 3), np.nan), 1, "labels row 0 holds NaN"),
    (np.zeros((2, 3)), np.zeros((5, 3)), 0, "k must be at least 1"),
])
def test_bad_input_is_refused_with_what_is_wrong(queries, labels, k, message):
    with pytest.raises(ValueError, match=message):
        retrieve(queries, labels, k)

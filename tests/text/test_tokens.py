import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xdex.text import TokenizedTexts


def make(rows):
    return TokenizedTexts.from_arrays([np.array(r, dtype=np.int32) for r in rows])


def test_flat_layout():
    tokens = make([[5, 6], [], [7, 8, 9]])
    assert tokens.ids.tolist() == [5, 6, 7, 8, 9]
    assert tokens.offsets.tolist() == [0, 2, 2, 5]
    assert tokens.lengths.tolist() == [2, 0, 3]
    assert len(tokens) == 3
    assert tokens.row(2).tolist() == [7, 8, 9]


def test_gather_batch():
    tokens = make([[5, 6], [], [7, 8, 9]])
    batch = tokens[[2, 0, 2]]
    assert batch.ids.tolist() == [7, 8, 9, 5, 6, 7, 8, 9]
    assert batch.offsets.tolist() == [0, 3, 5, 8]
    assert tokens[1:].offsets.tolist() == [0, 0, 3]
    assert tokens[np.array([True, False, True])].ids.tolist() == [5, 6, 7, 8, 9]
    assert tokens[-1].ids.tolist() == [7, 8, 9]
    assert len(tokens[[]]) == 0


def test_concatenate():
    joined = TokenizedTexts.concatenate([make([[1], [2, 3]]), make([[]]), make([[4, 5]])])
    assert joined.ids.tolist() == [1, 2, 3, 4, 5]
    assert joined.offsets.tolist() == [0, 1, 3, 3, 5]
    assert len(TokenizedTexts.concatenate([])) == 0
    one = make([[1], [2, 3]])
    assert TokenizedTexts.concatenate([one]) is one


def test_bad_indices_and_layouts():
    tokens = make([[1], [2]])
    with pytest.raises(IndexError, match="out of range for 2 texts"):
        tokens[[0, 2]]
    with pytest.raises(IndexError, match="boolean mask of length 3"):
        tokens[np.array([True, False, True])]
    with pytest.raises(IndexError, match="integers"):
        tokens[np.array([0.5])]
    with pytest.raises(ValueError, match="offsets must run from 0 to 2"):
        TokenizedTexts(np.array([1, 2], dtype=np.int32), np.array([0, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="int32"):
        TokenizedTexts(np.array([1, 2], dtype=np.int64), np.array([0, 2], dtype=np.int64))


@given(
    st.lists(st.lists(st.integers(0, 1000), max_size=6), min_size=1, max_size=12),
    st.data(),
)
def test_gather_equals_rows(rows, data):
    tokens = make(rows)
    picks = data.draw(st.lists(st.integers(-len(rows), len(rows) - 1), max_size=20))
    batch = tokens[picks]
    assert [batch.row(k).tolist() for k in range(len(batch))] == [rows[i] for i in picks]

"""Sparse text rows: col:val and comma-separated parsing, entry checks, CSR building, formatting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from xdex.data import ProblemLog
from xdex.data.filters import format_filter, read_filter
from xdex.data.sparse import Rows, format_pairs, parse_ids, parse_pairs, to_csr

PATH = Path("m.txt")


def _problems(log: ProblemLog) -> list[tuple[int | None, str]]:
    return [(p.line, p.message) for p in log.problems]


def test_parse_pairs_clean_rows():
    log = ProblemLog()
    rows = parse_pairs(["0:1 3:0.5", "", "2:2e1"], PATH, 2, log)
    assert not log
    np.testing.assert_array_equal(rows.indptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(rows.indices, [0, 3, 2])
    np.testing.assert_array_equal(rows.values, [1.0, 0.5, 20.0])


def test_parse_pairs_names_each_bad_line_and_keeps_the_rest():
    log = ProblemLog()
    rows = parse_pairs(["0:1", "3:", "x:1 1:1", "1:1", "4"], PATH, 2, log)
    assert _problems(log) == [
        (3, "'3:' is not a col:value pair (0-based integer column, number value)"),
        (4, "'x:1' is not a col:value pair (0-based integer column, number value)"),
        (6, "'4' is not a col:value pair (0-based integer column, number value)"),
    ]
    np.testing.assert_array_equal(rows.indptr, [0, 1, 1, 1, 2, 2])  # bad rows are left empty
    np.testing.assert_array_equal(rows.indices, [0, 1])


def test_parse_ids():
    log = ProblemLog()
    rows = parse_ids(["1,2", "", "7"], PATH, 1, log)
    assert not log
    np.testing.assert_array_equal(rows.indptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(rows.indices, [1, 2, 7])
    parse_ids(["1,,2", "99999999999999999999"], PATH, 1, log)
    assert [line for line, _ in _problems(log)] == [1, 2]


def test_to_csr_checks_every_entry():
    log = ProblemLog()
    rows = Rows.from_lists([[0, 2], [1, 1, -1], [5]], [[1.0, 0.0], [2.0, 2.0, 1.0], [1.0]])
    m = to_csr(rows, 3, PATH, 1, log, "label")
    assert _problems(log) == [
        (1, "label 2 has value 0.0; values must be finite and positive"),
        (2, "label id -1 is negative"),
        (2, "label id 1 appears more than once in the row"),
        (3, "label id 5 is out of range: there are 3 labels (ids 0..2)"),
    ]
    np.testing.assert_array_equal(m.toarray(), [[1, 0, 0], [0, 2, 0], [0, 0, 0]])


def test_to_csr_without_known_width_takes_the_largest_id():
    log = ProblemLog()
    m = to_csr(Rows.from_lists([[4], []]), None, PATH, 1, log, "label")
    assert not log and m.shape == (2, 5)


def test_format_pairs():
    m = sp.csr_matrix(np.array([[1.0, 0, 0.25], [0, 0, 0], [0, 3.0, 0]]))
    assert list(format_pairs(m)) == ["0:1 2:0.25", "", "1:3"]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 20), st.floats(1e-6, 1e6, allow_nan=False), max_size=5),
        min_size=1,
        max_size=8,
    )
)
def test_format_then_parse_is_identity(rows):
    ids = [sorted(r) for r in rows]
    values = [[r[c] for c in cols] for r, cols in zip(rows, ids, strict=False)]
    m = to_csr(Rows.from_lists(ids, values), 21, PATH, 1, ProblemLog(), "x")
    log = ProblemLog()
    back = to_csr(parse_pairs(list(format_pairs(m)), PATH, 1, log), 21, PATH, 1, log, "x")
    assert not log
    np.testing.assert_array_equal(back.toarray(), m.toarray())


def test_filter_file_round_trip(tmp_path):
    (tmp_path / "f.txt").write_text("1 2\n0 0\n")
    log = ProblemLog()
    m = read_filter(tmp_path / "f.txt", 2, 3, log)
    assert not log
    np.testing.assert_array_equal(m.toarray(), [[1, 0, 0], [0, 0, 1]])
    assert list(format_filter(m)) == ["0 0", "1 2"]
    (tmp_path / "empty.txt").write_text("")
    assert read_filter(tmp_path / "empty.txt", 2, 3, log).nnz == 0 and not log
    (tmp_path / "bad.txt").write_text("-1 0\n0 0 0\n")
    read_filter(tmp_path / "bad.txt", 2, 3, log)
    assert [line for line, _ in _problems(log)] == [1, 2]

import gzip

import numpy as np
import pytest
import scipy.sparse as sp
from zip_damage import marked_encrypted

from xdex.data.errors import DataFormatError
from xdex.metrics import Ranking, read_predictions, write_predictions, write_score_matrix

RANKING = Ranking.from_lists([[4, 2], [], [1, 0, 3]], [[0.9, 0.5], [], [0.7, 0.25, 0.125]])


def problems_of(path, n_rows=3, n_labels=5):
    with pytest.raises(DataFormatError) as info:
        read_predictions(path, n_rows, n_labels)
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize("name", ["p.jsonl", "p.jsonl.gz", "p.npz", "p.txt"])
def test_round_trip(tmp_path, name):
    path = tmp_path / name
    write_predictions(path, RANKING, n_labels=5)
    back = read_predictions(path, 3, 5)
    assert back.indices.tolist() == RANKING.indices.tolist()
    np.testing.assert_array_equal(back.scores, RANKING.scores)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left behind


def test_jsonl_rows_in_any_order_and_empty_rows(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 2, "labels": [3, 1], "scores": [2, 1.5]}\n\n{"id": 0, "labels": [0], "scores": [0.1]}\n'
                    '{"id": 1, "labels": [], "scores": []}\n')
    r = read_predictions(path, 3, 5)
    assert r.indices.tolist() == [[0, -1], [-1, -1], [3, 1]]
    assert read_predictions(path, 3, 5, k=1).indices.tolist() == [[0], [-1], [3]]


def test_empty_and_truncated_files_are_refused_with_the_counts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 2, "labels": [3, 1], "scores": [2, 1.5]}\n{"id": 0, "labels": [0], "scores": [0.1]}\n')
    assert problems_of(path) == [f'{path}: has prediction rows for 2 of the 3 test rows (the first missing "id" is '
                                 '1); a truncated file? Every test row needs a row, with empty "labels" and "scores" '
                                 'when it has no predictions']
    for name in ("p.jsonl", "p.jsonl.gz"):
        (tmp_path / name).write_bytes(b"" if name == "p.jsonl" else gzip.compress(b""))
        assert "has prediction rows for 0 of the 3 test rows" in problems_of(tmp_path / name)[0]
    (tmp_path / "p.txt").write_text("")
    assert problems_of(tmp_path / "p.txt") == [
        f"{tmp_path / 'p.txt'}: the file is empty; expected a 'rows cols' header and 3 rows of predictions"]


def test_deep_nesting_and_lone_surrogates_are_located(tmp_path):
    path = tmp_path / "p.jsonl"
    good = [f'{{"id": {i}, "labels": [], "scores": []}}' for i in range(3)]
    path.write_text("\n".join([good[0], "[" * 100000, '{"id": 1, "labels": [], "scores": [], "x": "\\ud800"}',
                               *good[1:]]) + "\n")
    assert problems_of(path) == [f"{path}:2: not valid JSON: nested too deeply",
                                 f'{path}:3: not valid JSON: "x" has a lone surrogate at character 1 (a text must be '
                                 'valid Unicode)']


def test_jsonl_problems_name_file_and_line(tmp_path):
    lines = [
        '{"id": 0, "labels": [1], "scores": [0.5]}',  # fine
        '{"id": 0, "labels": [2], "scores": [0.5]}',  # duplicate id
        '{"id": 1, "labels": [1, 2], "scores": [0.5]}',  # length mismatch
        '{"id": 7, "labels": [], "scores": []}',  # id out of range
        '{"id": 2, "labels": [5], "scores": [1]}',  # label out of range
        '{"id": 2, "labels": [-1], "scores": [1]}',  # negative label
        '{"id": 2, "labels": [1], "scores": ["high"]}',  # non-numeric score
        '{"id": 2, "labels": [1, 1], "scores": [1, 1]}',  # repeated label
        '{"id": 2, "labels": [1], "scores": [NaN]}',  # NaN score
        '{"id": "2", "labels": [1], "scores": [1]}',  # id not an integer
        '{"id": 2, "labels": [1]}',  # no scores
        "[1, 2]",  # not an object
        '{"id": 2, "labels": [1], "scores": [1]',  # bad JSON
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    found = problems_of(path)
    assert found == [
        f"{path}:2: duplicate id 0 (first on line 1)",
        f"{path}:3: 2 labels but 1 scores",
        f'{path}:4: "id" 7 is out of range: the test split has 3 rows (ids 0..2)',
        f"{path}:5: label 5 at position 0 is not a label id (0..4)",
        f"{path}:6: label -1 at position 0 is not a label id (0..4)",
        f"{path}:7: score 'high' at position 0 is not a number",
        f"{path}:8: a label id appears twice in one row",
        f"{path}:9: score nan at position 0 is not a number",
        f"{path}:10: \"id\" must be an integer, found '2'",
        f'{path}:11: missing "scores"',
        f"{path}:12: expected a JSON object, found list",
        f"{path}:13: not valid JSON: Expecting ',' delimiter (column 39)",
    ]


def test_undecodable_jsonl_is_reported(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": 0, "labels": [1], "scores": [1]}\n\xff\xfe\n'))
    assert problems_of(path) == [f"{path}:2: not UTF-8 text (invalid start byte at byte 0)"]


def test_xc_text_problems(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("3 5\n1:0.5 2:x\n7:1\n0:1 0:2\n1:1\n")
    assert problems_of(path) == [
        f"{path}:2: token '2:x' is not label:score",
        f"{path}:3: label id 7 is out of range (0..4)",
        f"{path}:4: a label id appears twice in one row",
        f"{path}:5: more than the 3 rows the header announces",
    ]
    path.write_text("3 6\n")
    assert problems_of(path) == [f"{path}:1: the header says 3 x 6 but the test split is 3 x 5"]
    path.write_text("three 5\n")
    assert problems_of(path) == [f"{path}:1: expected a 'rows cols' header, found 'three 5'"]
    path.write_text("3 5\n0:1\n")
    assert problems_of(path) == [f"{path}: has 1 rows of predictions but the header says 3"]


def test_xc_text_ranks_by_score_and_allows_empty_rows(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("3 5\n1:0.5 3:0.5 0:0.9\n\n2:-1\n\n")  # ties: 1 before 3; a trailing blank line
    r = read_predictions(path, 3, 5)
    assert r.indices.tolist() == [[0, 1, 3], [-1, -1, -1], [2, -1, -1]]
    assert read_predictions(path, 3, 5, k=2).k == 2


def test_npz_problems(tmp_path):
    path = tmp_path / "p.npz"
    write_score_matrix(path, sp.csr_matrix((3, 4)))
    assert problems_of(path) == [f"{path}: the score matrix is 3 x 4 but the test split is 3 x 5"]
    write_score_matrix(path, sp.csr_matrix(([1.0, np.nan], [0, 1], [0, 1, 1, 2]), shape=(3, 5)))
    assert problems_of(path) == [f"{path}: row 2 has a NaN score"]
    sp.save_npz(path, sp.csr_matrix(([1.0, 2.0, 3.0], [4, 1, 4], [0, 0, 3, 3]), shape=(3, 5)))
    assert problems_of(path) == [f"{path}: row 1 stores label 4 twice"]
    path.write_bytes(b"not a zip file")
    assert problems_of(path)[0].startswith(f"{path}: not a scipy sparse .npz score matrix")
    write_score_matrix(path, sp.csr_matrix((3, 5)))
    path.write_bytes(marked_encrypted(path.read_bytes()))  # zipfile raises RuntimeError: a password is required
    assert problems_of(path)[0].startswith(f"{path}: not a scipy sparse .npz score matrix")


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown prediction file type"):
        write_predictions(tmp_path / "p.csv", RANKING, 5)
    (tmp_path / "p.csv").write_text("")
    with pytest.raises(ValueError, match="use one of .jsonl, .jsonl.gz, .npz, .txt"):
        read_predictions(tmp_path / "p.csv", 3, 5)
    with pytest.raises(FileNotFoundError, match="prediction file not found"):
        read_predictions(tmp_path / "absent.jsonl", 3, 5)


def test_numbers_beyond_float_or_int_conversion_are_located(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 0, "labels": [1], "scores": [1' + "0" * 400 + ']}\n'
                    '{"id": 1, "labels": [1], "scores": [-1' + "0" * 400 + ']}\n'
                    '{"id": 2, "labels": [], "scores": []}\n')
    assert problems_of(path) == [f"{path}:1: score 1000000000000000000000000000000000000... at position 0 is beyond "
                                 "the range of a float",
                                 f"{path}:2: score -100000000000000000000000000000000000... at position 0 is beyond "
                                 "the range of a float"]
    path = tmp_path / "p.txt"
    path.write_text("9" * 5000 + " 5\n")
    assert problems_of(path) == [f"{path}:1: the header says {'9' * 37}... x 5 but the test split is 3 x 5"]
    path.write_text("3 5\n" + "9" * 5000 + ":1\n\n\n")
    assert problems_of(path) == [f"{path}:2: label id {'9' * 37}... is out of range (0..4)"]


def test_long_values_are_cut_short_in_messages(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "' + "x" * 10_000 + '", "labels": [], "scores": []}\n'
                    '{"id": 1, "labels": [' + "[" * 900 + "]" * 900 + '], "scores": [1]}\n')
    found = problems_of(path)
    assert found[:2] == [f"{path}:1: \"id\" must be an integer, found '{'x' * 36}...",
                         f"{path}:2: label {'[' * 37}... at position 0 is not a label id (0..4)"]
    path = tmp_path / "p.txt"
    path.write_text("3 5\n1:x" + "y" * 10_000 + "\n\n\n")
    assert problems_of(path) == [f"{path}:2: token '1:x{'y' * 33}... is not label:score"]

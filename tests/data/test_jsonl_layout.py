"""The jsonl layout on small hand-written folders: reading, every kind of problem, writing."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.data import Catalogue, DataFormatError, Dataset, Split, load, save, validate

LABELS = (
    '{"id": 0, "key": "cat", "text": "Cat", "desc": "a small feline"}\n'
    '{"id": 1, "key": "dog", "text": "Dog", "desc": "a loyal canine"}\n'
    '{"id": 2, "key": "fish", "text": "Fish"}\n'
)
AUX = '{"id": 0, "key": "pets", "text": "Pets"}\n{"id": 1, "key": "wild", "text": "Wild"}\n'
TRAIN = (
    '{"id": 0, "key": "d0", "text": "cats and dogs", "labels": [1, 0], "aux": [0], "rel": ["def", "syn"]}\n'
    '{"id": 1, "key": "d1", "text": "a fish", "labels": [2]}\n'
)
TEST = '{"id": 0, "key": "t0", "text": "dog food", "labels": [1], "aux": [1, 0]}\n'
GOOD = {
    "labels.jsonl": LABELS,
    "aux.jsonl": AUX,
    "train.jsonl": TRAIN,
    "test.jsonl": TEST,
    "filter_labels_test.txt": "0 0\n",
}


def test_reads_every_part(make_folder):
    ds = load(make_folder(GOOD))
    assert ds.meta["layout"] == "jsonl"
    assert ds.labels.ids == ["cat", "dog", "fish"]
    assert ds.labels.texts == ["Cat", "Dog", "Fish"]
    assert ds.labels.descs == ["a small feline", "a loyal canine", ""]
    assert ds.akp_items.ids == ["pets", "wild"] and ds.akp_items.descs is None
    assert ds.train.ids == ["d0", "d1"] and ds.train.texts == ["cats and dogs", "a fish"]
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[1, 1, 0], [0, 0, 1]])
    np.testing.assert_array_equal(ds.train.akp.toarray(), [[1, 0], [0, 0]])
    np.testing.assert_array_equal(ds.test.akp.toarray(), [[1, 1]])
    np.testing.assert_array_equal(ds.test.filter.toarray(), [[1, 0, 0]])
    assert ds.train.filter is None


def test_optional_parts_gzip_and_crlf(make_folder):
    folder = make_folder(
        {
            "labels.jsonl.gz": '{"text": "A"}\r\n{"text": "B"}\r\n',
            "train.jsonl.gz": '{"text": "x", "labels": [1]}\r\n{"text": "", "labels": []}\r\n',
        }
    )
    ds = load(folder)
    assert ds.test is None and ds.akp_items is None and ds.labels.descs is None
    assert ds.labels.ids == ["0", "1"] and ds.train.ids == ["0", "1"]
    assert ds.train.texts == ["x", ""]
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[0, 1], [0, 0]])


BAD_ROWS = [
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [2]', 2, "malformed JSON"),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish"}', 2, 'missing field "labels"'),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": "2"}', 2, '"labels" must be a list'),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [2.5]}', 2, "integer ids, found 2.5"),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [3]}', 2, "label id 3 is out of range"),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [-1]}', 2, "label id -1 is negative"),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [2, 2]}', 2, "appears more than once"),
    ("train.jsonl", '{"id": "1", "key": "d1", "text": "a fish", "labels": [2]}', 2, '"id" must be an integer'),
    ("train.jsonl", '{"id": 7, "key": "d1", "text": "a fish", "labels": [2]}', 2, '"id" is 7 but this is row 1'),
    ("train.jsonl", '{"id": 1, "key": "d0", "text": "a fish", "labels": [2]}', 2, "duplicate key 'd0' (first on"),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": ["a"], "labels": [2]}', 2, '"text" must be a string, found a list'),
    ("train.jsonl", '{"id": 1, "key": "d1", "text": "a fish", "labels": [2], "aux": [5]}', 2, "auxiliary item id 5"),
    ("train.jsonl", "[1, 2]", 2, "expected a JSON object, found a list"),
    ("train.jsonl", "null", 2, "expected a JSON object, found null"),
    ("train.jsonl", "[" * 100000, 2, "malformed JSON"),
    ("train.jsonl", "", 2, "empty line"),
    ("labels.jsonl", '{"id": 1, "key": "dog", "text": "  "}', 2, "the label has no text"),
    ("labels.jsonl", '{"id": 1, "key": "dog", "desc": "x"}', 2, 'missing field "text"'),
    ("labels.jsonl", '{"id": 1, "key": null, "text": "Dog"}', 2, '"key" must be a string or an integer'),
    ("aux.jsonl", '{"id": 1, "key": "wild", "text": ""}', 2, "the auxiliary item has no text"),
]


@pytest.mark.parametrize("name, row, line, message", BAD_ROWS)
def test_each_bad_row_is_reported_at_its_line(make_folder, name, row, line, message):
    lines = GOOD[name].splitlines()
    lines[line - 1] = row
    folder = make_folder({**GOOD, name: "\n".join(lines) + "\n"})
    problems = validate(folder)
    assert any(p.path == str(folder / name) and p.line == line and message in p.message for p in problems), problems
    with pytest.raises(DataFormatError, match=f"{name}:{line}: "):
        load(folder)


@pytest.mark.parametrize(
    "files, name, line, message",
    [
        ({"train.jsonl": TRAIN.encode() + b'{"text": "caf\xe9", "labels": []}\n'}, "train.jsonl", 3, "invalid UTF-8"),
        ({"labels.jsonl": ""}, "labels.jsonl", None, "the file is empty"),
        ({"filter_labels_test.txt": "0 0\n1 0\n"}, "filter_labels_test.txt", 2, "row 1 is out of range"),
        ({"filter_labels_test.txt": "0 3\n"}, "filter_labels_test.txt", 1, "label 3 is out of range"),
        ({"filter_labels_test.txt": "0 0\n0 0\n"}, "filter_labels_test.txt", 2, "repeats line 1"),
        ({"filter_labels_test.txt": "0 x\n"}, "filter_labels_test.txt", 1, "expected two non-negative integers"),
        ({"filter_labels_train.txt": "2 0\n"}, "filter_labels_train.txt", 1, "row 2 is out of range"),
    ],
)
def test_file_level_problems(make_folder, files, name, line, message):
    folder = make_folder({**GOOD, **files})
    problems = validate(folder)
    assert any(p.path == str(folder / name) and p.line == line and message in p.message for p in problems), problems


def test_truncated_gzip_names_the_line_where_it_breaks(make_folder):
    rows = "".join(f'{{"text": "document {i} {"x" * (i % 7)}", "labels": [0]}}\n' for i in range(2000))
    data = gzip.compress(rows.encode(), mtime=0)
    folder = make_folder({"labels.jsonl": LABELS, "train.jsonl.gz": data[: len(data) // 2]})
    problems = validate(folder)
    assert len(problems) == 1
    (problem,) = problems
    assert problem.path == str(folder / "train.jsonl.gz") and "truncated or corrupt" in problem.message
    assert problem.line is not None and 1 < problem.line <= 2000
    assert problem.message.startswith(f"the gzip data is truncated or corrupt after line {problem.line - 1} ")


def test_folder_level_problems(make_folder):
    folder = make_folder({"train.jsonl": TRAIN.replace(', "aux": [0]', ""), "train.jsonl.gz": TRAIN})
    messages = [str(p) for p in validate(folder)]
    assert f"{folder}: both train.jsonl and train.jsonl.gz exist; keep only one of them" in messages
    assert f"{folder}: missing labels.jsonl (or labels.jsonl.gz)" in messages

    stray = make_folder({"labels.jsonl": LABELS, "train.jsonl": TRAIN}, name="stray")
    assert [(p.line, p.message) for p in validate(stray)] == [
        (1, 'the rows have "aux" links but the folder has no aux.jsonl')
    ]


def _tiny(relevance: float = 1.0) -> Dataset:
    labels = sp.csr_matrix(np.array([[relevance, 0.0]]))
    return Dataset("tiny", Split(["a"], ["text a"], labels), Catalogue(["x", "y"], ["X", "Y"]))


def test_writer_refuses_to_overwrite_then_replaces_and_cleans_up(tmp_path):
    save(_tiny(), tmp_path, "jsonl", compress=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl.gz", "train.jsonl.gz"]
    before = (tmp_path / "train.jsonl.gz").read_bytes()
    with pytest.raises(FileExistsError, match="train.jsonl.gz"):
        save(_tiny(), tmp_path, "jsonl")
    assert (tmp_path / "train.jsonl.gz").read_bytes() == before
    save(_tiny(), tmp_path, "jsonl", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl", "train.jsonl"]
    assert (tmp_path / "train.jsonl").read_text() == '{"id": 0, "key": "a", "text": "text a", "labels": [0]}\n'


def test_writer_output_is_reproducible(tmp_path):
    save(_tiny(), tmp_path / "a", "jsonl", compress=True)
    save(_tiny(), tmp_path / "b", "jsonl", compress=True)
    for name in ("train.jsonl.gz", "labels.jsonl.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_writer_refuses_what_jsonl_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="relevances other than 1"):
        save(_tiny(relevance=0.5), tmp_path, "jsonl")
    bow = _tiny()
    bow.train.features = sp.csr_matrix(np.ones((1, 3)))
    with pytest.raises(ValueError, match="bag-of-words features"):
        save(bow, tmp_path, "jsonl")
    assert list(tmp_path.iterdir()) == []


def test_texts_with_line_breaks_round_trip(tmp_path):
    ds = _tiny()
    ds.train.texts[0] = "two\nlines\r\n"
    save(ds, tmp_path, "jsonl")
    assert load(tmp_path).train.texts == ["two\nlines\r\n"]

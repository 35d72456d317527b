"""The raw-text layout (trn_X.txt, trn_X_Y.txt, Y.txt ...) and its aux / ids / desc extensions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.data import Catalogue, Dataset, Split, load, save, validate

GOOD = {
    "trn_X.txt": "red leather shoe\r\nwool hat\r\n\r\n",
    "trn_X_Y.txt": "3 2\n0:1 1:0.25\n1:1\n\n",
    "tst_X.txt": "blue sock\n",
    "tst_X_Y.txt": "1 2\n1:2\n",
    "Y.txt": "Shoes\nHats\n",
    "lbl_desc.txt": "things for feet\n\n",
    "trn_ids.txt": "p1\np2\np3\n",
    "aux_X.txt": "Clothing\n",
    "trn_X_aux.txt": "3 1\n0:1\n\n0:1\n",
    "filter_labels_test.txt": "0 1\n",
}


def test_reads_every_part(make_folder):
    ds = load(make_folder(GOOD))
    assert ds.meta["layout"] == "xc-raw"
    assert ds.train.ids == ["p1", "p2", "p3"] and ds.test.ids == ["0"]
    assert ds.train.texts == ["red leather shoe", "wool hat", ""]
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[1, 0.25], [0, 1], [0, 0]])
    np.testing.assert_array_equal(ds.test.labels.toarray(), [[0, 2]])
    assert (ds.labels.ids, ds.labels.texts, ds.labels.descs) == (["0", "1"], ["Shoes", "Hats"], ["things for feet", ""])
    assert ds.akp_items.texts == ["Clothing"]
    np.testing.assert_array_equal(ds.train.akp.toarray(), [[1], [0], [1]])
    np.testing.assert_array_equal(ds.test.akp.toarray(), [[0]])
    np.testing.assert_array_equal(ds.test.filter.toarray(), [[0, 1]])


@pytest.mark.parametrize(
    "name, content, line, message",
    [
        ("trn_X_Y.txt", "3 2\n0:1 1:\n1:1\n\n", 2, "'1:' is not a col:value pair"),
        ("trn_X_Y.txt", "3 2\n0:1 a:1\n1:1\n\n", 2, "'a:1' is not a col:value pair"),
        ("trn_X_Y.txt", "3 2\n0:1 1:1:1\n1:1\n\n", 2, "'1:1:1' is not a col:value pair"),
        ("trn_X_Y.txt", "3 2\n0:1\n2:1\n\n", 3, "label id 2 is out of range"),
        ("trn_X_Y.txt", "3 2\n0:1 0:1\n1:1\n\n", 2, "label id 0 appears more than once"),
        ("trn_X_Y.txt", "3 2\n0:-1\n1:1\n\n", 2, "values must be finite and positive"),
        ("trn_X_Y.txt", "3 2\n0:nan\n1:1\n\n", 2, "values must be finite and positive"),
        ("trn_X_Y.txt", "4 2\n0:1\n1:1\n\n", 1, "the header says 4 rows but 3 follow"),
        ("trn_X_Y.txt", "3 5\n0:1\n1:1\n\n", 1, "the header says 5 columns but there are 2 labels"),
        ("trn_X_Y.txt", "3\n0:1\n1:1\n\n", 1, "expected a header 'rows cols'"),
        ("trn_X_Y.txt", "2 2\n0:1\n1:1\n", 4, "the file ends after 2 rows, but trn_X.txt has 3"),
        ("trn_X_aux.txt", "3 1\n0:1\n\n1:1\n", 4, "auxiliary item id 1 is out of range"),
        ("Y.txt", "Shoes\n \n", 2, "the label has no text"),
        ("aux_X.txt", "\n", 1, "the auxiliary item has no text"),
        ("trn_ids.txt", "p1\np1\np3\n", 2, "duplicate id 'p1' (first on line 1)"),
        ("trn_ids.txt", "p1\np2\n", 3, "the file ends after 2 rows, but trn_X.txt has 3"),
        ("lbl_desc.txt", "a\nb\nc\n", 3, "the file has 3 rows, but Y.txt has only 2"),
        ("tst_X.txt", b"blue \xc3\x28sock\n", 1, "invalid UTF-8 at byte 6"),
        ("filter_labels_test.txt", "1 1\n", 1, "row 1 is out of range"),
    ],
)
def test_each_problem_names_file_and_line(make_folder, name, content, line, message):
    folder = make_folder({**GOOD, name: content})
    problems = validate(folder)
    assert any(p.path == str(folder / name) and p.line == line and message in p.message for p in problems), problems


def test_missing_and_ambiguous_files(make_folder):
    files = {k: v for k, v in GOOD.items() if k not in ("trn_X_Y.txt", "tst_X.txt")}
    folder = make_folder({**files, "lbl_X.txt": "Shoes\nHats\n"})
    assert [str(p) for p in validate(folder)] == [
        f"{folder}: both lbl_X.txt and Y.txt exist; keep only one of them",
        f"{folder}: missing trn_X_Y.txt, the labels of trn_X.txt",
        f"{folder}: missing tst_X.txt, the test texts",
        f"{folder / 'filter_labels_test.txt'}: a filter for the test split, but the folder has no test split",
    ]


def _dataset(text: str) -> Dataset:
    train = Split(["a"], [text], sp.csr_matrix(np.array([[1.0, 0.0]])))
    return Dataset("d", train, Catalogue(["x", "y"], ["X", "Y"], ["desc x", "desc y"]))


def test_writer_files_and_formats(tmp_path):
    save(_dataset("one line"), tmp_path, "xc-raw")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["lbl_X.txt", "lbl_desc.txt", "lbl_ids.txt", "trn_X.txt", "trn_X_Y.txt", "trn_ids.txt"]
    assert (tmp_path / "trn_X_Y.txt").read_text() == "1 2\n0:1\n"
    assert (tmp_path / "lbl_ids.txt").read_text() == "x\ny\n"


def test_writer_refuses_line_breaks(tmp_path):
    with pytest.raises(ValueError, match="the text of train document 'a' has a line break"):
        save(_dataset("two\nlines"), tmp_path, "xc-raw")
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_compress(tmp_path):
    with pytest.raises(ValueError, match="compress applies to jsonl only"):
        save(_dataset("x"), tmp_path, "xc-raw", compress=True)

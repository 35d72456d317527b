"""The Extreme Classification Repository LF raw layout (trn/tst/lbl.json.gz)."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.data import load, validate

LBL = (
    '{"uid": "L1", "title": "Red shoe", "content": "A shoe that is red."}\n'
    '{"uid": "L2", "title": "Blue hat", "content": ""}\n'
    '{"uid": 3, "title": "Green sock"}\n'
)
TRN = (
    '{"uid": "D1", "title": "Shoe", "content": "red leather", "target_ind": [0, 2], "target_rel": [1.0, 0.5]}\n'
    '{"uid": "D2", "title": "Hat", "target_ind": [1]}\n'
)
TST = '{"uid": "T1", "title": "Sock", "content": "wool", "target_ind": [2]}\n'
GOOD = {"lbl.json.gz": LBL, "trn.json.gz": TRN, "tst.json.gz": TST, "tst_filter_labels.txt": "0 2\n"}


def test_reads_titles_relevances_and_filters(make_folder):
    ds = load(make_folder(GOOD))
    assert ds.meta["layout"] == "xc-lf"
    assert ds.labels.ids == ["L1", "L2", "3"]
    assert ds.labels.texts == ["Red shoe", "Blue hat", "Green sock"]
    assert ds.labels.descs == ["A shoe that is red.", "", ""]
    assert ds.train.ids == ["D1", "D2"] and ds.train.texts == ["Shoe", "Hat"]
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[1.0, 0, 0.5], [0, 1.0, 0]])
    np.testing.assert_array_equal(ds.test.filter.toarray(), [[0, 0, 1]])


def test_title_plus_content(make_folder):
    ds = load(make_folder(GOOD), text="title+content")
    assert ds.train.texts == ["Shoe red leather", "Hat"]
    assert ds.test.texts == ["Sock wool"]
    assert ds.labels.texts == ["Red shoe A shoe that is red.", "Blue hat", "Green sock"]


def test_plain_json_files(make_folder):
    ds = load(make_folder({"lbl.json": LBL, "trn.json": TRN}))
    assert ds.test is None and len(ds.labels) == 3


@pytest.mark.parametrize(
    "name, row, line, message",
    [
        ("lbl.json.gz", '{"uid": "L2", "title": " "}', 2, "the label has no title"),
        ("lbl.json.gz", '{"uid": "L1", "title": "Again"}', 2, "duplicate uid 'L1' (first on line 1)"),
        ("trn.json.gz", '{"uid": "D2", "title": "Hat", "target_ind": [1], "target_rel": [1, 2]}', 2, "2 entries for 1"),
        ("trn.json.gz", '{"uid": "D2", "title": "Hat", "target_ind": [1], "target_rel": [0]}', 2, "value 0.0"),
        ("trn.json.gz", '{"uid": "D2", "title": "Hat", "target_ind": [9]}', 2, "label id 9 is out of range"),
        ("trn.json.gz", '{"uid": "D2", "title": "Hat"}', 2, 'missing field "target_ind"'),
        ("trn.json.gz", '{"uid": "D2", "title": "Hat", "target_ind": [1]', 2, "malformed JSON"),
    ],
)
def test_bad_rows(make_folder, name, row, line, message):
    lines = GOOD[name].splitlines()
    lines[line - 1] = row
    folder = make_folder({**GOOD, name: "\n".join(lines) + "\n"})
    problems = validate(folder)
    assert any(p.path == str(folder / name) and p.line == line and message in p.message for p in problems), problems


def test_both_filter_spellings_are_a_problem(make_folder):
    folder = make_folder({**GOOD, "filter_labels_test.txt": "0 2\n"})
    assert [p.message for p in validate(folder)] == [
        "both filter_labels_test.txt and tst_filter_labels.txt exist; keep only one of them"
    ]


def test_unknown_text_choice(make_folder):
    with pytest.raises(ValueError, match="text must be one of title, title\\+content"):
        load(make_folder(GOOD), text="content")


def test_a_relevance_beyond_the_range_of_a_float_is_located(make_folder):
    folder = make_folder({
        "lbl.json": '{"uid": "L1", "title": "Red"}\n',
        "trn.json": '{"uid": "D1", "title": "Shoe", "target_ind": [0], "target_rel": [1' + "0" * 400 + "]}\n",
    })
    assert [str(p) for p in validate(folder)] == [
        f"{folder / 'trn.json'}:1: \"target_rel\" holds a number beyond the range of a float"]


def test_a_long_bad_value_is_cut_short_in_its_message(make_folder):
    folder = make_folder({
        "lbl.json": '{"uid": "L1", "title": "Red"}\n',
        "trn.json": '{"uid": "D1", "title": "Shoe", "target_ind": [0, "' + "x" * 10_000 + '"]}\n'
                    '{"uid": "D2", "title": "Hat", "target_ind": [' + "[" * 900 + "]" * 900 + "]}\n",
    })
    assert [str(p) for p in validate(folder)] == [
        f"{folder / 'trn.json'}:1: \"target_ind\" must hold integer ids, found \"{'x' * 36}...",
        f"{folder / 'trn.json'}:2: \"target_ind\" must hold integer ids, found {'[' * 37}...",
    ]

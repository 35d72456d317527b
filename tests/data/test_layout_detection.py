"""Which layout a folder is in, and the errors for folders that are in none."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdex.data import BUNDLED, DataFormatError, load, resolve_source, validate

MARKER_FILES = {
    "jsonl": {"train.jsonl": '{"text": "a", "labels": [0]}\n', "labels.jsonl": '{"text": "A"}\n'},
    "xc-lf": {"trn.json.gz": '{"title": "a", "target_ind": [0]}\n', "lbl.json.gz": '{"title": "A"}\n'},
    "xc-raw": {"trn_X.txt": "a\n", "trn_X_Y.txt": "1 1\n0:1\n", "lbl_X.txt": "A\n"},
    "bow": {"train.txt": "1 1 1\n0 0:1\n"},
}


@pytest.mark.parametrize("layout", MARKER_FILES)
def test_detects_each_layout(make_folder, layout):
    ds = load(make_folder(MARKER_FILES[layout]))
    assert ds.meta["layout"] == layout
    assert ds.train.labels.toarray().tolist() == [[1.0]]


def test_no_dataset_files_lists_what_was_looked_for(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DataFormatError) as e:
        load(tmp_path)
    assert str(e.value) == (
        f"{tmp_path}: no dataset files found; looked for train.jsonl or train.jsonl.gz (jsonl); "
        "trn.json.gz or trn.json (xc-lf); trn_X.txt (xc-raw); Y.trn.npz (npz); train.txt (bow)"
    )


def test_several_layouts_need_a_choice(make_folder):
    folder = make_folder({**MARKER_FILES["jsonl"], **MARKER_FILES["bow"]})
    (problem,) = validate(folder)
    assert "files of several layouts: train.jsonl (jsonl); train.txt (bow)" in problem.message
    assert load(folder, layout="bow").meta["layout"] == "bow"


def test_missing_folder_and_bad_arguments(tmp_path):
    assert [str(p) for p in validate(tmp_path / "nope")] == [f"{tmp_path / 'nope'}: no such folder"]
    assert [str(p) for p in validate(tmp_path / "nope", layout="jsonl")] == [f"{tmp_path / 'nope'}: no such folder"]
    with pytest.raises(ValueError, match="layout must be one of jsonl, xc-lf, xc-raw, npz, bow, not 'csv'"):
        load(tmp_path, layout="csv")


def test_demo_names_the_bundled_folder(tmp_path):
    assert resolve_source("demo") == BUNDLED["demo"]
    assert resolve_source("./demo") == Path("demo")
    assert resolve_source(Path("demo")) == Path("demo")
    assert sorted(p.name for p in BUNDLED["demo"].iterdir()) == [
        "GFDL-1.3.txt",
        "LICENSE.txt",
        "README.txt",
        "filter_labels_test.txt",
        "labels.jsonl.gz",
        "stats.json",
        "test.jsonl.gz",
        "train.jsonl.gz",
    ]

"""The layout of PECOS and DEXML: X.trn.txt / Y.trn.npz / output-items.txt, read and written through the same
validated readers as every layout; every problem names its file and, for an entry, its row."""

from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from data_strategies import assert_same_dataset, datasets
from hypothesis import HealthCheck, given, settings
from zip_damage import marked_encrypted

from xdex.data import Catalogue, DataFormatError, Dataset, Split, load, save, validate


def npz_bytes(matrix) -> bytes:
    """The bytes ``scipy.sparse.save_npz`` writes for ``matrix``."""
    buffer = io.BytesIO()
    sp.save_npz(buffer, matrix)
    return buffer.getvalue()


def raw_npz(**arrays) -> bytes:
    """An .npz file of exactly these arrays, for matrices that scipy would refuse to build."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def zip_of(**members: str) -> bytes:
    """A zip whose members are not numpy arrays."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return buffer.getvalue()


Y_TRN = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0]], dtype=np.float32))
PECOS = {
    "X.trn.txt": "red leather shoe\nwool hat\n\n",
    "Y.trn.npz": npz_bytes(Y_TRN),
    "X.tst.txt": "blue sock\n",
    "Y.tst.npz": npz_bytes(sp.csc_matrix(np.array([[0, 0.5, 0]]))),
    "output-items.txt": "Shoes\nHats\nClothing\n",
    "filter_labels_test.txt": "0 2\n",
}


def test_reads_a_pecos_folder(make_folder):
    ds = load(make_folder(PECOS))
    assert ds.meta["layout"] == "npz"
    assert ds.train.texts == ["red leather shoe", "wool hat", ""] and ds.train.ids == ["0", "1", "2"]
    np.testing.assert_array_equal(ds.train.labels.toarray(), Y_TRN.toarray())
    np.testing.assert_array_equal(ds.test.labels.toarray(), [[0, 0.5, 0]])  # csc, a relevance kept as is
    assert ds.labels.texts == ["Shoes", "Hats", "Clothing"] and ds.labels.ids == ["0", "1", "2"]
    np.testing.assert_array_equal(ds.test.filter.toarray(), [[0, 0, 1]])


def test_reads_a_dexml_folder_with_its_raw_texts(make_folder):
    coo = sp.coo_matrix(([1.0, 1.0], ([0, 1], [2, 0])), shape=(2, 3))
    folder = make_folder({"Y.trn.npz": npz_bytes(coo), "Y.tst.npz": npz_bytes(sp.csr_matrix((1, 3))),
                          "X.trn.npz": npz_bytes(sp.csr_matrix(np.eye(2))),  # TF-IDF features: not read
                          "raw/trn_X.txt": "a\nb\n", "raw/tst_X.txt": "c\n", "raw/Y.txt": "A\nB\nC\n",
                          "filter_labels_train.txt": ""})
    ds = load(folder)
    assert ds.meta["layout"] == "npz"
    assert ds.train.texts == ["a", "b"] and ds.test.texts == ["c"] and ds.labels.texts == ["A", "B", "C"]
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[0, 0, 1], [1, 0, 0]])
    assert ds.test.labels.nnz == 0 and ds.train.filter.nnz == 0
    (folder / "raw" / "Y.txt").write_text("A\nB\n", encoding="utf-8")
    assert problems(folder) == [f"{folder / 'Y.trn.npz'}: the matrix has 3 columns, but raw/Y.txt has 2 labels",
                                f"{folder / 'Y.trn.npz'}:1: matrix row 0: label id 2 is out of range: there are 2 "
                                "labels (ids 0..1)",
                                f"{folder / 'Y.tst.npz'}: the matrix has 3 columns, but raw/Y.txt has 2 labels"]


def problems(folder) -> list[str]:
    return [str(p) for p in validate(folder)]


@pytest.mark.parametrize(
    "name, content, line, message",
    [
        ("Y.trn.npz", npz_bytes(sp.csr_matrix((2, 3))), None, "the matrix has 2 rows, but X.trn.txt has 3 lines"),
        ("Y.trn.npz", npz_bytes(sp.csr_matrix((3, 4))), None,
         "the matrix has 4 columns, but output-items.txt has 3 labels"),
        ("Y.trn.npz", npz_bytes(sp.csr_matrix(np.array([[1, 0, 0], [0, -2, 0], [0, 0, 0]]))), 2,
         "matrix row 1: label 1 has value -2.0; values must be finite and positive"),
        ("Y.trn.npz", npz_bytes(sp.csr_matrix(np.array([[1, 0, 0], [0, 0, 0], [0, np.nan, 0]]))), 3,
         "matrix row 2: label 1 has value nan; values must be finite and positive"),
        ("Y.trn.npz", raw_npz(format=b"csr", shape=np.array([3, 3]), data=np.array([1.0, 0.0]),
                              indices=np.array([0, 1]), indptr=np.array([0, 0, 2, 2])), 2,
         "matrix row 1: label 1 has value 0.0"),  # an explicit zero that scipy keeps
        ("Y.trn.npz", raw_npz(format=b"coo", shape=np.array([3, 3]), data=np.ones(2), row=np.array([2, 2]),
                              col=np.array([1, 1])), 3, "matrix row 2: label id 1 appears more than once in the row"),
        ("Y.trn.npz", raw_npz(format=b"csr", shape=np.array([3, 3]), data=np.ones(1), indices=np.array([5]),
                              indptr=np.array([0, 1, 1, 1])), 1,
         "matrix row 0: label id 5 is out of range: there are 3 labels (ids 0..2)"),
        ("Y.trn.npz", b"1 2\n0:1\n", None, "not a .npz file (a zip of numpy arrays"),
        ("Y.trn.npz", b"", None, "the file is empty"),
        ("Y.trn.npz", b"PK\x03\x04 cut short", None, "cannot be read as a .npz file"),
        ("Y.trn.npz", marked_encrypted(npz_bytes(sp.csr_matrix((3, 3)))), None, "cannot be read as a .npz file"),
        ("Y.trn.npz", raw_npz(format=np.array(["csr"], dtype=object)), None,
         "Object arrays cannot be loaded when allow_pickle=False"),
        ("Y.trn.npz", raw_npz(y=np.ones(3)), None, "no 'format' array: not a sparse matrix"),
        ("Y.trn.npz", zip_of(notes="hello"), None, "not a .npz file: notes in the zip is not a numpy array"),
        ("Y.trn.npz", npz_bytes(sp.dia_matrix(np.eye(3))), None, "a sparse matrix in format 'dia'"),
        ("Y.trn.npz", raw_npz(format=b"csr", shape=np.array([3, 3]), data=np.ones(1), indices=np.array([0])), None,
         "the csr matrix lacks its indptr array"),
        ("Y.trn.npz", raw_npz(format=b"csr", shape=np.array([3, 3]), data=np.ones(1), indices=np.array([0]),
                              indptr=np.array([0, 1, 0, 1])), None, "damaged csr arrays"),
        ("Y.trn.npz", raw_npz(format=b"csr", shape=np.array([3, 3]), data=np.array(["a"]), indices=np.array([0]),
                              indptr=np.array([0, 1, 1, 1])), None, "the data array must be a 1-d array of numbers"),
        ("Y.trn.npz", raw_npz(format=b"coo", shape=np.array([3, 3]), data=np.ones(1), row=np.array([7]),
                              col=np.array([0])), None, "1 stored entries lie outside the 3 rows"),
        ("output-items.txt", "Shoes\n\nClothing\n", 2, "the label has no text"),
        ("X.trn.txt", b"a\n\xff\n\n", 2, "invalid UTF-8"),
        ("trn_ids.txt", "a\na\nb\n", 2, "duplicate id 'a' (first on line 1)"),
    ],
)
def test_each_problem_names_file_and_row(make_folder, name, content, line, message):
    folder = make_folder({**PECOS, name: content})
    found = validate(folder)
    assert any(Path(p.path) == folder / name and p.line == line and message in p.message for p in found), found
    with pytest.raises(DataFormatError, match=name.replace(".", r"\.")):
        load(folder)


def test_missing_files_are_named(make_folder):
    folder = make_folder({k: v for k, v in PECOS.items() if k not in ("X.tst.txt", "output-items.txt")})
    assert problems(folder) == [
        f"{folder}: missing output-items.txt (or Y.txt, lbl_X.txt, raw/Y.txt), the label texts",
        f"{folder}: missing X.tst.txt (or tst_X.txt, raw/tst_X.txt), the test texts",
    ]
    both = make_folder({**PECOS, "raw/Y.txt": "A\nB\nC\n"}, name="both")
    assert problems(both) == [f"{both}: both output-items.txt and raw/Y.txt exist; keep only one of them"]


def test_detection_and_the_flattened_dexml_folder(make_folder):
    flat = make_folder({"trn_X.txt": "a\n", "Y.trn.npz": npz_bytes(sp.csr_matrix(np.ones((1, 1)))), "Y.txt": "A\n"})
    (problem,) = validate(flat)
    assert "files of several layouts: trn_X.txt (xc-raw); Y.trn.npz (npz)" in problem.message
    assert load(flat, layout="npz").train.labels.toarray().tolist() == [[1.0]]


def test_save_writes_what_pecos_reads(make_folder, tmp_path):
    ds = load(make_folder(PECOS))
    save(ds, tmp_path / "out", layout="npz")
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    assert written == ["X.trn.txt", "X.tst.txt", "Y.trn.npz", "Y.tst.npz", "filter_labels_test.txt",
                       "output-items.txt"]  # ids that are row numbers need no file
    y = sp.load_npz(tmp_path / "out" / "Y.trn.npz")  # what the other toolkits call
    assert y.format == "csr" and y.shape == (3, 3)
    np.testing.assert_array_equal(y.toarray(), Y_TRN.toarray())
    assert_same_dataset(ds, load(tmp_path / "out"))
    with pytest.raises(FileExistsError, match="Y.trn.npz"):
        save(ds, tmp_path / "out", layout="npz")


def test_save_refuses_what_the_layout_cannot_hold(tmp_path):
    split = Split(["0"], ["a"], sp.csr_matrix(np.ones((1, 1))))
    labels = Catalogue(["0"], ["A"])
    with_aux = Dataset("x", dataclasses.replace(split, akp=sp.csr_matrix(np.ones((1, 1)))), labels,
                       akp_items=Catalogue(["0"], ["aux"]))
    with pytest.raises(ValueError, match="auxiliary items, which the npz layout cannot hold"):
        save(with_aux, tmp_path / "a", layout="npz")
    broken = Dataset("x", dataclasses.replace(split, texts=["two\nlines"]), labels)
    with pytest.raises(ValueError, match="has a line break, which the npz layout"):
        save(broken, tmp_path / "b", layout="npz")
    with pytest.raises(ValueError, match="compress applies to jsonl only"):
        save(Dataset("x", split, labels), tmp_path / "c", layout="npz", compress=True)
    assert not any((tmp_path / name).exists() and any((tmp_path / name).iterdir()) for name in "abc")


def without_aux(dataset: Dataset) -> Dataset:
    """``dataset`` without auxiliary items, which the npz layout does not hold."""
    splits = {name: dataclasses.replace(split, akp=None) for name, split in dataset.splits().items()}
    return dataclasses.replace(dataset, akp_items=None, **splits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dataset=datasets(values=True))
def test_round_trip_keeps_everything(tmp_path_factory, dataset):
    folder = tmp_path_factory.mktemp("npz")
    dataset = without_aux(dataset)
    save(dataset, folder, "npz")
    assert validate(folder) == []
    assert_same_dataset(dataset, load(folder))


def test_the_command_line_converts_and_validates(make_folder, tmp_path, monkeypatch, capsys):
    from cli_runner import xdex_cli

    folder = make_folder(PECOS)
    assert xdex_cli(monkeypatch, capsys, "data", "convert", folder, tmp_path / "j", "--to", "xc-raw")[0] == 0
    assert xdex_cli(monkeypatch, capsys, "data", "convert", tmp_path / "j", tmp_path / "n", "--to", "npz")[0] == 0
    assert_same_dataset(load(folder), load(tmp_path / "n"))
    (tmp_path / "n" / "Y.trn.npz").write_bytes(npz_bytes(sp.csr_matrix(np.array([[1, 0, 0], [0, 0, 0], [0, 0, -1]]))))
    code, out, _ = xdex_cli(monkeypatch, capsys, "data", "validate", tmp_path / "n")
    assert code == 1
    assert f"{tmp_path / 'n' / 'Y.trn.npz'}:3: matrix row 2: label 2 has value -1.0" in out

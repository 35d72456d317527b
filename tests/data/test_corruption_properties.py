"""Property: a corrupted file of a valid dataset is reported at the right file and line.

A random dataset is written (jsonl, plain or gzip, or xc-raw), one line of one of its files is
damaged in a random way (including a text with a lone surrogate and a value nested 100,000 deep), and
loading must raise DataFormatError while validation names that file and line, never any other exception.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from data_strategies import datasets
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from xdex.data import DataFormatError, load, save, validate


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("corrupt")


def _read(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.split(b"\n")[:-1]


def _write(path: Path, lines: list[bytes]) -> None:
    data = b"".join(line + b"\n" for line in lines)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def _jsonl_corruption(kind: str, line: bytes, row: int, n_labels: int) -> bytes:
    text = line.decode()
    if kind == "truncate":
        return text[: len(text) // 2].encode()
    if kind == "bad_json":
        return text[1:].encode()
    if kind == "bad_utf8":
        return line[: len(line) // 2] + b"\xff" + line[len(line) // 2 :]
    obj = json.loads(text)
    if kind == "wrong_id":
        obj["id"] = row + 1
    elif kind == "lone_surrogate":  # valid JSON ("\\ud800" as an escape) but not text
        obj["text"] = obj["text"][: len(obj["text"]) // 2] + "\ud800" + obj["text"][len(obj["text"]) // 2 :]
    elif kind == "deep":
        obj["extra"] = json.loads("[" * 50 + "]" * 50)
        return json.dumps(obj).encode().replace(b"[" * 50, b"[" * 100000, 1)
    else:  # out_of_range
        obj["labels"] = [n_labels]
    return json.dumps(obj).encode()


def _sparse_corruption(kind: str, line: bytes, n_cols: int) -> bytes:
    if kind == "truncate":
        return line[: line.rindex(b":") + 1]
    if kind == "bad_token":
        return b"x:1"
    if kind == "bad_utf8":
        return line + b" \xff"
    return (line + b" " if line else b"") + b"%d:1" % n_cols  # out_of_range


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dataset=datasets(), data=st.data())
def test_jsonl_corruption_is_located(folder, dataset, data):
    compress = data.draw(st.booleans(), label="compress")
    target = folder / "jsonl"
    save(dataset, target, "jsonl", overwrite=True, compress=compress)
    suffix = ".jsonl.gz" if compress else ".jsonl"
    stems = ["train", "labels"] + ["test"] * (dataset.test is not None) + ["aux"] * (dataset.akp_items is not None)
    path = target / (data.draw(st.sampled_from(stems), label="file") + suffix)
    kinds = ["truncate", "bad_json", "bad_utf8", "wrong_id", "lone_surrogate", "deep"]
    if path.name.startswith(("train", "test")):
        kinds.append("out_of_range")
    kind = data.draw(st.sampled_from(kinds), label="kind")
    lines = _read(path)
    row = data.draw(st.integers(0, len(lines) - 1), label="row")
    lines[row] = _jsonl_corruption(kind, lines[row], row, dataset.n_labels)
    _write(path, lines)
    _assert_located(target, path, row + 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dataset=datasets(), data=st.data())
def test_gzip_truncation_is_located(folder, dataset, data):
    target = folder / "gzip"
    save(dataset, target, "jsonl", overwrite=True, compress=True)
    path = target / data.draw(st.sampled_from(["train.jsonl.gz", "labels.jsonl.gz"]))
    raw = path.read_bytes()
    path.write_bytes(raw[: data.draw(st.integers(10, len(raw) - 1), label="cut")])
    problems = [p for p in validate(target) if p.path == str(path)]
    assert problems and all(p.line is not None for p in problems)
    with pytest.raises(DataFormatError):
        load(target)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dataset=datasets(), data=st.data())
def test_xc_raw_corruption_is_located(folder, dataset, data):
    target = folder / "xc-raw"
    save(dataset, target, "xc-raw", overwrite=True)
    sparse = {"trn_X_Y.txt": dataset.n_labels}
    if dataset.test is not None:
        sparse["tst_X_Y.txt"] = dataset.n_labels
    if dataset.akp_items is not None:
        sparse["trn_X_aux.txt"] = len(dataset.akp_items)
    name = data.draw(st.sampled_from([*sorted(sparse), "trn_X.txt", "lbl_X.txt"]), label="file")
    path = target / name
    lines = _read(path)
    if name in sparse:
        kind = data.draw(st.sampled_from(["truncate", "bad_token", "bad_utf8", "out_of_range", "header"]), label="kind")
        if kind == "header":
            rows, cols = lines[0].split()
            lines[0], line = b"%d %s" % (int(rows) + 1, cols), 1
        else:
            line = data.draw(st.integers(2, len(lines)), label="line")
            assume(kind != "truncate" or b":" in lines[line - 1])
            lines[line - 1] = _sparse_corruption(kind, lines[line - 1], sparse[name])
    else:
        kinds = ["bad_utf8", "lone_surrogate", "blank"] if name == "lbl_X.txt" else ["bad_utf8", "lone_surrogate"]
        kind = data.draw(st.sampled_from(kinds), label="kind")
        line = data.draw(st.integers(1, len(lines)), label="line")
        # a lone surrogate encoded as if it were a character (CESU / WTF-8) is not UTF-8
        lines[line - 1] = {"blank": b" ", "bad_utf8": lines[line - 1] + b"\xc3",
                           "lone_surrogate": lines[line - 1] + b"\xed\xa0\x80"}[kind]
    _write(path, lines)
    _assert_located(target, path, line)


def _assert_located(folder: Path, path: Path, line: int) -> None:
    problems = validate(folder)
    assert any(p.path == str(path) and p.line == line for p in problems), problems
    assert all(p.path.startswith(str(folder)) for p in problems)
    with pytest.raises(DataFormatError):
        load(folder)

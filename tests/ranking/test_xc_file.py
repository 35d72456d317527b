"""The Extreme Classification Repository text file written for Omikuji's trainer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.ranking.xc_file import ROWS_PER_CHUNK, write_xc_file


def _read(path: Path) -> tuple[str, list[list[int]], list[list[tuple[int, np.float32]]]]:
    lines = path.read_text(encoding="ascii").split("\n")
    assert lines[-1] == ""
    labels, pairs = [], []
    for line in lines[1:-1]:
        head, *rest = line.split(" ")
        labels.append([int(t) for t in head.split(",")] if head else [])
        pairs.append([(int(j), np.float32(float(v))) for j, v in (t.split(":") for t in rest)])
    return lines[0], labels, pairs


def test_values_read_back_as_the_same_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.random(30_000), rng.random(10_000) * 1e-4, rng.standard_normal(10_000) * 1e6,
        [1.0, 0.1, 0.5, 1e-7, 3.4e38, 1.4e-45, 1.2e-38, 123456789.0, 16777217.0, 999999999.5, -2.5, 100.0],
    ]).astype(np.float32)
    n_rows = 2 * ROWS_PER_CHUNK + 3  # several chunks
    indptr = np.linspace(0, values.size, n_rows + 1).astype(np.int64)
    columns = np.arange(values.size) % 5000
    x = sp.csr_matrix((values, columns, indptr), shape=(n_rows, 5000))
    y = sp.csr_matrix((np.ones(2 * n_rows), np.arange(2 * n_rows) % 9, np.arange(0, 2 * n_rows + 1, 2)),
                      shape=(n_rows, 9))
    path = tmp_path / "train.txt"
    write_xc_file(path, x, y)
    header, labels, pairs = _read(path)
    assert header == f"{n_rows} 5000 9"
    for i in range(n_rows):
        assert labels[i] == y.indices[y.indptr[i]:y.indptr[i + 1]].tolist()
        assert [j for j, _ in pairs[i]] == x.indices[x.indptr[i]:x.indptr[i + 1]].tolist()
        read_back = np.array([v for _, v in pairs[i]], np.float32)
        np.testing.assert_array_equal(read_back, x.data[x.indptr[i]:x.indptr[i + 1]])


def test_text_by_hand(tmp_path: Path) -> None:
    x = sp.csr_matrix(np.array([[0.5, 0, 0.25], [0, 0, 0], [0, 1.0, 0.1]], np.float32))
    y = sp.csr_matrix(np.array([[1, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]]))
    path = tmp_path / "train.txt"
    write_xc_file(path, x, y)
    assert path.read_text(encoding="ascii") == "3 3 4\n0,2,3 0:5e-1 2:25e-2\n1\n 1:1 2:100000001e-9\n"


def test_refuses_mismatched_rows_and_values_that_are_not_finite(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 feature rows but 1 label rows"):
        write_xc_file(tmp_path / "a.txt", sp.csr_matrix(np.eye(2)), sp.csr_matrix(np.ones((1, 2))))
    with pytest.raises(ValueError, match="not finite"):
        write_xc_file(tmp_path / "b.txt", sp.csr_matrix(np.array([[np.inf, 1.0]])), sp.csr_matrix(np.ones((1, 2))))


def test_omikuji_trains_from_the_file(tmp_path: Path) -> None:
    """Omikuji reads every line (its trainer is not repeatable, so the model is checked by what it learnt): each
    text's own label, marked by a feature of its own, comes first."""
    omikuji = pytest.importorskip("omikuji")
    rng = np.random.default_rng(1)
    n, d, n_labels = 300, 40, 12
    labels = rng.integers(0, n_labels, n)
    x_dense = (rng.random((n, d)) < 0.2) * rng.random((n, d)) * 0.3
    x_dense[np.arange(n), labels] += 0.7
    x, y = sp.csr_matrix(x_dense.astype(np.float32)), sp.csr_matrix(np.eye(n_labels, dtype=np.int64)[labels])
    write_xc_file(tmp_path / "train.txt", x, y)
    hp = omikuji.Model.default_hyper_param()
    hp.n_trees = 1
    model = omikuji.Model.train_on_data(str(tmp_path / "train.txt"), hp, n_threads=1)
    assert model.n_features == d
    top = [model.predict(list(zip(x[i].indices.tolist(), x[i].data.tolist(), strict=True)), top_k=1)[0][0]
           for i in range(n)]
    assert top == labels.tolist()

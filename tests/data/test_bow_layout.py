"""The sparse bag-of-words layout (train.txt / test.txt with an 'N D L' header)."""

from __future__ import annotations

import numpy as np
import pytest

from xdex.data import compute_stats, load, save, validate

TRAIN = "3 4 2\n0,1 0:1.5 3:2\n 1:1\n1\n"
TEST = "1 4 2\n0 2:0.5\n"


def test_reads_features_and_labels(make_folder):
    ds = load(make_folder({"train.txt": TRAIN, "test.txt": TEST}))
    assert ds.meta["layout"] == "bow"
    np.testing.assert_array_equal(ds.train.labels.toarray(), [[1, 1], [0, 0], [0, 1]])
    np.testing.assert_array_equal(ds.train.features.toarray(), [[1.5, 0, 0, 2], [0, 1, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(ds.test.features.toarray(), [[0, 0, 0.5, 0]])
    assert ds.train.texts == ["", "", ""] and ds.train.ids == ["0", "1", "2"]
    assert ds.labels.texts == ["", ""] and ds.labels.ids == ["0", "1"]
    stats = compute_stats(ds)
    assert stats["n_features"] == 4
    assert stats["avg_features_per_point"] == 3 / 3  # nnz 3 over 3 documents
    assert stats["avg_features_per_point_test"] == 1.0


@pytest.mark.parametrize(
    "name, content, line, message",
    [
        ("train.txt", "3 4\n0 0:1\n 1:1\n1\n", 1, "expected a header 'N D L'"),
        ("train.txt", "4 4 2\n0 0:1\n 1:1\n1\n", 1, "the header says 4 documents but 3 lines follow"),
        ("train.txt", "3 4 2\n0,x 0:1\n 1:1\n1\n", 2, "'x' in '0,x' is not an integer id"),
        ("train.txt", "3 4 2\n0,2 0:1\n 1:1\n1\n", 2, "label id 2 is out of range"),
        ("train.txt", "3 4 2\n0 4:1\n 1:1\n1\n", 2, "feature id 4 is out of range"),
        ("train.txt", "3 4 2\n0 0:1 0:2\n 1:1\n1\n", 2, "feature id 0 appears more than once"),
        ("train.txt", "3 4 2\n0 0:1\n1:1\n1\n", 3, "'1:1' in '1:1' is not an integer id"),
        ("test.txt", "1 5 2\n0 2:0.5\n", 1, "the header says 5 features but train.txt has 4"),
    ],
)
def test_problems(make_folder, name, content, line, message):
    folder = make_folder({"train.txt": TRAIN, "test.txt": TEST, name: content})
    problems = validate(folder)
    assert any(p.path == str(folder / name) and p.line == line and message in p.message for p in problems), problems


def test_negative_feature_values_are_allowed(make_folder):
    ds = load(make_folder({"train.txt": "1 2 1\n0 0:-0.5\n"}))
    assert ds.train.features[0, 0] == -0.5


def test_bow_cannot_be_written_as_text(make_folder, tmp_path):
    ds = load(make_folder({"train.txt": TRAIN}))
    with pytest.raises(ValueError, match="bag-of-words features"):
        save(ds, tmp_path / "out", "xc-raw")

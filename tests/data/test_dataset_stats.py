"""Dataset statistics on hand-computed datasets, and their rounding."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.data import Catalogue, Dataset, Split, compute_stats, format_table, rounded


def _csr(rows: list[list[int]], n_cols: int) -> sp.csr_matrix:
    dense = np.zeros((len(rows), n_cols))
    for r, cols in enumerate(rows):
        dense[r, cols] = 1
    return sp.csr_matrix(dense)


def test_small_dataset_by_hand():
    train = Split(["a", "b", "c"], ["a b c", "d", ""], _csr([[0, 1], [1], []], 4), akp=_csr([[0], [0, 1], []], 3))
    test = Split(["t", "u"], ["p q", "r"], _csr([[2], [1, 3]], 4), akp=_csr([[2], []], 3), filter=_csr([[0], []], 4))
    labels = Catalogue(["l0", "l1", "l2", "l3"], ["x y", "z", "w", "v u t"])
    aux = Catalogue(["m0", "m1", "m2"], ["M0", "M1", "M2"])
    stats = compute_stats(Dataset("hand", train, labels, test, aux))
    assert stats == {
        "name": "hand",
        "n_train": 3,
        "n_test": 2,
        "n_labels": 4,
        "avg_labels_per_point": 3 / 3,  # 3 (document, label) pairs over 3 documents
        "avg_points_per_label": 3 / 4,  # over all 4 labels
        "avg_words_per_point": 4 / 3,  # 3 + 1 + 0 words
        "avg_labels_per_point_test": 3 / 2,
        "avg_words_per_point_test": 3 / 2,
        "n_train_points_without_label": 1,
        "n_test_points_without_label": 0,
        "n_labels_without_train_point": 2,  # l2, l3
        "n_tail_labels": 2,  # l0 (1 point), l1 (2 points)
        "n_torso_labels": 0,
        "n_head_labels": 0,
        "n_labels_in_test": 3,  # l1, l2, l3
        "n_test_labels_without_train_point": 2,  # l2, l3
        "avg_words_per_label_text": 7 / 4,
        "n_filter_pairs_test": 1,
        "n_aux": 3,
        "n_aux_seen_in_train": 2,  # m0, m1
        "avg_aux_per_point": 3 / 3,
        "avg_aux_per_point_test": 1 / 2,
        "frac_points_with_aux": 2 / 3,
        "frac_points_with_aux_test": 1 / 2,
        "avg_points_per_aux": 3 / 2,  # 3 training links over the 2 items seen in train
    }


def test_head_torso_tail_boundaries():
    # label l is relevant to the first counts[l] of 101 documents
    counts = [0, 9, 10, 100, 101]
    rows = [[label for label, c in enumerate(counts) if r < c] for r in range(101)]
    ids = [str(i) for i in range(101)]
    ds = Dataset("bins", Split(ids, ["w"] * 101, _csr(rows, 5)), Catalogue(list("abcde"), list("ABCDE"), ["d"] * 5))
    stats = compute_stats(ds)
    assert (stats["n_labels_without_train_point"], stats["n_tail_labels"]) == (1, 1)
    assert (stats["n_torso_labels"], stats["n_head_labels"]) == (2, 1)
    assert stats["avg_points_per_label"] == 220 / 5
    assert stats["avg_labels_per_point"] == 220 / 101
    assert stats["avg_words_per_label_desc"] == 1.0
    assert stats["n_test"] == 0 and "avg_labels_per_point_test" not in stats


@pytest.mark.parametrize(
    "key, value, shown",
    [
        # full-precision values of the shared datasets, and the figures their README prints
        ("avg_points_per_label", 2.169590013989024, 2.17),
        ("avg_points_per_label", 4.625157232704402, 4.625),
        ("avg_points_per_label", 138.68035714285713, 138.68),
        ("avg_labels_per_point", 2.123358842940392, 2.123),
        ("avg_words_per_point", 27.231271501790353, 27.23),
        ("avg_words_per_point", 1.0293828547356596, 1.03),
        ("frac_points_with_aux", 0.763583974, 0.7636),
        ("n_train", 28486, 28486),
    ],
)
def test_rounding(key, value, shown):
    assert rounded({key: value}) == {key: shown}


def test_table_prints_the_rounded_figures():
    table = format_table({"name": "x", "n_train": 28486, "avg_points_per_label": 2.169590013989024})
    # captions padded to the longest one, values right-aligned in 12 columns
    assert table.splitlines() == [
        "dataset: x",
        "N train" + " " * 9 + "  " + " " * 7 + "28486",
        "avg points/label" + "  " + " " * 8 + "2.17",
    ]

"""The bundled dataset: it loads by name and its statistics equal those its builder published."""

from __future__ import annotations

import json

import pytest

from xdex.data import BUNDLED, compute_stats, load, rounded


@pytest.fixture(scope="module")
def demo():
    return load("demo")


def test_demo_loads(demo):
    assert demo.name == "foldoc-links" and demo.meta["layout"] == "jsonl"
    assert demo.akp_items is None and demo.test.filter is not None
    assert demo.labels.descs is not None


def test_demo_statistics_equal_its_stats_json(demo):
    published = json.loads((BUNDLED["demo"] / "stats.json").read_text())
    ours = rounded(compute_stats(demo))
    same_name = [
        "n_train",
        "n_test",
        "n_labels",
        "avg_labels_per_point_test",
        "avg_words_per_point_test",
        "n_labels_in_test",
        "avg_words_per_label_text",
        "avg_words_per_label_desc",
        "n_filter_pairs_test",
    ]
    for key in same_name:
        assert ours[key] == published[key], key
    for key in ("avg_labels_per_point", "avg_points_per_label", "avg_words_per_point"):
        assert ours[key] == published[f"{key}_train"], key
    assert ours["avg_labels_per_point"] == published["labels_per_point_train"]["mean"]
    assert ours["avg_points_per_label"] == published["points_per_label_train"]["mean"]


def test_demo_licence_notice():
    notice = (BUNDLED["demo"] / "LICENSE.txt").read_text()
    phrases = ("GNU Free Documentation License", "Version 1.1 or any later", "Copyright 1985 Denis Howe", "20230119-1")
    assert all(phrase in notice for phrase in phrases)

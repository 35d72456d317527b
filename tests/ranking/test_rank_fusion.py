"""The fusion's candidates and features by hand, its fit, its file, and the ranker's top-k."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.ranking.fusion import (
    ADDED_FEATURES,
    DENSE_FEATURES,
    FEATURES,
    MONOTONE,
    Candidates,
    LinearFusion,
    LogisticFusion,
    TreeFusion,
    candidates,
    label_prior,
)
from xdex.ranking.ranker import top_k

F = {name: i for i, name in enumerate(FEATURES)}


def dense_score_of(table: np.ndarray):
    """``dense_score`` reading a [texts, labels] table of inner products (a network with one head)."""
    return lambda rows, ids: (table[rows, ids], None)


def test_candidates_are_the_union_of_both_shortlists_with_their_features():
    table = np.array([[0.9, 0.5, 0.1, 0.3, 0.2]], np.float32)  # dense inner products of one text with 5 labels
    dense_ids = np.array([[0, 1]])  # the dense shortlist: labels 0, 1
    lexical_ids = np.array([[1, 3]])  # the lexical shortlist: labels 1 (also dense) and 3 (new)
    lexical_scores = np.array([[0.8, 0.4]], np.float32)
    prior = np.array([1.0, 0.5, 0.0, 0.25], np.float32)  # label 4 was added after training
    found = candidates(dense_ids, lexical_ids, lexical_scores, dense_score_of(table), prior, n_known=4)

    assert found.ids.tolist() == [[0, 1, -1, 3]]  # label 1 once; its lexical slot left empty
    f = found.features[0]
    assert f[:, F["dense"]].tolist() == pytest.approx([0.9, 0.5, 0.0, 0.3])
    assert f[:, F["dense_gap"]].tolist() == pytest.approx([0.0, -0.4, 0.0, -0.6])
    assert f[:, F["dense_rrank"]].tolist() == pytest.approx([1 / 2, 1 / 3, 0.0, 0.0])  # 1 / (1 + rank)
    assert f[:, F["lexical"]].tolist() == pytest.approx([0.0, 0.8, 0.0, 0.4])
    assert f[:, F["lexical_gap"]].tolist() == pytest.approx([0.0, 0.0, 0.0, -0.4])
    assert f[:, F["lexical_rrank"]].tolist() == pytest.approx([0.0, 1 / 2, 0.0, 1 / 3])
    assert f[:, F["in_lexical"]].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert f[:, F["log_lexical"]].tolist() == pytest.approx([0.0, np.log(0.8), 0.0, np.log(0.4)])
    assert f[:, F["log_lexical_gap"]].tolist() == pytest.approx([0.0, 0.0, 0.0, np.log(0.4 / 0.8)])
    assert f[:, F["prior"]].tolist() == pytest.approx([1.0, 0.5, 0.0, 0.25])
    assert not f[:, [F["de"], F["clf"]]].any()  # one head: no head features


def test_a_network_with_two_heads_gives_each_head_score_as_a_feature():
    de = np.array([[0.4, 0.1, 0.3]], np.float32)
    clf = np.array([[0.5, 0.2, -0.1]], np.float32)

    def dense_score(rows, ids):
        return de[rows, ids] + clf[rows, ids], np.stack([de[rows, ids], clf[rows, ids]], axis=-1)

    found = candidates(np.array([[0, 2]]), np.array([[1]]), np.array([[0.7]], np.float32), dense_score,
                       np.ones(3, np.float32), n_known=3)
    f = found.features[0]
    assert found.ids.tolist() == [[0, 2, 1]]
    assert f[:, F["dense"]].tolist() == pytest.approx([0.9, 0.2, 0.3])
    assert f[:, F["de"]].tolist() == pytest.approx([0.4, 0.3, 0.1])
    assert f[:, F["clf"]].tolist() == pytest.approx([0.5, -0.1, 0.2])


def test_an_added_label_has_no_lexical_features_and_no_prior():
    table = np.array([[0.2, 0.7, 0.9]], np.float32)
    found = candidates(np.array([[2, 1]]), np.array([[0, 1]]), np.array([[0.6, 0.3]], np.float32),
                       dense_score_of(table), np.array([0.5, 0.5], np.float32), n_known=2)
    added = found.features[0, 0]  # label 2, added after training
    assert found.ids[0, 0] == 2
    assert added[F["dense"]] == pytest.approx(0.9)
    assert added[[F["prior"], F["lexical"], F["in_lexical"]]].tolist() == [0.0, 0.0, 0.0]


def test_added_labels_are_scored_by_their_dense_features_alone():
    rng = np.random.default_rng(1)
    features = rng.normal(size=(1, 3, len(FEATURES))).astype(np.float32)
    trained = LinearFusion(FEATURES, np.ones(len(FEATURES)), 0.5, np.zeros(len(FEATURES)), np.ones(len(FEATURES)))
    added = LinearFusion(DENSE_FEATURES, np.array([2.0, 0.0, 0.0]), -1.0, np.zeros(3), np.ones(3))
    fusion = LogisticFusion(trained, added)
    scores = fusion.score(Candidates(np.array([[0, 7, 1]]), features), n_known=5)  # label 7 was added
    f = features[0]
    assert scores[0].tolist() == pytest.approx([f[0].sum() + 0.5, 2 * f[1, F["dense"]] - 1.0, f[2].sum() + 0.5],
                                               rel=1e-5)


def test_label_prior_is_log_frequency_on_a_unit_scale():
    y = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0]], np.float32))  # 3, 1 and 0 documents
    assert label_prior(y).tolist() == pytest.approx([1.0, np.log(2) / np.log(4), 0.0])


@pytest.mark.parametrize("form", ["trees", "linear"])
def test_fusion_learns_which_feature_says_relevant_and_reads_back(tmp_path, form):
    rng = np.random.default_rng(0)
    n, c = 200, 6
    ids = np.tile(np.arange(c), (n, 1))
    features = rng.normal(size=(n, c, len(FEATURES))).astype(np.float32)
    truth = np.zeros((n, c), np.float32)
    truth[np.arange(n), features[:, :, F["lexical"]].argmax(axis=1)] = 1  # the best lexical score is relevant
    found = Candidates(ids, features)
    fusion = LogisticFusion.fit(found, sp.csr_matrix(truth), form=form)
    assert isinstance(fusion.trained, TreeFusion if form == "trees" else LinearFusion)
    if form == "linear":
        assert fusion.trained.weights[F["lexical"]] == max(fusion.trained.weights)
    assert fusion.added.features == ADDED_FEATURES
    ranking = top_k(found, fusion.score(found, c), 1)
    assert (ranking.indices[:, 0] == truth.argmax(axis=1)).mean() > 0.9

    fusion.save(tmp_path / "fusion.json")
    again = LogisticFusion.load(tmp_path / "fusion.json")
    np.testing.assert_array_equal(again.score(found, c), fusion.score(found, c))


def test_tree_fusion_scores_as_scikit_learn_does_and_never_lowers_a_score_for_more_evidence():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, len(FEATURES)))
    y = x[:, F["dense"]] + x[:, F["lexical"]] * x[:, F["prior"]] + 0.3 * rng.normal(size=3000) > 0.5
    names = list(FEATURES)
    model = HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=15, early_stopping=False,
                                           monotonic_cst=[1 if n in MONOTONE else 0 for n in names]).fit(x, y)
    trees = TreeFusion.from_sklearn(names, model)
    test = rng.normal(size=(500, len(FEATURES)))
    np.testing.assert_allclose(trees.score(test.astype(np.float32)), model.decision_function(test.astype(np.float32)),
                               rtol=1e-9, atol=1e-9)
    more = test.copy()
    more[:, F["dense"]] += 1.0  # more dense evidence: a monotone feature
    assert (trees.score(more) >= trees.score(test) - 1e-12).all()
    again = TreeFusion.from_dict(json.loads(json.dumps(trees.to_dict())))
    np.testing.assert_array_equal(again.score(test), trees.score(test))


def test_damaged_trees_are_refused(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES)))
    trees = TreeFusion.fit(FEATURES, x, x[:, 0] > 0, trees=3)
    path = tmp_path / "fusion.json"
    LogisticFusion(trees, LinearFusion(DENSE_FEATURES, np.ones(3), 0.0, np.zeros(3), np.ones(3))).save(path)
    assert isinstance(LogisticFusion.load(path).trained, TreeFusion)
    record = json.loads(path.read_text())
    record["trained"]["left"][0][0] = 10**6  # a child that is no node
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="fusion.json.*trees"):
        LogisticFusion.load(path)
    record["trained"]["left"][0][0], record["trained"]["right"][0][0] = 1, 0  # a cycle back to the root
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="fusion.json.*trees"):
        LogisticFusion.load(path)
    record["trained"]["form"] = "forest"
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="fusion.json.*forest"):
        LogisticFusion.load(path)


def test_fusion_needs_both_kinds_of_pair():
    found = Candidates(np.array([[0, 1]]), np.zeros((1, 2, len(FEATURES)), np.float32))
    with pytest.raises(ValueError, match="no positive"):
        LogisticFusion.fit(found, sp.csr_matrix((1, 2), dtype=np.float32))


def test_a_fusion_file_without_head_features_still_scores(tmp_path):
    """Fusion files written before the head features name eight features; they score as they did."""
    old = FEATURES[:8]
    part = LinearFusion(old, np.arange(1.0, 9.0), 0.5, np.zeros(8), np.ones(8))
    LogisticFusion(part, LinearFusion(DENSE_FEATURES, np.ones(3), 0.0, np.zeros(3), np.ones(3))).save(
        tmp_path / "fusion.json")
    fusion = LogisticFusion.load(tmp_path / "fusion.json")
    features = np.ones((1, 1, len(FEATURES)), np.float32)
    assert fusion.score(Candidates(np.array([[0]]), features), 1).tolist() == [[36.5]]


def test_a_damaged_fusion_file_is_refused(tmp_path):
    part = LinearFusion(DENSE_FEATURES, np.ones(3), 0.0, np.zeros(3), np.ones(3))
    path = tmp_path / "fusion.json"
    LogisticFusion(part, part).save(path)
    record = json.loads(path.read_text())
    record["trained"]["features"] = ["dense", "colour", "dense_rrank"]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="fusion.json.*colour"):
        LogisticFusion.load(path)
    record["trained"]["features"] = ["dense", "dense_gap"]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="fusion.json"):
        LogisticFusion.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not an xdex fusion"):
        LogisticFusion.load(path)


def test_top_k_pads_short_candidate_lists():
    found = Candidates(np.array([[4, -1, 7]]), np.zeros((1, 3, len(FEATURES)), np.float32))
    ranking = top_k(found, np.array([[0.1, 5.0, 0.3]], np.float32), 4)
    assert ranking.indices.tolist() == [[7, 4, -1, -1]]
    assert ranking.scores[0, :2].tolist() == pytest.approx([0.3, 0.1])
    assert np.isneginf(ranking.scores[0, 2:]).all()

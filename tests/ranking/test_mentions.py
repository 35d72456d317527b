"""The mention channel by hand: forms of label texts, mentions found in texts, the shortlist and the features."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xdex.methods.ranker import scored_only
from xdex.ranking.fusion import FEATURES, Candidates, candidates
from xdex.ranking.mentions import (
    MAX_WORDS,
    MENTION_FEATURES,
    Mention,
    MentionIndex,
    forms,
    mention_features,
    shortlist,
)

LABELS = ["Mercury (planet)", "mercury", "Unix", "operating system", "system", "GNU/Linux"]


def test_a_label_is_named_by_its_words_and_by_its_words_without_brackets():
    assert forms("Mercury (planet)") == {("mercury", "planet"), ("mercury",)}
    assert forms(".NET framework") == {("net", "framework")}
    assert forms("GNU/Linux") == {("gnu", "linux")}
    assert forms("(only brackets)") == {("only", "brackets")}  # nothing left without them: the words as they are
    assert forms(" ".join(["w"] * (MAX_WORDS + 1))) == set()  # too long to be written out word for word
    assert forms("!!!") == set()


def test_mentions_are_counted_with_their_longest_form_first_place_and_sharing():
    index = MentionIndex(LABELS)
    found = index.find("Unix is an operating system; the Unix operating system runs on Mercury.")
    # words: unix is an operating system the unix operating system runs on mercury (12)
    assert found[2] == Mention(occurrences=2, words=1, first=0, length=12, shared=1)
    assert found[3] == Mention(occurrences=2, words=2, first=3, length=12, shared=1)
    assert found[4] == Mention(occurrences=2, words=1, first=4, length=12, shared=1)
    # "mercury" is a form of two labels: the planet (without its brackets) and the element
    assert found[0] == Mention(occurrences=1, words=1, first=11, length=12, shared=2)
    assert found[1] == Mention(occurrences=1, words=1, first=11, length=12, shared=2)
    assert 5 not in found
    assert index.find("MERCURY (PLANET)")[0] == Mention(occurrences=2, words=2, first=0, length=2, shared=1)
    assert index.find("") == {}


def test_the_shortlist_puts_long_then_specific_then_early_mentions_first():
    index = MentionIndex(LABELS)
    found = index.find_all(["mercury, unix and an operating system", "nothing here"])
    ids = shortlist(found, 4)
    # operating system (2 words), then unix (1 word, only label), system (1 word, only label, later),
    # then the two labels sharing "mercury" (the lower row first) would come: cut at 4
    assert ids.tolist() == [[3, 2, 4, 0], [-1, -1, -1, -1]]
    assert shortlist(found, 0).shape == (2, 0)


def test_the_features_follow_their_formula_and_are_zero_for_labels_not_named():
    index = MentionIndex(LABELS)
    found = index.find_all(["the unix system", "nothing"])
    out = mention_features(found, np.array([[4, 2, 5, -1], [2, 3, -1, -1]]))
    assert out.shape == (2, 4, len(MENTION_FEATURES))
    np.testing.assert_allclose(out[0, 0], [1.0, np.log(2.0), 1.0, 1.0 - 2 / 3, 1.0], rtol=1e-6)
    np.testing.assert_allclose(out[0, 1], [1.0, np.log(2.0), 1.0, 1.0 - 1 / 3, 1.0], rtol=1e-6)
    assert not out[0, 2:].any() and not out[1].any()


def test_an_extended_index_names_the_new_labels_and_leaves_the_old_one_alone():
    index = MentionIndex(LABELS)
    more = index.extended(["Plan 9", "unix"])
    assert more.n_labels == len(LABELS) + 2 and index.n_labels == len(LABELS)
    found = more.find("plan 9 from bell labs, a unix")
    assert set(found) == {6, 2, 7} and found[2].shared == 2
    assert set(index.find("plan 9 from bell labs, a unix")) == {2}
    fresh = MentionIndex([*LABELS, "Plan 9", "unix"]).find("plan 9 from bell labs, a unix")
    assert fresh == found


def test_labels_of_the_text_channels_join_the_candidates_once_after_the_other_shortlists():
    dense_ids = np.array([[0, 1]])
    lexical_ids, lexical_scores = np.array([[1, 2]]), np.array([[0.5, 0.25]], np.float32)
    table = np.arange(8, dtype=np.float32)[None, :] / 10
    prior = np.linspace(0, 0.7, 8).astype(np.float32)

    def dense_score(rows, ids):
        return table[rows, ids], None

    found = candidates(dense_ids, lexical_ids, lexical_scores, dense_score, prior, 8)
    assert found.ids.tolist() == [[0, 1, -1, 2]]
    more = candidates(dense_ids, lexical_ids, lexical_scores, dense_score, prior, 8, np.array([[2, 5, 0, -1, 5, 6]]))
    assert more.ids.tolist() == [[0, 1, -1, 2, -1, 5, -1, -1, -1, 6]]
    column = {name: i for i, name in enumerate(FEATURES)}
    np.testing.assert_allclose(more.features[0, [5, 9], column["dense"]], [0.5, 0.6], rtol=1e-6)
    np.testing.assert_allclose(more.features[0, [0, 5, 9], column["dense_gap"]], [-0.6, -0.1, 0.0], atol=1e-6)
    np.testing.assert_allclose(more.features[0, [5, 9], column["prior"]], prior[[5, 6]], rtol=1e-6)
    assert more.features[0, 5, column["in_lexical"]] == 0.0 and more.features[0, 5, column["lexical"]] == 0.0
    assert not more.features[0, [4, 6, 7, 8]].any()  # empty slots
    np.testing.assert_array_equal(more.features[0, :4, column["lexical"]], found.features[0, :, column["lexical"]])
    assert not more.features[..., [column[name] for name in MENTION_FEATURES]].any()  # the ranker fills them


def test_filter_pairs_are_left_out_of_the_fusion_fit():
    found = Candidates(np.array([[3, 1, -1], [2, 3, 0]]), np.zeros((2, 3, len(FEATURES)), np.float32))
    pairs = sp.csr_matrix(([1.0, 1.0], ([0, 1], [3, 0])), shape=(2, 4))
    assert scored_only(found, pairs).ids.tolist() == [[-1, 1, -1], [2, 3, -1]]
    assert scored_only(found, None) is found
    assert found.ids.tolist() == [[3, 1, -1], [2, 3, 0]]  # the caller's candidates are unchanged

"""Labels added after training: zero-shot label vectors of each network by hand, keys, the merged search and
the file that keeps them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from zip_damage import marked_encrypted

from xdex.encoders import BagOfEmbeddings
from xdex.index import ExactIndex
from xdex.index.retrieval import with_added
from xdex.inference.added_labels import (
    ADDED_LABELS,
    MAX_KEY_CHARS,
    MAX_LABEL_TEXT_CHARS,
    KeyConflict,
    check_new_labels,
    check_texts,
    fingerprint,
    new_keys,
    read_added,
    read_added_labels,
    shown,
    write_added,
)
from xdex.metrics.ranking import Ranking
from xdex.modules import ClassifierFusionNet, DualEncoder, UniDECNet
from xdex.text import Tokenizer

# Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 a=5 b=6 c=7; E(text) = plain mean of the token rows
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
TABLE = torch.tensor([[0.0, 0.0]] * 5 + [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
S2 = 1 / math.sqrt(2)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return BagOfEmbeddings(Tokenizer.from_pretrained_dir(folder), 2, weighting="none", embeddings=TABLE)


def close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=0, atol=1e-6)


def test_dual_encoder_embeds_a_new_label_as_a_trained_one(encoder):
    net = DualEncoder(encoder)
    tokens = encoder.tokenize(["c", "a b"])  # E = [1, 1] and [0.5, 0.5]: both normalise to [1, 1] / √2
    close(net.new_label_vectors(tokens), [[S2, S2], [S2, S2]])
    close(net.new_label_vectors(tokens), net.label_vectors(tokens).tolist())


@pytest.mark.parametrize("mode", ["fused", "de", "clf"])
def test_fusion_gives_a_new_label_its_embedding_in_every_mode(encoder, mode):
    # trained labels: Z = [[0, 1]], W = [[1, 0]]; a new label "a" has E = [1, 0], no cluster vector, so w = z = [1, 0]
    net = ClassifierFusionNet(encoder, torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]]), 0.3, mode)
    close(net.new_label_vectors(encoder.tokenize(["a", "c"])), [[1.0, 0.0], [S2, S2]])


def test_fusion_new_label_vectors_are_the_label_vectors_of_classifiers_at_their_start(encoder):
    """DEXA Module II starts w_l at ẑ_l = N(E(z_l)) (no auxiliary vectors): then every mode's label vector is
    the new-label vector."""
    tokens = encoder.tokenize(["a", "b", "c", "a b c"])
    z = DualEncoder(encoder).embed(tokens)
    for mode in ("fused", "de", "clf"):
        net = ClassifierFusionNet(encoder, z, z.clone(), 0.6, mode)
        close(net.new_label_vectors(tokens), net.label_vectors(tokens).tolist())


def unidec(encoder, search: str) -> UniDECNet:
    net = UniDECNet(encoder, 2, n_labels=1, dropout=0.0, search=search)
    with torch.no_grad():
        net.de_head[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        net.de_head[0].bias.copy_(torch.tensor([0.0, 0.5]))
        net.clf_head[0].weight.copy_(torch.tensor([[2.0, 0.0], [1.0, 3.0]]))
        net.clf_head[0].bias.copy_(torch.tensor([0.5, -1.0]))
    return net


def test_unidec_new_label_vectors_by_hand(encoder):
    # "c": Φ = [1, 1]; Φ_D = N(tanh([1, -1 + 0.5])) = [tanh 1, -tanh 0.5] / n; Φ_C = [2 + 0.5, 1 + 3 - 1] = [2.5, 3]
    t1, t5 = math.tanh(1.0), math.tanh(0.5)
    n, r = math.hypot(t1, t5), math.hypot(2.5, 3.0)
    de, clf = [t1 / n, -t5 / n], [2.5 / r, 3.0 / r]
    tokens = encoder.tokenize(["c"])
    close(unidec(encoder, "concat").new_label_vectors(tokens), [de + clf])
    close(unidec(encoder, "de").new_label_vectors(tokens), [de])
    close(unidec(encoder, "clf").new_label_vectors(tokens), [clf])


@pytest.mark.parametrize("mode", ["concat", "de", "clf"])
def test_unidec_new_label_vectors_are_those_of_classifiers_initialised_from_label_text(encoder, mode):
    """UniDECObjective.init_classifiers sets Ψ_l ← Φ_C(z_l); a label with that classifier gets the new-label vector."""
    net = unidec(encoder, mode)
    tokens = encoder.tokenize(["a", "b", "c", "a b"])
    net.classifier = torch.nn.Embedding.from_pretrained(net.clf(encoder.embed(tokens)).detach())
    close(net.new_label_vectors(tokens), net.label_vectors(tokens).tolist())


def test_generated_keys_are_rows_and_skip_taken_keys():
    assert new_keys(3, 7, {"l0", "l1"}) == ["added-7", "added-8", "added-9"]
    assert new_keys(2, 3, {"added-3", "added-3-2"}) == ["added-3-3", "added-4"]


def test_given_keys_are_checked():
    assert new_keys(2, 5, {"a"}, ["b", "c"]) == ["b", "c"]
    with pytest.raises(KeyConflict, match="'a' already exists"):
        new_keys(1, 5, {"a"}, ["a"])
    with pytest.raises(KeyConflict, match="'b' is given twice"):
        new_keys(2, 5, {"a"}, ["b", "b"])
    with pytest.raises(ValueError, match="1 keys for 2 texts"):
        new_keys(2, 5, set(), ["b"])
    for bad in ("", " b", "b\n"):
        with pytest.raises(ValueError, match="non-empty string without surrounding whitespace"):
            new_keys(1, 5, set(), [bad])
    with pytest.raises(TypeError, match="not one string"):
        new_keys(1, 5, set(), "b")
    with pytest.raises(TypeError, match="key 0 is a int"):
        new_keys(1, 5, set(), [3])


def test_texts_are_checked():
    assert check_texts(("x", "y z")) == ["x", "y z"]
    for texts, error, message in [("x", TypeError, "not one string"), (["x", 3], TypeError, "text 1 is a int"),
                                  (["x", " \t"], ValueError, "text 1 is blank")]:
        with pytest.raises(error, match=message):
            check_texts(texts)


def test_texts_with_a_lone_surrogate_are_refused():
    with pytest.raises(ValueError, match="text 1 is not valid Unicode: a lone surrogate at character 2"):
        check_texts(["ok", "ab\ud800c"])


def test_new_labels_have_printable_bounded_ids_and_bounded_texts():
    texts, keys = check_new_labels(iter(["one", "two"]), iter(["new/1", "new 2"]))
    assert (texts, keys) == (["one", "two"], ["new/1", "new 2"])
    assert check_new_labels(["x" * MAX_LABEL_TEXT_CHARS], ["k" * MAX_KEY_CHARS])[1] == ["k" * MAX_KEY_CHARS]
    for key, message in [("a\nb", "not printable"), ("nul\x00", "not printable"), ("a\u2028b", "not printable"),
                         ("\ud800", "not printable"), ("k" * (MAX_KEY_CHARS + 1), "longer than 256"),
                         (" k", "surrounding whitespace"), ("", "non-empty"), (".", "path segment"),
                         ("a/../b", "path segment"), ("a/.", "path segment")]:
        with pytest.raises(ValueError, match=f"key 0: label id .*{message}"):
            check_new_labels(["x"], [key])
    with pytest.raises(ValueError, match=f"text 0 has {MAX_LABEL_TEXT_CHARS + 1} characters"):
        check_new_labels(["x" * (MAX_LABEL_TEXT_CHARS + 1)], None)
    with pytest.raises(TypeError, match="key 0 is a int"):
        check_new_labels(["x"], [3])
    assert check_new_labels(["x"], ["a.b/..c"]) == (["x"], ["a.b/..c"])  # dots inside a segment are fine
    with pytest.raises(KeyConflict, match="'n' is given twice"):
        check_new_labels(["x", "y"], ["n", "n"])
    with pytest.raises(ValueError, match="1 keys for 2 texts"):
        check_new_labels(["x", "y"], ["n"])


def test_ids_are_shown_escaped_and_bounded():
    assert shown("a\nb") == "'a\\nb'" and shown("\ud800") == "'\\ud800'"
    assert shown("x" * 100) == repr("x" * 60) + " ... (100 characters)"


def test_files_written_before_the_new_id_rules_still_load(tmp_path):
    trained, vectors = ["a"], np.ones((2, 2), np.float32)
    owner = fingerprint({}, {}, trained)
    write_added(tmp_path, ["line\nbreak", "."], ["one", "two"], vectors, "de", 1, owner)
    assert read_added(tmp_path, trained, owner, "de", 2).keys == ["line\nbreak", "."]
    assert read_added_labels(tmp_path) == (["line\nbreak", "."], ["one", "two"])
    assert read_added_labels(tmp_path / "nowhere") == ([], [])


def test_merge_with_added_labels_by_hand():
    # 3 trained labels: the index found rows 2 (0.9) and 0 (0.5), then padding; added rows 3 and 4 score 0.7 and
    # 0.5 for the query [0.7, 0.5]; the tie at 0.5 goes to the lower row, 0
    trained = Ranking(np.array([[2, 0, -1]]), np.array([[0.9, 0.5, -np.inf]]))
    merged = with_added(trained, np.array([[0.7, 0.5]], np.float32), np.eye(2, dtype=np.float32), 3, 3)
    assert merged.indices.tolist() == [[2, 3, 0]]
    np.testing.assert_allclose(merged.scores, [[0.9, 0.7, 0.5]], rtol=1e-6)
    padded = Ranking(np.array([[0, -1, -1, -1]]), np.array([[0.1, -np.inf, -np.inf, -np.inf]]))
    merged = with_added(padded, np.array([[0.7, 0.5]], np.float32), np.eye(2, dtype=np.float32), 1, 4)
    assert merged.indices.tolist() == [[1, 2, 0, -1]]  # padding stays last


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000))
def test_merge_equals_one_exact_search_over_all_labels(n_trained, n_added, k, seed):
    rng = np.random.default_rng(seed)
    vectors = rng.integers(-2, 3, size=(n_trained + n_added, 3)).astype(np.float32)  # small integers: many ties
    queries = rng.integers(-2, 3, size=(4, 3)).astype(np.float32)
    trained, everything = ExactIndex(3), ExactIndex(3)
    trained.add(vectors[:n_trained])
    everything.add(vectors)
    scores, ids = trained.search(queries, k)
    merged = with_added(Ranking(ids, scores), queries, vectors[n_trained:], n_trained, k)
    expected_scores, expected_ids = everything.search(queries, k)
    assert merged.indices.tolist() == expected_ids.tolist()
    np.testing.assert_array_equal(merged.scores, expected_scores)


def test_file_round_trip_and_checks(tmp_path):
    vectors = np.array([[0.6, 0.8], [1.0, 0.0]], np.float32)
    trained = ["a", "b", "c"]
    owner = fingerprint({"method": "ngame"}, {}, trained)
    write_added(tmp_path, ["n1", "n/2"], ["new one", "zwei \u00fc\0 "], vectors, "de", 3, owner)
    added = read_added(tmp_path, trained, owner, "de", 2)
    assert (added.keys, added.texts) == (["n1", "n/2"], ["new one", "zwei \u00fc\0 "])  # any text, exactly
    np.testing.assert_array_equal(added.vectors, vectors)
    assert read_added(tmp_path, trained, owner, "concat", 4).vectors is None  # another mode: recomputed
    with pytest.raises(ValueError, match="written for a model of 3 trained labels, but this model has 2"):
        read_added(tmp_path, ["a", "b"], owner, "de", 2)
    with pytest.raises(ValueError, match="written for another model"):
        read_added(tmp_path, trained, fingerprint({"method": "dexml"}, {}, trained), "de", 2)
    clash = fingerprint({}, {}, ["a", "b", "n1"])  # a file whose keys clash with the trained ones is refused
    write_added(tmp_path / "clash", ["n1", "n2"], ["new one", "new two"], vectors, "de", 3, clash)
    with pytest.raises(ValueError, match="damaged: label id 'n1' already exists"):
        read_added(tmp_path / "clash", ["a", "b", "n1"], clash, "de", 2)
    with pytest.raises(ValueError, match=r"float32 vectors of shape \(2, 3\)"):
        read_added(tmp_path, trained, owner, "de", 3)
    write_added(tmp_path, [], [], np.zeros((0, 2), np.float32), "de", 3, owner)  # no labels: no file
    assert not (tmp_path / ADDED_LABELS).exists() and read_added(tmp_path, trained, owner, "de", 2) is None
    (tmp_path / ADDED_LABELS).write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ValueError, match="not a readable file of added labels"):
        read_added(tmp_path, trained, owner, "de", 2)
    write_added(tmp_path, ["n1"], ["new one"], vectors[:1], "de", 3, owner)
    (tmp_path / ADDED_LABELS).write_bytes(marked_encrypted((tmp_path / ADDED_LABELS).read_bytes()))
    with pytest.raises(ValueError, match="not a readable file of added labels"):
        read_added(tmp_path, trained, owner, "de", 2)


def test_the_fingerprint_follows_the_metadata_the_recipe_and_the_trained_keys():
    assert fingerprint({"a": 1, "b": 2}, {"c": 3}, ["x"]) == fingerprint({"b": 2, "a": 1}, {"c": 3}, ("x",))
    variants = [({"a": 1}, {}, ["x"]), ({"a": 2}, {}, ["x"]), ({"a": 1}, {"c": 3}, ["x"]), ({"a": 1}, {}, ["y"])]
    assert len({fingerprint(*v) for v in variants}) == 4

"""The lexical channel: TF-IDF by hand, the character n-gram rule, quality on the bundled data, its folder format."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from xdex.data import load
from xdex.metrics import Ranking, compute_metrics, remove_pairs
from xdex.ranking import (
    FORMAT_VERSION,
    LexicalConfig,
    LexicalModel,
    choose_analyzer,
    documents_per_label,
    fit_choosing_features,
    unique_word_share,
)


def labels_of(rows: list[list[int]], n_labels: int) -> sp.csr_matrix:
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([j for r in rows for j in r], dtype=np.int64)
    return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(len(rows), n_labels))


@pytest.fixture(scope="module")
def demo() -> object:
    return load("demo")


@pytest.fixture(scope="module")
def fitted(demo) -> LexicalModel:
    """napkinXC PLT on the first 3,000 training documents of the bundled dataset."""
    n = 3000
    config = LexicalConfig(classifier="napkinxc-plt", threads=2, seed=0)  # fast, and its file names are known
    return LexicalModel(config).fit(demo.train.texts[:n], demo.train.labels[:n])


@pytest.fixture(scope="module")
def saved(fitted, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lexical") / "model"
    fitted.save(folder)
    return folder


# --- TF-IDF and the rule -----------------------------------------------------------------------------

def test_tfidf_by_hand():
    texts = ["a b", "a c", "a b b"]
    config = LexicalConfig(analyzer="word", word_ngrams=(1, 1), min_df=1)
    model = LexicalModel(config).fit(texts, labels_of([[0], [1], [0]], 2))
    assert model.blocks == ["word"]
    vocabulary = model.vectorizers[0].vocabulary_
    # smoothed idf ln((1 + n) / (1 + df)) + 1 with n = 3; sublinear tf 1 + ln tf; unit rows
    idf = {"a": 1.0, "b": math.log(4 / 3) + 1, "c": math.log(2) + 1}
    raw = {"a": 1.0 * idf["a"], "b": (1 + math.log(2)) * idf["b"]}
    norm = math.sqrt(sum(v * v for v in raw.values()))
    row = model.features(["a b b"]).toarray()[0]
    expected = np.zeros(3)
    for term, value in raw.items():
        expected[vocabulary[term]] = value / norm
    np.testing.assert_allclose(row, expected, rtol=1e-6)
    assert model.features(["a b b"]).dtype == np.float32


def test_words_and_characters_stacked_rows_are_unit_length():
    texts = ["alpha beta", "alpha gamma", "beta gamma delta"]
    config = LexicalConfig(analyzer="word+char", min_df=1, char_ngrams=(2, 3))
    model = LexicalModel(config).fit(texts, labels_of([[0], [1], [0, 1]], 2))
    assert model.blocks == ["word", "char"]
    x = model.features(texts + ["alphabet"])  # an unseen word: only its character n-grams count
    np.testing.assert_allclose(sp.linalg.norm(x, axis=1), 1.0, rtol=1e-6)
    assert x.shape[1] == model.n_features


def test_features_equal_scikit_learns_transform(demo):
    texts = demo.train.texts[:400]
    config = LexicalConfig(analyzer="word+char", classifier="napkinxc-plt")
    model = LexicalModel(config).fit(texts, demo.train.labels[:400])
    unseen = [*demo.test.texts[:200], "", "zzzz qqqq", "Ünïcode wörds and ß"]
    ours = model.features(unseen)
    parts = [v.transform(unseen) for v in model.vectorizers]  # scikit-learn's own transform
    reference = sp.csr_matrix(sp.hstack(parts), dtype=np.float64)
    reference = sp.diags(1 / np.maximum(sp.linalg.norm(reference, axis=1), 1e-30)) @ reference
    np.testing.assert_allclose(ours.toarray(), reference.toarray(), rtol=1e-5, atol=1e-7)
    assert ours.has_sorted_indices and ours.dtype == np.float32


def test_character_ngrams_in_too_many_texts_are_left_out():
    """``char_max_df``: a character n-gram in more than that share of the texts is dropped (never below min_df
    texts); the words are not touched, and both paths to the vocabulary (word by word, scikit-learn's) agree."""
    texts = ["ab xy", "ab zz", "ab qq", "cd qq"]  # " a", "ab", "b ": 3 of 4 texts
    y = labels_of([[0], [1], [0], [1]], 2)
    kept = {}
    for max_features in (None, 10_000):
        config = LexicalConfig(analyzer="word+char", min_df=1, char_ngrams=(2, 2), char_max_df=0.5,
                               max_features=max_features, classifier="napkinxc-plt")
        model = LexicalModel(config).fit(texts, y)
        words, chars = (set(v.vocabulary_) for v in model.vectorizers)
        assert "ab" in words and {" a", "ab", "b "}.isdisjoint(chars) and {"qq", " q", " c"} <= chars
        kept[max_features] = chars
    assert kept[None] == kept[10_000]
    tiny = LexicalModel(LexicalConfig(analyzer="char", min_df=2, char_ngrams=(2, 2), char_max_df=0.01,
                                      classifier="napkinxc-plt")).fit(texts, y)
    assert set(tiny.vectorizers[0].vocabulary_) == {" q", "qq", "q "}  # at most min_df = 2 texts
    with pytest.raises(ValueError, match="char_max_df"):
        LexicalConfig(char_max_df=0.0)


def test_unique_word_share_by_hand():
    assert unique_word_share(["apple pie", "apple tart"]) == pytest.approx(2 / 4)  # pie and tart: once each
    assert unique_word_share(["red apple", "red apple", "red pie pie"]) == pytest.approx(2 / 7)  # pie: one text
    assert unique_word_share(["red apple", "red apple pie", "red pie"]) == 0.0
    assert unique_word_share(["", "!!"]) == 1.0


def test_rule_picks_characters_for_headwords_and_words_for_prose():
    headwords = ["Abacus", "Batch file", "Cache", "Daemon", "Ethernet", "File system", "Gopher"]
    prose = ["the cache of the file system", "the file system of the daemon", "the daemon of the cache"]
    config = LexicalConfig()  # analyzer="auto", threshold 0.2
    assert choose_analyzer(headwords, config)[0] == ["word", "char"]
    blocks, share = choose_analyzer(prose, config)
    assert blocks == ["word"] and share is not None and share < config.unique_word_threshold
    assert choose_analyzer(headwords, LexicalConfig(analyzer="word"))[0] == ["word"]


def ranking_by(preferred: list[str], seen: list[list[str]]):
    """A validation rank that puts the models of the ``preferred`` feature blocks first (1 against 0)."""
    def rank(model: LexicalModel) -> tuple[float, ...]:
        seen.append(model.blocks)
        return (1.0 if model.blocks == preferred else 0.0, 0.5)
    return rank


@pytest.fixture(scope="module")
def prose(demo) -> tuple[list[str], sp.csr_matrix]:
    """300 training documents of the bundled data and the labels they have: long texts, for which the rule gives
    words alone."""
    labels = demo.train.labels[:300].tocsc()
    return demo.train.texts[:300], labels[:, np.flatnonzero(np.diff(labels.indptr))].tocsr()


@pytest.mark.parametrize("preferred", [["word", "char"], ["word"]])
def test_the_feature_set_that_ranks_validation_better_is_kept(prose, preferred):
    seen: list[list[str]] = []
    config = LexicalConfig(analyzer="validation", classifier="napkinxc-plt", threads=1)
    model, tried = fit_choosing_features(config, *prose, ranking_by(preferred, seen))
    assert seen == [["word"], ["word", "char"]]  # words first, as the rule has them; then words + characters
    assert model.blocks == preferred
    assert tried == {"word": (1.0 if preferred == ["word"] else 0.0, 0.5),
                     "word+char": (1.0 if preferred == ["word", "char"] else 0.0, 0.5)}
    refitted = model.refit(*prose)  # the choice is kept by the refit on more documents
    assert refitted.blocks == preferred


def test_a_tie_keeps_words_the_cheaper_set(prose):
    config = LexicalConfig(analyzer="validation", classifier="napkinxc-plt", threads=1)
    model, tried = fit_choosing_features(config, *prose, lambda m: (0.5,))
    assert model.blocks == ["word"] and set(tried) == {"word", "word+char"}


def test_the_rule_alone_decides_for_headwords_and_for_other_analyzers(prose):
    headwords = ["Abacus", "Batch file", "Cache", "Daemon", "Ethernet", "File system", "Gopher", "Batch"]
    seen: list[list[str]] = []
    validation = LexicalConfig(analyzer="validation", classifier="napkinxc-plt", threads=1, min_df=1)
    model, tried = fit_choosing_features(validation, headwords, labels_of([[i % 3] for i in range(8)], 3),
                                         ranking_by(["word"], seen))
    assert model.blocks == ["word", "char"] and tried == {} and seen == []
    for analyzer in ("auto", "word"):
        config = LexicalConfig(analyzer=analyzer, classifier="napkinxc-plt", threads=1)
        model, tried = fit_choosing_features(config, *prose, ranking_by(["word", "char"], seen))
        assert model.blocks == ["word"] and tried == {} and seen == []


def test_auto_chooses_on_validation_where_labels_have_many_documents(prose):
    texts, labels = prose
    head = sp.csr_matrix((np.ones(len(texts)), (np.arange(len(texts)), np.arange(len(texts)) % 4)),
                         shape=(len(texts), 9))  # 75 documents for each of 4 labels; 5 labels with none
    assert documents_per_label(head) == 75.0
    assert documents_per_label(labels) < 20.0  # the bundled data: most labels have a few documents
    seen: list[list[str]] = []
    config = LexicalConfig(classifier="napkinxc-plt", threads=1)  # analyzer="auto", head_label_documents=20
    model, tried = fit_choosing_features(config, texts, head, ranking_by(["word", "char"], seen))
    assert seen == [["word"], ["word", "char"]] and model.blocks == ["word", "char"] and set(tried) == {
        "word", "word+char"}
    never = dataclasses.replace(config, head_label_documents=None)
    model, tried = fit_choosing_features(never, texts, head, ranking_by(["word", "char"], seen))
    assert model.blocks == ["word"] and tried == {}
    with pytest.raises(ValueError, match="head_label_documents"):
        LexicalConfig(head_label_documents=0)


def test_config_roundtrip_and_checks():
    config = LexicalConfig(analyzer="word+char", c=2.0, trees=2)
    assert LexicalConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="analyzer"):
        LexicalConfig(analyzer="chars")
    with pytest.raises(ValueError, match="classifier"):
        LexicalConfig(classifier="pecos")
    with pytest.raises(ValueError, match="unknown lexical settings"):
        LexicalConfig.from_dict({"colour": 1})


# --- quality, empty rows, determinism ---------------------------------------------------------------------

def test_quality_floor_on_held_out_documents(demo, fitted):
    """Measured: P@1 57.0, P@5 26.8 on the first 1,500 demo test documents from 3,000 training documents."""
    n = 1500
    ids, scores = fitted.predict(demo.test.texts[:n], 10)
    assert ids.shape == scores.shape == (n, 10)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    ranking = remove_pairs(Ranking(ids, scores), demo.test.filter[:n])
    metrics = compute_metrics(ranking, demo.test.labels[:n], (1, 5))
    assert metrics["P@1"] > 48 and metrics["P@5"] > 22
    valid = ids >= 0
    assert np.all((scores[valid] >= 0) & (scores[valid] <= 1))  # PLT probabilities
    assert np.all((scores[:, 1:] <= scores[:, :-1])[valid[:, 1:]])  # best first


def test_texts_without_features_get_empty_rows(fitted):
    ids, scores = fitted.predict(["", "qzxv wqpt", "the compiler"], 5)
    assert (ids[:2] == -1).all() and np.isneginf(scores[:2]).all()
    assert (ids[2] >= 0).all()


def test_deterministic_given_the_seed(demo):
    texts, labels = demo.train.texts[:600], demo.train.labels[:600]
    config = LexicalConfig(classifier="napkinxc-plt", threads=1, seed=3)
    runs = [LexicalModel(config).fit(texts, labels).predict(demo.test.texts[:200], 5) for _ in range(2)]
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


# --- the folder -------------------------------------------------------------------------------------------

def test_save_load_roundtrip_gives_identical_predictions(demo, fitted, saved):
    loaded = LexicalModel.load(saved)
    texts = demo.test.texts[:300]
    assert (fitted.features(texts) != loaded.features(texts)).nnz == 0
    for a, b in zip(fitted.predict(texts, 10), loaded.predict(texts, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    assert loaded.config == fitted.config and loaded.n_labels == fitted.n_labels


def test_saving_again_replaces_the_model_and_refuses_a_foreign_folder(fitted, tmp_path):
    folder = tmp_path / "model"
    fitted.save(folder)
    fitted.save(folder)
    assert not [p for p in tmp_path.iterdir() if p.name != "model"]  # no staging or old folder left behind
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no lexical model"):
        fitted.save(tmp_path / "other")


def test_no_pickle_anywhere(demo, saved, monkeypatch):
    files = [p for p in saved.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".pkl", ".pickle", ".joblib")]
    assert not [p for p in files if p.read_bytes()[:1] == b"\x80"]  # pickle protocol 2+ magic

    def refuse(*args, **kwargs):
        raise AssertionError("something was unpickled")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    ids, _ = LexicalModel.load(saved).predict(demo.test.texts[:20], 5)
    assert (ids[:, 0] >= 0).any()


def copy_of(saved: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(saved, target)
    return target


@pytest.mark.parametrize("name", ["vocab_word.json", "idf_word.npz", "classifier/weights.bin", "meta.json"])
def test_missing_file_is_named(saved, tmp_path, name):
    folder = copy_of(saved, tmp_path)
    (folder / name).unlink()
    with pytest.raises(ValueError, match=name.split("/")[-1]):
        LexicalModel.load(folder)


@pytest.mark.parametrize("name", ["vocab_word.json", "idf_word.npz", "classifier/tree.bin"])
def test_altered_file_is_named(saved, tmp_path, name):
    folder = copy_of(saved, tmp_path)
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{name.split('/')[-1]}.*differs"):
        LexicalModel.load(folder)


def test_other_format_version_is_refused(saved, tmp_path):
    folder = copy_of(saved, tmp_path)
    meta = json.loads((folder / "meta.json").read_text())
    meta["format_version"] = FORMAT_VERSION + 1
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"meta.json.*format version"):
        LexicalModel.load(folder)


@pytest.mark.parametrize(("classifier", "trees"), [("omikuji-bonsai", 1), ("omikuji-parabel", 1),
                                                   ("omikuji-parabel", 3)])
def test_omikuji_roundtrip(demo, tmp_path, classifier, trees):
    texts, labels = demo.train.texts[:800], demo.train.labels[:800]
    config = LexicalConfig(classifier=classifier, trees=trees, threads=2)
    model = LexicalModel(config).fit(texts, labels)
    model.save(tmp_path / "omikuji")
    loaded = LexicalModel.load(tmp_path / "omikuji")
    a, b = model.predict(texts[:50], 5), loaded.predict(texts[:50], 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert (a[0][:, 0] >= 0).all() and (a[1][a[0] >= 0] <= 1).all()
    assert not list((tmp_path / "omikuji").rglob("*.pkl"))
    # the direct call of Omikuji's C function (on the calling thread, into arrays) gives its Python API's answer
    x = loaded.feature_rows([*texts[:50], "", "qzxv"])  # two empty rows
    ids, scores = loaded._classifier.top_k(x, 5)
    for i in range(len(ids)):
        pairs = list(zip(x.indices[x.indptr[i]:x.indptr[i + 1]].tolist(), x.data[x.indptr[i]:x.indptr[i + 1]].tolist(),
                         strict=True))
        found = loaded._classifier.model.predict(pairs, beam_size=max(config.beam, 5), top_k=5) if pairs else []
        kept = ids[i] >= 0
        assert list(zip(ids[i][kept].tolist(), scores[i][kept].tolist(), strict=True)) == found
        assert kept.sum() == len(found) and (scores[i][~kept] == -np.inf).all()
    # a beam narrower than k: Omikuji's own search of that width
    ids, scores = loaded.predict(texts[:20], 8, beam=2)
    for i in range(20):
        pairs = list(zip(*(a.tolist() for a in (x.indices[x.indptr[i]:x.indptr[i + 1]],
                                                x.data[x.indptr[i]:x.indptr[i + 1]])), strict=True))
        found = loaded._classifier.model.predict(pairs, beam_size=2, top_k=8)
        assert sorted(zip(ids[i][:len(found)].tolist(), scores[i][:len(found)].tolist(), strict=True),
                      key=lambda p: (-p[1], p[0])) == sorted(found, key=lambda p: (-p[1], p[0]))


def test_a_batch_split_over_threads_predicts_as_one_text_at_a_time(demo):
    texts = demo.train.texts[:800]
    model = LexicalModel(LexicalConfig(classifier="omikuji-parabel", trees=1)).fit(texts, demo.train.labels[:800])
    model._classifier.threads = 2  # whatever the machine: two parts of 150 texts
    ids, scores = model.predict(texts[:300], 5)
    for i in (0, 149, 150, 299):  # each side of the split
        one_ids, one_scores = model.predict([texts[i]], 5)
        np.testing.assert_array_equal(ids[i], one_ids[0])
        np.testing.assert_array_equal(scores[i], one_scores[0])

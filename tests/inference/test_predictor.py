"""xdex.Predictor: loads a model directory once, ranks labels for texts, adds labels by their texts."""

from __future__ import annotations

import hashlib
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ranking_asserts import assert_same_ranking

import xdex
from xdex.inference import DualEncoderModel, Predictor, ScoredLabel, retrieve
from xdex.inference import predictor as predictor_module
from xdex.inference.added_labels import ADDED_LABELS, KeyConflict
from xdex.inference.predictor import WRITER_LOCK, ReadOnlyError, _batches

NO_LOCKS = pytest.mark.skipif(sys.platform == "win32", reason="no file locks on Windows")
TRAINED_FILES = ("labels.jsonl", "label_embeddings.npy", "index/index.json", "index/vectors.npy", "meta.json")


@pytest.fixture(scope="module")
def model_dir(trained):
    return trained["ngame"]


@pytest.fixture(scope="module")
def texts(toy):
    return toy.test.texts


def new_text(toy) -> str:
    """A text that is no label's: the first two words of label 0 and the last two of label 1."""
    return " ".join(toy.labels.texts[0].split()[:2] + toy.labels.texts[1].split()[2:])


def digests(folder) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in TRAINED_FILES}


def as_arrays(rows) -> tuple[list[list[int]], list[list[float]]]:
    """Label rows and scores of ``Predictor.predict`` output."""
    return [[label.index for label in row] for row in rows], [[label.score for label in row] for row in rows]


def test_predictions_are_the_model_ranking_with_keys_and_texts(model_dir, texts):
    model = DualEncoderModel.load(model_dir)
    expected = model.predict(texts, 5)
    predicted = xdex.Predictor(model_dir, batch_size=16).predict(texts, k=5)
    assert len(predicted) == len(texts)
    for row, scores, labels in zip(expected.indices, expected.scores, predicted, strict=False):
        assert_same_ranking([row], [scores], [[label.index for label in labels]], [[label.score for label in labels]])
        assert all(label.key == model.label_ids[label.index] and label.text == model.label_texts[label.index]
                   for label in labels)
        assert all(a.score >= b.score for a, b in zip(labels, labels[1:], strict=False))  # best first


def test_a_text_gets_the_same_labels_alone_or_in_a_batch(model_dir, texts):
    predictor = Predictor(model_dir, batch_size=7)
    batched = predictor.predict(texts[:20], k=3)
    for i in (0, 6, 7, 19):
        alone = predictor.predict([texts[i]], k=3)[0]
        assert_same_ranking(*as_arrays([alone]), *as_arrays([batched[i]]))


def test_the_warm_up_ranks_label_texts_alone_and_in_batches_and_changes_no_ranking(model_dir, texts, monkeypatch):
    predictor = Predictor(model_dir, read_only=True)
    before = predictor.predict(texts[:5], k=4)
    calls = []
    rank = predictor.rank
    monkeypatch.setattr(predictor, "rank", lambda batch, k=10: calls.append(list(batch)) or rank(batch, k))
    seconds = predictor.warm_up()
    assert seconds >= 0
    labels = predictor.model.label_texts
    assert [len(batch) for batch in calls] == list(predictor_module.WARM_UP_BATCHES)
    assert all(text in labels for batch in calls for text in batch)
    assert as_arrays(predictor.predict(texts[:5], k=4)) == as_arrays(before)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 50), max_size=30), size=st.integers(1, 8), chars=st.integers(1, 100))
def test_batches_hold_at_most_size_texts_and_chars_characters(lengths, size, chars):
    texts = ["x" * n for n in lengths]
    slices = _batches(texts, size, chars)
    assert [i for start, end in slices for i in range(start, end)] == list(range(len(texts)))
    for start, end in slices:
        assert 1 <= end - start <= size
        assert end - start == 1 or sum(lengths[start:end]) <= chars


def test_long_texts_are_encoded_in_smaller_batches_with_the_same_results(model_dir, texts, monkeypatch):
    long = [" ".join([text] * 50)[:1000] for text in texts[:12]]  # 1,000 characters each
    whole = Predictor(model_dir).predict(long, k=3)
    calls = []
    monkeypatch.setattr(predictor_module, "BATCH_CHARS", 3000)
    monkeypatch.setattr(DualEncoderModel, "predict", lambda self, batch, k, original=DualEncoderModel.predict:
                        calls.append(len(batch)) or original(self, batch, k))
    split = Predictor(model_dir).predict(long, k=3)
    assert calls == [3, 3, 3, 3]
    assert_same_ranking(*as_arrays(split), *as_arrays(whole))


def test_long_labels_are_added_in_batches_all_or_nothing(copy_model, monkeypatch):
    folder = copy_model("ngame")
    predictor = Predictor(folder)
    monkeypatch.setattr(predictor_module, "BATCH_CHARS", 3000)
    texts = [f"label {i} " + "word " * 200 for i in range(7)]  # about 1,000 characters each: 3 batches
    with pytest.raises(KeyConflict, match="'l3' already exists"):  # in the last batch
        predictor.add_labels(texts, [f"n{i}" for i in range(6)] + ["l3"])
    assert predictor.n_labels == 64 and not (folder / ADDED_LABELS).exists()
    assert predictor.add_labels(texts) == [f"added-{row}" for row in range(64, 71)]
    assert Predictor(folder, read_only=True).model.label_texts[64:] == texts


def test_concurrent_calls_give_the_sequential_results(model_dir, texts):
    predictor = Predictor(model_dir, batch_size=8)
    chunks = [texts[i : i + 16] for i in range(0, len(texts), 16)]
    sequential = [predictor.predict(chunk, k=4) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda chunk: predictor.predict(chunk, k=4), chunks))
    for part, reference in zip(concurrent, sequential, strict=True):
        assert_same_ranking(*as_arrays(part), *as_arrays(reference))


def test_k_beyond_the_catalogue_and_empty_input(model_dir):
    predictor = Predictor(model_dir)
    assert predictor.predict([], k=3) == []
    (labels,) = predictor.predict(["compiler"], k=predictor.n_labels + 5)
    assert len(labels) == predictor.n_labels and isinstance(labels[0], ScoredLabel)


@pytest.mark.parametrize(("texts", "k", "error"), [
    ("one string", 3, TypeError), (["ok", 3], 3, TypeError), (["ok"], 0, ValueError),
])
def test_bad_calls_are_named(model_dir, texts, k, error):
    with pytest.raises(error):
        Predictor(model_dir).predict(texts, k=k)


def test_a_directory_that_is_not_a_model_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an xdex model directory"):
        Predictor(tmp_path)


def test_bad_settings_are_named(model_dir):
    with pytest.raises(ValueError, match="batch_size"):
        Predictor(model_dir, batch_size=0)
    with pytest.raises(ValueError, match="search mode 'clf'"):
        Predictor(model_dir, search="clf")  # a plain dual encoder has no classifiers


def test_an_added_label_is_found_by_its_text_and_survives_a_restart(copy_model, toy):
    folder = copy_model("ngame")
    before = digests(folder)
    predictor = Predictor(folder)
    text = new_text(toy)
    assert predictor.add_labels([text]) == ["added-64"]  # generated from its row
    (best,) = predictor.predict([text], k=1)[0]
    assert (best.index, best.key, best.text) == (64, "added-64", text)
    assert best.score == pytest.approx(1.0, abs=1e-5)  # the cosine of a text with itself
    assert predictor.label("added-64") == (64, text) and predictor.n_labels == 65
    assert digests(folder) == before  # the trained files are never rewritten
    predictor.close()  # as when its process ends: the next writer may start
    restarted = Predictor(folder)
    assert restarted.n_labels == 65 and restarted.label("added-64") == (64, text)
    assert restarted.predict([text], k=1)[0][0].key == "added-64"
    assert restarted.add_labels(["another new label"], ["mine"]) == ["mine"]
    assert Predictor(folder).model.label_ids[64:] == ["added-64", "mine"]


@pytest.mark.parametrize("method", ["ngame", "unidec", "dexa"])
def test_every_network_and_search_mode_ranks_a_new_label_first_for_its_text(copy_model, toy, method):
    folder = copy_model(method)
    text = new_text(toy)
    (key,) = Predictor(folder).add_labels([text])
    model = DualEncoderModel.load(folder)
    for mode in model.net.search_modes:
        (best,) = Predictor(folder, search=mode).predict([text], k=1)[0]
        assert best.key == key
        # concat scores the sum of the DE and the classifier cosines; the other modes one cosine
        assert best.score == pytest.approx(2.0 if mode == "concat" else 1.0, abs=1e-5)


def test_added_labels_rank_as_in_one_exact_search_over_all_label_vectors(copy_model, toy, texts):
    model = DualEncoderModel.load(copy_model("unidec")).with_labels([new_text(toy), "zzz unknown words"])
    everything = np.concatenate([model.label_embeddings, model.added_vectors])
    expected = retrieve(model.embed_texts(texts), everything, 6)
    got = model.predict(texts, 6)
    assert got.indices.tolist() == expected.indices.tolist()
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-6)
    de = model.with_search("de")  # added vectors follow the search mode
    np.testing.assert_allclose(de.added_vectors, de.net.new_label_vectors(
        de.net.encoder.tokenize(model.label_texts[64:])).numpy(), rtol=1e-6)


def test_an_hnsw_model_searches_its_added_labels_too(copy_model, toy):
    folder = copy_model("hnsw")
    predictor = Predictor(folder)
    text = new_text(toy)
    predictor.add_labels([text], ["fresh"])
    assert predictor.predict([text], k=3)[0][0].key == "fresh"
    assert Predictor(folder).predict([text], k=3)[0][0].key == "fresh"


def test_bad_additions_add_nothing(copy_model):
    folder = copy_model("ngame")
    predictor = Predictor(folder)
    trained_key = predictor.model.label_ids[0]
    for texts, keys, error in [(["x"], [trained_key], KeyConflict), (["x", "y"], ["a", "a"], KeyConflict),
                               (["x", "  "], None, ValueError), (["x"], ["a", "b"], ValueError),
                               ("x", None, TypeError)]:
        with pytest.raises(error):
            predictor.add_labels(texts, keys)
    assert predictor.add_labels([]) == []
    assert predictor.n_labels == 64 and not (folder / ADDED_LABELS).exists()


def test_a_failed_save_adds_nothing(copy_model, monkeypatch):
    folder = copy_model("ngame")
    predictor = Predictor(folder)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(DualEncoderModel, "save_added", full_disk)
    with pytest.raises(OSError, match="No space left"):
        predictor.add_labels(["x y"])
    assert predictor.n_labels == 64
    with pytest.raises(KeyError):
        predictor.label("added-64")


def test_added_labels_of_another_model_are_refused(copy_model):
    folder, other = copy_model("ngame"), copy_model("hnsw")  # the same 64 label keys, another training run
    Predictor(folder).add_labels(["x y"])
    (other / ADDED_LABELS).write_bytes((folder / ADDED_LABELS).read_bytes())
    with pytest.raises(ValueError, match="written for another model"):
        Predictor(other)


def test_save_writes_the_added_labels_apart_from_the_trained_files(copy_model, tmp_path, toy):
    model = DualEncoderModel.load(copy_model("dexa")).with_labels([new_text(toy)], ["n"])
    model.save(tmp_path / "saved")
    assert len((tmp_path / "saved" / "labels.jsonl").read_text().splitlines()) == 64
    loaded = DualEncoderModel.load(tmp_path / "saved")
    assert loaded.label_ids == model.label_ids and loaded.n_trained == 64
    np.testing.assert_array_equal(loaded.added_vectors, model.added_vectors)


def test_concurrent_additions_and_predictions_lose_nothing(copy_model, toy):
    """4 threads add 5 labels each, one at a time, while 4 threads predict: every addition survives, in memory
    and after a restart, and every predicted label is in the catalogue of the snapshot that answered."""
    folder = copy_model("ngame")
    predictor = Predictor(folder, batch_size=8)
    words = " ".join(toy.labels.texts[:4]).split()
    adding = threading.Event()
    errors: list[BaseException] = []

    def add(worker: int) -> list[str]:
        keys = []
        for i in range(5):
            keys += predictor.add_labels([f"{words[worker + i]} {words[worker * 2 + i]}"], [f"w{worker}-{i}"])
        return keys

    def predict() -> None:
        while not adding.is_set():
            try:
                for labels in predictor.predict(toy.test.texts[:8] + [f"{words[1]} {words[2]}"], k=5):
                    for label in labels:
                        assert predictor.label(label.key) == (label.index, label.text)
            except BaseException as e:  # reported below
                errors.append(e)
                return

    readers = [threading.Thread(target=predict) for _ in range(4)]
    for reader in readers:
        reader.start()
    with ThreadPoolExecutor(max_workers=4) as pool:
        added = [key for keys in pool.map(add, range(4)) for key in keys]
    adding.set()
    for reader in readers:
        reader.join()
    assert not errors, errors[0]
    assert sorted(added) == sorted(f"w{w}-{i}" for w in range(4) for i in range(5))
    assert set(predictor.model.label_ids[64:]) == set(added) and predictor.n_labels == 84
    restarted = Predictor(folder)
    assert restarted.model.label_ids == predictor.model.label_ids
    assert restarted.model.label_texts == predictor.model.label_texts


def test_predicting_takes_no_lock_and_a_read_only_predictor_adds_nothing(copy_model):
    model_dir = copy_model("ngame")
    predictor = Predictor(model_dir, read_only=True)
    predictor.predict(["a text"], k=2)
    assert not (model_dir / WRITER_LOCK).exists()
    with pytest.raises(ReadOnlyError, match="read-only"):
        predictor.add_labels(["a label"])
    assert not predictor.is_writer and Predictor(model_dir).add_labels(["a label"]) == ["added-64"]


@NO_LOCKS
def test_a_directory_where_the_lock_cannot_be_made_is_read_only(copy_model):
    model_dir = copy_model("ngame")
    (model_dir / WRITER_LOCK).mkdir()  # open() fails on it, as on a read-only file system
    predictor = Predictor(model_dir)
    with pytest.raises(ReadOnlyError, match="cannot open the writer lock"):
        predictor.add_labels(["a label"])
    assert predictor.n_labels == 64


@NO_LOCKS
def test_a_second_predictor_of_a_directory_cannot_add_until_the_first_is_closed(copy_model):
    folder = copy_model("ngame")
    first, second = Predictor(folder), Predictor(folder)
    second.claim_writer()
    with pytest.raises(ReadOnlyError, match="this process"):
        first.add_labels(["a label"])
    assert second.is_writer and not first.is_writer
    second.close()
    assert first.add_labels(["a label"]) == ["added-64"] and first.is_writer


def test_a_lone_surrogate_is_a_named_error(model_dir):
    with pytest.raises(ValueError, match="text 1 is not valid Unicode"):
        Predictor(model_dir).predict(["ok", "bad \ud800"], k=2)


def test_a_label_named_fast_is_a_scored_label():
    """Predictions name their labels through ``_scored_label`` (slots filled directly): the same frozen object."""
    import dataclasses

    from xdex.inference.predictor import _scored_label

    fast, plain = _scored_label(3, "k3", "text", 0.25), ScoredLabel(3, "k3", "text", 0.25)
    assert type(fast) is ScoredLabel and fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.score = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("enabled", [True, False])
def test_naming_labels_pauses_the_garbage_collector_and_leaves_it_as_it_was(enabled, monkeypatch):
    import gc

    from xdex.inference.predictor import Predictions
    from xdex.metrics.ranking import Ranking

    seen = []
    made = predictor_module._scored_label
    monkeypatch.setattr(predictor_module, "_scored_label", lambda *a: seen.append(gc.isenabled()) or made(*a))
    ranking = Ranking(np.array([[1, 0], [2, -1]]), np.array([[0.5, 0.25], [0.75, -np.inf]], np.float32))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        labels = Predictions.of(ranking, ["k0", "k1", "k2"], ["t0", "t1", "t2"]).labels
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False, False]
    assert labels == [[ScoredLabel(1, "k1", "t1", 0.5), ScoredLabel(0, "k0", "t0", 0.25)],
                      [ScoredLabel(2, "k2", "t2", 0.75)]]

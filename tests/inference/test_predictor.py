"""xdex.Predictor: loads a model directory once and ranks labels for texts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import xdex
import xdex.data
from xdex.inference import DualEncoderModel, Predictor, ScoredLabel
from xdex.methods.recipe import load_recipe, train


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("predictor") / "model"
    overrides = ["trainer.epochs=2", "trainer.eval_every=2", "trainer.progress=false", "encoder.dim=64"]
    train(xdex.data.load("demo"), load_recipe("ngame", overrides=overrides), out)
    return out


@pytest.fixture(scope="module")
def texts():
    return xdex.data.load("demo").test.texts[:300]


def test_predictions_are_the_model_ranking_with_keys_and_texts(model_dir, texts):
    model = DualEncoderModel.load(model_dir)
    expected = model.predict(texts, 5)
    predicted = xdex.Predictor(model_dir, batch_size=64).predict(texts, k=5)
    assert len(predicted) == len(texts)
    for row, scores, labels in zip(expected.indices, expected.scores, predicted):
        assert [label.index for label in labels] == row.tolist()
        np.testing.assert_allclose([label.score for label in labels], scores, rtol=1e-5, atol=1e-6)
        assert all(label.key == model.label_ids[label.index] and label.text == model.label_texts[label.index]
                   for label in labels)
        assert all(a.score >= b.score for a, b in zip(labels, labels[1:]))  # best first


def test_a_text_gets_the_same_labels_alone_or_in_a_batch(model_dir, texts):
    predictor = Predictor(model_dir, batch_size=7)
    batched = predictor.predict(texts[:20], k=3)
    for i in (0, 6, 7, 19):
        alone = predictor.predict([texts[i]], k=3)[0]
        assert [label.index for label in alone] == [label.index for label in batched[i]]


def test_concurrent_calls_give_the_sequential_results(model_dir, texts):
    predictor = Predictor(model_dir, batch_size=32)
    chunks = [texts[i : i + 50] for i in range(0, len(texts), 50)]
    sequential = [predictor.predict(chunk, k=4) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda chunk: predictor.predict(chunk, k=4), chunks))
    assert [[[label.index for label in row] for row in part] for part in concurrent] == \
        [[[label.index for label in row] for row in part] for part in sequential]


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

"""NGAME's two modules (NGAME Sec. 3): Module I trains the dual encoder; Module II trains per-label classifiers
w_l on the frozen encoder, started from the label embeddings, and fuses their scores with the embedding scores,
s(x, l) = α·⟨E(x), w_l⟩ + (1 − α)·⟨E(x), E(z_l)⟩, α chosen on validation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from xdex.data import load
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.metrics import evaluate_predictions
from xdex.modules import ClassifierFusionNet, DualEncoder

SMALL = ["encoder.dim=64", "encoder.vocab_size=8000", "trainer.epochs=2", "trainer.eval_every=2",
         "sampling.first_refresh=1", "classifiers.epochs=2", "data.validation_size=500", "trainer.progress=false",
         "ranker=null"]


@pytest.fixture(scope="module")
def demo():
    return load("demo")


@pytest.fixture(scope="module")
def ngame(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("ngame") / "model"
    return train(demo, load_recipe("ngame", overrides=SMALL), out), out


def test_the_ngame_recipe_has_module_ii():
    assert load_recipe("ngame").classifiers is not None
    assert load_recipe("ngame", overrides=["classifiers=null"]).classifiers is None


def test_module_ii_fuses_classifier_and_embedding_scores(ngame, demo):
    model, out = ngame
    assert isinstance(model.net, ClassifierFusionNet)
    alpha = json.loads((out / "heads.json").read_text())["alpha"]
    tables = load_file(str(out / "heads.safetensors"))
    z, w = tables["label_embeddings"], tables["classifiers"]
    assert not np.allclose(w, z, atol=1e-3)  # the classifiers moved from their start, the label embeddings
    np.testing.assert_allclose(np.load(out / "label_embeddings.npy"), alpha * w + (1 - alpha) * z, atol=1e-6)
    assert 0.0 <= alpha <= 1.0 and model.search_modes == ("fused", "de", "clf")
    fused = evaluate_predictions(model.predict(demo.test.texts, 10), demo)
    de = evaluate_predictions(model.with_search("de").predict(demo.test.texts, 10), demo)
    assert fused["P@1"] >= de["P@1"] - 0.5  # α was chosen on validation: no worse than Module I alone


def test_without_module_ii_ngame_is_a_plain_dual_encoder(demo, tmp_path):
    model = train(demo, load_recipe("ngame", overrides=[*SMALL, "classifiers=null", "trainer.epochs=1"]),
                  tmp_path / "m")
    assert type(model.net) is DualEncoder and not (tmp_path / "m" / "heads.json").exists()

"""A tiny trained model for the tests of `xdex serve` (DEXML's memorisation task, one epoch of a small
bag-of-embeddings encoder, about a second), and clients of its API."""

from __future__ import annotations

import shutil

import pytest

from xdex.data.synthetic import memorisation_task
from xdex.inference import Predictor
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient

from xdex.serving import create_app

TINY = ["trainer.epochs=1", "trainer.eval_every=1", "trainer.progress=false", "data.validation_size=0",
        "encoder.dim=16", "encoder.vocab_size=300", "sampling.batch_size=16"]


@pytest.fixture(scope="session")
def toy():
    """64 labels of 4 words from a 60-word vocabulary (DEXML's memorisation task)."""
    return memorisation_task(n=64, length=4, vocab_size=60, seed=1)


@pytest.fixture(scope="session")
def trained(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve") / "model"
    train(toy, load_recipe("ngame", overrides=TINY), out)
    return out


@pytest.fixture(scope="session")
def predictor(trained):
    return Predictor(trained, read_only=True)


@pytest.fixture(scope="session")
def client(predictor):
    """A read-only server of the shared model."""
    return TestClient(create_app(predictor, read_only=True))


@pytest.fixture()
def model_dir(trained, tmp_path):
    """A copy of the trained model that a test may add labels to."""
    return shutil.copytree(trained, tmp_path / "model")


@pytest.fixture()
def new_text(toy):
    """A text that is no label's: the first two words of label 0 and the last two of label 1."""
    return " ".join(toy.labels.texts[0].split()[:2] + toy.labels.texts[1].split()[2:])

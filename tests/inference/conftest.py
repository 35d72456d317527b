"""Tiny trained models for the inference tests: DEXML's memorisation task (64 random queries, each relevant to
one random label text), one epoch of a small bag-of-embeddings encoder, about a second per model."""

from __future__ import annotations

import shutil

import pytest

from xdex.data.synthetic import memorisation_task
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe

TINY = ["trainer.epochs=1", "trainer.eval_every=1", "trainer.progress=false", "data.validation_size=0",
        "encoder.dim=16", "encoder.vocab_size=300", "sampling.batch_size=16"]


@pytest.fixture(scope="session")
def toy():
    """64 labels of 4 words from a 60-word vocabulary; the test split is the training split."""
    return memorisation_task(n=64, length=4, vocab_size=60, seed=1)


MODELS = {  # name: recipe and its settings beyond TINY
    "ngame": ("ngame", ["classifiers=null"]),  # a plain dual encoder (NGAME's Module I)
    "unidec": ("unidec", []),  # UniDEC heads and classifiers
    "dexa": ("dexa", []),  # DEXA's fused classifiers
    "hnsw": ("ngame", ["index.kind=hnsw", "index.ef_search=8"]),  # an approximate index
}


@pytest.fixture(scope="session")
def trained(toy, tmp_path_factory):
    """Model directories by ``MODELS`` name, trained once for the session; tests that change a model copy it
    first (``copy_model``)."""
    root = tmp_path_factory.mktemp("trained")
    out = {}
    for name, (recipe, settings) in MODELS.items():
        out[name] = root / name
        train(toy, load_recipe(recipe, overrides=[*TINY, *settings]), out[name])
    return out


@pytest.fixture()
def copy_model(trained, tmp_path):
    """A fresh copy of a trained model directory: ``copy_model("ngame")``."""
    def copy(name: str = "ngame"):
        return shutil.copytree(trained[name], tmp_path / name)
    return copy

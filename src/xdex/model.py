"""``xdex.Model``: the one object a user trains, loads, saves, extends and predicts with.

In the spirit of scikit-learn's estimators and sentence-transformers' models::

    model = xdex.Model.train(dataset, recipe="dexml", out="models/m", trainer__epochs=10)
    model = xdex.Model.load("models/m")
    predictions = model.predict(texts, k=10)   # .indices / .scores arrays, .labels per text
    model.add_labels(["a new label"])          # zero-shot, searchable at once; kept by model.save(...)
    model.with_search("lexical")               # one channel alone: "dense", "lexical", or "de" / "clf"

Every recipe (NGAME, DEXML, DePSL, UniDEC, DEXA, OAK) trains and loads as this class; the network inside
says which. :class:`xdex.Predictor` is the thread-safe serving wrapper around a model directory.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xdex.data import Dataset
from xdex.data import load as load_dataset
from xdex.inference.model import DualEncoderModel
from xdex.inference.predictor import Predictions
from xdex.methods.pipeline import train as train_recipe
from xdex.methods.recipe import load_recipe


class Model(DualEncoderModel):
    """A trained model: network, label catalogue and index (see the module docstring)."""

    @classmethod
    def train(
        cls,
        dataset: Dataset | str | Path,
        recipe: str = "ngame",
        out: str | Path | None = None,
        *,
        config: str | Path | None = None,
        overrides: Sequence[str] = (),
        resume: bool = False,
        **settings: Any,
    ) -> Model:
        """Train ``recipe`` on ``dataset`` (a :class:`~xdex.data.Dataset`, a dataset folder or ``"demo"``) and
        write the model directory ``out`` (a new or empty folder), as ``xdex train`` does.

        ``config`` is a YAML file over the recipe, ``overrides`` are ``"key.sub=value"`` strings, and keyword
        settings are the same with ``__`` for the dots: ``trainer__epochs=10`` is ``trainer.epochs=10``.
        """
        if out is None:
            raise ValueError("Model.train needs out=: the folder the model directory is written to")
        if not isinstance(dataset, Dataset):
            dataset = load_dataset(dataset)
        keyword = [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in settings.items()]
        cfg = load_recipe(recipe, config, [*overrides, *keyword])
        trained = train_recipe(dataset, cfg, out, resume=resume)
        if trained is None:  # a rank other than 0 under torchrun
            raise RuntimeError("this process is not rank 0 of a torchrun job: rank 0 holds the model")
        return cls(**{f.name: getattr(trained, f.name) for f in dataclasses.fields(trained) if f.init})

    def predict(self, texts: Sequence[str], k: int = 10) -> Predictions:
        """Top-``k`` labels of each text, best first: arrays for metrics, ``.labels`` for applications."""
        return Predictions.of(super().predict(list(texts), k), self.label_ids, self.label_texts)

    def add_labels(self, texts: Sequence[str], keys: Sequence[str] | None = None) -> list[str]:
        """Add labels by their texts alone (zero-shot): searchable at once, kept by :meth:`save`. Returns their
        keys (``keys`` when given, checked to be new; else ``added-<row>``)."""
        before = len(self.label_ids)
        grown = self.with_labels(texts, keys)
        self.label_ids, self.label_texts, self.added_vectors = grown.label_ids, grown.label_texts, grown.added_vectors
        self.channels = grown.channels  # the text channels read the new labels' texts too
        return self.label_ids[before:]

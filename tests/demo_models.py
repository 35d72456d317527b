"""One training of the ``dexml`` recipe on the bundled data, shared by the tests that only read its model
(the ``dexml_on_demo`` fixture of conftest.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from xdex.data import load
from xdex.inference.model import DualEncoderModel
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe

DEMO_DEXML = ["trainer.epochs=3", "trainer.progress=false", "data.validation_size=800"]
"""The settings of :func:`train_dexml_on_demo`: the packaged recipe, ranking stage included, for three epochs."""


class UnreadableSplit:
    """A test split that fails the run the moment anything but its filter pairs is read."""

    def __init__(self, filter_pairs):
        self.filter = filter_pairs

    def __getattr__(self, name: str):
        raise AssertionError(f"training read the test split's {name!r}")


def train_dexml_on_demo(out: Path) -> DualEncoderModel:
    """``dexml`` (:data:`DEMO_DEXML`) trained on the bundled data into ``out`` while its test split cannot be read."""
    demo = load("demo")
    blind = dataclasses.replace(demo)
    blind.test = UnreadableSplit(demo.test.filter)
    return train(blind, load_recipe("dexml", overrides=DEMO_DEXML), out)

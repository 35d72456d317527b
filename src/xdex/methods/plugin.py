"""Plug-ins: what a method adds to the one training pipeline (``methods/pipeline.py``).

A plug-in is active in a recipe when the recipe has its section (or when its ``active`` test says so) and adds:

- ``section``: the dataclass of its recipe section (registered in :data:`xdex.methods.schema.SECTIONS`);
- ``check``: refuses settings it cannot train with, before anything runs;
- ``build``: the network and the trainer objective (at most one active plug-in builds; without one the run
  trains a plain dual encoder);
- ``lr_groups``: learning rates of its own parameter groups (name prefix -> rate);
- stages: functions of the :class:`Run` called ``before_encoder`` (after the validation split, before the
  encoder is built), ``before_fit`` (network and objective built) and ``after_fit`` (the main fit done; a stage
  may replace ``run.net``, e.g. by a network that fuses classifiers).

The built-in plug-ins (UniDEC's heads, DEXA's auxiliary vectors and classifiers, DEXML-Full, OAK) register
themselves when their modules are imported; :func:`active_plugins` imports them first. A sixth method is one
module that calls :func:`register` (and registers its network with :func:`xdex.modules.register_network`) plus
one recipe YAML (:func:`xdex.methods.recipe.register_recipe`); ``docs/architecture.md`` has a worked example.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from xdex.methods.schema import SECTIONS, RecipeConfig, register_section

if TYPE_CHECKING:
    from xdex.data.dataset import Dataset
    from xdex.encoders.base import Encoder
    from xdex.inference.model import DualEncoderModel
    from xdex.modules.network import Network
    from xdex.ranking.ranker import Ranker
    from xdex.text.tokens import TokenizedTexts
    from xdex.train import Objective, Trainer

BUILTIN = ("xdex.methods.full_label", "xdex.methods.unidec", "xdex.methods.dexa", "xdex.methods.oak",
           "xdex.methods.ranker")  # in this order: the ranking stage comes after every other stage


@dataclass
class Validation:
    """The held-out training documents that choose the best epoch, scored as the test split is."""

    rows: np.ndarray  # their rows in the training split
    texts: list[str]
    tokens: TokenizedTexts
    labels: sp.csr_matrix
    pairs: sp.csr_matrix | None  # filter pairs removed from their rankings
    depth: int  # ranking depth: the largest k of the metrics, plus room for filtered pairs


@dataclass
class Run:
    """What a training run has built so far; the pipeline's steps and the plug-ins' stages read and extend it.

    :func:`xdex.methods.pipeline.build_objective` makes a run of the first four fields alone (a network and
    objective outside a training run): stages that need the others check for them.
    """

    config: RecipeConfig
    train_labels: sp.csr_matrix  # the labels of the training rows
    query_texts: list[str]  # the texts of the training rows
    label_texts: list[str]
    dataset: Dataset | None = None
    out: Path | None = None  # the model directory being written
    workdir: Path | None = None  # out/training: checkpoints, metrics logs, the run's config
    resume: bool = False
    train_rows: np.ndarray | None = None  # rows of the training split that train (the others validate)
    train_recipe: Callable[..., DualEncoderModel | None] | None = None  # the pipeline: (dataset, config, out, resume)
    vocabulary_texts: list[str] = field(default_factory=list)  # more texts the encoder's vocabulary sees
    encoder: Encoder | None = None
    queries: TokenizedTexts | None = None
    labels: TokenizedTexts | None = None
    validation: Validation | None = None
    validation_queries: Callable[[], np.ndarray] | None = None  # query vectors of validation (default: the net's)
    validation_labels: Callable[[], np.ndarray] | None = None  # label vectors of validation (default: the net's)
    # the validation metrics from those query and label vectors (default: their inner-product ranking's)
    validation_scorer: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = None
    net: Network | None = None
    objective: Objective | None = None
    trainer: Trainer | None = None
    ranker: Ranker | None = None  # the ranking stage of the model, once fitted (methods/ranker.py)
    checkpoints: list[Path] = field(default_factory=list)  # removed once the model directory is written
    meta: dict[str, Any] = field(default_factory=dict)  # added to the model's meta.json
    shared: dict[str, Any] = field(default_factory=dict)  # what a plug-in's stages hand each other

    def inputs(self) -> tuple[Encoder, TokenizedTexts, TokenizedTexts]:
        """The encoder and the tokenized training queries and labels (built by the pipeline before any network)."""
        if self.encoder is None or self.queries is None or self.labels is None:
            raise RuntimeError("the encoder and the tokenized texts are built before the network")
        return self.encoder, self.queries, self.labels

    def training_folder(self) -> Path:
        """``out/training`` of a training run (stages that write checkpoints need one)."""
        if self.workdir is None:
            raise RuntimeError("this stage runs inside a training run (xdex.methods.pipeline.train) only")
        return self.workdir


Stage = Callable[[Run], None]


@dataclass(frozen=True)
class Plugin:
    """What a method adds to the pipeline (see the module docstring)."""

    name: str  # also the recipe section it reads, when it has one
    section: type | None = None
    active: Callable[[RecipeConfig], bool] | None = None  # default: the recipe has the section
    check: Callable[[RecipeConfig], None] | None = None
    build: Callable[[Run], tuple[Network, Objective]] | None = None
    lr_groups: Callable[[RecipeConfig], dict[str, float]] | None = None
    before_encoder: tuple[Stage, ...] = ()
    before_fit: tuple[Stage, ...] = ()
    after_fit: tuple[Stage, ...] = ()

    def is_active(self, config: RecipeConfig) -> bool:
        if self.active is not None:
            return self.active(config)
        return config.section(self.name) is not None


PLUGINS: dict[str, Plugin] = {}


def register(plugin: Plugin) -> Plugin:
    """Add ``plugin`` to the pipeline (its section to the recipe schema); registering it again replaces it."""
    if plugin.section is not None:
        register_section(plugin.name, plugin.section)
    PLUGINS[plugin.name] = plugin
    return plugin


def unregister(name: str) -> None:
    """Remove the plug-in ``name`` and its recipe section."""
    plugin = PLUGINS.pop(name, None)
    if plugin is not None and plugin.section is not None:
        SECTIONS.pop(name, None)


def active_plugins(config: RecipeConfig) -> list[Plugin]:
    """The plug-ins ``config`` uses, in registration order, checked (each plug-in's own check, then: at most one
    builds the network)."""
    for module in BUILTIN:
        importlib.import_module(module)  # each registers its plug-in
    plugins = [p for p in PLUGINS.values() if p.is_active(config)]
    for plugin in plugins:
        if plugin.check is not None:
            plugin.check(config)
    builders = [p.name for p in plugins if p.build is not None]
    if len(builders) > 1:
        raise ValueError(f"{' and '.join(builders)} each build the network: a recipe can use only one of them")
    return plugins

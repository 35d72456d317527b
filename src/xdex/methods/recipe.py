"""Recipes: named YAML configs that choose the encoder, the loss, the batches, the trainer settings and the
method sections (the plug-ins of ``methods/plugin.py``) that :func:`xdex.methods.pipeline.train` runs.

``configs/base.yaml`` holds the defaults; each method's recipe (``configs/<method>.yaml``) lays only its
differences over them; a user's YAML file and ``key=value`` overrides come last. A method added from outside
xdex names its recipe file with :func:`register_recipe`.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from xdex.config import ConfigError, apply_overrides, load_config, read_yaml

if TYPE_CHECKING:  # the schema imports torch (through the encoders): loaded on the first load_recipe, so that the
    from xdex.methods.schema import RecipeConfig  # command line names the recipes and answers --help at once

METHODS = ("ngame", "dexml", "depsl", "unidec", "dexa", "oak")  # the packaged recipes
BASE = "base"  # configs/base.yaml: the defaults every method's recipe extends
FRESH_SECTIONS = {"encoder": "type", "loss": "name"}  # a recipe that changes these keys restarts the section
RECIPES: dict[str, Path] = {}  # recipes registered from outside xdex: method -> YAML file


def register_recipe(method: str, path: str | Path) -> None:
    """Make ``method`` a recipe name, read from the YAML file ``path`` (laid over ``configs/base.yaml``)."""
    if method in (*METHODS, BASE):
        raise ValueError(f"{method!r} is a packaged recipe of xdex")
    RECIPES[method] = Path(path)


def recipe_names() -> tuple[str, ...]:
    """Every recipe that ``--method`` accepts: the packaged ones, then the registered ones."""
    return (*METHODS, *RECIPES)


def recipe_path(method: str) -> Path:
    """The YAML recipe of ``method`` (``base`` names the defaults every recipe extends)."""
    if method in RECIPES:
        return RECIPES[method]
    if method not in (*METHODS, BASE):
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(recipe_names())}")
    return Path(str(resources.files("xdex") / "configs" / f"{method}.yaml"))


def recipe_layers(method: str) -> dict:
    """The packaged defaults (``base.yaml``) with the method's recipe (``<method>.yaml``) laid over them."""
    return _lay_over(read_yaml(recipe_path(BASE)), read_yaml(recipe_path(method)), fresh=FRESH_SECTIONS)


def load_recipe(method: str, path: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """The packaged defaults, the recipe of ``method``, then the user's YAML file, then ``key=value`` overrides.

    Sections merge key by key, except that another ``encoder.type`` or ``encoder.pretrained`` starts the encoder
    section afresh (a transformer has none of a bag encoder's settings, a pre-trained model brings its own), and
    a method recipe that names another ``loss.name`` than the defaults starts the loss section afresh.
    """
    from xdex.methods.schema import RecipeConfig, renamed_settings

    recipe = recipe_layers(method)
    user = apply_overrides(read_yaml(path) if path is not None else {}, overrides or [])
    old = renamed_settings(user)
    if old:
        raise ConfigError("renamed settings: " + ", ".join(f"{a} is now {b}" for a, b in old))
    if _switches(recipe, user, "encoder", "type") or _switches(recipe, user, "encoder", "pretrained"):
        recipe["encoder"] = {}
    cfg = load_config(RecipeConfig, path, overrides, base=recipe)
    if cfg.method != method:
        raise ValueError(f"the config is for method {cfg.method!r} but --method is {method!r}")
    return cfg


def _switches(lower: dict, upper: dict, section: str, key: str) -> bool:
    """Whether ``upper`` names another ``section.key`` than ``lower`` (e.g. another encoder type)."""
    new, old = upper.get(section), lower.get(section)
    if not isinstance(new, dict):
        new = {}
    if not isinstance(old, dict):
        old = {}
    return key in new and new[key] != old.get(key)


def _lay_over(lower: dict, upper: dict, fresh: dict[str, str]) -> dict:
    """``upper`` merged into a copy of ``lower`` key by key; a section of ``fresh`` ({section: key}) whose key
    ``upper`` changes is taken from ``upper`` alone."""
    out = copy.deepcopy(lower)
    for section, value in upper.items():
        if isinstance(value, dict) and isinstance(out.get(section), dict):
            if section in fresh and _switches(out, upper, section, fresh[section]):
                out[section] = {}
            out[section] = _lay_over(out[section], value, fresh={})
        else:
            out[section] = value
    return out

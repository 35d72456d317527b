"""One set of defaults: configs/base.yaml equals the config classes' defaults, each method's recipe lists only
what it changes, and `xdex train --print-config` prints the full resolved recipe."""

from __future__ import annotations

import pytest
import yaml
from cli_runner import xdex_cli

from xdex.config import to_dict
from xdex.encoders.factory import BAG_DEFAULTS
from xdex.methods.recipe import FRESH_SECTIONS, METHODS, load_recipe, recipe_path
from xdex.methods.schema import RecipeConfig


def read(name: str) -> dict:
    return yaml.safe_load(recipe_path(name).read_text(encoding="utf-8"))


def leaves(section: dict, prefix: tuple = ()) -> dict[tuple, object]:
    out = {}
    for key, value in section.items():
        out |= leaves(value, (*prefix, key)) if isinstance(value, dict) and value else {(*prefix, key): value}
    return out


def test_the_base_recipe_equals_the_config_defaults():
    assert RecipeConfig.from_dict(read("base")) == RecipeConfig()
    assert read("base")["encoder"] == {"type": "bag", **BAG_DEFAULTS}


@pytest.mark.parametrize("method", METHODS)
def test_a_method_recipe_lists_only_what_it_changes(method):
    base, recipe = leaves(read("base")), read(method)
    restarted = {s for s, key in FRESH_SECTIONS.items() if key in recipe.get(s, {})
                 and recipe[s][key] != read("base")[s][key]}
    repeated = [".".join(path) for path, value in leaves(recipe).items()
                if path[0] not in restarted and path in base and base[path] == value]
    assert repeated == []


def test_a_method_that_names_another_loss_does_not_inherit_the_defaults_loss_settings():
    assert load_recipe("dexml").loss == {"name": "decoupled_softmax", "temperature": 0.05}
    assert load_recipe("ngame").loss == {"name": "triplet", "margin": 0.3, "num_negatives": 10}
    assert load_recipe("dexml", overrides=["loss.name=soft_topk"]).loss["temperature"] == 0.05  # a user's --set merges


@pytest.mark.parametrize("method", METHODS)
def test_print_config_prints_the_resolved_recipe_which_reads_back_as_a_config(method, monkeypatch, capsys, tmp_path):
    code, stdout, _ = xdex_cli(monkeypatch, capsys, "train", "--method", method, "--print-config", "--set",
                               "trainer.epochs=3")
    assert code == 0
    printed = yaml.safe_load(stdout)
    expected = to_dict(load_recipe(method, overrides=["trainer.epochs=3"]))
    assert printed == expected and printed["trainer"]["epochs"] == 3
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(printed))
    assert to_dict(load_recipe(method, tmp_path / "c.yaml")) == expected


def test_renamed_settings_are_named_and_recipes_written_before_still_read(tmp_path):
    from xdex.config import ConfigError
    from xdex.methods.schema import upgrade_names

    with pytest.raises(ConfigError, match=r"heads\.lam is now heads\.de_weight, loss\.lam is now loss\.q2l_weight"):
        load_recipe("unidec", overrides=["heads.lam=0.3", "loss.lam=1"])
    assert load_recipe("unidec", overrides=["heads.de_weight=0.3"]).heads.de_weight == 0.3
    old = {"heads": {"lam": 0.3, "classifier_loss": {"name": "symmetric", "lam": 0.2}}, "loss": {"lam": 1.0}}
    assert upgrade_names(old) == {
        "heads": {"de_weight": 0.3, "classifier_loss": {"name": "symmetric", "q2l_weight": 0.2}},
        "loss": {"q2l_weight": 1.0}}
    assert old["heads"]["lam"] == 0.3  # the recipe given is left as it is

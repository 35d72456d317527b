from dataclasses import dataclass, field
from typing import Literal

import pytest

from xdex.config import ConfigError, apply_overrides, from_dict, load_config, save_config


@dataclass
class Inner:
    lr: float = 1e-3
    kind: Literal["a", "b"] = "a"


@dataclass
class Outer:
    epochs: int = 3
    name: str | None = None
    ks: list[int] = field(default_factory=lambda: [1, 3])
    inner: Inner = field(default_factory=Inner)


def test_defaults_file_and_overrides_apply_in_order(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("epochs: 5\ninner:\n  lr: 0.1\n")
    cfg = load_config(Outer, path, ["inner.kind=b", "epochs=7", "ks=[5, 10]"], base={"name": "x"})
    assert cfg == Outer(epochs=7, name="x", ks=[5, 10], inner=Inner(lr=0.1, kind="b"))


def test_int_is_accepted_for_float_but_not_the_reverse():
    assert from_dict(Inner, {"lr": 1}).lr == 1.0
    with pytest.raises(ConfigError, match="epochs"):
        from_dict(Outer, {"epochs": 1.5})


def test_unknown_keys_and_bad_literals_are_named():
    with pytest.raises(ConfigError, match=r"inner\.lrr"):
        from_dict(Outer, {"inner": {"lrr": 1}})
    with pytest.raises(ConfigError, match=r"inner\.kind"):
        from_dict(Outer, {"inner": {"kind": "c"}})


def test_bad_override_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["epochs"])
    path = tmp_path / "bad.yaml"
    path.write_text("epochs: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+"):
        load_config(Outer, path)


def test_save_and_reload_round_trip(tmp_path):
    cfg = Outer(epochs=9, inner=Inner(kind="b"))
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(Outer, tmp_path / "c.yaml") == cfg

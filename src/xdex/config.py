"""Dataclass configs loadable from YAML, with ``key.sub=value`` overrides from the command line.

Unknown keys and values of the wrong type are rejected with the offending key named, so a typo in a
recipe never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from xdex.atomic import atomic_write_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class ConfigError(ValueError):
    """A config file or override that does not fit the config's fields."""


def convert(value: Any, tp: Any, where: str) -> Any:
    """``value`` (read from YAML) as type ``tp``: dataclasses built field by field, the rest checked; errors name
    ``where`` (the dotted key)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [convert(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if tp is Any:
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")


def from_dict(cls: type[T], data: dict, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; missing keys keep their defaults."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key(s) {', '.join(prefix + k for k in unknown)}; valid keys: {', '.join(sorted(names))}"
        )
    kwargs = {k: convert(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def to_dict(config: Any) -> dict:
    """A config as a YAML mapping (a class with a ``to_dict`` method of its own writes itself)."""
    own = getattr(config, "to_dict", None)
    return own() if own is not None else dataclasses.asdict(config)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=value`` strings (values parsed as YAML scalars) to a nested dict, in order."""
    out = yaml.safe_load(yaml.safe_dump(data))  # deep copy
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict | None = None) -> T:
    """``base`` (defaults of a recipe), then the YAML file at ``path``, then ``overrides``; a class with a
    ``from_dict`` classmethod of its own (a recipe and its method sections) builds itself."""
    data: dict = dict(base or {})
    if path is not None:
        data = _merge(data, read_yaml(path))
    data = apply_overrides(data, overrides or [])
    own = getattr(cls, "from_dict", None)
    return own(data) if own is not None else from_dict(cls, data)


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from ``path``; errors name the file and line."""
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: invalid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return loaded


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def save_config(config: Any, path: str | Path) -> None:
    atomic_write_text(path, yaml.safe_dump(to_dict(config), sort_keys=False))

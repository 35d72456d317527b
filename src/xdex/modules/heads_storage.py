"""The two files that hold a network's parts beyond its encoder in a model directory: ``heads.json`` (the
network type, which :func:`xdex.modules.load_net` dispatches on, and its settings) and ``heads.safetensors``
(its tables). Each is written atomically; reading names the file and what is wrong with it."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from xdex.atomic import atomic_path
from xdex.jsonfile import read_json, write_json

HEADS_CONFIG = "heads.json"
HEADS_WEIGHTS = "heads.safetensors"


def write_heads(folder: str | Path, kind: str, tables: dict[str, torch.Tensor], settings: dict) -> None:
    """Write ``tables`` (as contiguous CPU tensors) and ``{"type": kind, **settings}`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / HEADS_WEIGHTS) as tmp:
        save_file({name: t.detach().cpu().contiguous() for name, t in tables.items()}, str(tmp))
    write_json(folder / HEADS_CONFIG, {"type": kind, **settings})


def read_heads(folder: str | Path, kind: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The settings and tables written by :func:`write_heads` for a network of type ``kind``."""
    folder = Path(folder)
    config_path, weights_path = folder / HEADS_CONFIG, folder / HEADS_WEIGHTS
    config = read_json(config_path)
    if not isinstance(config, dict) or config.get("type") != kind:
        raise ValueError(f"{config_path}: expected a JSON object with type {kind!r}")
    if not weights_path.is_file():
        raise FileNotFoundError(f"{folder}: no {HEADS_WEIGHTS}")
    try:
        return config, load_file(str(weights_path))
    except SafetensorError as e:
        raise ValueError(f"{weights_path}: damaged safetensors file ({e})") from None

"""The small JSON files of tokenizer and encoder folders: written atomically, read with clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xdex.atomic import atomic_write_text


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with sorted keys, atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path) -> Any:
    """Read a JSON file; a syntax error becomes a ``ValueError`` naming the file and line."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None

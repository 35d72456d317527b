"""Stable item ids: every document, label and auxiliary item has a distinct, non-empty string id."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xdex.data.errors import ProblemLog


def default_ids(n: int) -> list[str]:
    """The ids of items whose source has none: their 0-based row numbers."""
    return [str(i) for i in range(n)]


def check_ids(ids: Sequence[str], path: Path, log: ProblemLog, what: str = "id", first_line: int = 1) -> None:
    """Report empty ids and every repeat of an id, naming the line where it first occurs."""
    seen: dict[str, int] = {}
    for row, key in enumerate(ids):
        line = first_line + row
        if not key.strip():
            log.add(path, line, f"empty {what}")
        elif key in seen:
            log.add(path, line, f"duplicate {what} '{key}' (first on line {seen[key]})")
        else:
            seen[key] = line

"""JSON-lines files: one JSON object per line, read with type-checked field access.

Every problem (malformed JSON, a text with a lone surrogate, a missing field, a field of the wrong type) is
reported at its file and line, and the row still counts, so that the rows after it keep their ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdex.data.errors import ProblemLog
from xdex.data.textfile import read_lines
from xdex.jsonfile import beyond_float, cut, parse_json_line


def read_json_rows(path: Path, log: ProblemLog) -> Iterator[dict | None]:
    """The objects of a JSON-lines file, one per line, None for a line that is not a JSON object."""
    for number, line in enumerate(read_lines(path, log), 1):
        if not line.strip():
            log.add(path, number, "empty line; expected a JSON object")
            yield None
            continue
        try:
            value = parse_json_line(line)
        except json.JSONDecodeError as e:
            log.add(path, number, f"malformed JSON: {e.msg} at column {e.colno}")
            yield None
            continue
        except ValueError as e:  # nested too deeply, a lone surrogate, a number Python refuses
            message = str(e)
            log.add(path, number, message if "surrogate" in message else f"malformed JSON: {message}")
            yield None
            continue
        if not isinstance(value, dict):
            log.add(path, number, f"expected a JSON object, found {_kind(value)}")
            value = None
        yield value



def _shown(value: Any, limit: int = 40) -> str:
    """``value`` as JSON for a message, cut to ``limit`` characters: a line may hold megabytes."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError):  # nested too deeply; an integer too long to print
        return _kind(value)
    return cut(text, limit)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _is_int(value: Any) -> bool:
    return type(value) is int and -(2**63) <= value < 2**63


_MISSING = object()


@dataclass
class Fields:
    """The fields of one JSON row; a getter that finds a problem reports it at the row's line and returns None."""

    row: dict
    path: Path
    line: int
    log: ProblemLog

    def _get(self, name: str, required: bool) -> Any:
        if name not in self.row:
            if required:
                self.log.add(self.path, self.line, f'missing field "{name}"')
            return _MISSING
        return self.row[name]

    def _wrong(self, name: str, expected: str) -> None:
        self.log.add(self.path, self.line, f'"{name}" must be {expected}, found {_kind(self.row[name])}')

    def string(self, name: str, required: bool = True) -> str | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if isinstance(value, str):
            return value
        self._wrong(name, "a string")
        return None

    def key(self, name: str) -> str | None:
        """An optional source id: a string, or an integer taken as its decimal string."""
        value = self._get(name, required=False)
        if value is _MISSING:
            return None
        if isinstance(value, str) or _is_int(value):
            return str(value)
        self._wrong(name, "a string or an integer")
        return None

    def row_number(self, name: str, expected: int) -> None:
        """Check an optional row-number field: it must equal the 0-based row ``expected``."""
        value = self._get(name, required=False)
        if value is _MISSING:
            return
        if not _is_int(value):
            self._wrong(name, "an integer (the 0-based row number)")
        elif value != expected:
            self.log.add(self.path, self.line, f'"{name}" is {value} but this is row {expected} (0-based)')

    def ids(self, name: str, required: bool = True) -> list[int] | None:
        """A list of integer ids (their range and repeats are checked when the matrix is built)."""
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if not isinstance(value, list):
            self._wrong(name, "a list of integer ids")
            return None
        if set(map(type, value)) - {int} or (value and not (min(value) >= -(2**63) and max(value) < 2**63)):
            bad = next(v for v in value if not _is_int(v))
            self.log.add(self.path, self.line, f'"{name}" must hold integer ids, found {_shown(bad)}')
            return None
        return value

    def numbers(self, name: str, length: int) -> list[float] | None:
        """An optional list of ``length`` numbers."""
        value = self._get(name, required=False)
        if value is _MISSING:
            return None
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            self._wrong(name, "a list of numbers")
            return None
        if len(value) != length:
            self.log.add(self.path, self.line, f'"{name}" has {len(value)} entries for {length} ids')
            return None
        if any(beyond_float(v) for v in value):
            self.log.add(self.path, self.line, f'"{name}" holds a number beyond the range of a float')
            return None
        return [float(v) for v in value]

"""JSON text read with clear errors: small JSON files (tokenizer and encoder folders, ``meta.json``), written
atomically, and single JSON lines (:func:`parse_json_line`), which every JSON-lines reader shares."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from xdex.atomic import atomic_write_text


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON with sorted keys, atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path) -> Any:
    """Read a JSON file; any problem (syntax, nesting, encoding, lone surrogates) becomes a ``ValueError``
    naming the file (and the line of a syntax error)."""
    path = Path(path)
    try:
        return parse_json_line(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None
    except ValueError as e:
        raise ValueError(f"{path}: invalid JSON ({e})") from None


def parse_json_line(text: str) -> Any:
    """The JSON value of ``text``.

    Raises ``json.JSONDecodeError`` for a syntax error (its ``msg`` and ``colno`` say where), and a plain
    ``ValueError`` saying what is wrong for a value nested too deeply, a number Python refuses (e.g. an
    integer of more than 4,300 digits) or a string with a lone surrogate (``"\\ud800"`` is valid JSON but not
    text: it cannot be encoded as UTF-8, so no tokenizer or file can take it).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (ValueError, TypeError) as e:
        raise ValueError(str(e)) from None
    if "\\u" in text or not _encodes(text):  # a lone surrogate comes from an escape, or was in the text
        problem = lone_surrogate(value)
        if problem is not None:
            raise ValueError(problem)
    return value


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def surrogate_at(text: str) -> int | None:
    """The 1-based position of the first lone surrogate of ``text``, or None when it is valid Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start + 1
    return None


def lone_surrogate(value: Any) -> str | None:
    """What is wrong when a string in the JSON value ``value`` (a key or a value, at any depth) has a lone
    surrogate, e.g. ``"text" has a lone surrogate at character 3``; None when every string is valid text."""
    stack: list[tuple[str, Any]] = [("the value", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            at = surrogate_at(item)
            if at is not None:
                return f"{where} has a lone surrogate at character {at} (a text must be valid Unicode)"
        elif isinstance(item, dict):
            for key, sub in reversed(item.items()):
                stack.append((f"{json.dumps(key)} (a field name)", key))
                stack.append((json.dumps(key), sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in reversed(list(enumerate(item))))
    return None


FLOAT_MAX = int(sys.float_info.max)  # JSON integers beyond this cannot become a float (a score, a relevance)


def beyond_float(value: object) -> bool:
    """Whether ``value`` is an integer too large in magnitude for a float."""
    return isinstance(value, int) and not -FLOAT_MAX <= value <= FLOAT_MAX


def cut(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters, for a message (a line of a file may hold megabytes)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""Write one `## ` section of docs/benchmarks.md, leaving the other sections as they are."""

from __future__ import annotations

import re
from pathlib import Path

from xdex.atomic import atomic_write_text

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def update_section(title: str, section: str, path: Path = DOCS) -> None:
    """Replace the section headed ``title`` (a `## ` line that ``section`` starts with), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + section
    atomic_write_text(path, text)


def publish(section: str, write: bool, path: Path = DOCS) -> None:
    """Print ``section``; with ``write``, also put it in place of its `## ` section of ``path``."""
    print(section)
    if write:
        update_section(section.split("\n", 1)[0], section, path)

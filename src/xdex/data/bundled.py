"""Datasets shipped inside the package, usable by name wherever a data folder is expected."""

from __future__ import annotations

from pathlib import Path

BUNDLED: dict[str, Path] = {"demo": Path(__file__).parent / "bundled" / "foldoc-links"}
"""Bundled dataset name -> its folder. "demo" is FOLDOC computing-dictionary links (GFDL 1.1+)."""


def resolve_source(source: str | Path) -> Path:
    """The folder ``source`` names: a bundled dataset's name (a string such as "demo") or a path.

    The name takes precedence over a folder of the same name in the working directory;
    write ``./demo`` to mean such a folder.
    """
    if isinstance(source, str) and source in BUNDLED:
        return BUNDLED[source]
    return Path(source)

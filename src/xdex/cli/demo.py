"""`xdex demo`: the main job on the bundled dataset."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass

"""`xdex evaluate`: metrics of a prediction file (or, later, a model) on a dataset's test split."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass

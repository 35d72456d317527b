"""`xdex data stats|validate|convert`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect, validate and convert datasets.", no_args_is_help=True)

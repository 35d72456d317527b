"""`xdex data stats|validate|convert`."""

from __future__ import annotations

import json

import typer

import xdex.data
from xdex.cli.common import fail

app = typer.Typer(help="Inspect, validate and convert datasets.", no_args_is_help=True)

DATA_HELP = "Dataset folder (any supported layout), or 'demo' for the bundled dataset."
LAYOUT_HELP = f"Layout of the folder: {' | '.join(xdex.data.LAYOUTS)} (default: detected from its files)."
TEXT_HELP = "Texts of the xc-lf layout: title | title+content."


@app.command()
def stats(
    data: str = typer.Argument(..., help=DATA_HELP),
    layout: str | None = typer.Option(None, "--layout", help=LAYOUT_HELP),
    text: str = typer.Option("title", "--text", help=TEXT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (rounded as in the table)."),
) -> None:
    """Dataset statistics: sizes, labels per point, points per label, words per point, label bins."""
    values = xdex.data.compute_stats(xdex.data.load(data, layout, text))
    typer.echo(json.dumps(xdex.data.rounded(values)) if as_json else xdex.data.format_table(values))


@app.command()
def validate(
    data: str = typer.Argument(..., help=DATA_HELP),
    layout: str | None = typer.Option(None, "--layout", help=LAYOUT_HELP),
    text: str = typer.Option("title", "--text", help=TEXT_HELP),
) -> None:
    """List every problem of a dataset folder as file:line: message; exit 1 if there is any."""
    problems = xdex.data.validate(data, layout, text)
    for problem in problems:
        typer.echo(str(problem))
    if problems:
        typer.echo(f"{len(problems)} problem(s) listed for {data}")
        raise typer.Exit(1)
    typer.echo(f"no problems found in {data}")


@app.command()
def convert(
    src: str = typer.Argument(..., help=DATA_HELP),
    dst: str = typer.Argument(..., help="Folder to write (created if missing)."),
    to: str = typer.Option(..., "--to", help=f"Layout to write: {' | '.join(xdex.data.WRITABLE)}."),
    layout: str | None = typer.Option(None, "--layout", help=LAYOUT_HELP),
    text: str = typer.Option("title", "--text", help=TEXT_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the layout's files already in DST."),
    compress: bool = typer.Option(False, "--compress", help="Gzip the files (jsonl only)."),
) -> None:
    """Convert a dataset to another layout."""
    dataset = xdex.data.load(src, layout, text)
    try:
        xdex.data.save(dataset, dst, to, overwrite=overwrite, compress=compress)
    except FileExistsError as e:
        fail(str(e))
    typer.echo(f"wrote {dataset.name} to {dst} ({to})")

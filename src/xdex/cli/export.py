"""`xdex export`: a trained model's text tower in another library's format (:mod:`xdex.inference.export`)."""

from __future__ import annotations

from pathlib import Path

import typer

FORMAT_HELP = "Output format: sentence-transformers (a folder that SentenceTransformer(OUT) loads, offline)."
TOWER_HELP = ("query: texts embedded as queries; label: texts embedded as a label added by its text after training "
              "(the same tower for every network but OAK, whose labels skip the linker and augmentation).")
SEARCH_HELP = ("The network's search mode whose query tower is exported (default: the model's own): UniDEC de "
               "(the DE head) or clf (the classifier head), as its default concat cannot be exported; OAK encoder "
               "(queries without the linker's augmentation). A dual encoder and DEXA have one query tower.")


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    model_dir: Path = typer.Argument(..., help="Model directory written by `xdex train`."),
    out: Path = typer.Argument(..., help="New folder to write (must not exist)."),
    fmt: str = typer.Option(..., "--format", help=FORMAT_HELP),
    tower: str = typer.Option("query", "--tower", help=TOWER_HELP),
    search: str | None = typer.Option(None, "--search", help=SEARCH_HELP),
) -> None:
    """Write MODEL_DIR's text tower as a folder another library loads, checked to embed texts as xdex does."""
    from xdex.inference.export import export_model  # torch and the networks: only when exporting

    export_model(model_dir, out, fmt=fmt, tower=tower, search=search)
    typer.echo(f"wrote {out} ({fmt}): SentenceTransformer({str(out)!r}).encode(texts) embeds as {tower} vectors")

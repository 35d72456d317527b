"""`xdex train`: train a recipe on a dataset and write a model directory.

The same command runs under ``torchrun --nproc_per_node=N -m xdex train ...``: every process trains,
rank 0 alone logs, shows progress and writes the model directory (docs/distributed.md).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from xdex.methods.recipe import METHODS


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        method: str = typer.Option(..., "--method", help=f"Recipe: {' | '.join(METHODS)}."),
        data: str = typer.Option(..., "--data", help="Dataset folder, or 'demo'."),
        out: Path = typer.Option(..., "--out", help="Model directory to write."),
        config: Optional[Path] = typer.Option(None, "--config", help="YAML file overriding the recipe."),
        set_: list[str] = typer.Option([], "--set", help="Override one setting, e.g. --set trainer.epochs=5."),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its checkpoint."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    ) -> None:
        """Train a recipe; the model directory predicts without the training data. Runs under torchrun too."""
        from xdex.data import load
        from xdex.methods.recipe import load_recipe, train
        from xdex.train import distributed

        cfg = load_recipe(method, config, set_)
        if quiet:
            cfg.trainer.progress = False
        if distributed.init_from_env() and not distributed.is_main():
            logging.getLogger().setLevel(logging.WARNING)  # one rank reports
        try:
            dataset = load(data)
            model = train(dataset, cfg, out, resume=resume)
        finally:
            distributed.shutdown()
        if model is None:  # a rank other than 0
            return
        valid = model.meta.get("validation") or {}
        summary = ", ".join(f"{k} {v:.2f}" for k, v in valid.items() if k.startswith("P@"))
        typer.echo(f"model written to {out} ({model.meta['train_seconds']:.0f} s; validation {summary or 'n/a'})")

"""`xdex train`: train a recipe on a dataset and write a model directory.

The same command runs under ``torchrun --nproc_per_node=N -m xdex train ...``: every process trains,
rank 0 alone logs, shows progress and writes the model directory (docs/distributed.md).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import typer
import yaml

from xdex.cli.common import USAGE_ERROR, fail
from xdex.methods.recipe import METHODS


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        method: str = typer.Option(..., "--method", help=f"Recipe: {' | '.join(METHODS)}."),
        data: str | None = typer.Option(None, "--data", help="Dataset folder, or 'demo'."),
        out: Path | None = typer.Option(None, "--out", help="Model directory to write (a new or empty folder)."),
        config: Path | None = typer.Option(None, "--config", help="YAML file overriding the recipe."),
        set_: list[str] = typer.Option([], "--set", help="Override one setting, e.g. --set trainer.epochs=5."),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its checkpoint."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
        print_config: bool = typer.Option(
            False, "--print-config", help="Print the full resolved recipe (defaults, recipe, --config, --set) as "
            "YAML and exit; the output is a valid --config file."),
    ) -> None:
        """Train a recipe; the model directory predicts without the training data. Runs under torchrun too."""
        from xdex.config import to_dict
        from xdex.data import load
        from xdex.methods.pipeline import train
        from xdex.methods.recipe import load_recipe
        from xdex.methods.run import recorded_command
        from xdex.train import distributed

        cfg = load_recipe(method, config, set_)
        if print_config:
            typer.echo(yaml.safe_dump(to_dict(cfg), sort_keys=False), nl=False)
            return
        if data is None or out is None:
            fail(f"missing option '{'--data' if data is None else '--out'}' (see 'xdex train --help')", USAGE_ERROR)
        if quiet:
            cfg.trainer.progress = False
        if distributed.init_from_env() and not distributed.is_main():
            logging.getLogger().setLevel(logging.WARNING)  # one rank reports
        try:
            dataset = load(data)
            with recorded_command(["xdex", *sys.argv[1:]]):  # for the model card
                model = train(dataset, cfg, out, resume=resume)
        finally:
            distributed.shutdown()
        if model is None:  # a rank other than 0
            return
        valid = model.meta.get("validation") or {}
        summary = ", ".join(f"{k} {v:.2f}" for k, v in valid.items() if k.startswith("P@"))
        typer.echo(f"model written to {out} ({model.meta['train_seconds']:.0f} s; validation {summary or 'n/a'})")

"""`xdex demo`: the main job on the bundled dataset.

Shows the dataset's statistics, evaluates the label-popularity baseline, then trains the default
recipe on the CPU and prints its test metrics beside the baseline's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

SHOWN = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@1", "PSP@5", "R@10")


def _table(rows: dict[str, dict[str, float]]) -> str:
    head = f"{'model':<14}" + "".join(f"{m:>9}" for m in SHOWN)
    lines = [head, "-" * len(head)]
    for name, metrics in rows.items():
        lines.append(f"{name:<14}" + "".join(f"{metrics[m]:>9.2f}" for m in SHOWN))
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        data: str = typer.Option("demo", "--data", help="Dataset folder, or 'demo' (the bundled dataset)."),
        method: str = typer.Option("ngame", "--method", help="Recipe to train: ngame | dexml."),
        out: Path | None = typer.Option(None, "--out", help="Keep the trained model here (default: discarded)."),
        train: bool = typer.Option(True, "--train/--no-train", help="Train the recipe (a few minutes on 2 cores)."),
    ) -> None:
        """Statistics of the bundled dataset, the popularity baseline, and a dual encoder trained on CPU."""
        from xdex.data import compute_stats, format_table, load
        from xdex.methods.popularity import PopularityBaseline
        from xdex.metrics.evaluation import DEFAULT_RECALL_KS, evaluate_predictions, require_test
        from xdex.metrics.ranking import Ranking, depth_with_filter

        dataset = load(data)
        test = require_test(dataset)
        typer.echo(format_table(compute_stats(dataset)) + "\n")
        k = max(10, *DEFAULT_RECALL_KS)
        depth = depth_with_filter(k, test.filter)
        ids, scores = PopularityBaseline().fit(dataset.train.labels).predict(len(test), depth)
        rows = {"popularity": evaluate_predictions(Ranking(ids, scores), dataset, recall_ks=(5, 10))}
        if train:
            from xdex.methods.pipeline import train as train_recipe
            from xdex.methods.recipe import load_recipe

            cfg = load_recipe(method)
            with tempfile.TemporaryDirectory(prefix="xdex-demo-") as tmp:
                model = train_recipe(dataset, cfg, out if out is not None else Path(tmp) / "model")
                assert model is not None  # the demo trains in one process, which writes the model
                ranking = model.predict(test.texts, depth)
            rows[method] = evaluate_predictions(ranking, dataset, recall_ks=(5, 10))
            typer.echo(f"trained {method} in {model.meta['train_seconds']:.0f} s")
        typer.echo(f"test metrics (%, filter pairs removed, propensity A=0.55 B=1.5)\n{_table(rows)}")

"""DEXML Table 3 at CPU scale: more negatives per query, better P@1? The `dexml` recipe with growing label pools.

    python -m benchmarks.bench_negatives [--data DIR] [--seeds 0] [--set key=value ...]
        [--update-docs]

The same recipe (bag-of-embeddings encoder, DecoupledSoftmax, same epochs, batches and seed) is trained with
label pools of growing size:

* in-batch negatives only (η = 0): the sampled positives of the batch's queries, ~B labels;
* η = 4 and η = 16 ANN hard negatives per query from shortlists refreshed every τ epochs (DEXML Sec. 5.4),
  ~B(1 + η) labels;
* η = 4 embedding-cache negatives per query, fresh every step (Appendix C.3);
* the full label space (DEXML-Full, Sec. 4.2): all L labels in every step.

--data defaults to foldoc-links under $XDEX_DATA_ROOT, else under ../shared/data beside the repository.
Each run holds out the recipe's validation documents to choose its best epoch, and is scored on the test
split with the dataset's filter pairs removed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness import (
    DOCS,
    command_line,
    data_root,
    load_average,
    machine_line,
    publish,
    timed,
    training_history,
)
from xdex.data import load
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.metrics import depth_with_filter, evaluate_predictions

log = logging.getLogger("bench_negatives")

MODULE = "benchmarks.bench_negatives"
SECTION = "## DEXML Table 3 at CPU scale: negatives per query against P@1"
SETTINGS = {
    "in-batch only": ["sampling.hard_negatives=0"],
    "+ η = 4 ANN hard negatives": ["sampling.hard_negatives=4"],
    "+ η = 16 ANN hard negatives": ["sampling.hard_negatives=16"],
    "+ 4 embedding-cache negatives (C.3)": ["sampling.hard_negatives=0", "sampling.cache_negatives=4"],
    "full label space (DEXML-Full)": ["sampling.hard_negatives=0", "sampling.label_space=full",
                                      "sampling.clustered=false"],
}
METRICS = ("P@1", "P@3", "P@5", "R@5")


def run(dataset, overrides: list[str]) -> dict:
    """Train the `dexml` recipe with ``overrides``; test metrics, train seconds and the average label pool."""
    config = load_recipe("dexml", overrides=["trainer.progress=false", *overrides])
    with tempfile.TemporaryDirectory(prefix="bench-negatives-") as tmp:
        model, seconds = timed(lambda: train(dataset, config, Path(tmp) / "model"))
        history = training_history(Path(tmp) / "model")
        ranking = model.predict(dataset.test.texts, depth_with_filter(5, dataset.test.filter))
    metrics = evaluate_predictions(ranking, dataset, ks=(1, 3, 5), recall_ks=(5,))
    pools = [r["avg_pool_size"] for r in history if "avg_pool_size" in r]
    return {**{m: metrics[m] for m in METRICS}, "train_s": seconds, "pool": float(np.mean(pools)),
            "best_epoch": model.meta["best_epoch"]}


def table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| label pool | avg labels per step | " + " | ".join(METRICS) + " | train s |",
             "|---|---:|" + "---:|" * (len(METRICS) + 1)]
    for name, runs in results.items():
        cells = [f"{np.mean([r[m] for r in runs]):.2f}" for m in METRICS]
        pool = np.mean([r["pool"] for r in runs])
        train_s = np.mean([r["train_s"] for r in runs])
        lines.append(f"| {name} | {pool:,.0f} | " + " | ".join(cells) + f" | {train_s:.0f} |")
    return lines


def report(command: str, dataset_name: str, results: dict[str, list[dict]], load: float,
           args: argparse.Namespace) -> str:
    config = load_recipe("dexml", overrides=args.set)
    seeds = ", ".join(map(str, args.seeds))
    sentences = [
        f"{machine_line([load], f' with {torch.get_num_threads()} thread(s)')}.",
        f"{dataset_name}; the packaged `dexml` recipe ({config.encoder['type']} encoder, {config.loss['name']}, "
        f"B = {config.sampling.batch_size}, {config.trainer.epochs} epochs, refreshes every "
        f"{config.sampling.refresh_every} epochs from epoch {config.sampling.first_refresh + 1}), overrides: "
        f"{' '.join(args.set) or 'none'}, then the pool setting of each row; seed(s) {seeds} (the mean is shown).",
        "Test metrics in percent (filter pairs removed); avg labels per step: the mean label-pool size over the "
        "training steps; train s: wall seconds from the texts to the saved model.",
    ]
    return "\n".join([SECTION, "", f"`{command}`", "", *sentences, "", *table(results)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(data_root() / "foldoc-links"), help="dataset folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="trainer seeds")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    load_recipe("dexml", overrides=args.set)  # a bad --set stops here
    load_avg = load_average()
    dataset = load(args.data)
    results = {}
    for name, setting in SETTINGS.items():
        results[name] = [run(dataset, [*args.set, *setting, f"trainer.seed={seed}"]) for seed in args.seeds]
        log.info("%s: %s", name, results[name])
    command = command_line(MODULE, argv)
    publish(report(command, dataset.name, results, load_avg, args), args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

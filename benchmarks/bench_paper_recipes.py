"""Train the papers' transformer recipes (``configs/*-paper.yaml``) on real datasets, on a GPU where there is one,
and compare their test metrics with the TF-IDF peers run in the same invocation.

    python -m benchmarks.bench_paper_recipes --model-dir DIR [--data-root DIR] [--datasets NAME ...]
        [--recipes dexml-paper ngame-paper ...] [--peers omikuji-parabel omikuji-bonsai] [--set key=value ...]
        [--json out.json] [--update-docs]

``--model-dir`` is a local Hugging Face model folder (the recipes' ``encoder.model_dir``; default: the
all-MiniLM-L6-v2 folder of the ``pretrained`` extra). Every (dataset, recipe) pair runs in a process of its own,
as in :mod:`benchmarks.bench_quality`, whose scoring (filter pairs removed, propensities A=0.55, B=1.5) and peers
this script shares. Beside the metrics each record keeps what a GPU run costs: the epochs trained, the median
seconds of an epoch (the trainer's own figure: batches, steps and the refreshes they start; validation excluded),
the whole training's wall seconds, the device, and the peak GPU memory that torch allocated.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.bench_quality import COLUMNS, PEERS, PROPENSITY, run_job, run_method
from benchmarks.harness import (
    DATA_ROOT_HELP,
    add_isolation_args,
    command_line,
    data_root,
    load_average,
    machine_line,
    peak_rss_mb,
    publish,
    training_history,
    write_result,
)
from xdex.atomic import atomic_write_text

if TYPE_CHECKING:
    from xdex.methods.schema import RecipeConfig

log = logging.getLogger("bench_paper_recipes")

MODULE = "benchmarks.bench_paper_recipes"
SECTION = "## The papers' transformer recipes on a GPU"
RECIPES = ("dexml-paper", "ngame-paper", "depsl-paper", "unidec-paper", "dexa-paper", "oak-paper")
DATASETS = ("foldoc-links-titles", "gcide-links-titles")
DEFAULT_PEERS = ("omikuji-parabel", "omikuji-bonsai")


def recipe_file(recipe: str) -> Path:
    """The packaged YAML file of a paper recipe, e.g. ``configs/dexml-paper.yaml``."""
    from importlib import resources

    if recipe not in RECIPES:
        raise ValueError(f"unknown paper recipe {recipe!r}; choose one of {', '.join(RECIPES)}")
    return Path(str(resources.files("xdex") / "configs" / f"{recipe}.yaml"))


def recipe_config(recipe: str, model_dir: str, overrides: list[str]) -> RecipeConfig:
    """The paper recipe with the encoder folder and ``overrides`` laid over it."""
    from xdex.config import read_yaml
    from xdex.methods.recipe import load_recipe

    path = recipe_file(recipe)
    method = read_yaml(path)["method"]
    return load_recipe(method, path, overrides=[f"encoder.model_dir={model_dir}", *overrides])


def default_model_dir() -> str | None:
    """The all-MiniLM-L6-v2 folder of the ``pretrained`` extra, or None where it is not installed."""
    from xdex.encoders.packaged import PRETRAINED, MissingExtraError, model_dir

    try:
        return str(model_dir(PRETRAINED["minilm"]))
    except (MissingExtraError, FileNotFoundError):
        return None


# --- one run, in its own process ------------------------------------------------------------------

def epoch_seconds(model_dir: Path) -> list[float]:
    """The trainer's seconds for each epoch, from the metrics log the run leaves in its ``training`` folder (none
    without the log)."""
    try:
        return [float(record["seconds"]) for record in training_history(model_dir)]
    except FileNotFoundError:
        return []


def run_one(job: dict) -> list[dict]:
    """Train one paper recipe on one dataset; one record per ranking the model offers, metrics in percent."""
    import torch

    from xdex.data import load
    from xdex.methods.pipeline import train
    from xdex.metrics import depth_with_filter, evaluate_predictions

    dataset = load(job["path"])
    k = depth_with_filter(5, dataset.test.filter)
    config = recipe_config(job["recipe"], job["model_dir"], job["overrides"])
    config.trainer.progress = False
    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="bench-paper-") as workdir:
        out = Path(workdir) / "model"
        start = time.perf_counter()
        model = train(dataset, config, out)
        seconds = time.perf_counter() - start
        epochs = epoch_seconds(out)
    if model is None:
        raise RuntimeError("training returned no model")
    run = {
        "train_s": seconds,
        "epochs": len(epochs),
        "epoch_s": statistics.median(epochs) if epochs else float("nan"),
        "first_epoch_s": epochs[0] if epochs else float("nan"),
        "best_epoch": model.meta.get("best_epoch"),
        "valid_p1": (model.meta.get("validation") or {}).get("P@1"),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
        "torch": torch.__version__,
    }
    model.to("auto")  # the test texts embedded where training ran: a transformer on the CPU takes minutes for long texts
    rankings = {f"{job['recipe']} [{model.search}]": model.predict(dataset.test.texts, k)}
    for mode in model.search_modes:
        if mode != model.search:
            rankings[f"{job['recipe']}-{mode}"] = model.with_search(mode).predict(dataset.test.texts, k)
    records = []
    for name, ranking in rankings.items():
        metrics = evaluate_predictions(ranking, dataset, ks=(1, 3, 5), propensity=PROPENSITY, recall_ks=(5,))
        records.append({"method": name, "metrics": {m: metrics[m] for m in COLUMNS}} | run)
    peak = peak_rss_mb()
    return [r | {"peak_mb": peak} for r in records]


# --- the driver ------------------------------------------------------------------------------------

def run_recipe(path: Path, recipe: str, model_dir: str, overrides: list[str]) -> list[dict]:
    """Run ``recipe`` on the dataset folder ``path`` in a process of its own; its records, or its failure."""
    return run_job(MODULE, path, recipe, {"path": str(path), "recipe": recipe, "model_dir": model_dir,
                                          "overrides": overrides})


def table(records: list[dict]) -> list[str]:
    head = ["method", *COLUMNS, "epochs", "s / epoch", "train s", "GPU MB", "peak MB"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['method']} | failed ({r['error']}) |" + " |" * (len(head) - 2))
            continue
        cells = [f"{r['metrics'][c]:.2f}" for c in COLUMNS]
        if "epochs" in r:  # an xdex recipe
            cells += [str(r["epochs"]), f"{r['epoch_s']:.2f}", f"{r['train_s']:.0f}", f"{r['gpu_peak_mb']:,.0f}"]
        else:  # a peer: TF-IDF and training on the CPU
            cells += ["", "", f"{r['train_s']:.0f}", ""]
        lines.append(f"| {r['method']} | " + " | ".join(cells) + f" | {r['peak_mb']:,.0f} |")
    return lines


def report(command: str, records: list[dict], load: float, args: argparse.Namespace) -> str:
    devices = sorted({r["device"] for r in records if "device" in r}) or ["none"]
    torch_versions = sorted({r["torch"] for r in records if "torch" in r})
    sentences = [
        f"{machine_line([load], torch_note=None)}; torch {', '.join(torch_versions) or 'unknown'}; device: "
        f"{', '.join(devices)}.",
        f"Encoder: the Hugging Face folder `{args.model_dir}` (`encoder.model_dir`); recipes as packaged, overrides: "
        f"{' '.join(args.set) or 'none'}.",
        "Metrics in percent on each test split, scored as in 'Quality on the shared datasets' (filter pairs removed, "
        f"propensities A={PROPENSITY[0]}, B={PROPENSITY[1]}); `RECIPE [MODE]` is the ranking the model serves, "
        "chosen on its validation documents, `-dense` the network alone, `-fused` / `-lexical` the ranking stage and "
        "its TF-IDF channel.",
        "s / epoch: the median of the trainer's epoch times (batches, steps, and the refreshes of hard negatives "
        "they start; validation excluded); train s: wall seconds from the texts to a written model (tokenising, "
        "training with validation, the ranking stage, the label index); GPU MB: the peak memory torch allocated on "
        "the GPU; peak MB: peak resident memory of the run's process. Peers: TF-IDF features and Omikuji on the "
        "CPU, as in 'Quality on the shared datasets'.",
    ]
    lines = [SECTION, "", f"`{command}`", "", *sentences]
    for name in dict.fromkeys(r["dataset"] for r in records):
        lines += ["", f"### {name}", "", *table([r for r in records if r["dataset"] == name])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="local Hugging Face model folder (default: the pretrained extra's MiniLM)")
    parser.add_argument("--data-root", type=Path, default=data_root(),
                        help=f"folder of the dataset folders (default: {DATA_ROOT_HELP})")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help="dataset folders under --data-root")
    parser.add_argument("--recipes", nargs="+", default=["dexml-paper", "ngame-paper"], choices=RECIPES)
    parser.add_argument("--peers", nargs="*", default=list(DEFAULT_PEERS), choices=PEERS)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    parser.add_argument("--json", type=Path, help="also write every run's record to this JSON file (after each run)")
    parser.add_argument("--update-docs", action="store_true", help="write the section of docs/benchmarks.md")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.one:
        write_result(args.result, run_one(json.loads(args.one)))
        return 0
    load = load_average()
    args.model_dir = args.model_dir or default_model_dir()
    if args.model_dir is None:
        parser.error('no --model-dir, and the pretrained extra is not installed (pip install "xdex[pretrained]")')
    for recipe in args.recipes:  # bad overrides fail here, before the first run
        try:
            recipe_config(recipe, args.model_dir, args.set)
        except ValueError as error:
            parser.error(f"{recipe}: {error}")
    records: list[dict] = []
    for name in args.datasets:
        path = args.data_root / name
        if not path.is_dir():
            parser.error(f"no dataset folder {name} under {args.data_root}")
        for recipe in args.recipes:
            records += run_recipe(path, recipe, args.model_dir, args.set)
            if args.json:
                atomic_write_text(args.json, json.dumps(records, indent=1) + "\n")
        for peer in args.peers:
            records += run_method(path, peer, [])
            if args.json:
                atomic_write_text(args.json, json.dumps(records, indent=1) + "\n")
    publish(report(command_line(MODULE, argv), records, load, args), args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

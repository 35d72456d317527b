"""DEXA against NGAME on real datasets: cluster count, head label partitioning and overheads (DEXA Fig. 3, Tables 5-8).

    python -m benchmarks.bench_dexa [--data-root DIR] [--datasets NAME ...] [--ratios 64 16 4 2] [--hlp 0 50]
        [--json out.json] [--update-docs]

For each dataset the ``ngame`` recipe runs once and the ``dexa`` recipe once per labels-per-cluster ratio r
and head threshold h (``aux.labels_per_cluster=r aux.head_threshold=h``; K = L/r rounded to a power of two,
so r = 64 ... 2 spans the paper's K = L/64 ... L/2), each in a process of its own
(``bench_quality.run_method``) and scored like the quality benchmark. ``dexa-de`` searches with the label
embeddings Module I leaves (trained with the auxiliary vectors A, Eq. 5; ẑ_l, or E(z_l) where validation prefers
it); ``dexa-dense`` fuses them with Module II's classifiers (Eq. 6), the network's own search. NGAME is DEXA with
K = 0 (Fig. 3): same encoder, same schedule, the same Module II (``ngame-de``, ``ngame-dense``). The ranking stage
that every recipe serves is left out of this comparison.

Overheads (Table 8): on the first dataset, NGAME and DEXA at the smallest and the largest K (HLP off) train
again in this process, to time Module I's epochs and to measure the model directories and their prediction
time. A (K x d float32) is dropped after Module I, so neither may grow with K.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.bench_quality import PROPENSITY, run_method
from benchmarks.harness import (
    DATA_ROOT_HELP,
    DOCS,
    command_line,
    data_root,
    load_average,
    machine_line,
    publish,
    repeat,
    training_history,
)
from xdex.atomic import atomic_write_text

if TYPE_CHECKING:
    from xdex.data import Dataset
    from xdex.methods.schema import RecipeConfig

log = logging.getLogger("bench_dexa")

MODULE = "benchmarks.bench_dexa"
SECTION = "## DEXA: cluster count, head label partitioning and overheads"
DATASETS = ("foldoc-links-titles", "gcide-links-titles")
RATIOS = (64.0, 16.0, 4.0, 2.0)
HLP = (0, 50)
METRICS = ("P@1", "P@5", "PSP@1", "PSP@5")
MODES = (("I", "de"), ("fused", "dense"))  # column suffix, search mode (record name: RECIPE-MODE)
NETWORK_FILES_EXCLUDED = ("ranker", "training")  # the ranking stage's files and the logs: not the network's
TRAINING = "training"  # the model directory's sub-folder with the training logs (xdex.methods.recipe.train)
PREDICT_REPEATS = 3
PAPER = ("the paper reports +7.3 P@1 on LF-AmazonTitles-131K and +10.7 on LF-AmazonTitles-1.3M with a "
         "bag-of-embeddings encoder, +0.5 to +7.4 with the other encoders (Table 5)")


# --- the auxiliary vectors of one setting -----------------------------------------------------------

def dexa_config(ratio: float, hlp: int, extra: tuple[str, ...] = ()) -> RecipeConfig:
    """The ``dexa`` recipe with ``ratio`` labels per cluster and head threshold ``hlp``."""
    from xdex.methods.recipe import load_recipe

    return load_recipe("dexa", overrides=list(aux_overrides(ratio, hlp)) + list(extra))


def aux_overrides(ratio: float, hlp: int) -> tuple[str, str]:
    return f"aux.labels_per_cluster={ratio:g}", f"aux.head_threshold={hlp}"


def aux_setting(dataset: Dataset, config: RecipeConfig) -> dict:
    """The cluster budget K (``num_clusters``), the head labels K̂ with private vectors, and the vectors
    trained K' = K̂ + 2^⌊log2(K − K̂)⌋ (``xdex.cluster.cluster_labels``; K' = K with HLP off), with A's bytes
    K' · d · 4. Head labels are counted as Module I counts them: on the training rows left after the
    validation hold-out. ``head`` >= K means the run cannot start (no cluster left for the other labels)."""
    from xdex.methods.dexa import num_clusters
    from xdex.methods.run import split_validation

    aux = config.aux
    budget = num_clusters(aux, len(dataset.labels))
    head = 0
    if aux.head_threshold > 0:
        rows, _ = split_validation(dataset.train, config.data.validation_size, config.trainer.seed)
        points = np.asarray((dataset.train.labels[rows] != 0).sum(axis=0)).ravel()
        head = int((points >= aux.head_threshold).sum())
    vectors = head + (1 << ((budget - head).bit_length() - 1)) if head < budget else 0
    return {"ratio": aux.labels_per_cluster, "hlp": aux.head_threshold, "budget": budget, "head": head,
            "clusters": vectors, "a_bytes": vectors * int(config.encoder["dim"]) * 4}


# --- the sweep, each run in its own process ---------------------------------------------------------

def sweep(path: Path, dataset: Dataset, ratios: list[float], hlps: list[int]) -> list[dict]:
    """NGAME, then DEXA for each (ratio, threshold): one entry per run with its records (bench_quality's)."""
    runs = [{"dataset": path.name, "recipe": "ngame", "records": run_method(path, "ngame", [])}]
    for ratio in ratios:
        for hlp in hlps:
            setting = aux_setting(dataset, dexa_config(ratio, hlp))
            run = {"dataset": path.name, "recipe": "dexa", **setting}
            if setting["head"] >= setting["budget"]:
                problem = (f"{setting['head']} head labels leave none of the K={setting['budget']} clusters "
                           "to the others")
                log.warning("dexa r=%g h=%d on %s not run: %s", ratio, hlp, path.name, problem)
                run["records"] = [{"dataset": path.name, "method": "dexa", "error": problem}]
            else:
                run["records"] = run_method(path, "dexa", list(aux_overrides(ratio, hlp)))
            runs.append(run)
    return runs


def record(run: dict, method: str) -> dict | None:
    return next((r for r in run["records"] if r["method"] == method), None)


def error(run: dict) -> str | None:
    return next((r["error"] for r in run["records"] if "error" in r), None)


def table(runs: list[dict]) -> list[str]:
    """One row per run, NGAME's first: K, HLP, A, Module I's and the fused metrics, train s, peak MB."""
    metric_columns = [f"{m} {suffix}" for suffix, _ in MODES for m in METRICS]
    header = ["recipe", "r", "K", "HLP", "A MB", *metric_columns, "train s", "peak MB"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for run in sorted(runs, key=lambda r: r["recipe"] != "ngame"):
        if run["recipe"] == "ngame":
            setting = ["—", "0", "—", "—"]
        else:
            hlp = f"{run['hlp']} ({run['head']} head)" if run["hlp"] else "off"
            setting = [f"{run['ratio']:g}", str(run["clusters"] or run["budget"]), hlp, f"{run['a_bytes'] / 1e6:.2f}"]
        names = [f"{run['recipe']}-{mode}" for _, mode in MODES]
        problem = error(run)
        if problem:
            lines.append(f"| {run['recipe']} | " + " | ".join(setting) + f" | failed ({problem}) |"
                         + " |" * (len(metric_columns) + 1))
            continue
        cells = []
        for name in names:
            found = record(run, name)
            cells += [f"{found['metrics'][m]:.2f}" if found else "—" for m in METRICS]
        first = run["records"][0]
        cells += [f"{first['train_s']:.0f}", f"{first['peak_mb']:.0f}"]
        lines.append(f"| {run['recipe']} | " + " | ".join(setting + cells) + " |")
    return lines


def verdict(runs: list[dict]) -> str:
    """Best Module I alone (dexa-de) and best fused (dexa-dense) P@1 against NGAME's in the same mode."""
    ngame = next((r for r in runs if r["recipe"] == "ngame" and not error(r)), None)
    dexa = [r for r in runs if r["recipe"] == "dexa" and not error(r)]
    if ngame is None or not dexa or any(record(r, f"{r['recipe']}-{mode}") is None
                                        for r in [ngame, *dexa] for _, mode in MODES):
        return "No comparison: the NGAME run or every DEXA run is missing."
    parts = []
    for label, mode in (("Module I alone", "de"), ("fused with Module II", "dense")):
        base = record(ngame, f"ngame-{mode}")["metrics"]["P@1"]
        best = max(dexa, key=lambda r: record(r, f"dexa-{mode}")["metrics"]["P@1"])
        p1 = record(best, f"dexa-{mode}")["metrics"]["P@1"]
        hlp = f"HLP {best['hlp']}" if best["hlp"] else "HLP off"
        parts.append(f"{label}: NGAME {base:.2f} P@1, DEXA at its best (K={best['clusters']}, {hlp}) {p1:.2f}, "
                     f"{p1 - base:+.2f}")
    return "; ".join(parts) + "."


# --- overheads, in this process -------------------------------------------------------------------

def dir_bytes(folder: Path) -> int:
    """Bytes of the network's files in the model directory ``folder``: every file but the ranking stage's and the
    training logs (:data:`NETWORK_FILES_EXCLUDED`; the lexical channel's forest differs a little between fits)."""
    return sum(p.stat().st_size for p in folder.rglob("*")
               if p.is_file() and p.relative_to(folder).parts[0] not in NETWORK_FILES_EXCLUDED)


def module_one_seconds(folder: Path) -> float:
    """Seconds of Module I's (or NGAME's) training epochs, from the model directory's training log
    (validation and saving excluded)."""
    return sum(record["seconds"] for record in training_history(folder))


def predict_seconds(folder: Path, texts: list[str], k: int) -> float:
    """Best of ``PREDICT_REPEATS`` wall times to rank ``k`` labels for ``texts`` with the saved model."""
    from xdex.inference import DualEncoderModel

    model = DualEncoderModel.load(folder)
    return min(repeat(lambda: model.predict(texts, k), PREDICT_REPEATS))


def overheads(dataset: Dataset, ratios: list[float]) -> list[dict]:
    """NGAME and DEXA (HLP off) at the smallest and the largest K of ``ratios``, trained here: Module I
    seconds, model directory bytes and prediction seconds on the test texts."""
    from xdex.methods.pipeline import train
    from xdex.methods.recipe import load_recipe
    from xdex.metrics import depth_with_filter

    settings: dict[int, dict] = {}
    for ratio in ratios:
        setting = aux_setting(dataset, dexa_config(ratio, 0))
        settings.setdefault(setting["clusters"], setting)
    plans = [("ngame", load_recipe("ngame"), {"ratio": None, "clusters": 0, "a_bytes": 0})]
    extremes = sorted({min(settings), max(settings)})
    plans += [("dexa", dexa_config(settings[k]["ratio"], 0), settings[k]) for k in extremes]
    texts = dataset.test.texts
    k = depth_with_filter(5, dataset.test.filter)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-dexa-") as tmp:
        for i, (name, config, setting) in enumerate(plans):
            config.trainer.progress = False
            folder = Path(tmp) / f"{i}-{name}"
            log.info("%s with K=%d on %s, in this process", name, setting["clusters"], dataset.name)
            train(dataset, config, folder)
            rows.append({"recipe": name, "clusters": setting["clusters"], "a_bytes": setting["a_bytes"],
                         "module1_s": module_one_seconds(folder), "model_bytes": dir_bytes(folder),
                         "predict_s": predict_seconds(folder, texts, k), "n_texts": len(texts)})
    return rows


def overhead_table(rows: list[dict]) -> list[str]:
    lines = ["| recipe | K | A bytes | Module I s | model bytes | predict s |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['recipe']} | {r['clusters']} | {r['a_bytes']:,} | {r['module1_s']:.1f} | "
                     f"{r['model_bytes']:,} | {r['predict_s']:.2f} |")
    return lines


def overhead_verdict(rows: list[dict]) -> str:
    """Whether the DEXA model directory grows with K: its byte change set against the change of A."""
    dexa = sorted((r for r in rows if r["recipe"] == "dexa"), key=lambda r: r["clusters"])
    if len(dexa) < 2:
        return "One K only: no size comparison."
    small, large = dexa[0], dexa[-1]
    grown = large["model_bytes"] - small["model_bytes"]
    added = large["a_bytes"] - small["a_bytes"]
    holds = "does not depend on K and the model holds no A" if abs(grown) * 100 < added else "grows with K"
    return (f"From K={small['clusters']} to K={large['clusters']} A grows by {added:,} bytes and the model directory "
            f"by {grown:+,} bytes, so its size {holds}. Prediction on the test texts takes "
            f"{small['predict_s']:.2f} s and {large['predict_s']:.2f} s.")


# --- the report -----------------------------------------------------------------------------------

def report(command: str, runs: list[dict], costs: list[dict], cost_dataset: str, loads: tuple[float, float]) -> str:
    sentences = [
        f"{machine_line(loads)}.",
        "Metrics in percent on each test split, scored by `xdex.metrics.evaluate_predictions` (filter pairs removed, "
        f"propensities A={PROPENSITY[0]}, B={PROPENSITY[1]}); each run holds out `data.validation_size` training "
        "documents to choose its best epoch and, for dexa, the fusion weight.",
        "ngame and dexa are the packaged CPU recipes, with the same encoder and schedule: NGAME is DEXA's Module I "
        "without auxiliary vectors (K = 0 in DEXA Fig. 3).",
        "r: `aux.labels_per_cluster`; K: auxiliary vectors trained, L/r rounded to a power of two "
        "(`xdex.cluster.clusters_for_ratio`). With head label partitioning (HLP h, `aux.head_threshold`) the "
        "labels with at least h training points get a vector each and the other labels share "
        "2^⌊log2(K₀ − head)⌋ vectors, K₀ = L/r rounded as above; K counts both. A MB: size of the auxiliary "
        "vectors A, K × d × 4 bytes (d: the encoder's dimension).",
        "I: searched with the label embeddings Module I leaves alone (dexa-de, ngame-de); fused: those fused with "
        "Module II's classifiers (dexa-dense, ngame-dense: the network's own search). The ranking stage each model "
        "serves is left out.",
        "train s: wall seconds from the texts to a trained model, Module II's classifiers included for dexa; "
        "peak MB: peak resident memory of the run's own process, prediction and evaluation included.",
        f"Gain of DEXA's embeddings over NGAME's: {PAPER}.",
    ]
    lines = [SECTION, "", f"`{command}`", "", *sentences]
    for name in dict.fromkeys(r["dataset"] for r in runs):
        rows = [r for r in runs if r["dataset"] == name]
        lines += ["", f"### {name}", "", *table(rows), "", verdict(rows)]
    if costs:
        lines += [
            "", f"### Overheads ({cost_dataset})", "",
            "NGAME and DEXA (HLP off) at the smallest and the largest K trained again in one process. "
            "Module I s: the training epochs of the encoder (NGAME, or DEXA's Module I with A; DEXA Table 8), "
            "validation excluded; model bytes: the network's files in the model directory (the ranking stage's "
            "and the training logs apart); predict s: ranking the "
            f"{costs[0]['n_texts']:,} test texts with the saved model, best of {PREDICT_REPEATS}.",
            "", *overhead_table(costs), "", overhead_verdict(costs),
        ]
    return "\n".join(lines) + "\n"


# --- the driver -----------------------------------------------------------------------------------

def load_datasets(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Dataset]:
    """Every dataset, loaded and checked, and every setting's recipe, before the first run starts."""
    from xdex.data import load

    if any(not (r > 0 and np.isfinite(r)) for r in args.ratios):
        parser.error(f"--ratios must be positive numbers, got {' '.join(map(str, args.ratios))}")
    if any(h < 0 for h in args.hlp):
        parser.error(f"--hlp thresholds must be 0 (off) or positive, got {' '.join(map(str, args.hlp))}")
    datasets = {}
    for name in args.datasets:
        path = args.data_root / name
        if not path.is_dir():
            parser.error(f"no dataset folder {name} under {args.data_root}")
        try:
            datasets[name] = load(path)
        except ValueError as problem:  # DataFormatError names the file, the line and the problem
            parser.error(str(problem))
        if datasets[name].test is None:
            parser.error(f"{path} has no test split")
    for ratio in args.ratios:
        for hlp in args.hlp:
            try:
                dexa_config(ratio, hlp)
            except ValueError as problem:
                parser.error(f"dexa with r={ratio:g}, h={hlp}: {problem}")
    return datasets


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=data_root(),
                        help=f"folder of the dataset folders (default: {DATA_ROOT_HELP})")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help="dataset folders under --data-root")
    parser.add_argument("--ratios", nargs="+", type=float, default=list(RATIOS),
                        help="labels per cluster r (K = L/r rounded to a power of two)")
    parser.add_argument("--hlp", nargs="+", type=int, default=list(HLP),
                        help="head label thresholds (0: no head label partitioning)")
    parser.add_argument("--json", type=Path, help="also write every run's record to this JSON file")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    start_load = load_average()
    datasets = load_datasets(parser, args)
    runs = []
    for name, dataset in datasets.items():
        runs += sweep(args.data_root / name, dataset, args.ratios, args.hlp)
    first = datasets[args.datasets[0]]
    costs = overheads(first, args.ratios)
    if args.json:
        atomic_write_text(args.json, json.dumps({"runs": runs, "overheads": costs}, indent=1) + "\n")
    command = command_line(MODULE, argv)
    section = report(command, runs, costs, first.name, (start_load, load_average()))
    publish(section, args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

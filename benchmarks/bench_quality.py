"""Train the xdex recipes and peer XMC libraries on real datasets and compare their test metrics.

    python -m benchmarks.bench_quality [--data-root DIR] [--datasets NAME ...] [--methods ngame dexml depsl unidec dexa]
        [--peers napkinxc-plt omikuji-parabel omikuji-bonsai] [--set key=value ...] [--recipe-set ngame:key=value ...]
        [--json out.json] [--update-docs]

Every (dataset, method) pair runs in a process of its own, so that its peak memory is its own and a
crash loses only that run. All rankings are scored by ``xdex.metrics.evaluate_predictions``: the
test split's filter pairs are removed from the predictions, propensities use A=0.55, B=1.5.
The peers read TF-IDF features of the texts (scikit-learn, fitted on the training split only).
A model is scored in the ranking it serves (``RECIPE [MODE]``) and in each other mode it offers: ``-fused``,
``-lexical`` and ``-dense`` (the ranking stage, its lexical channel alone, the network alone); ``unidec-de`` /
``unidec-clf`` search with UniDEC's DE head or classifier head alone (UniDEC Table 5; the network's own search is
their concatenation), ``dexa-de`` / ``dexa-clf`` with DEXA's Module I label embeddings or Module II classifiers
alone (the network's own search fuses them).
The -aux datasets have the same documents and labels as their base dataset and are not run by default.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.harness import (
    DATA_ROOT_HELP,
    DOCS,
    RunFailed,
    add_isolation_args,
    command_line,
    data_root,
    load_average,
    machine_line,
    peak_rss_mb,
    publish,
    run_isolated,
    write_result,
)
from xdex.atomic import atomic_write_text

if TYPE_CHECKING:
    import scipy.sparse as sp

    from xdex.data import Dataset
    from xdex.metrics import Ranking

    Fit = Callable[[Dataset, int, Path], tuple[dict[str, Ranking], float]]

log = logging.getLogger("bench_quality")

MODULE = "benchmarks.bench_quality"
SECTION = "## Quality on the shared datasets"
DATASETS = ("gcide-links", "gcide-links-titles", "foldoc-links", "foldoc-links-titles", "debian-debtags")
RECIPES = ("ngame", "dexml", "depsl", "unidec", "dexa")
PEERS = ("napkinxc-plt", "omikuji-parabel", "omikuji-bonsai")
COLUMNS = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@1", "PSP@5")
PROPENSITY = (0.55, 1.5)
THREADS = 2
SEED = 0
TFIDF = dict(sublinear_tf=True, ngram_range=(1, 2), min_df=2, token_pattern=r"(?u)\b\w+\b")
TFIDF_TEXT = "sublinear tf, unigrams and bigrams of words of one or more characters, min_df 2, unit rows"


# --- one run, in its own process ------------------------------------------------------------------

def tfidf_features(dataset: Dataset) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """TF-IDF rows of the training and test texts; the vocabulary and idf come from training only."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(dtype=np.float32, **TFIDF)
    return vectorizer.fit_transform(dataset.train.texts), vectorizer.transform(dataset.test.texts)


def label_lists(labels: sp.csr_matrix) -> list[list[int]]:
    return [labels.indices[a:b].tolist() for a, b in zip(labels.indptr[:-1], labels.indptr[1:])]


def napkinxc_plt(dataset: Dataset, k: int, workdir: Path) -> tuple[Ranking, float]:
    """napkinXC's probabilistic label tree with its default settings; returns (ranking, train seconds)."""
    from napkinxc.models import PLT

    from xdex.metrics import Ranking

    start = time.perf_counter()
    x_train, x_test = tfidf_features(dataset)
    model = PLT(str(workdir / "plt"), threads=THREADS, seed=SEED)
    model.fit(x_train, label_lists(dataset.train.labels))
    seconds = time.perf_counter() - start
    rows = model.predict_proba(x_test, top_k=k)
    return Ranking.from_lists([[l for l, _ in r] for r in rows], [[p for _, p in r] for r in rows]), seconds


def omikuji_parabel(dataset: Dataset, k: int, workdir: Path) -> tuple[Ranking, float]:
    """Omikuji with its default hyper-parameters (Parabel: 3 trees of balanced 2-means, beam 10)."""
    return omikuji_forest(dataset, k, workdir, bonsai=False)


def omikuji_bonsai(dataset: Dataset, k: int, workdir: Path) -> tuple[Ranking, float]:
    """Omikuji with the Bonsai settings of its README (3 trees of unbalanced 100-means, depth 3, beam 10)."""
    return omikuji_forest(dataset, k, workdir, bonsai=True)


def omikuji_forest(dataset: Dataset, k: int, workdir: Path, bonsai: bool) -> tuple[Ranking, float]:
    import omikuji

    from xdex.metrics import Ranking
    from xdex.ranking.xc_file import write_xc_file

    start = time.perf_counter()
    x_train, x_test = tfidf_features(dataset)
    path = workdir / "train.txt"  # Omikuji trains from a file in the Extreme Classification Repository format
    write_xc_file(path, x_train, dataset.train.labels)
    settings = omikuji.Model.default_hyper_param()
    if bonsai:
        settings.cluster_k, settings.cluster_balanced, settings.max_depth = 100, False, 3
    model = omikuji.Model.train_on_data(str(path), settings, n_threads=THREADS)
    seconds = time.perf_counter() - start
    rows = [model.predict(list(zip(x_test[i].indices.tolist(), x_test[i].data.tolist())), top_k=k)
            for i in range(x_test.shape[0])]
    return Ranking.from_lists([[l for l, _ in r] for r in rows], [[s for _, s in r] for r in rows]), seconds


def xdex_recipe(method: str, overrides: list[str]) -> Fit:
    """A trainer for the packaged CPU recipe ``method`` with ``overrides``; returns ({name: ranking}, train
    seconds), with the model's other search modes as ``METHOD-MODE`` (e.g. ``unidec-de``)."""

    def run(dataset: Dataset, k: int, workdir: Path) -> tuple[dict[str, Ranking], float]:
        from xdex.methods.pipeline import train
        from xdex.methods.recipe import load_recipe

        config = load_recipe(method, overrides=overrides)
        config.trainer.progress = False
        start = time.perf_counter()
        model = train(dataset, config, workdir / "model")
        seconds = time.perf_counter() - start
        rankings = {f"{method} [{model.search}]": model.predict(dataset.test.texts, k)}  # the ranking it serves
        for mode in model.search_modes:
            if mode != model.search:
                rankings[f"{method}-{mode}"] = model.with_search(mode).predict(dataset.test.texts, k)
        log.info("%s serves its %s ranking", method, model.search)
        return rankings, seconds

    return run


def peer(fit: Callable[[Dataset, int, Path], tuple[Ranking, float]], name: str) -> Fit:
    def run(dataset: Dataset, k: int, workdir: Path) -> tuple[dict[str, Ranking], float]:
        ranking, seconds = fit(dataset, k, workdir)
        return {name: ranking}, seconds

    return run


PEER_FITS: dict[str, Fit] = {name: peer(fit, name) for name, fit in
                             (("napkinxc-plt", napkinxc_plt), ("omikuji-parabel", omikuji_parabel),
                              ("omikuji-bonsai", omikuji_bonsai))}


def run_one(job: dict) -> list[dict]:
    """Train, predict and evaluate one method on one dataset: one record per ranking, metrics in percent."""
    from xdex.data import load
    from xdex.metrics import depth_with_filter, evaluate_predictions

    dataset = load(job["path"])  # the driver has checked that it loads and has a test split
    k = depth_with_filter(5, dataset.test.filter)
    method = job["method"]
    fit = PEER_FITS[method] if method in PEER_FITS else xdex_recipe(method, job["overrides"])
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as workdir:
        rankings, seconds = fit(dataset, k, Path(workdir))
    records = []
    for name, ranking in rankings.items():
        metrics = evaluate_predictions(ranking, dataset, ks=(1, 3, 5), propensity=PROPENSITY, recall_ks=(5,))
        records.append({"method": name, "metrics": {m: metrics[m] for m in COLUMNS}, "train_s": seconds})
    peak = peak_rss_mb()
    return [r | {"peak_mb": peak} for r in records]


# --- the driver ------------------------------------------------------------------------------------

def run_method(path: Path, method: str, overrides: list[str]) -> list[dict]:
    """Run ``method`` on the dataset folder ``path`` in a process of its own; its records, or its failure."""
    return run_job(MODULE, path, method, {"path": str(path), "method": method, "overrides": overrides})


def run_job(module: str, path: Path, name: str, job: dict) -> list[dict]:
    """``job`` (training ``name`` on the dataset folder ``path``) run by ``module`` in a process of its own: its
    records, each with the dataset's name, or one record of its failure."""
    log.info("%s on %s", name, path.name)
    try:
        records = run_isolated(module, job)
    except RunFailed as failure:
        return [{"dataset": path.name, "method": name, "error": str(failure)}]
    records = [{"dataset": path.name} | r for r in records]
    for r in records:
        log.info("%s on %s: P@1 %.2f, PSP@5 %.2f, %.0f s", r["method"], path.name,
                 r["metrics"]["P@1"], r["metrics"]["PSP@5"], r["train_s"])
    return records


def overrides_for(method: str, common: list[str], per_recipe: list[str]) -> list[str]:
    """``--set`` overrides, then the ``--recipe-set METHOD:key=value`` ones naming ``method``."""
    return common + [item.split(":", 1)[1] for item in per_recipe if item.split(":", 1)[0] == method]


def table(records: list[dict]) -> list[str]:
    lines = ["| method | " + " | ".join(COLUMNS) + " | train s | peak MB |", "|---|" + "---:|" * (len(COLUMNS) + 2)]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['method']} | failed ({r['error']}) |" + " |" * (len(COLUMNS) + 1))
        else:
            cells = [f"{r['metrics'][c]:.2f}" for c in COLUMNS] + [f"{r['train_s']:.0f}", f"{r['peak_mb']:.0f}"]
            lines.append(f"| {r['method']} | " + " | ".join(cells) + " |")
    return lines


def verdict(records: list[dict]) -> str:
    """Whether the best dual encoder beats the best peer on P@1 and on PSP@5."""
    ok = [r for r in records if "error" not in r]
    peers = [r for r in ok if r["method"] in PEERS]
    des = [r for r in ok if r["method"] not in PEERS]
    if not des or not peers:
        return "No comparison: a dual encoder or a peer is missing."
    parts = []
    for metric in ("P@1", "PSP@5"):
        de = max(des, key=lambda r: r["metrics"][metric])
        peer = max(peers, key=lambda r: r["metrics"][metric])
        a, b = de["metrics"][metric], peer["metrics"][metric]
        outcome = "beats" if a > b else "ties" if a == b else "does not beat"
        parts.append(f"on {metric} the best dual encoder ({de['method']}, {a:.2f}) {outcome} "
                     f"the best peer ({peer['method']}, {b:.2f})")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def report(command: str, records: list[dict], load: float, args: argparse.Namespace) -> str:
    overrides = " ".join(args.set + args.recipe_set) or "none"
    sentences = [
        f"{machine_line([load])}.",
        "Metrics in percent on each test split, all scored by `xdex.metrics.evaluate_predictions`: filter pairs "
        f"removed from the predictions, propensities A={PROPENSITY[0]}, B={PROPENSITY[1]}.",
        f"xdex: the packaged CPU recipes, overrides: {overrides}; each holds out `data.validation_size` training "
        "documents to choose its best epoch.",
        f"Peers, on TF-IDF features fitted on the training texts (scikit-learn {version('scikit-learn')}: "
        f"{TFIDF_TEXT}), {THREADS} threads each: napkinXC {version('napkinxc')} PLT with its default settings "
        f"and seed {SEED}; Omikuji {version('omikuji')} with its default hyper-parameters (Parabel) and with the "
        "Bonsai settings of its README.",
        f"Neither peer repeats its figures exactly with {THREADS} threads (Omikuji's Python API takes no seed): "
        "they move by a few tenths of a point between runs.",
        "PECOS is not run: libpecos needs numpy < 2.",
        "Each xdex model is scored in every ranking it offers (`--search`), all from one training run (same train s "
        "and peak MB): `RECIPE [MODE]` is the ranking the model serves by default, chosen on its validation "
        "documents; `-fused` the ranking stage (dense, lexical and mention candidates, fusion learnt on validation), "
        "`-lexical` the stage's TF-IDF channel alone (Omikuji Bonsai on the training documents), `-dense` the "
        "network's own ranking without the stage; unidec-de / unidec-clf search with one UniDEC head alone (Table 5), "
        "dexa-de / dexa-clf with DEXA's Module I label embeddings or Module II classifiers alone (dexa-dense fuses "
        "them with the weight chosen on validation).",
        "train s: wall seconds from the texts to a trained model (xdex: tokenizer, training with validation, "
        "label index; peers: TF-IDF and training).",
        "peak MB: peak resident memory of the run's own process, prediction and evaluation included.",
    ]
    lines = [SECTION, "", f"`{command}`", "", *sentences]
    for name in dict.fromkeys(r["dataset"] for r in records):
        rows = [r for r in records if r["dataset"] == name]
        lines += ["", f"### {name}", "", *table(rows), "", verdict(rows)]
    return "\n".join(lines) + "\n"


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad overrides and datasets that do not load before the first run starts."""
    for item in args.recipe_set:
        if item.split(":", 1)[0] not in RECIPES or ":" not in item or "=" not in item:
            parser.error(f"--recipe-set {item!r}: expected METHOD:KEY=VALUE with METHOD one of {', '.join(RECIPES)}")
    from xdex.data import load
    from xdex.methods.recipe import load_recipe

    for name in args.datasets:
        path = args.data_root / name
        if not path.is_dir():
            parser.error(f"no dataset folder {name} under {args.data_root}")
        try:
            if load(path).test is None:
                parser.error(f"{path} has no test split")
        except ValueError as error:  # DataFormatError lists the file, the line and the problem
            parser.error(str(error))

    for method in args.methods:
        try:
            load_recipe(method, overrides=overrides_for(method, args.set, args.recipe_set))
        except ValueError as error:
            parser.error(f"{method}: {error}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=data_root(),
                        help=f"folder of the dataset folders (default: {DATA_ROOT_HELP})")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help="dataset folders under --data-root")
    parser.add_argument("--methods", nargs="*", default=list(RECIPES), choices=RECIPES, help="xdex recipes")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    parser.add_argument("--recipe-set", action="append", default=[], metavar="METHOD:KEY=VALUE",
                        help="override for one recipe")
    parser.add_argument("--json", type=Path, help="also write every run's record to this JSON file (after each run)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the records already in --json and run only the (dataset, method) pairs they lack")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.one:
        write_result(args.result, run_one(json.loads(args.one)))
        return 0
    load = load_average()
    check_args(parser, args)
    log.info("PECOS is not run here: libpecos pins numpy < 2; run it in an environment of its own")
    if args.reuse and not args.json:
        parser.error("--reuse needs --json")
    kept = json.loads(args.json.read_text()) if args.reuse and args.json.is_file() else []
    records = []
    for name in args.datasets:
        for method in [*args.methods, *args.peers]:
            done = [r for r in kept if r["dataset"] == name and r.get("job", r["method"]) == method and "error" not in r]
            if done:
                records += done
                continue
            overrides = overrides_for(method, args.set, args.recipe_set) if method in RECIPES else []
            records += [r | {"job": method} for r in run_method(args.data_root / name, method, overrides)]
            if args.json:  # after every run: a benchmark cut off keeps what it measured, and what it reused
                ran = {(r["dataset"], r.get("job", r["method"])) for r in records}
                later = [r for r in kept if (r["dataset"], r.get("job", r["method"])) not in ran]
                atomic_write_text(args.json, json.dumps(records + later, indent=1) + "\n")
    section = report(command_line(MODULE, argv), records, load, args)
    publish(section, args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

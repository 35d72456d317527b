"""The lexical channel (xdex.ranking.lexical) on validation splits carved from the training data: TF-IDF feature
sets and classifier libraries side by side.

    python -m benchmarks.bench_lexical [--data-root DIR] [--datasets NAME ...] [--options plt parabel ...]
        [--feature-option plt-l2] [--valid-size 2000] [--threads 2] [--update-docs]

For each dataset, ``--valid-size`` labelled training documents are held out (``split_validation`` of the
recipes, seed 0); the model is fitted on the other training documents and scored on them. The test split
is never read. Same-universe datasets (a document can be the entry a label stands for) have the pair of a
held-out document and its own label removed from the predictions, as the recipes' validation does.
Every option runs with the feature set the ``auto`` rule picks; ``--feature-option`` also runs with the other
one (words alone, or words and characters), which checks the rule. Every run is a process of its own (its
peak memory is its own).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

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

log = logging.getLogger("bench_lexical")

MODULE = "benchmarks.bench_lexical"
SECTION = "## Lexical channel: TF-IDF classifiers on validation splits"
DATASETS = ("foldoc-links", "foldoc-links-titles", "debian-debtags", "gcide-links", "gcide-links-titles")
OPTIONS: dict[str, dict[str, Any]] = {
    "plt": {"classifier": "napkinxc-plt"},  # napkinXC defaults: log loss, C=10, one tree
    "plt-l2": {"classifier": "napkinxc-plt", "loss": "hinge", "c": 1.0},  # squared hinge, C=1 (Parabel's C)
    "plt-x3": {"classifier": "napkinxc-plt", "trees": 3},  # an ensemble of three trees
    "parabel": {"classifier": "omikuji-parabel"},  # Omikuji defaults: hinge, C=1, three trees
    "bonsai": {"classifier": "omikuji-bonsai"},
}
COLUMNS = ("P@1", "P@5", "PSP@1", "PSP@5")
CHOICE = """\
The choice, `LexicalConfig()`'s defaults: **Omikuji Bonsai** (`classifier="omikuji-bonsai"`) on the features of the
auto rule. It has the best PSP@5 on all five sets and the best P@1 on three (foldoc-links +3.0 over Parabel,
gcide-links +1.6, gcide-links-titles +1.8 over the best napkinXC option), and is within 0.9 P@1 of Parabel on the
other two; napkinXC's PLT trails the best by 0.4-8.5 P@1 with its defaults. Its costs: it trains two to four times
slower than Parabel (`omikuji-parabel`, the faster choice), and Omikuji has no seed, so a refit moves the figures
by a few tenths. Character n-grams are what make the title sets work at all (foldoc-links-titles: P@1 14.8 with
words alone, 24-26 with words and characters; gcide-links-titles: 0.3 and 8-12); on long texts they cost 4-7 times
the fit time for -1.0 to +1.6 P@1, so the rule leaves them out there, and the ranking stage chooses between the
two on a run's validation documents with `analyzer: validation` ("Ranking stage: choices on validation splits")."""
PROPENSITY = (0.55, 1.5)
K = 10


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Fit one option on one dataset's training part and score it on the held-out part."""
    import numpy as np

    from xdex.data import load
    from xdex.methods.run import split_validation, validation_filter
    from xdex.metrics import Ranking, compute_metrics, inverse_propensity, remove_pairs
    from xdex.ranking import LexicalConfig, LexicalModel

    dataset = load(job["path"])
    train_rows, valid_rows = split_validation(dataset.train, job["valid_size"], 0)
    texts = dataset.train.texts
    fit_texts, valid_texts = [texts[i] for i in train_rows], [texts[i] for i in valid_rows]
    y_fit, y_valid = dataset.train.labels[train_rows], dataset.train.labels[valid_rows]
    config = LexicalConfig(**OPTIONS[job["option"]], analyzer=job["analyzer"], threads=job["threads"], seed=0)
    start = time.perf_counter()
    model = LexicalModel(config).fit(fit_texts, y_fit)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    ids, scores = model.predict(valid_texts, K)
    predict_s = time.perf_counter() - start
    ranking = Ranking(ids, scores)
    pairs = validation_filter(dataset, valid_rows)
    if pairs is not None:
        ranking = remove_pairs(ranking, pairs)
    q = inverse_propensity(y_fit, *PROPENSITY)
    metrics = compute_metrics(ranking, y_valid, (1, 5), q)
    return {
        "metrics": {name: metrics[name] for name in COLUMNS},
        "fit_s": fit_s,
        "texts_per_s": len(valid_texts) / predict_s,
        "features": model.n_features,
        "blocks": "+".join(model.blocks),
        "share": model.share,
        "empty": float(np.mean(ids[:, 0] < 0)),
        "peak_mb": peak_rss_mb(),
        "n_fit": len(fit_texts),
        "n_valid": len(valid_texts),
    }


Row = tuple[str, ...]


def table(header: Row, rows: list[Row]) -> list[str]:
    lines = [f"| {' | '.join(header)} |", "|---|---|" + "---:|" * (len(header) - 2)]
    return lines + [f"| {' | '.join(row)} |" for row in rows]


def report(args: argparse.Namespace, argv: list[str], results: dict[str, list[tuple[str, str, dict]]],
           shares: dict[str, tuple[float, str]], load: float) -> str:
    from importlib.metadata import version

    libraries = ", ".join(f"{name} {version(name)}" for name in ("scikit-learn", "napkinxc", "omikuji"))
    lines = [
        SECTION,
        "",
        f"`{command_line(MODULE, argv)}`",
        f"on {machine_line([load], torch_note=None)}; {libraries}; {args.threads} threads for the classifiers.",
        f"Each dataset's training split minus {args.valid_size:,} held-out labelled documents (the recipes'",
        "`split_validation`, seed 0) fits the model; the held-out documents score it (filter pairs of same-universe",
        "data removed; propensities A=0.55, B=1.5 from the fitted part). The test splits are not read.",
        "fit s: wall seconds from texts to a fitted model (TF-IDF included); texts/s: prediction of the top 10.",
        "Options: `plt` napkinXC PLT with its defaults (log loss, C=10, one tree, seed 0); `plt-l2` the same with",
        "squared hinge loss and C=1; `plt-x3` three trees; `parabel` Omikuji's defaults (hinge loss, C=1, three",
        "balanced 2-means trees, beam 10); `bonsai` Omikuji with 100-way unbalanced clustering, depth 3.",
        "Features: `word` = word unigrams + bigrams, `word+char` = those and `char_wb` 2-5-grams stacked; the",
        "`auto` rule picks word+char when the unique-word share (word occurrences whose word is in one training",
        f"text only) is at least 0.2; `{args.feature_option}` also runs with the other feature set, to check the rule.",
        "no feature: share of held-out texts without any feature (an empty row).",
        "",
        "| dataset | unique-word share | auto picks |",
        "|---|---:|---|",
        *(f"| {name} | {share:.3f} | {blocks} |" for name, (share, blocks) in shares.items()),
        "",
    ]
    for name, runs in results.items():
        rows = []
        for option, analyzer, r in runs:
            m = r["metrics"]
            rows.append((option, analyzer, *(f"{m[c]:.2f}" for c in COLUMNS), f"{r['fit_s']:.1f}",
                         f"{r['texts_per_s']:,.0f}", f"{r['features']:,}", f"{100 * r['empty']:.1f}%",
                         f"{r['peak_mb']:.0f}"))
        first = runs[0][2]
        lines += [f"### {name} ({first['n_fit']:,} fitted, {first['n_valid']:,} held out)", ""]
        lines += table(("option", "features", *COLUMNS, "fit s", "texts/s", "features", "no feature", "peak MB"),
                       rows)
        lines.append("")
    lines += ["Best option per dataset (feature set of the auto rule):", ""]
    for name, runs in results.items():
        auto = [(option, r["metrics"]) for option, shown, r in runs if shown.endswith("(auto)")]
        if auto:
            best = {c: max(auto, key=lambda pair, c=c: pair[1][c]) for c in ("P@1", "PSP@5")}
            lines.append(f"- {name}: P@1 {best['P@1'][0]} ({best['P@1'][1]['P@1']:.2f}), "
                         f"PSP@5 {best['PSP@5'][0]} ({best['PSP@5'][1]['PSP@5']:.2f})")
    lines += ["", CHOICE]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None, help=f"default: {DATA_ROOT_HELP}")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--options", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    parser.add_argument("--feature-option", default="plt-l2", choices=list(OPTIONS),
                        help="the option also run with the feature set the auto rule did not pick")
    parser.add_argument("--valid-size", type=int, default=2000, help="held-out training documents per dataset")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write every record here")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    add_isolation_args(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.one:
        write_result(args.result, run_one(json.loads(args.one)))
        return 0
    if args.valid_size < 1 or args.threads < 1:
        parser.error("--valid-size and --threads must be positive")
    root = args.data_root or data_root()
    load = load_average()
    results: dict[str, list[tuple[str, str, dict]]] = {}
    shares: dict[str, tuple[float, str]] = {}
    for name in args.datasets:
        path = root / name
        shares[name] = _share(path, args.valid_size)
        other = "word" if shares[name][1] == "word+char" else "word+char"
        runs = [(option, "auto") for option in args.options] + [(args.feature_option, other)]
        for option, analyzer in runs:
            job = {"path": str(path), "option": option, "analyzer": analyzer, "valid_size": args.valid_size,
                   "threads": args.threads}
            try:
                record = run_isolated(MODULE, job)
            except RunFailed:
                continue
            log.info("%s %s %s: %s, fit %.1f s", name, option, analyzer, record["metrics"], record["fit_s"])
            shown = f"{record['blocks']} (auto)" if analyzer == "auto" else record["blocks"]
            results.setdefault(name, []).append((option, shown, record))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    publish(report(args, argv, results, shares, load), args.update_docs)
    return 0


def _share(path: Path, valid_size: int) -> tuple[float, str]:
    """The unique-word share of the fitted part of ``path``'s training split and what the auto rule picks."""
    from xdex.data import load
    from xdex.methods.run import split_validation
    from xdex.ranking import LexicalConfig, choose_analyzer

    dataset = load(path)
    rows, _ = split_validation(dataset.train, valid_size, 0)
    blocks, share = choose_analyzer([dataset.train.texts[i] for i in rows], LexicalConfig())
    return float(share or 0.0), "+".join(blocks)


if __name__ == "__main__":
    sys.exit(main())

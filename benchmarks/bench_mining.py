"""Hard-negative mining with an HNSW graph against exact search: refresh time, recall and validation quality.

    python -m benchmarks.bench_mining refresh [--labels 10000 100000] [--queries 20000] [--repeats 1] [--threads N]
        [--seed 0] [--set key=value ...] [--update-docs]
    python -m benchmarks.bench_mining quality [--data-root DIR] [--datasets NAME ...] [--methods unidec ngame]
        [--seeds 0 1] [--set key=value ...] [--json out.json] [--update-docs]

``refresh``: the synthetic data and packaged `unidec` recipe of ``bench_unidec_step`` (N queries, L labels); for
each L, in a process of its own, the untrained network's refresh 0 (embedding every query and label, the query
clusters, the hard-negative shortlists) runs with ``sampling.mining_index.kind=exact`` and then ``hnsw``, on the
same vectors, alternately --repeats times. Reported: the median seconds of each refresh and of its search alone
(the HNSW graph's build included, and shown apart), and the recall of the HNSW shortlists against
the exact ones (``xdex.index.recall_at_k`` at the shortlist size: the share of the exact shortlist's negatives
that the HNSW shortlist holds).

``quality``: each (dataset, method, mining kind, seed) is trained in a process of its own with the recipe
overrides, the ranking stage off (``ranker=null``, so that the network's own ranking is scored) and
``sampling.mining_index.kind`` set; the score is the final model's P@1 / P@5 on the run's own validation
documents (the ``data.validation_size`` training documents it held out, filter pairs removed, scored as the
trainer scores them); the test split is not read. Every hard-negative search of an HNSW run is repeated
exactly, untimed, to report the recall of its shortlists.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness import (
    DATA_ROOT_HELP,
    DOCS,
    RunFailed,
    add_isolation_args,
    command_line,
    data_root,
    load_average,
    machine_line,
    publish,
    run_isolated,
    write_result,
)

log = logging.getLogger("bench_mining")

MODULE = "benchmarks.bench_mining"
REFRESH_TITLE = "## Hard-negative mining with HNSW: refresh time and recall"
QUALITY_TITLE = "## Hard-negative mining with HNSW: validation quality"
KINDS = ("exact", "hnsw")
DATASETS = ("foldoc-links-titles", "gcide-links-titles")
METHODS = ("unidec", "ngame")
KS = [1, 3, 5]


# --- refresh: time and recall on synthetic data -------------------------------------------------------

def measure_refresh(n_labels: int, n_queries: int, overrides: list[str], seed: int = 0, repeats: int = 1) -> dict:
    """Refresh 0 of the untrained `unidec` network with exact and with HNSW mining, alternately ``repeats`` times:
    median seconds, and recall."""
    from benchmarks.bench_unidec_step import synthetic_objective
    from xdex.index.hnsw import HNSWIndex
    from xdex.index.recall import recall_at_k
    from xdex.sampling import negatives

    _, objective = synthetic_objective(n_queries, n_labels, seed, overrides)
    search_s: list[float] = []
    mine = negatives.HardNegatives.mine.__func__  # type: ignore[attr-defined]

    def timed_mine(cls, *args, **kwargs):  # the search alone, within the refresh
        start = time.perf_counter()
        out = mine(cls, *args, **kwargs)
        search_s.append(time.perf_counter() - start)
        return out

    build_s: list[float] = []
    add = HNSWIndex.add

    def timed_add(index, *args, **kwargs):  # the graph's build, within the search
        start = time.perf_counter()
        add(index, *args, **kwargs)
        build_s.append(time.perf_counter() - start)

    original_mine = negatives.HardNegatives.__dict__["mine"]
    negatives.HardNegatives.mine = classmethod(timed_mine)  # type: ignore[method-assign, assignment]
    HNSWIndex.add = timed_add  # type: ignore[method-assign]
    try:
        record: dict = {"labels": n_labels, "queries": n_queries, "repeats": repeats}
        shortlists = {}
        times: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
        for _ in range(repeats):  # alternately, so that a change of the machine's load touches both
            for kind in KINDS:
                objective.cfg.mining_index.kind = kind
                start = time.perf_counter()
                objective.refresh(0)
                times[kind].append((time.perf_counter() - start, search_s[-1]))
                shortlists[kind] = objective.negatives.shortlist
                log.info("L = %d: %s refresh %.1f s (search %.1f s)", n_labels, kind, *times[kind][-1])
        for kind in KINDS:
            record[f"{kind}_refresh_s"] = float(np.median([t[0] for t in times[kind]]))
            record[f"{kind}_search_s"] = float(np.median([t[1] for t in times[kind]]))
        record["hnsw_build_s"] = float(np.median(build_s))
        size = shortlists["exact"].shape[1]
        record["shortlist"] = size
        record["recall"] = recall_at_k(shortlists["hnsw"], shortlists["exact"], size)
    finally:  # the classes as they were, for whatever runs next in this process
        negatives.HardNegatives.mine = original_mine  # type: ignore[method-assign]
        HNSWIndex.add = add  # type: ignore[method-assign]
    return record


def refresh_table(records: list[dict]) -> list[str]:
    lines = ["| labels L | queries N | refresh s, exact | refresh s, HNSW | search s, exact | search s, HNSW "
             "| of which graph build s | speed-up of the refresh | shortlist size | recall of the HNSW shortlists |",
             "|---:" * 10 + "|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['labels']:,} | failed ({r['error']}) |" + " |" * 8)
            continue
        cells = [f"{r['labels']:,}", f"{r['queries']:,}", f"{r['exact_refresh_s']:.1f}", f"{r['hnsw_refresh_s']:.1f}",
                 f"{r['exact_search_s']:.1f}", f"{r['hnsw_search_s']:.1f}", f"{r['hnsw_build_s']:.1f}",
                 f"{r['exact_refresh_s'] / r['hnsw_refresh_s']:.2f}×", str(r["shortlist"]), f"{r['recall']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --- quality: training runs on the shared datasets ----------------------------------------------------

def measure_quality(data: str, method: str, kind: str, seed: int, overrides: list[str]) -> dict:
    """Train ``method`` on ``data`` with ``kind`` mining; validation metrics, mining seconds and recall."""
    from xdex.data import load
    from xdex.index.recall import recall_at_k
    from xdex.methods.pipeline import train
    from xdex.methods.recipe import load_recipe
    from xdex.methods.run import held_out_as_test, split_validation, validation_filter
    from xdex.metrics.measures import compute_metrics
    from xdex.metrics.ranking import depth_with_filter, remove_pairs
    from xdex.sampling import negatives

    config = load_recipe(method, overrides=["trainer.progress=false", "ranker=null", *overrides,
                                            f"sampling.mining_index.kind={kind}", f"trainer.seed={seed}"])
    dataset = load(data)
    searches: list[dict] = []
    mine = negatives.HardNegatives.mine.__func__  # type: ignore[attr-defined]

    def recorded_mine(cls, q, z, y, size, index="exact", seed=0, **settings):
        start = time.perf_counter()
        out = mine(cls, q, z, y, size, index, seed, **settings)
        entry = {"index": index, "seconds": time.perf_counter() - start, "queries": len(q), "labels": len(z)}
        if index != "exact":  # the exact shortlists of the same vectors, untimed
            exact = mine(cls, q, z, y, size)
            entry["recall"] = recall_at_k(out.shortlist, exact.shortlist, size)
        searches.append(entry)
        return out

    negatives.HardNegatives.mine = classmethod(recorded_mine)  # type: ignore[method-assign, assignment]
    with tempfile.TemporaryDirectory(prefix="bench-mining-") as tmp:
        start = time.perf_counter()
        model = train(dataset, config, Path(tmp) / "model")
        seconds = time.perf_counter() - start
    assert model is not None
    train_rows, valid_rows = split_validation(dataset.train, config.data.validation_size, seed)
    valid_rows, valid_labels = held_out_as_test(dataset.train.labels, train_rows, valid_rows)
    pairs = validation_filter(dataset, valid_rows)
    ranking = model.predict([dataset.train.texts[i] for i in valid_rows], depth_with_filter(max(KS), pairs))
    if pairs is not None:
        ranking = remove_pairs(ranking, pairs)
    metrics = compute_metrics(ranking, valid_labels, KS)
    recalls = [s["recall"] for s in searches if "recall" in s]
    return {"dataset": dataset.name, "method": method, "kind": kind, "seed": seed,
            "P@1": metrics["P@1"], "P@5": metrics["P@5"], "train_s": seconds,
            "search_s": float(sum(s["seconds"] for s in searches)), "searches": len(searches),
            "recall": float(np.mean(recalls)) if recalls else None, "labels": len(dataset.labels)}


def quality_table(records: list[dict]) -> list[str]:
    lines = ["| dataset | method | mining | seeds | P@1 valid (per seed) | P@1 mean | P@5 mean | searches | "
             "search s (all) | recall of the HNSW shortlists |", "|---|---|---|---:|---|---:|---:|---:|---:|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["method"], r["kind"]), []).append(r)
    for (dataset, method, kind), runs in groups.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            lines.append(f"| {dataset} | {method} | {kind} | failed ({runs[0]['error']}) |" + " |" * 6)
            continue
        per_seed = ", ".join(f"{r['P@1']:.2f}" for r in ok)
        recall = [r["recall"] for r in ok if r["recall"] is not None]
        cells = [dataset, method, kind, str(len(ok)), per_seed, f"{np.mean([r['P@1'] for r in ok]):.2f}",
                 f"{np.mean([r['P@5'] for r in ok]):.2f}", str(ok[0]["searches"]),
                 f"{np.mean([r['search_s'] for r in ok]):.2f}", f"{np.mean(recall):.3f}" if recall else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --- the driver ----------------------------------------------------------------------------------

def isolated(job: dict, threads: int | None, key: dict) -> dict:
    try:
        return run_isolated(MODULE, job, args=[] if threads is None else ["--threads", str(threads)])
    except RunFailed as failure:
        return {**key, "error": str(failure)}


def main(argv: list[str] | None = None) -> int:
    from xdex.methods.recipe import load_recipe

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["refresh", "quality"], nargs="?", default="refresh")
    parser.add_argument("--labels", type=int, nargs="+", default=[10_000, 100_000], help="refresh: values of L")
    parser.add_argument("--queries", type=int, default=20_000, help="refresh: training queries N")
    parser.add_argument("--data-root", type=Path, default=None, help=f"quality: datasets folder ({DATA_ROOT_HELP})")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help="quality: dataset folder names")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help="quality: recipes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="quality: trainer seeds")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--seed", type=int, default=0, help="refresh: seed of the synthetic data")
    parser.add_argument("--repeats", type=int, default=1, help="refresh: refreshes of each kind (medians shown)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--json", type=Path, help="also write the records to this JSON file")
    parser.add_argument("--update-docs", action="store_true", help=f"write the part's section of {DOCS}")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.one:
        job = json.loads(args.one)
        part = job.pop("part")
        write_result(args.result, measure_refresh(**job) if part == "refresh" else measure_quality(**job))
        return 0
    for method in ["unidec"] if args.part == "refresh" else args.methods:
        try:
            load_recipe(method, overrides=args.set)
        except ValueError as error:
            parser.error(f"--set: {error}")
    load = load_average()
    if args.part == "refresh":
        jobs = [{"part": "refresh", "n_labels": n, "n_queries": args.queries, "overrides": args.set, "seed": args.seed,
                 "repeats": args.repeats} for n in args.labels]
        records = [isolated(job, args.threads, {"labels": job["n_labels"]}) for job in jobs]
        lines = refresh_table(records)
        title = REFRESH_TITLE
    else:
        root = args.data_root or data_root()
        records = []
        for name in args.datasets:
            for method in args.methods:
                for kind in KINDS:
                    for seed in args.seeds:
                        job = {"part": "quality", "data": str(root / name), "method": method, "kind": kind,
                               "seed": seed, "overrides": args.set}
                        records.append(isolated(job, args.threads, {"dataset": name, "method": method,
                                                                    "kind": kind, "seed": seed}))
                        log.info("%s", records[-1])
        lines = quality_table(records)
        title = QUALITY_TITLE
    if args.json:
        args.json.write_text(json.dumps(records, indent=1), encoding="utf-8")
    command = command_line(MODULE, argv)
    mining = load_recipe("unidec", overrides=args.set).sampling.mining_index
    sentences = [f"{machine_line([load, load_average()], f' with {torch.get_num_threads()} thread(s)')}.",
                 f"HNSW settings: M = {mining.M}, ef_construction = {mining.ef_construction}, "
                 f"ef_search = {mining.ef_search} (built on one thread); overrides: {' '.join(args.set) or 'none'}."]
    publish("\n".join([title, "", f"`{command}`", "", *sentences, "", *lines]) + "\n", args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

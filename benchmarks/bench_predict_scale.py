"""`xdex.Predictor` single-text latency and batch throughput at 10^5 labels (exact search) and 10^6 labels (HNSW).

    python -m benchmarks.bench_predict_scale [--exact 100000] [--hnsw 1000000] [--queries 20000] [--texts 2000]
        [--calls 300] [--runs 5] [--batch 2000] [--k 10] [--M 16] [--ef-construction 32] [--ef-search 64 128 256]
        [--threads N] [--seed 0] [--models DIR] [--set key=value ...] [--update-docs]

For each label count L (``--exact``: an exact index; ``--hnsw``: an HNSW graph), in a process of its own, a real
model directory is made the way users get one, but cheaply: the packaged `dexml` recipe (bag-of-embeddings
encoder) trained for one epoch without validation and without the ranking stage (``ranker=null``), its index kind
set by ``index.kind``, on the synthetic data of ``bench_unidec_step`` (``--queries`` training queries of 8 and L
label texts of 4 random words, 1 to 5 Zipf-distributed positives per query), so the directory holds L label
vectors and their index. Then, in the same process: ``Predictor(model_dir)``, a warm-up, and ``--runs`` rounds of
``--calls`` single-text calls ``predict([text], k)`` (p50 and p95 of each round; the table gives the medians over
the rounds) and one call of ``--batch`` texts (texts per second). The query texts are ``--texts`` new random texts
of the same words. Each round also times, for the same texts, the encoder alone (``embed_texts([text])``) and the
index's search alone (``index.search(vector, k)``), and a numpy copy of a 100 MB float32 array: the reference for
what reading the label vectors costs (an exact search of one text reads all L x d x 4 bytes of them).

With HNSW every ``--ef-search`` value is measured on the same graph (the model directory keeps the first), and
recall@k is that of the graph's top k against an exact search of the same label vectors for the query texts.
``--models DIR`` keeps the model directories there and reuses them in later runs with the same settings
(default: a temporary folder, removed at the end of each run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.bench_unidec_step import (
    LABEL_WORDS,
    QUERY_WORDS,
    VOCABULARY,
    random_texts,
    random_words,
    synthetic_data,
)
from benchmarks.harness import (
    DOCS,
    RunFailed,
    add_isolation_args,
    command_line,
    load_average,
    machine_line,
    peak_rss_mb,
    publish,
    run_isolated,
    timed,
    write_result,
)

log = logging.getLogger("bench_predict_scale")

MODULE = "benchmarks.bench_predict_scale"
SECTION = "## Prediction at 10^5 and 10^6 labels"
COPY_BYTES = 100 * 10**6  # the reference copy: about the label vectors of 10^5 labels of 256 float32
GOAL_ONE_TEXT_MS = 1.0  # single text p50, exact search at 10^5 labels and HNSW at 10^6
GOAL_BATCH_TEXTS_PER_S = 20_000.0  # batched, the network alone, 2 cores


# --- the model directory ------------------------------------------------------------------------------

def recipe_overrides(kind: str, M: int, ef_construction: int, ef_search: int, threads: int,
                     extra: Sequence[str] = ()) -> list[str]:
    """The `dexml` recipe's overrides of a model directory made cheaply: one epoch, no validation, no ranking
    stage, the index ``kind`` (HNSW: its settings, built on ``threads`` threads), then ``extra``."""
    base = ["trainer.epochs=1", "data.validation_size=0", "ranker=null", f"index.kind={kind}"]
    if kind == "hnsw":
        base += [f"index.M={M}", f"index.ef_construction={ef_construction}", f"index.ef_search={ef_search}",
                 f"index.num_threads={threads}"]
    return base + list(extra)


def synthetic_dataset(n_labels: int, n_queries: int, seed: int) -> Any:
    """``bench_unidec_step``'s synthetic training queries and L label texts as an :class:`xdex.data.Dataset`."""
    from xdex.data.dataset import Catalogue, Dataset, Split

    queries, labels, y = synthetic_data(n_queries, n_labels, seed)
    return Dataset(name=f"synthetic-{n_labels}", train=Split([f"q{i}" for i in range(n_queries)], queries, y),
                   labels=Catalogue([f"l{j}" for j in range(n_labels)], labels))


def query_texts(n: int, seed: int) -> list[str]:
    """``n`` new texts of QUERY_WORDS words of the synthetic data's vocabulary (not training queries)."""
    words = random_words(VOCABULARY, np.random.default_rng([seed, 0]))  # the vocabulary of synthetic_data
    return random_texts(words, n, QUERY_WORDS, np.random.default_rng([seed, 5]))


def model_name(job: dict) -> str:
    """A folder name for the model directory of ``job``: its label count, index kind and a digest of the rest."""
    settings = {key: job[key] for key in ("labels", "queries", "seed", "overrides")}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    return f"{job['kind']}-{job['labels']}-{digest}"


def build_model(job: dict, out: Path) -> tuple[float, bool]:
    """Train the model directory of ``job`` into ``out``: its build seconds and whether it was already there (then
    the seconds of the run that built it, from ``out``'s record beside it, or 0.0 without one)."""
    from xdex.inference.model import MARKER
    from xdex.jsonfile import read_json, write_json
    from xdex.methods.pipeline import train
    from xdex.methods.recipe import load_recipe

    record = out.parent / f"{out.name}.json"
    if (out / MARKER).is_file():
        log.info("L = %d: reusing the model directory %s", job["labels"], out)
        return (float(read_json(record)["build_s"]) if record.is_file() else 0.0), True
    config = load_recipe("dexml", overrides=job["overrides"])
    config.trainer.progress = False
    dataset = synthetic_dataset(job["labels"], job["queries"], job["seed"])
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as cache:  # the token cache of these texts
        previous = os.environ.get("XDEX_CACHE_DIR")
        os.environ["XDEX_CACHE_DIR"] = cache
        try:
            _, seconds = timed(train, dataset, config, out)
        finally:
            if previous is None:
                os.environ.pop("XDEX_CACHE_DIR")
            else:
                os.environ["XDEX_CACHE_DIR"] = previous
    write_json(record, {"build_s": seconds})
    log.info("L = %d: model directory written in %.1f s", job["labels"], seconds)
    return seconds, False


# --- timing ---------------------------------------------------------------------------------------------

def each_ms(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[float]:
    """Milliseconds of ``fn(item)`` for each item."""
    out = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        out.append(1000.0 * (time.perf_counter() - start))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def copy_ms(n_bytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """Median milliseconds of a numpy copy of ``n_bytes`` of float32 into an array already allocated."""
    source = np.random.default_rng(0).random(n_bytes // 4, dtype=np.float32)
    target = np.empty_like(source)
    np.copyto(target, source)  # page both arrays in
    return statistics.median(each_ms(lambda _: np.copyto(target, source), range(repeats)))


def time_round(predictor: Any, texts: list[str], vectors: np.ndarray, calls: int, batch: int, k: int,
               first: int) -> dict:
    """One round: ``calls`` single-text predictions from text ``first`` on, the encoder and the index's search
    alone for the same texts, one batch of ``batch`` texts, and the reference copy."""
    model = predictor.model
    picks = [(first + i) % len(texts) for i in range(calls)]
    one = each_ms(lambda i: predictor.predict([texts[i]], k), picks)
    encoder = each_ms(lambda i: model.embed_texts([texts[i]]), picks)
    search = each_ms(lambda i: model.index.search(vectors[i : i + 1], k), picks)
    chunk = [texts[(first + i) % len(texts)] for i in range(batch)]
    _, batch_s = timed(predictor.predict, chunk, k)
    return {"p50_ms": percentile(one, 50), "p95_ms": percentile(one, 95), "encoder_ms": percentile(encoder, 50),
            "search_ms": percentile(search, 50), "batch_texts_per_s": batch / batch_s, "copy_ms": copy_ms()}


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """recall@k of ``found`` ids against ``truth`` ids (both N x k)."""
    from xdex.index import recall_at_k

    return float(recall_at_k(found, truth, truth.shape[1]))


# --- one label count, in its own process -----------------------------------------------------------

def measure(job: dict, models: Path | None = None) -> dict:
    """Build (or reuse) the model directory of ``job`` and time its :class:`xdex.Predictor`; see the module
    docstring. One record per ``ef_search`` value (one for an exact index) under ``rows``."""
    from xdex.index.exact import exact_search
    from xdex.inference.predictor import Predictor

    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-predict-scale-") as tmp:
        out = (models or Path(tmp)) / model_name(job)
        build_s, reused = build_model(job, out)
        start = time.perf_counter()
        predictor = Predictor(out, read_only=True)
        load_s = time.perf_counter() - start
        model = predictor.model
        texts = query_texts(job["texts"], job["seed"])
        vectors = model.embed_texts(texts)
        k = job["k"]
        truth = None
        if job["kind"] == "hnsw":  # the exact top k of the same label vectors
            _, truth = exact_search(np.asarray(model.label_embeddings), np.ascontiguousarray(vectors), k)
        rows = []
        for ef in job["ef_search"] if job["kind"] == "hnsw" else [None]:
            if ef is not None:
                model.index.ef_search = ef
            predictor.predict(texts[:64], k)  # warm-up: compiled loops, thread pools, the pages of the index
            for text in texts[:50]:
                predictor.predict([text], k)
            rounds = [time_round(predictor, texts, vectors, job["calls"], job["batch"], k, r * job["calls"])
                      for r in range(job["runs"])]
            row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            row["ef_search"] = ef
            row["recall"] = 1.0 if truth is None else recall(model.index.search(vectors, k)[1], truth)
            log.info("L = %d, %s: %s", job["labels"], job["kind"], json.dumps(row))
            rows.append(row)
        dim = int(model.label_embeddings.shape[1])
    return {"labels": job["labels"], "kind": job["kind"], "dim": dim, "build_s": build_s, "reused": reused,
            "load_s": load_s, "rows": rows, "peak_mb": peak_rss_mb(), "load": [load_start, load_average()],
            "threads": torch.get_num_threads()}


# --- the driver --------------------------------------------------------------------------------------

def run_job(job: dict, args: argparse.Namespace) -> dict:
    """``measure(job)`` in a process of its own; its record, or its failure."""
    log.info("L = %d (%s) in its own process", job["labels"], job["kind"])
    extra = [] if args.threads is None else ["--threads", str(args.threads)]
    if args.models is not None:
        extra += ["--models", str(args.models)]
    try:
        return run_isolated(MODULE, job, args=extra)
    except RunFailed as failure:
        return {"labels": job["labels"], "kind": job["kind"], "error": str(failure)}


def build_cell(record: dict) -> str:
    """The build seconds of a record's model directory, marked when an earlier run built it."""
    if not record.get("reused"):
        return f"{record['build_s']:.0f}"
    return f"{record['build_s']:.0f} (earlier run)" if record["build_s"] else "earlier run"


def table(records: list[dict], k: int) -> list[str]:
    lines = [f"| labels L | index | build s | one text p50 ms | one text p95 ms | encoder ms | search ms "
             f"| batch texts/s | recall@{k} | 100 MB copy ms |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['labels']:,} | {r['kind']} | failed ({r['error']}) |" + " |" * 7)
            continue
        for row in r["rows"]:
            index = r["kind"] if row["ef_search"] is None else f"{r['kind']} ef_search={row['ef_search']}"
            cells = [f"{r['labels']:,}", index, build_cell(r),
                     f"{row['p50_ms']:.2f}", f"{row['p95_ms']:.2f}", f"{row['encoder_ms']:.2f}",
                     f"{row['search_ms']:.2f}", f"{row['batch_texts_per_s']:,.0f}", f"{row['recall']:.3f}",
                     f"{row['copy_ms']:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(command: str, records: list[dict], args: argparse.Namespace, load: Sequence[float]) -> str:
    ran = [r for r in records if "error" not in r]
    threads = ran[0]["threads"] if ran else args.threads
    loads = "; ".join(f"L = {r['labels']:,}: {r['load'][0]:.1f} at the start and {r['load'][1]:.1f} at the end"
                      for r in ran)
    sentences = [
        f"{machine_line(load, f' with {threads} threads')}" + (f" (per run: {loads})." if loads else "."),
        f"Model directories: the packaged `dexml` recipe (bag encoder), one epoch on {args.queries:,} synthetic "
        f"queries of {QUERY_WORDS} random words, L label texts of {LABEL_WORDS} (the data of "
        "`bench_unidec_step`), no validation, `ranker=null`, `index.kind=exact` or `hnsw` (M = "
        f"{args.M}, ef_construction = {args.ef_construction}, built on {args.build_threads} threads); "
        f"overrides: {' '.join(args.set) or 'none'}. build s: data, tokenizer, one epoch, the label vectors, the "
        "index and writing the directory; peak memory "
        + ", ".join(f"{r['peak_mb']:,.0f} MB at L = {r['labels']:,}" for r in ran) + ".",
        f"Each L in a process of its own; {args.runs} rounds, medians: a round is {args.calls} calls "
        f"`Predictor.predict([text], k={args.k})` (p50, p95), the encoder alone (`embed_texts([text])`) and the "
        f"index's search alone for the same texts (p50), one call of {args.batch:,} texts, and a numpy copy of "
        f"100 MB (median of 5). Query texts: {args.texts:,} new random texts of the same words; recall@{args.k}: "
        "the index's top k against an exact search of the same label vectors for those texts.",
        f"Goals: one text p50 ≤ {GOAL_ONE_TEXT_MS:g} ms (exact search at 10^5 labels, HNSW at 10^6); batched "
        f"≥ {GOAL_BATCH_TEXTS_PER_S:,.0f} texts/s with the network alone on 2 cores.",
    ]
    return "\n".join([SECTION, "", f"`{command}`", "", *sentences, "", *table(records, args.k)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exact", type=int, nargs="*", default=[100_000], help="label counts with an exact index")
    parser.add_argument("--hnsw", type=int, nargs="*", default=[1_000_000], help="label counts with an HNSW index")
    parser.add_argument("--queries", type=int, default=20_000, help="training queries")
    parser.add_argument("--texts", type=int, default=2_000, help="query texts predicted")
    parser.add_argument("--calls", type=int, default=300, help="single-text calls per round")
    parser.add_argument("--runs", type=int, default=5, help="rounds")
    parser.add_argument("--batch", type=int, default=2_000, help="texts of the batched call")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--M", type=int, default=16, help="HNSW links per node")
    parser.add_argument("--ef-construction", type=int, default=32, help="HNSW candidate list while building")
    parser.add_argument("--ef-search", type=int, nargs="+", default=[64, 128, 256],
                        help="HNSW candidate lists while searching (the model directory keeps the first)")
    parser.add_argument("--build-threads", type=int, default=2, help="threads building the HNSW graph")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    parser.add_argument("--models", type=Path, help="keep the model directories here and reuse them")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be positive, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.one:
        write_result(args.result, measure(json.loads(args.one), args.models))
        return 0
    sizes = [*args.exact, *args.hnsw]
    if not sizes:
        parser.error("give at least one label count (--exact or --hnsw)")
    positive = [*sizes, args.queries, args.texts, args.calls, args.runs, args.batch, args.k, args.build_threads]
    if min(positive) < 1 or min(args.ef_search) < 1 or args.M < 2 or args.ef_construction < 2:
        parser.error("label counts, queries, texts, calls, runs, batch, k, threads and ef_search must be positive; "
                     "M and ef_construction at least 2")
    if min(sizes) < args.k:
        parser.error(f"every label count must be at least k = {args.k}")
    from xdex.index import build_index
    from xdex.methods.recipe import load_recipe

    for kind in ("exact", "hnsw"):  # a bad override stops here, before any model is built
        try:
            index = dict(load_recipe("dexml", overrides=recipe_overrides(
                kind, args.M, args.ef_construction, args.ef_search[0], args.build_threads, args.set)).index)
            build_index(index.pop("kind"), 8, "ip", **index)
        except (TypeError, ValueError) as e:  # xdex.config.ConfigError is a ValueError
            parser.error(f"--set: {e}")
    load = load_average()
    records = []
    for kind, counts in (("exact", args.exact), ("hnsw", args.hnsw)):
        for n_labels in counts:
            overrides = recipe_overrides(kind, args.M, args.ef_construction, args.ef_search[0], args.build_threads,
                                         args.set)
            job = {"labels": n_labels, "kind": kind, "queries": args.queries, "texts": args.texts,
                   "calls": args.calls, "runs": args.runs, "batch": args.batch, "k": args.k, "seed": args.seed,
                   "ef_search": args.ef_search, "overrides": overrides}
            records.append(run_job(job, args))
    publish(report(command_line(MODULE, argv), records, args, [load]), args.update_docs)
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

"""UniDEC's training step time against the number of labels L, on synthetic data (UniDEC Sec. 3.1).

    python -m benchmarks.bench_unidec_step [--labels 10000 100000 1000000] [--queries 20000] [--steps 50]
        [--warmup 3] [--threads N] [--seed 0] [--set key=value ...] [--update-docs]

A batch's label pool L_B is the union of β sampled positives and η hard negatives of each of its B
queries, so |L_B| ≤ B·(β + η) whatever L is, and the cost of a training step (encoder over B queries
and |L_B| labels, both heads, sparse updates of the |L_B| rows of Ψ) follows |L_B|, not L.
What does grow with L is set apart: the setup (tokenising the labels, Ψ ← Φ_C(z) over every label) and
the refresh (embedding every label, exact search for the hard-negative shortlists).

Each L runs in a Python process of its own, so its peak memory is its own. The packaged CPU recipe
`unidec` (with the --set overrides) is built as ``xdex train`` builds it; one refresh puts hard
negatives in the pools, then --warmup untimed and --steps timed steps (``Trainer.step``: forward,
backward, optimiser and schedule steps) go through that refresh's batches.

Synthetic data, from --seed alone (vectorised numpy: about 1 s for L = 10^6): a vocabulary of 20,000
random 6-letter words; N queries of 8 and L labels of 4 words drawn uniformly from it; each query
draws 1 to 5 label ids (duplicates merged), log-uniformly over 0..L-1: P(l) = log((l + 2)/(l + 1)) /
log(L + 1), a Zipf law of exponent 1, so a few labels are popular and most have no query. The queries
do not depend on L. The tokenizer (WordPiece vocabulary and IDF weights) is built on a seeded sample
of at most 100,000 of the texts: every text is made of the same words, and on 2 cores building it on
all 1,020,000 texts of L = 10^6 takes about 60 s against 7 s on the sample.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from benchmarks.harness import (
    DOCS,
    RunFailed,
    add_isolation_args,
    command_line,
    load_average,
    machine_line,
    peak_rss_mb,
    publish,
    repeat,
    run_isolated,
    step_trainer,
    synchronised_step,
    write_result,
)
from xdex.encoders.factory import build_encoder
from xdex.methods.pipeline import build_objective
from xdex.methods.recipe import load_recipe

log = logging.getLogger("bench_unidec_step")

MODULE = "benchmarks.bench_unidec_step"
SECTION = "## UniDEC step time against the number of labels"
VOCABULARY = 20_000
WORD_LETTERS = 6
QUERY_WORDS = 8
LABEL_WORDS = 4
MAX_POSITIVES = 5
TOKENIZER_SAMPLE = 100_000


# --- synthetic data ------------------------------------------------------------------------------------

def random_words(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random lower-case words as ASCII codes, ``[n, WORD_LETTERS]`` uint8."""
    return rng.integers(ord("a"), ord("z") + 1, size=(n, WORD_LETTERS), dtype=np.uint8)


def random_texts(words: np.ndarray, n: int, length: int, rng: np.random.Generator) -> list[str]:
    """``n`` texts of ``length`` words drawn uniformly from ``words`` (rows of ASCII codes), space-separated."""
    picked = words[rng.integers(0, len(words), size=(n, length))]  # [n, length, letters]
    spaced = np.concatenate([np.full((n, length, 1), ord(" "), np.uint8), picked], axis=2)
    chars = np.ascontiguousarray(spaced.reshape(n, -1)[:, 1:])  # drop the leading space
    return chars.view(f"S{chars.shape[1]}").ravel().astype(str).tolist()


def log_uniform_labels(n: int, n_labels: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` label ids ⌊(L + 1)^u⌋ − 1, u ~ U[0, 1): P(l) = log((l + 2)/(l + 1)) / log(L + 1), Zipf-like."""
    draws = np.floor((n_labels + 1.0) ** rng.random(n)).astype(np.int64) - 1
    return np.minimum(draws, n_labels - 1)  # (L + 1)^u may round up to L + 1 itself


def random_positives(n_queries: int, n_labels: int, rng: np.random.Generator) -> sp.csr_matrix:
    """1..MAX_POSITIVES log-uniform label draws per query, duplicates merged (binary rows)."""
    counts = rng.integers(1, MAX_POSITIVES + 1, size=n_queries)
    cols = log_uniform_labels(int(counts.sum()), n_labels, rng)
    rows = np.repeat(np.arange(n_queries), counts)
    y = sp.csr_matrix((np.ones(len(cols), np.float32), (rows, cols)), shape=(n_queries, n_labels))
    y.sum_duplicates()
    y.data[:] = 1.0
    return y


def synthetic_data(n_queries: int, n_labels: int, seed: int) -> tuple[list[str], list[str], sp.csr_matrix]:
    """Query texts, label texts and the query-label matrix (see the module docstring)."""
    words = random_words(VOCABULARY, np.random.default_rng([seed, 0]))
    queries = random_texts(words, n_queries, QUERY_WORDS, np.random.default_rng([seed, 1]))
    labels = random_texts(words, n_labels, LABEL_WORDS, np.random.default_rng([seed, 2]))
    return queries, labels, random_positives(n_queries, n_labels, np.random.default_rng([seed, 3]))


def tokenizer_sample(texts: list[str], seed: int) -> list[str]:
    """At most TOKENIZER_SAMPLE of ``texts``, drawn with ``seed``, in their order."""
    if len(texts) <= TOKENIZER_SAMPLE:
        return texts
    keep = np.sort(np.random.default_rng([seed, 4]).choice(len(texts), TOKENIZER_SAMPLE, replace=False))
    return [texts[i] for i in keep]


# --- one measurement, in its own process ---------------------------------------------------------

def measure(n_labels: int, n_queries: int, steps: int, warmup: int = 3, overrides: list[str] | None = None,
            seed: int = 0) -> dict:
    """Setup and refresh seconds, then the times and label pools of ``steps`` training steps.

    Returns step_ms (each timed step), pool_sizes and positives_in_pool (per timed step: |L_B| and
    Avg(|P_i^B|), UniDEC Table 6), pool_bound = B·(β + η), setup_s, refresh_s and peak_mb.
    """
    if n_labels < 1 or n_queries < 1 or steps < 1 or warmup < 0:
        raise ValueError("labels, queries and steps must be positive and warmup non-negative")
    start = time.perf_counter()
    config, objective = synthetic_objective(n_queries, n_labels, seed, overrides)
    # the model on its device; SparseAdam creates its O(L) states for Ψ at the first step
    trainer = step_trainer(objective, config.trainer, objective.steps_per_epoch() * config.trainer.epochs)
    setup_s = time.perf_counter() - start
    log.info("L = %d: setup %.1f s", n_labels, setup_s)

    start = time.perf_counter()
    objective.refresh(0)
    refresh_s = time.perf_counter() - start
    log.info("L = %d: refresh %.1f s", n_labels, refresh_s)

    items = objective.batches(config.sampling.first_refresh)  # the batches of the epoch of refresh 0
    timed = [items[s % len(items)] for s in range(warmup, warmup + steps)]
    torch.manual_seed(config.trainer.seed)
    cycle = itertools.cycle(items)
    step_ms = [1000.0 * s for s in repeat(lambda: synchronised_step(trainer, next(cycle)), steps, warmup)]
    batches = [objective.make_batch(item) for item in timed]  # the same pools: each depends on (seed, epoch, i)
    sampling = config.sampling
    return {
        "labels": n_labels,
        "queries": n_queries,
        "setup_s": setup_s,
        "refresh_s": refresh_s,
        "step_ms": step_ms,
        "pool_sizes": [len(b.label_ids) for b in batches],
        "positives_in_pool": [b.avg_positives_in_pool for b in batches],
        "pool_bound": sampling.batch_size * (sampling.beta + sampling.hard_negatives),
        "peak_mb": peak_rss_mb(),
    }


def synthetic_objective(n_queries: int, n_labels: int, seed: int, overrides: list[str]) -> tuple[Any, Any]:
    """The `unidec` recipe (with ``overrides``) and its untrained objective over :func:`synthetic_data`."""
    config = load_recipe("unidec", overrides=overrides)
    query_texts, label_texts, y = synthetic_data(n_queries, n_labels, seed)
    torch.manual_seed(config.trainer.seed)
    encoder_config = {k: v for k, v in config.encoder.items() if v is not None}
    encoder = build_encoder(encoder_config, tokenizer_sample(query_texts + label_texts, seed))
    queries, labels = encoder.tokenize(query_texts), encoder.tokenize(label_texts)
    _, objective = build_objective(config, encoder, queries, labels, y)
    return config, objective


def summary(record: dict) -> dict:
    """Medians and means of a measurement's per-step lists."""
    return {
        "step_ms_median": float(np.median(record["step_ms"])),
        "step_ms_mean": float(np.mean(record["step_ms"])),
        "avg_pool": float(np.mean(record["pool_sizes"])),
        "max_pool": int(np.max(record["pool_sizes"])),
        "avg_positives_in_pool": float(np.mean(record["positives_in_pool"])),
    }


# --- the driver ----------------------------------------------------------------------------------

def run_labels(job: dict, threads: int | None) -> dict:
    """``measure(**job)`` in a process of its own with ``threads`` torch threads; its record, or its failure."""
    log.info("L = %d in its own process", job["n_labels"])
    try:
        return run_isolated(MODULE, job, args=[] if threads is None else ["--threads", str(threads)])
    except RunFailed as failure:
        return {"labels": job["n_labels"], "error": str(failure)}


def table(records: list[dict]) -> list[str]:
    header = ("| labels L | setup s | refresh s | step ms, median | step ms, mean | avg pool size | max pool size "
              "| avg positives in pool | peak MB |")
    lines = [header, "|---:" * 9 + "|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['labels']:,} | failed ({r['error']}) |" + " |" * 7)
            continue
        s = summary(r)
        cells = [f"{r['labels']:,}", f"{r['setup_s']:.1f}", f"{r['refresh_s']:.1f}", f"{s['step_ms_median']:.1f}",
                 f"{s['step_ms_mean']:.1f}", f"{s['avg_pool']:.0f}", f"{s['max_pool']}",
                 f"{s['avg_positives_in_pool']:.2f}", f"{r['peak_mb']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(command: str, records: list[dict], load: float, threads: int, args: argparse.Namespace) -> str:
    sampling = load_recipe("unidec", overrides=args.set).sampling
    b, beta, eta = sampling.batch_size, sampling.beta, sampling.hard_negatives
    sentences = [
        f"{machine_line([load], f' with {threads} threads')}.",
        f"Synthetic data, seed {args.seed}: {args.queries:,} queries of {QUERY_WORDS} and L labels of {LABEL_WORDS} "
        f"words drawn from {VOCABULARY:,} random {WORD_LETTERS}-letter words; each query has 1 to {MAX_POSITIVES} "
        "positives drawn log-uniformly over the label ids (a Zipf law of exponent 1).",
        f"The packaged `unidec` recipe, overrides: {' '.join(args.set) or 'none'}; B = {b}, β = {beta}, η = {eta}, "
        f"so a label pool holds at most B·(β + η) = {b * (beta + eta):,} labels; it holds fewer when the queries "
        "of a batch share positives or hard negatives, which is more common when L is small.",
        f"Each L in a process of its own: one refresh, then {args.warmup} untimed and {args.steps} timed training "
        "steps (forward, backward, optimiser steps) on that refresh's batches.",
        f"setup s: data, tokenizer (WordPiece and IDF on at most {TOKENIZER_SAMPLE:,} of the texts), tokenising, "
        "the network and Ψ ← Φ_C(z) for every label; refresh s: query clusters, embedding every label and an exact "
        "search for the hard-negative shortlists; pool sizes and positives in pool (Avg(|P_i^B|)) over the timed "
        "steps; peak MB: peak resident memory of the run's process.",
    ]
    return "\n".join([SECTION, "", f"`{command}`", "", *sentences, "", *table(records)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="values of L")
    parser.add_argument("--queries", type=int, default=20_000, help="training queries N")
    parser.add_argument("--steps", type=int, default=50, help="timed training steps per L")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed training steps before them (the first creates the optimiser states)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be positive, got {args.threads}")
    if not args.one:
        if min(args.labels) < 1 or args.queries < 1 or args.steps < 1 or args.warmup < 0:
            parser.error("--labels, --queries and --steps must be positive and --warmup non-negative")
        try:
            load_recipe("unidec", overrides=args.set)
        except ValueError as error:
            parser.error(f"--set: {error}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.one:
        write_result(args.result, measure(**json.loads(args.one)))
        return 0
    load = load_average()
    records = [run_labels({"n_labels": n, "n_queries": args.queries, "steps": args.steps, "warmup": args.warmup,
                             "overrides": args.set, "seed": args.seed}, args.threads)
               for n in args.labels]
    command = command_line(MODULE, argv)
    section = report(command, records, load, torch.get_num_threads(), args)
    publish(section, args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

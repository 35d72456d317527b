"""DEXML-Full on CPU: peak memory and step time against L, naive against gradient cache, and a 10^6-label model.

    python -m benchmarks.bench_full_label [--labels 10000 100000 1000000] [--queries 20000] [--steps 3]
        [--naive-budget-mb 8000] [--model-labels 1000000] [--model-queries 2048] [--set key=value ...]
        [--update-docs]

A full-label step scores its B queries against all L labels (DEXML Sec. 4.2). Two ways of computing it:

* naive: the L label embeddings are computed with the graph, S = q Zᵀ and the engine loss over [B, L] are
  autograd's, one backward; the activations of all L labels are alive at once;
* gradient cache (``xdex.methods.full_label``): Z without a graph in chunks of η = ``sampling.label_chunk``,
  the loss and ∂ℓ/∂Z in blocks of rows, then each chunk re-encoded with the graph and back-propagated.

Each (L, way) runs in a Python process of its own, so its peak resident memory is its own. The naive way
runs at increasing L only while its estimated peak (the memory its steps added at the previous L, scaled
linearly in L) stays under --naive-budget-mb, so the machine is never pushed to swap. Then a model with
--model-labels labels is trained with the packaged `dexml-full` config (`xdex train`'s code path, one
epoch over --model-queries queries), saved, and loaded in another process that predicts a few texts; the
peak memory of both processes is reported. Synthetic data as in bench_unidec_step.py (random 6-letter
words; queries of 8, labels of 4 words; 1 to 5 Zipf-distributed positives per query).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_unidec_step import synthetic_data, tokenizer_sample
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
    rss_mb,
    run_isolated,
    step_trainer,
    synchronised_step,
    timed,
    write_result,
)
from xdex.data.dataset import Catalogue, Dataset, Split
from xdex.encoders.factory import build_encoder
from xdex.methods.full_label import FullLabelObjective
from xdex.methods.pipeline import build_objective, train
from xdex.methods.recipe import load_recipe
from xdex.text.cache import CACHE_ENV

log = logging.getLogger("bench_full_label")

MODULE = "benchmarks.bench_full_label"
SECTION = "## DEXML-Full: memory and step time against the number of labels"
FULL_CONFIG = Path(str(resources.files("xdex") / "configs" / "dexml-full.yaml"))
WAYS = ("gradient cache", "naive")
PREDICT_TEXTS = 8


class NaiveFullLabel(FullLabelObjective):
    """The reference computation: every label embedding with the graph, autograd over the [B, L] loss."""

    def loss(self, item: tuple[int, int, np.ndarray]) -> torch.Tensor:
        _, _, query_ids = item
        q = self.net(self.queries[query_ids])
        z = torch.cat([self.net(self.labels[np.arange(s, min(s + self.cfg.label_chunk, len(self.labels)))])
                       for s in range(0, len(self.labels), self.cfg.label_chunk)])
        positives = torch.from_numpy(self.y[query_ids].toarray() > 0)
        return self.loss_fn(q @ z.T, positives)


def measure_steps(way: str, n_labels: int, n_queries: int, steps: int, overrides: list[str], seed: int = 0) -> dict:
    """Setup seconds, then one untimed and ``steps`` timed training steps of ``way`` (as the trainer runs them)."""
    config = load_recipe("dexml", FULL_CONFIG, overrides)
    start = time.perf_counter()
    query_texts, label_texts, y = synthetic_data(n_queries, n_labels, seed)
    torch.manual_seed(config.trainer.seed)
    encoder = build_encoder({k: v for k, v in config.encoder.items() if v is not None},
                            tokenizer_sample(query_texts + label_texts, seed))
    queries, labels = encoder.tokenize(query_texts), encoder.tokenize(label_texts)
    del query_texts, label_texts
    _, objective = build_objective(config, encoder, queries, labels, y)
    if way == "naive":
        objective = NaiveFullLabel(objective.net, objective.loss_fn, queries, labels, y, config.sampling)
    trainer = step_trainer(objective, config.trainer, objective.steps_per_epoch())  # the model on its device
    setup_s = time.perf_counter() - start
    setup_mb = rss_mb()
    cycle, losses = itertools.cycle(objective.batches(0)), []

    def step() -> None:
        loss, seconds = timed(lambda: synchronised_step(trainer, next(cycle)))
        losses.append(loss)
        log.info("%s, L = %d: step %d in %.1f s", way, n_labels, len(losses) - 1, seconds)

    step_s = repeat(step, steps, warmup=1)
    return {"way": way, "labels": n_labels, "setup_s": setup_s, "step_s": step_s, "losses": losses,
            "setup_mb": setup_mb, "peak_mb": peak_rss_mb()}


def measure_model(step: str, n_labels: int, n_queries: int, folder: str, overrides: list[str], seed: int = 0) -> dict:
    """``train``: a model of ``n_labels`` labels with the `dexml-full` config written to ``folder``;
    ``predict``: that model loaded and asked for the top 10 labels of a few texts."""
    if step == "train":
        query_texts, label_texts, y = synthetic_data(n_queries, n_labels, seed)
        dataset = Dataset("synthetic", Split([f"q{i}" for i in range(n_queries)], query_texts, y),
                          Catalogue([f"l{i}" for i in range(n_labels)], label_texts))
        config = load_recipe("dexml", FULL_CONFIG, ["trainer.epochs=1", "data.validation_size=0",
                                                    "trainer.progress=false", *overrides])
        start = time.perf_counter()
        train(dataset, config, folder)
        steps = -(-n_queries // config.sampling.batch_size)
        return {"step": step, "seconds": time.perf_counter() - start, "steps": steps, "peak_mb": peak_rss_mb()}
    from xdex.inference.model import DualEncoderModel

    texts = synthetic_data(PREDICT_TEXTS, 1, seed + 1)[0]
    start = time.perf_counter()
    model = DualEncoderModel.load(folder)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    ranking = model.predict(texts, 10)
    return {"step": step, "load_s": load_s, "predict_s": time.perf_counter() - start,
            "found": int((ranking.indices >= 0).sum()), "peak_mb": peak_rss_mb()}


def run_job(job: dict) -> dict:
    """``job`` in a process of its own with one torch thread and a token cache of its own; its record, or
    its failure."""
    with tempfile.TemporaryDirectory(prefix="bench-full-label-") as tmp:
        try:
            return run_isolated(MODULE, job, env={CACHE_ENV: str(Path(tmp) / "cache"), "OMP_NUM_THREADS": "1"})
        except RunFailed as failure:
            return job | {"error": str(failure)}


def run_steps(args: argparse.Namespace) -> list[dict]:
    """The gradient cache at every L, then the naive way while :func:`naive_estimate_mb` fits the budget."""
    records, cached = [], {}
    for way in WAYS:
        previous = None
        for n in sorted(args.labels):
            expected = naive_estimate_mb(previous, cached.get(n), n) if way == "naive" else None
            if expected is not None and expected > args.naive_budget_mb:
                records.append({"way": way, "labels": n, "skipped": expected})
                continue
            record = run_job({"kind": "steps", "way": way, "n_labels": n, "n_queries": args.queries,
                                   "steps": args.steps, "overrides": args.set})
            records.append(record)
            if "error" not in record:
                previous = record
                if way == WAYS[0]:
                    cached[n] = record
    return records


def naive_estimate_mb(previous: dict | None, cached: dict | None, n: int) -> float | None:
    """The naive way's peak at L = n: the memory its steps added at the L before (peak minus resident memory
    after the setup), scaled linearly in L, plus the setup memory at n (measured by the gradient-cache run)."""
    if previous is None or cached is None:
        return None
    return cached["setup_mb"] + (previous["peak_mb"] - previous["setup_mb"]) * n / previous["labels"]


def steps_table(records: list[dict]) -> list[str]:
    lines = ["| labels L | way | setup s | step s, median | step s, min | peak MB |", "|---:|---|---:|---:|---:|---:|"]
    for r in sorted(records, key=lambda r: (r["labels"], r["way"])):
        if "skipped" in r:
            lines.append(f"| {r['labels']:,} | {r['way']} | not run: about {r['skipped']:,.0f} MB estimated | | | |")
        elif "error" in r:
            lines.append(f"| {r['labels']:,} | {r['way']} | failed ({r['error']}) | | | |")
        else:
            lines.append(f"| {r['labels']:,} | {r['way']} | {r['setup_s']:.1f} | {np.median(r['step_s']):.2f} "
                         f"| {np.min(r['step_s']):.2f} | {r['peak_mb']:,.0f} |")
    return lines


def model_lines(train_record: dict, predict_record: dict, args: argparse.Namespace) -> list[str]:
    if "error" in train_record or "error" in predict_record:
        return [f"The {args.model_labels:,}-label model run failed: {train_record.get('error')}, "
                f"{predict_record.get('error')}."]
    return [
        f"A model with L = {args.model_labels:,} labels, trained with the packaged `dexml-full` config for one epoch "
        f"of {args.model_queries:,} queries ({train_record['steps']} full-label steps), every step over all L labels: "
        f"{train_record['seconds']:.0f} s from the texts to the saved model (tokenizer on all texts, training, label "
        f"embeddings, exact index, model directory), peak {train_record['peak_mb']:,.0f} MB. In a new process the "
        f"model directory loads in {predict_record['load_s']:.1f} s with `label_embeddings.npy` and the exact "
        f"index's vectors memory-mapped, and predicts the top 10 labels of {PREDICT_TEXTS} texts in "
        f"{predict_record['predict_s']:.2f} s (the exact index reads the mapped matrix block by block); peak "
        f"{predict_record['peak_mb']:,.0f} MB.",
    ]


def report(command: str, steps: list[dict], model: tuple[dict, dict] | None, load: float,
           args: argparse.Namespace) -> str:
    config = load_recipe("dexml", FULL_CONFIG, args.set)
    s = config.sampling
    sentences = [
        f"{machine_line([load], ' with 1 thread')}.",
        f"The packaged `dexml-full` config (bag-of-embeddings encoder, d = {config.encoder['dim']}, "
        f"{config.loss['name']} loss), overrides: {' '.join(args.set) or 'none'}; B = {s.batch_size} queries, "
        f"label chunk η = {s.label_chunk}. Synthetic data as in benchmarks.bench_unidec_step: "
        f"{args.queries:,} queries of 8 "
        "and L labels of 4 random words.",
        f"Each (L, way) in a process of its own: setup (data, tokenizer, network), then 1 untimed and {args.steps} "
        "timed training steps (forward, backward, optimiser steps); peak MB: peak resident memory of the process. "
        "The naive way is not run where its estimated peak exceeds "
        f"{args.naive_budget_mb:,.0f} MB: the memory its steps added at the L before (peak minus resident memory "
        "after setup), scaled linearly in L, plus the setup memory at the new L.",
    ]
    lines = [SECTION, "", f"`{command}`", "", *sentences, "", *steps_table(steps)]
    if model is not None:
        lines += ["", *model_lines(*model, args)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="values of L")
    parser.add_argument("--queries", type=int, default=20_000, help="training queries of the step measurements")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per (L, way)")
    parser.add_argument("--naive-budget-mb", type=float, default=8000, help="memory the naive way may need")
    parser.add_argument("--model-labels", type=int, default=1_000_000, help="labels of the trained model (0: none)")
    parser.add_argument("--model-queries", type=int, default=2048, help="training queries of that model")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    torch.set_num_threads(1)
    if args.one:
        job = json.loads(args.one)
        kind = job.pop("kind")
        record = measure_steps(**job) if kind == "steps" else measure_model(**job)
        write_result(args.result, record)
        return 0
    if min(args.labels) < 1 or args.queries < 1 or args.steps < 1:
        parser.error("--labels, --queries and --steps must be positive")
    load_recipe("dexml", FULL_CONFIG, args.set)  # a bad --set stops here, before any run
    load = load_average()
    steps = run_steps(args)
    model = None
    if args.model_labels:
        with tempfile.TemporaryDirectory(prefix="bench-full-label-model-") as tmp:
            folder = str(Path(tmp) / "model")
            common = {"n_labels": args.model_labels, "n_queries": args.model_queries, "folder": folder,
                      "overrides": args.set}
            model = (run_job({"kind": "model", "step": "train", **common}),
                     run_job({"kind": "model", "step": "predict", **common}))
    command = command_line(MODULE, argv)
    publish(report(command, steps, model, load, args), args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

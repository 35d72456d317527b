"""What the ranking stage costs at prediction: `xdex.Predictor` latency for one text and throughput in batches,
the model's network alone (`dense`) against the ranking stage (`fused`) and its lexical channel alone.

    python -m benchmarks.bench_ranker MODEL_DIR --data DIR|demo [--calls 300] [--batch 2000] [--runs 5] [--k 10]
        [--lexical-beams 0 10] [--predictor-batch-sizes 1024 4096] [--update-docs]

MODEL_DIR: a model trained with the ranking stage (every packaged recipe has it), e.g.
`xdex train --method dexml --data demo --out /tmp/dexml-demo`. Texts: the dataset's test split, taken in turn.
Each mode is timed in every run, the modes interleaved, so that a busy machine slows them alike; reported are the
medians over the runs of the p50 single-text latency (``--calls`` calls a run) and of the texts per second of one
``--batch``-text call, and the ratio against `dense` measured in the same runs. ``--lexical-beams``: the fused
ranking also with the lexical shortlist searched at each of these beam widths (``ranker.lexical_beam``; 0: as wide as
the shortlist), interleaved with the other modes. ``--predictor-batch-sizes``: the dense and fused rankings also
through predictors that split a call's texts into batches of each of these sizes (``Predictor(batch_size=N)``; the
others use its default), interleaved likewise.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import Goal, command_line, goals_line, load_average, machine_line, median, publish

log = logging.getLogger("bench_ranker")
MODULE = "benchmarks.bench_ranker"
SECTION = "## Ranking stage: prediction cost"
MODES = ("dense", "fused", "lexical")
GOAL_FUSED_ONE_TEXT_MS = 1.5  # one text through the ranking stage, p50
GOAL_STAGE_ADDS_MS = 0.5  # what the stage adds to one text, at most
GOAL_FUSED_TEXTS_PER_S = 5_000.0  # batched, the ranking stage on, 2 cores
GOAL_DENSE_TEXTS_PER_S = 20_000.0  # batched, the network's embedding search alone, 2 cores


def single_text_ms(predictor, texts: list[str], calls: int, k: int) -> float:
    """The p50 latency in ms of ``predictor.predict([text], k)`` over ``calls`` texts."""
    times = []
    for i in range(calls):
        start = time.perf_counter()
        predictor.predict([texts[i % len(texts)]], k)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def batch_texts_per_s(predictor, texts: list[str], batch: int, k: int) -> float:
    chunk = [texts[i % len(texts)] for i in range(batch)]
    start = time.perf_counter()
    predictor.predict(chunk, k)
    return batch / (time.perf_counter() - start)


def ranking_goals(dense_ms: float, fused_ms: float, dense_tps: float, fused_tps: float) -> list[Goal]:
    """The prediction goals against one run's medians: one fused text, what the stage adds to it, and batches fused
    and through the network alone."""
    return [
        (f"one text fused ≤ {GOAL_FUSED_ONE_TEXT_MS:g} ms", f"{fused_ms:.2f} ms", fused_ms <= GOAL_FUSED_ONE_TEXT_MS),
        (f"the stage adds ≤ {GOAL_STAGE_ADDS_MS:g} ms", f"{fused_ms - dense_ms:+.2f} ms",
         fused_ms - dense_ms <= GOAL_STAGE_ADDS_MS),
        (f"fused batches ≥ {GOAL_FUSED_TEXTS_PER_S:,.0f} texts/s", f"{fused_tps:,.0f}",
         fused_tps >= GOAL_FUSED_TEXTS_PER_S),
        (f"dense batches ≥ {GOAL_DENSE_TEXTS_PER_S:,.0f} texts/s", f"{dense_tps:,.0f}",
         dense_tps >= GOAL_DENSE_TEXTS_PER_S),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--data", required=True, help="dataset folder (or demo) whose test texts are predicted")
    parser.add_argument("--calls", type=int, default=300, help="single-text calls per mode and run")
    parser.add_argument("--batch", type=int, default=2000, help="texts of the batched call")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--lexical-beams", type=int, nargs="*", default=[], help="fused with these lexical beams too")
    parser.add_argument("--predictor-batch-sizes", type=int, nargs="*", default=[],
                        help="dense and fused also through predictors with these batch sizes")
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)

    from xdex.data import load
    from xdex.inference.predictor import Predictor

    texts = list(load(args.data).test.texts)
    start_load = load_average()
    predictors = {mode: Predictor(args.model_dir, search=mode, read_only=True) for mode in MODES}
    for beam in args.lexical_beams:
        predictors[f"fused, lexical beam {beam}"] = predictor = Predictor(args.model_dir, read_only=True)
        predictor.model.ranker.lexical_beam = beam  # this predictor's own model
    for size in args.predictor_batch_sizes:
        for mode in ("dense", "fused"):
            predictors[f"{mode}, batches of {size}"] = Predictor(args.model_dir, batch_size=size, search=mode,
                                                                 read_only=True)
    modes = list(predictors)
    for predictor in predictors.values():  # warm-up: first calls build thread pools and caches
        predictor.predict(texts[:64], args.k)
    latency: dict[str, list[float]] = {mode: [] for mode in modes}
    throughput: dict[str, list[float]] = {mode: [] for mode in modes}
    for run in range(args.runs):
        for mode in modes:
            latency[mode].append(single_text_ms(predictors[mode], texts, args.calls, args.k))
            throughput[mode].append(batch_texts_per_s(predictors[mode], texts, args.batch, args.k))
        log.info("run %d: %s", run + 1, ", ".join(f"{m} {latency[m][-1]:.2f} ms, {throughput[m][-1]:.0f}/s"
                                                 for m in modes))
    lines = [SECTION, "", f"`{command_line(MODULE, argv)}`", "",
             f"{machine_line([start_load, load_average()])}; {args.runs} runs, medians; k = {args.k}; "
             f"one text: p50 of {args.calls} calls of `Predictor.predict([text])`; batch: one call of "
             f"{args.batch} texts.", "",
             "| mode | one text, p50 ms | added to dense, ms | batch, texts/s | ratio to dense |",
             "|---|---:|---:|---:|---:|"]
    dense_ms, dense_tps = median(latency["dense"]), median(throughput["dense"])
    for mode in modes:
        ms, tps = median(latency[mode]), median(throughput[mode])
        lines.append(f"| {mode} | {ms:.2f} | {ms - dense_ms:+.2f} | {tps:,.0f} | {tps / dense_tps:.2f} |")
    lines += ["", goals_line(ranking_goals(dense_ms, median(latency["fused"]), dense_tps, median(throughput["fused"])))]
    publish("\n".join(lines) + "\n", args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

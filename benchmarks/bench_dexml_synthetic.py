"""DEXML's synthetic checks on CPU: the decoupled-softmax task (Fig. 2) and random-pair memorisation (Table 10).

    python -m benchmarks.bench_dexml_synthetic decoupled [--set key=value ...] [--update-docs]
    python -m benchmarks.bench_dexml_synthetic memorisation --n 100000 [--set key=value ...] [--update-docs]

Both train the `dexml` recipe (bag-of-embeddings encoder, CPU defaults unless --set says otherwise) on a
dataset from :mod:`xdex.data.synthetic` and report test P@1. `decoupled` trains twice, with the
DecoupledSoftmax loss and with the standard softmax, on the same batches.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

from benchmarks.harness import command_line, load_average, machine_line, peak_rss_mb, timed, update_section
from xdex.data.synthetic import decoupled_softmax_task, memorisation_task
from xdex.encoders.factory import build_encoder
from xdex.methods.pipeline import train
from xdex.methods.recipe import load_recipe
from xdex.metrics import compute_metrics

log = logging.getLogger("bench_dexml_synthetic")
MODULE = "benchmarks.bench_dexml_synthetic"
TASKS = {"decoupled": "decoupled softmax (Fig. 2)", "memorisation": "memorisation (Table 10)"}


def section_title(task: str, encoder: str) -> str:
    return f"## DEXML synthetic check: {TASKS[task]}, {encoder} encoder"


def run(dataset, overrides: list[str]) -> dict:
    cfg = load_recipe("dexml", overrides=overrides)
    log.info("encoder %s", cfg.encoder)
    cfg.trainer.progress = False
    with tempfile.TemporaryDirectory(prefix="xdex-bench-") as tmp:
        model, seconds = timed(lambda: train(dataset, cfg, os.path.join(tmp, "model")))
        ranking = model.predict(dataset.test.texts, 5)
    metrics = compute_metrics(ranking, dataset.test.labels, ks=(1, 5))
    return {"P@1": metrics["P@1"], "P@5": metrics["P@5"], "train s": seconds}


def check_trigger_kept(dataset, overrides: list[str]) -> None:
    """Stop before training when the encoder's max_length would cut the trigger off label 0's text (it is
    the last word, and random words split into many word pieces): the task would then be unlearnable."""
    cfg = load_recipe("dexml", overrides=overrides)
    encoder = build_encoder({k: v for k, v in cfg.encoder.items() if v is not None},
                            dataset.train.texts + dataset.labels.texts)
    full = len(encoder.tokenizer.tokenize([dataset.labels.texts[0]], 10**6, encoder.special_tokens).ids)
    if full > encoder.max_length:
        raise SystemExit(f"label 0 is {full} tokens long but encoder.max_length is {encoder.max_length}: its trigger "
                         f"would be cut off; use --set encoder.max_length={full} or more")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["decoupled", "memorisation"])
    parser.add_argument("--n", type=int, default=100_000, help="pairs of the memorisation task")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override key=value")
    parser.add_argument("--update-docs", action="store_true", help="write the task's section of docs/benchmarks.md")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    load = load_average()
    encoder = load_recipe("dexml", overrides=args.overrides).encoder["type"]
    title_line = section_title(args.task, encoder)
    if args.task == "decoupled":
        dataset = decoupled_softmax_task()
        check_trigger_kept(dataset, args.overrides)
        base = ["data.validation_size=0", *args.overrides]
        rows = {loss: run(dataset, [f"loss.name={loss}", *base]) for loss in ("decoupled_softmax", "softmax")}
        title = "1,000 training queries, 5,000 labels; 1,000 test queries with the trigger token, label 0 only"
    else:
        dataset = memorisation_task(n=args.n)
        rows = {"dexml": run(dataset, ["data.validation_size=0", *args.overrides])}
        title = f"{args.n:,} random 16-token query/label pairs; P@1 on the pairs themselves"
    peak_mb = peak_rss_mb()
    lines = ["| run | P@1 | P@5 | train s |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {r['P@1']:.2f} | {r['P@5']:.2f} | {r['train s']:.0f} |" for name, r in rows.items()]
    table = "\n".join(lines)
    print(f"{title}\n{table}\npeak memory {peak_mb:.0f} MB")
    if args.update_docs:
        command = command_line(MODULE, argv)
        section = "\n".join([
            title_line, "", title, "",
            f"`{command}` on {machine_line([load])}; peak memory {peak_mb:.0f} MB.", "", table, "",
        ])
        update_section(title_line, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

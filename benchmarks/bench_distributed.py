"""Training throughput with 1 and 2 processes (torchrun, gloo on CPU) against 1 process with 1 and 2 threads.

    python -m benchmarks.bench_distributed [--data DIR] [--methods ngame unidec]
        [--epochs 3] [--update-docs]

Each setting trains the packaged CPU recipe (``--set``-style overrides below) on the dataset's training
split for --epochs epochs under ``torchrun --standalone`` and reports the training queries per second of
the epochs after the first (the first pays for warm-up and allocations); --data defaults to foldoc-links
under $XDEX_DATA_ROOT, else under ../shared/data beside the repository. No refresh runs in the timed
epochs (``sampling.first_refresh`` is past the last epoch) and nothing is validated, so the figure is
the training steps alone: forward, backward, gradient averaging (DDP over gloo) and optimiser steps.
The global batch is the recipe's in every setting, so each of 2 ranks encodes half of every batch.

Settings: 1 process x 1 thread, 1 process x 2 threads (torch intra-op threads) and 2 processes x 1
thread (``OMP_NUM_THREADS=1``). On a 2-core machine the last two use the same two cores; what 2 ranks
can show here is the overhead of the collectives against the parallel work, not multi-GPU scaling.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.harness import (
    DOCS,
    command_line,
    data_root,
    load_average,
    machine_line,
    median,
    publish,
    python_env,
    speedup,
)
from xdex.data import load
from xdex.encoders.factory import build_encoder
from xdex.methods.pipeline import build_objective
from xdex.methods.recipe import load_recipe
from xdex.methods.run import split_validation
from xdex.train import Trainer
from xdex.train import distributed as dist

log = logging.getLogger("bench_distributed")

MODULE = "benchmarks.bench_distributed"
SECTION = "## Distributed training: 1 vs 2 processes"
SETTINGS = ((1, 1), (1, 2), (2, 1))  # (processes, threads per process)


def worker(args: argparse.Namespace) -> None:
    """One setting, as launched by torchrun: train and let rank 0 write the epoch times as JSON."""
    torch.set_num_threads(args.threads)
    dist.init_from_env()
    dataset = load(args.data)
    overrides = [f"trainer.epochs={args.epochs}", f"sampling.first_refresh={args.epochs + 1}",
                 "trainer.progress=false", "data.validation_size=0"]
    cfg = load_recipe(args.method, overrides=overrides)
    rows, _ = split_validation(dataset.train, 0, cfg.trainer.seed)
    query_texts = [dataset.train.texts[i] for i in rows]
    label_texts = list(dataset.labels.texts)
    encoder = build_encoder({k: v for k, v in cfg.encoder.items() if v is not None}, query_texts + label_texts)
    cache = encoder.token_cache()
    with dist.main_first():
        queries, labels = cache.get(query_texts), cache.get(label_texts)
    _, objective = build_objective(cfg, encoder, queries, labels, dataset.train.labels[rows])
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        history = Trainer(objective, cfg.trainer, tmp).fit()
    if dist.is_main():
        seconds = [h["seconds"] for h in history[1:]]
        result = {"queries": len(rows), "steps": objective.steps_per_epoch(), "seconds": seconds}
        Path(args.json).write_text(json.dumps(result))
    dist.shutdown()


def measure(data: str, method: str, processes: int, threads: int, epochs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
               "-m", MODULE, "--worker", "--data", data, "--method", method, "--epochs", str(epochs),
               "--threads", str(threads), "--json", str(out)]
        subprocess.run(cmd, check=True, env=python_env({"OMP_NUM_THREADS": str(threads)}), stdout=subprocess.DEVNULL)
        return {**json.loads(out.read_text()), "load": load_average()}


def section(data: str, epochs: int, results: dict[tuple[str, int, int], dict]) -> str:
    lines = [
        SECTION,
        "",
        f"`{command_line(MODULE, ['--epochs', str(epochs)])}` on `{Path(data).name}` "
        f"({machine_line(torch_note=', gloo')}). "
        "Training queries per second over the epochs after the first, the packaged CPU recipe, "
        "no refresh and no validation in the timed epochs; the global batch is the same in every row. "
        "The last column is the machine's 1-minute load average after the setting ran: other work on the "
        "machine at the same time slows a row down.",
        "",
        "| recipe | processes x threads | steps / epoch | s / epoch | queries / s | vs 1 x 1 | load |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (method, processes, threads), r in results.items():
        per_epoch = median(r["seconds"])
        versus = speedup(results[method, 1, 1]["seconds"], r["seconds"])
        lines.append(f"| {method} | {processes} x {threads} | {r['steps']} | {per_epoch:.2f} | "
                     f"{r['queries'] / per_epoch:,.0f} | {versus:.2f}x | {r['load']:.1f} |")
    lines += [
        "",
        "Two ranks on two cores only share the machine one process with two threads already uses, and pay "
        "for the all-gathers of the embeddings and the gradient all-reduce (the sparse embedding table's "
        "gradient goes through gloo as indices and values) on every step. What this measures is that "
        "overhead; the figure that matters on GPUs, where each rank has a device of its own, cannot be "
        "measured here.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(data_root() / "foldoc-links"), help="dataset folder")
    parser.add_argument("--methods", nargs="+", default=["ngame", "unidec"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    if args.worker:
        worker(args)
        return 0
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch is not timed")
    results = {}
    for method in args.methods:
        for processes, threads in SETTINGS:
            results[method, processes, threads] = measure(args.data, method, processes, threads, args.epochs)
            log.info("%s %d x %d: %s", method, processes, threads, results[method, processes, threads])
    publish(section(args.data, args.epochs, results), args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training steps over large label pools: the sparse tables' path of training against the one before it, in one process.

    python -m benchmarks.bench_sparse_steps [--documents 100000] [--rounds 6] [--steps 15] [--warmup 3] [--epoch]
        [--threads 1] [--set key=value ...]

The packaged `unidec` recipe (with the --set overrides) on ``xdex.data.synthetic.memorisation_task(n=--documents)``
(n documents and n labels of 16 random words), built as ``xdex train`` builds it; one refresh puts η = 3 hard
negatives per query in the label pools (~975 labels a batch of 256 at 100,000), then --rounds rounds of --steps
``Trainer.step`` calls with each of three computations in turn (the order reversed every other round, so that
a drift of the machine's load falls on all of them alike):

* ``before``: a pass of the bag over the batch's queries and another over its labels, each summed by the token
  table itself (``nn.EmbeddingBag`` over the token ids, whose sparse gradient has one row per token occurrence),
  and ``torch.optim.SparseAdam``;
* ``distinct``: the same two passes over each one's distinct tokens (``BagOfEmbeddings``' training path: one
  gradient row per distinct token), and ``torch.optim.SparseAdam``;
* ``now``: one pass over the queries and labels together (``xdex.train.distributed.encode_together``), its
  distinct tokens, and :class:`xdex.train.sparse_adam.RowSparseAdam`: what training runs.

All three train the same model on the same batches in turn (the dense AdamW is shared; each sparse optimiser
keeps its own moments). Each step is timed whole and in parts: the forward pass (the loss), the optimiser steps,
and the rest (backward pass, clipping, schedules). --epoch: then one full epoch of the refresh's batches with
``before`` and one with ``now``. --threads: torch threads during the steps (training runs a bag encoder's steps
on one, ``xdex.train.threads``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from benchmarks.harness import command_line, load_average, machine_line, step_trainer
from xdex.data.synthetic import memorisation_task
from xdex.encoders.bag import BagOfEmbeddings
from xdex.encoders.factory import build_encoder
from xdex.methods.pipeline import build_objective, trainer_settings
from xdex.methods.recipe import load_recipe
from xdex.train.sparse_adam import RowSparseAdam

log = logging.getLogger("bench_sparse_steps")

MODES = ("before", "distinct", "now")
PARTS = ("step", "forward", "optimiser", "rest")


def per_occurrence_bag(self: BagOfEmbeddings, ids: torch.Tensor, offsets: torch.Tensor) -> tuple[Any, Any]:
    """The bag as the token table sums it itself (the computation before): one gradient row per token occurrence."""
    weights = self.token_weights(ids)
    return self.embedding(ids, offsets, per_sample_weights=weights), weights


class Setup:
    """The recipe's trainer after one refresh, and a switch between the three computations."""

    def __init__(self, documents: int, overrides: list[str]):
        start = time.perf_counter()
        config = load_recipe("unidec", overrides=overrides)
        data = memorisation_task(n=documents)
        torch.manual_seed(config.trainer.seed)
        settings = {k: v for k, v in config.encoder.items() if v is not None}
        encoder = build_encoder(settings, data.train.texts + data.labels.texts, data.train.texts)
        if not isinstance(encoder, BagOfEmbeddings) or not encoder.sparse:
            raise ValueError("the recipe's encoder must be a bag of embeddings with a sparse table")
        queries, labels = encoder.tokenize(data.train.texts), encoder.tokenize(data.labels.texts)
        _, self.objective = build_objective(config, encoder, queries, labels, data.train.labels)
        cfg = trainer_settings(config)
        self.trainer = step_trainer(self.objective, cfg, self.objective.steps_per_epoch() * cfg.epochs)
        self.setup_s = time.perf_counter() - start
        start = time.perf_counter()
        self.objective.refresh(0)
        self.refresh_s = time.perf_counter() - start
        self.items = self.objective.batches(config.sampling.first_refresh)
        dense = [o for o in self.trainer.optimizers if not isinstance(o, torch.optim.SparseAdam)]
        ours = [o for o in self.trainer.optimizers if isinstance(o, RowSparseAdam)]
        if len(ours) != 1:
            raise ValueError("the recipe's network has no sparse table trained by RowSparseAdam")
        torchs = torch.optim.SparseAdam(ours[0].param_groups)  # the same groups: the schedule sets both rates
        self.optimizers = {"before": [*dense, torchs], "distinct": [*dense, torchs], "now": [*dense, ours[0]]}
        self.times: dict[str, float] = {}
        self._started = 0.0
        for opt in {id(o): o for group in self.optimizers.values() for o in group}.values():
            opt.register_step_pre_hook(self._start_optimiser)
            opt.register_step_post_hook(self._end_optimiser)
        self.objective.loss = self._timed(self.objective.loss, "forward")  # type: ignore[method-assign]

    def _start_optimiser(self, *args: Any) -> None:
        self._started = time.perf_counter()

    def _end_optimiser(self, *args: Any) -> None:
        self.times["optimiser"] = self.times.get("optimiser", 0.0) + time.perf_counter() - self._started

    def _timed(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.times[part] = self.times.get(part, 0.0) + time.perf_counter() - start
        return timed

    @contextlib.contextmanager
    def mode(self, mode: str) -> Iterator[None]:
        """Steps with the computation ``mode`` (one of MODES)."""
        saved = BagOfEmbeddings._distinct_bag, BagOfEmbeddings.joint_pass
        if mode == "before":
            BagOfEmbeddings._distinct_bag = per_occurrence_bag  # type: ignore[method-assign]
        if mode != "now":
            BagOfEmbeddings.joint_pass = False  # a pass for the queries and another for the labels
        self.trainer.optimizers = self.optimizers[mode]
        try:
            yield
        finally:
            BagOfEmbeddings._distinct_bag, BagOfEmbeddings.joint_pass = saved  # type: ignore[method-assign]

    def step(self, batch: Any) -> dict[str, float]:
        """One ``Trainer.step``, its milliseconds whole and in parts."""
        self.times = {}
        start = time.perf_counter()
        with warnings.catch_warnings():  # torch's SparseAdam steps in place of the one the schedule was made for
            warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
            self.trainer.step(batch)
        total = time.perf_counter() - start
        parts = {"step": total, "forward": self.times["forward"], "optimiser": self.times["optimiser"]}
        parts["rest"] = total - parts["forward"] - parts["optimiser"]
        return {k: 1000.0 * v for k, v in parts.items()}


def measure(documents: int, rounds: int, steps: int, warmup: int, epoch: bool, overrides: list[str],
            threads: int | None = None) -> dict[str, Any]:
    """Per mode, the milliseconds of each part of each step; with ``epoch``, the seconds of an epoch of ``before``
    and of ``now``."""
    setup = Setup(documents, overrides)
    log.info("setup %.1f s, refresh %.1f s", setup.setup_s, setup.refresh_s)
    pools = [len(setup.objective.make_batch(item).label_ids) for item in setup.items[:20]]
    record: dict[str, Any] = {"documents": documents, "setup_s": setup.setup_s, "refresh_s": setup.refresh_s,
                              "pool_sizes": pools, "loads": [], "times": {m: {p: [] for p in PARTS} for m in MODES}}
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        cycle = itertools.cycle(setup.items)
        for mode in MODES:
            with setup.mode(mode):
                for _ in range(warmup):
                    setup.step(next(cycle))
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                with setup.mode(mode):
                    for _ in range(steps):
                        for part, ms in setup.step(next(cycle)).items():
                            record["times"][mode][part].append(ms)
            record["loads"].append(load_average())
            log.info("round %d: %s", r + 1, {m: round(float(np.median(record["times"][m]["step"][-steps:])), 1)
                                             for m in MODES})
        if epoch:
            record["epoch_s"] = {}
            for mode in ("before", "now"):
                with setup.mode(mode):
                    start = time.perf_counter()
                    for item in setup.items:
                        setup.step(item)
                    record["epoch_s"][mode] = time.perf_counter() - start
                record["loads"].append(load_average())
                log.info("an epoch of %d steps, %s: %.1f s", len(setup.items), mode, record["epoch_s"][mode])
            record["epoch_steps"] = len(setup.items)
    finally:
        torch.set_num_threads(before)
    return record


def summary(record: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Median milliseconds of each part of a step, per mode."""
    return {m: {p: float(np.median(v)) for p, v in parts.items()} for m, parts in record["times"].items()}


def report(command: str, record: dict[str, Any], threads: int) -> str:
    medians = summary(record)
    loads = record["loads"]
    lines = [
        f"`{command}`",
        "",
        f"{machine_line([min(loads), max(loads)], f' with {threads} thread(s) in the steps')}; "
        f"{record['documents']:,} documents and labels; label pools of {min(record['pool_sizes'])}-"
        f"{max(record['pool_sizes'])} labels; {len(record['times']['now']['step'])} steps of each computation, "
        "alternated; median ms a step:",
        "",
        "| computation | step | forward | backward and the rest | optimiser steps |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode in MODES:
        m = medians[mode]
        lines.append(f"| {mode} | {m['step']:.1f} | {m['forward']:.1f} | {m['rest']:.1f} | {m['optimiser']:.1f} |")
    if "epoch_s" in record:
        e = record["epoch_s"]
        lines += ["", f"An epoch of {record['epoch_steps']} steps: before {e['before']:.1f} s, now {e['now']:.1f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000, help="documents and labels of the task")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of steps of each computation")
    parser.add_argument("--steps", type=int, default=15, help="timed steps of a computation in a round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each computation first")
    parser.add_argument("--epoch", action="store_true", help="then time an epoch of 'before' and one of 'now'")
    parser.add_argument("--threads", type=int, default=1, help="torch threads during the steps")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    args = parser.parse_args(argv)
    if min(args.documents, args.rounds, args.steps, args.threads) < 1 or args.warmup < 0:
        parser.error("--documents, --rounds, --steps and --threads must be positive and --warmup non-negative")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    record = measure(args.documents, args.rounds, args.steps, args.warmup, args.epoch, args.set, args.threads)
    print(report(command_line("benchmarks.bench_sparse_steps", argv), record, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine losses' cost on a training step's label pool, at the two scales of scores they meet.

    python -m benchmarks.bench_losses [--queries 256] [--pool 1010] [--runs 200] [--threads 1] [--update-docs]

A pool of ``--pool`` labels for ``--queries`` queries (two positives a query, seeded), scores uniform in [-1, 1]
(cosine scores, as the dual-encoder heads give) or in [-20, 20] (unnormalised classifier scores, as UniDEC's
classifier head gives once trained), each loss at τ = 0.05, so the logits span ±20 or ±400. Timed: the loss and
its backward pass in both directions (UniDEC's symmetric form), median of --runs, on --threads torch threads
(training runs a bag encoder's steps on one), subnormals flushed as the trainer flushes them.

The reference, timed beside them in the same run, is Eq. 3 written with ``torch.logsumexp``, as SoftmaxCE was:
torch's exp takes a slow path on every entry more than about 87 below its row's largest (where e^x leaves
float32's normal range), which logits spanning ±400 make most of a row; ``torch.log_softmax`` does not.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

import torch
from torch import Tensor

from benchmarks.harness import command_line, load_average, machine_line, median, publish, repeat
from xdex.hardware import denormals_flushed
from xdex.losses import build_loss

MODULE = "benchmarks.bench_losses"
SECTION = "## Loss cost against the scale of the scores"
log = logging.getLogger("bench_losses")
LOSSES = ("paln", "softmax", "decoupled_softmax", "triplet")
SCALES = {"cosine scores (logits ±20)": 1.0, "classifier scores (logits ±400)": 20.0}
TAU = 0.05


def logsumexp_eq3(scores: Tensor, positives: Tensor) -> Tensor:
    """PAL-N by Eq. 3 with ``torch.logsumexp`` (the reference): mean over rows of Σ_p (lse_i − x_ip) / |P_i|."""
    logits = scores / TAU
    n = positives.sum(dim=1)
    rows = n * torch.logsumexp(logits, dim=1) - logits.masked_fill(~positives, 0.0).sum(dim=1)
    return (rows / n.clamp(min=1)).mean()


def symmetric(loss: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
    return lambda s, m: 0.5 * loss(s, m) + 0.5 * loss(s.T, m.T)


def time_loss(loss: Callable[[Tensor, Tensor], Tensor], scores: Tensor, positives: Tensor, runs: int) -> float:
    """Median milliseconds of the loss and its backward pass."""
    x = scores.clone().requires_grad_()

    def step() -> None:
        x.grad = None
        loss(x, positives).backward()

    with denormals_flushed():
        return 1000.0 * median(repeat(step, runs, warmup=3))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--pool", type=int, default=1010)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    unit = torch.rand(args.queries, args.pool, generator=generator) * 2 - 1
    positives = torch.zeros(args.queries, args.pool, dtype=torch.bool)
    picked = torch.randint(0, args.pool, (args.queries, 2), generator=generator)
    positives[torch.arange(args.queries)[:, None], picked] = True
    losses: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "paln with torch.logsumexp (reference)": symmetric(logsumexp_eq3)}
    for name in LOSSES:
        params = {"temperature": TAU} if name != "triplet" else {}
        losses[name] = symmetric(build_loss(name, **params))
    load = [load_average()]
    rows = {name: [time_loss(loss, unit * scale, positives, args.runs) for scale in SCALES.values()]
            for name, loss in losses.items()}
    load.append(load_average())
    log.info("%s", rows)
    lines = [
        SECTION, "",
        f"`{command_line(MODULE, argv)}`", "",
        f"{machine_line(load)}, {args.threads} torch thread(s).",
        f"A pool of {args.pool:,} labels for {args.queries} queries, two positives each; scores uniform in [-1, 1] and",
        "[-20, 20], τ = 0.05; the loss and its backward pass in both directions (UniDEC's symmetric form), median",
        f"milliseconds of {args.runs} runs. The first row is Eq. 3 with `torch.logsumexp`, as SoftmaxCE (PAL-N) was",
        "computed before it went through `torch.log_softmax`.", "",
        "| loss | " + " | ".join(f"{name}, ms" for name in SCALES) + " |",
        "|---|" + "---:|" * len(SCALES),
        *(f"| {name} | " + " | ".join(f"{ms:.2f}" for ms in values) + " |" for name, values in rows.items()),
    ]
    publish("\n".join(lines) + "\n", args.update_docs)


if __name__ == "__main__":
    main()

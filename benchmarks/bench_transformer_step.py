"""The training step of the packaged all-MiniLM-L6-v2 encoder on the CPU: fp32 against bf16 autocast, one
intra-op thread against two.

    python -m benchmarks.bench_transformer_step [--threads 1 2] [--rounds 3] [--steps 2] [--pairs 64]
        [--tokens 32] [--data DIR] [--update-docs]

A step is what a dual-encoder recipe does per batch: both sides of ``--pairs`` (query, label) pairs of
``--tokens`` tokens each ([CLS], random WordPiece ids, [SEP]; speed does not depend on the ids) go through
the encoder (``encoder.pretrained: minilm``, mean pooling), in-batch softmax loss (tau = 0.05), backward, and
AdamW (``xdex.train.optim.build_optimizers``, lr 2e-5). Every setting (fp32 or bf16, 1 or 2 threads) starts
from the same weights. The settings take turns: each round runs every setting once, ``--steps`` timed steps
after one untimed one, so that a change of the machine's load touches them all alike. Figures are medians over
all timed steps; the reference is fp32 with two threads, measured in the same run.

Wall time and CPU time (user + system time of the process, summed over its threads) are both given: on a
machine shared with other jobs the wall time is an upper bound.

The embeddings' check: cosine of bf16 to fp32 embeddings (``Encoder.embed``, eval mode) of the label texts
of ``--data`` (default: the shared foldoc-links-titles, if present; else the random texts).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.harness import DOCS, command_line, data_root, load_average, machine_line, median, peak_rss_mb, publish
from xdex.encoders.factory import build_encoder
from xdex.encoders.transformer import Transformer
from xdex.text import TokenizedTexts
from xdex.train.optim import OptimConfig, build_optimizers

log = logging.getLogger("bench_transformer_step")

MODULE = "benchmarks.bench_transformer_step"
SECTION = "## Transformer training step on the CPU: bf16 and threads"
TAU = 0.05
LR = 2e-5
FIRST_ID = 1_000  # random ids from here on: past BERT's [PAD], [unusedN], [CLS], [SEP], [MASK]
COSINE_TEXTS = 2_048


def random_texts(n: int, tokens: int, vocab_size: int, cls_id: int, sep_id: int, seed: int) -> TokenizedTexts:
    """``n`` texts of exactly ``tokens`` ids: [CLS], random ids, [SEP]."""
    ids = np.random.default_rng(seed).integers(FIRST_ID, vocab_size, size=(n, tokens), dtype=np.int32)
    ids[:, 0], ids[:, -1] = cls_id, sep_id
    return TokenizedTexts.from_arrays(list(ids))


def label_texts(folder: Path, n: int) -> list[str]:
    """The first ``n`` label texts of a dataset folder (``labels.jsonl.gz``)."""
    out = []
    with gzip.open(folder / "labels.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                break
    return out


class Setting:
    """One encoder copy (fp32 or bf16) with its optimiser, run with a given number of threads."""

    def __init__(self, base: Transformer, bf16: bool, threads: int):
        self.encoder = copy.deepcopy(base)
        self.encoder.bf16 = bf16
        self.encoder.train()
        self.optimizers = build_optimizers(self.encoder, OptimConfig(lr=LR))
        self.bf16, self.threads = bf16, threads
        self.wall: list[list[float]] = []  # per round: the seconds of each timed step
        self.cpu: list[list[float]] = []

    @property
    def name(self) -> str:
        return f"{'bf16' if self.bf16 else 'fp32'}, {self.threads} thread{'s' if self.threads > 1 else ''}"

    def step(self, queries: TokenizedTexts, labels: TokenizedTexts) -> float:
        q = F.normalize(self.encoder(queries), dim=1)
        lab = F.normalize(self.encoder(labels), dim=1)
        loss = F.cross_entropy(q @ lab.T / TAU, torch.arange(len(queries)))
        for opt in self.optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in self.optimizers:
            opt.step()
        return float(loss.detach())

    def round(self, batches: list[tuple[TokenizedTexts, TokenizedTexts]]) -> None:
        """One untimed step, then one timed step per batch (wall and process CPU seconds)."""
        torch.set_num_threads(self.threads)
        self.step(*batches[0])
        self.wall.append([])
        self.cpu.append([])
        for batch in batches[1:]:
            wall, cpu = time.perf_counter(), time.process_time()
            self.step(*batch)
            self.wall[-1].append(time.perf_counter() - wall)
            self.cpu[-1].append(time.process_time() - cpu)

    def median_wall(self, rounds: slice = slice(None)) -> float:
        return median([t for r in self.wall[rounds] for t in r])

    def median_cpu(self, rounds: slice = slice(None)) -> float:
        return median([t for r in self.cpu[rounds] for t in r])


def cosine_check(base: Transformer, texts: TokenizedTexts, threads: int) -> dict:
    """Cosine of bf16 to fp32 embeddings of ``texts`` (min and mean), and the texts/s of each."""
    torch.set_num_threads(threads)
    out = {}
    for bf16 in (False, True):
        base.bf16 = bf16
        start = time.perf_counter()
        out["bf16" if bf16 else "fp32"] = base.embed(texts, batch_size=256)
        out[f"texts_per_s_{'bf16' if bf16 else 'fp32'}"] = len(texts) / (time.perf_counter() - start)
    cos = F.cosine_similarity(out.pop("fp32"), out.pop("bf16"))
    return {**out, "cos_min": float(cos.min()), "cos_mean": float(cos.mean()), "texts": len(texts)}


def report(command: str, settings: list[Setting], check: dict, figures: dict) -> str:
    ref = next((s for s in settings if not s.bf16 and s.threads == max(x.threads for x in settings)), settings[0])
    loads = figures["round_loads"]
    rounds = [f"round {i + 1} (load {load:.1f})" for i, load in enumerate(loads)]
    lines = [
        "| setting | " + " | ".join(rounds) + " | all rounds | speed-up vs " + ref.name + " (wall) |",
        "|---|" + "---:|" * (len(rounds) + 2),
    ]
    for s in settings:
        cells = [f"{s.median_wall(slice(i, i + 1)):.2f} ({s.median_cpu(slice(i, i + 1)):.2f})"
                 for i in range(len(loads))]
        lines.append(f"| {s.name} | " + " | ".join(cells) + f" | {s.median_wall():.2f} ({s.median_cpu():.2f}) "
                     f"| {ref.median_wall() / s.median_wall():.2f}x |")
    sentences = [
        f"{figures['machine']}; bf16 on this CPU: {figures['bf16_cpu']}. Other jobs shared the machine: wall "
        "times are upper bounds, CPU times (user + system, summed over threads) are given beside them.",
        f"all-MiniLM-L6-v2 (`encoder.pretrained: minilm`), {figures['pairs']} (query, label) pairs of "
        f"{figures['tokens']} tokens, both sides encoded, in-batch softmax, backward, AdamW; {figures['rounds']} "
        f"rounds, each running every setting for one untimed and {figures['steps']} timed steps in turn; "
        "cells: median seconds per step, wall (CPU), with the 1-minute load average at the start of the round; "
        f"peak memory {figures['peak_mb']:.0f} MB (four copies of the model and their AdamW states).",
    ]
    cosine = (f"Embeddings under bf16 against fp32 (`Encoder.embed`, eval mode, {check['texts']:,} {check['source']}, "
              f"{check['threads']} thread(s)): cosine min {check['cos_min']:.6f}, mean {check['cos_mean']:.6f}; "
              f"{check['texts_per_s_fp32']:,.0f} texts/s fp32, {check['texts_per_s_bf16']:,.0f} texts/s bf16.")
    return "\n".join([SECTION, "", f"`{command}`", "", *sentences, "", *lines, "", cosine]) + "\n"


def bf16_note() -> str:
    avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return f"AVX-512 BF16 {'yes' if avx512_bf16 else 'no'}, AMX {'yes' if amx else 'no'}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="intra-op thread counts to time")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every setting once")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setting and round")
    parser.add_argument("--pairs", type=int, default=64, help="(query, label) pairs per step")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per text, [CLS] and [SEP] included")
    parser.add_argument("--data", type=Path, help="dataset folder whose label texts the cosine check embeds "
                        "(default: foldoc-links-titles under the shared data, if present)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = parser.parse_args(argv)
    if min(args.threads) < 1 or args.rounds < 1 or args.steps < 1 or args.pairs < 2 or args.tokens < 3:
        parser.error("--threads, --rounds and --steps must be positive, --pairs at least 2, --tokens at least 3")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if "OMP_NUM_THREADS" in os.environ:
        log.warning("OMP_NUM_THREADS is set; each setting still sets its own thread count")
    load_start = load_average()
    torch.manual_seed(args.seed)
    base = build_encoder({"pretrained": "minilm", "max_length": max(args.tokens, 32), "bf16": False})
    assert isinstance(base, Transformer)
    tok = base.tokenizer
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    texts = random_texts(2 * args.pairs * (args.steps + 1), args.tokens, tok.vocab_size, cls_id, sep_id, args.seed)
    batches = [(texts[np.arange(2 * i * args.pairs, (2 * i + 1) * args.pairs)],
                texts[np.arange((2 * i + 1) * args.pairs, (2 * i + 2) * args.pairs)]) for i in range(args.steps + 1)]
    settings = [Setting(base, bf16, threads) for threads in args.threads for bf16 in (False, True)]
    round_loads = []
    for r in range(args.rounds):
        round_loads.append(load_average())
        for s in settings:
            s.round(batches)
            log.info("round %d, %s: last step %.2f s wall, %.2f s CPU", r + 1, s.name, s.wall[-1][-1], s.cpu[-1][-1])

    folder = args.data or data_root() / "foldoc-links-titles"
    if (folder / "labels.jsonl.gz").is_file():
        check_texts, source = base.tokenize(label_texts(folder, COSINE_TEXTS)), f"label texts of {folder.name}"
    else:
        check_texts, source = texts[np.arange(min(COSINE_TEXTS, len(texts)))], "random texts"
    check = {**cosine_check(base, check_texts, max(args.threads)), "source": source, "threads": max(args.threads)}
    figures = {"machine": machine_line([load_start, load_average()]), "bf16_cpu": bf16_note(),
               "pairs": args.pairs, "tokens": args.tokens, "rounds": args.rounds, "steps": args.steps,
               "peak_mb": peak_rss_mb(), "round_loads": round_loads}
    publish(report(command_line(MODULE, argv), settings, check, figures), args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tokenizing texts for prediction: xdex's `Tokenizer.encode_batch` with its ASCII shortcut (texts cleaned as
BertNormalizer cleans them, cut to the words their ids come from, and their words' ids remembered) against the same
call without it (the whole `tokenizers` pipeline on every text), on the same texts.

    python -m benchmarks.bench_tokenize [--data-root DIR] [--datasets NAME ...] [--batches 1 200 2000]
        [--runs 40] [--vocab 30000] [--update-docs]

Per dataset: a WordPiece vocabulary trained on its training texts (as a bag encoder's is); its test texts taken in
turn, cut to the length a recipe reads (``max_length: auto``: :func:`xdex.encoders.factory.length_from_data`). The
two ways alternate call by call, each first in every other pair, so that a busy machine slows both alike; reported
are the medians and their ratio. Both give the same ids (checked here, and in tests/text/test_tokenizer.py). The
shortcut's memory of words is filled by one pass over the texts first, as a server's is after a while, and the
shortcut is also timed with that memory emptied before each call: a batch of words never seen before.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import tokenizers

from benchmarks.harness import (
    DATA_ROOT_HELP,
    command_line,
    data_root,
    load_average,
    machine_line,
    median,
    publish,
    timed,
)

log = logging.getLogger("bench_tokenize")
MODULE = "benchmarks.bench_tokenize"
SECTION = "## Tokenizing for prediction: ASCII texts cut to their words, and the words' ids remembered"
DATASETS = ("foldoc-links-titles", "foldoc-links", "debian-debtags")


def measure(name: str, root: Path, batches: list[int], runs: int, vocab: int) -> list[dict]:
    from xdex.data import load
    from xdex.encoders.factory import length_from_data
    from xdex.text import Tokenizer

    dataset = load(root / name)
    tokenizer = Tokenizer.train_wordpiece(dataset.train.texts + dataset.labels.texts, vocab)
    max_length = length_from_data(tokenizer, dataset.train.texts)
    whole = Tokenizer(tokenizers.Tokenizer.from_str(tokenizer._backend.to_str()), tokenizer.pad_token)
    whole._ascii = None  # the reference: every text through the whole pipeline
    if dataset.test is None:
        raise ValueError(f"{root / name}: no test split to tokenize")
    texts = dataset.test.texts
    share = np.mean([t.isascii() for t in texts])
    rows = []
    tokenizer.encode_batch(texts, max_length)  # every word of the texts seen once: the memory of a server at work
    for size in batches:
        chunks = [[texts[(start + i) % len(texts)] for i in range(size)] for start in range(0, runs * size, size)]
        ours: list[float] = []
        theirs: list[float] = []
        unseen: list[float] = []
        for i, chunk in enumerate(chunks):  # each way first in every other pair: the first call of a pair pays more
            ids = {}
            for way, times in ((tokenizer, ours), (whole, theirs))[:: 1 if i % 2 else -1]:
                ids[way], seconds = timed(way.encode_batch, chunk, max_length)
                times.append(seconds)
            if any(not np.array_equal(a, b) for a, b in zip(ids[tokenizer], ids[whole], strict=True)):
                raise AssertionError(f"{name}: ids differ from the whole pipeline's")
            if tokenizer._ascii is not None and tokenizer._ascii.words is not None:
                remembered, tokenizer._ascii.words._ids = tokenizer._ascii.words._ids, {}  # no word of it seen
                unseen.append(timed(tokenizer.encode_batch, chunk, max_length)[1])
                tokenizer._ascii.words._ids = remembered
        rows.append({"dataset": name, "texts": size, "max_length": max_length, "ascii": share,
                     "whole_us": 1e6 * median(theirs) / size, "ours_us": 1e6 * median(ours) / size,
                     "unseen_us": 1e6 * median(unseen) / size if unseen else float("nan")})
        log.info("%s, batch %d: %.1f -> %.1f us a text", name, size, rows[-1]["whole_us"], rows[-1]["ours_us"])
    return rows


def report(rows: list[dict], argv: list[str], load: list[float]) -> str:
    lines = [
        SECTION, "",
        f"`{command_line(MODULE, argv)}`", "",
        f"{machine_line(load, torch_note=None)}; tokenizers {tokenizers.__version__} (its own thread pool, as in "
        "prediction). Microseconds per text: the median over the calls of a batch's time over its texts. "
        "`encode_batch` without the shortcut (every text through the whole pipeline) and with it alternate call by "
        "call, each first in every other pair, and give the same ids. shortcut: every word of the texts seen once "
        "before (one call over them all); words unseen: the shortcut with its memory of words emptied before each "
        "call.", "",
        "| dataset | max_length | ASCII texts | batch | whole pipeline µs / text | shortcut µs / text | ratio | "
        "words unseen µs / text |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['max_length']} | {100 * r['ascii']:.1f}% | {r['texts']} | "
                     f"{r['whole_us']:.2f} | {r['ours_us']:.2f} | {r['ours_us'] / r['whole_us']:.2f} | "
                     f"{r['unseen_us']:.2f} |")
    lines += ["", "An ASCII text is cleaned and cut to its first `max_length` words in Python, split into BERT's "
              "words, and its ids are its words' ids, each word's asked of the library once and remembered "
              "(`xdex.text.tokenizer._AsciiShortcut`, `_WordPieces`)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=data_root(), help=DATA_ROOT_HELP)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 200, 2000])
    parser.add_argument("--runs", type=int, default=40, help="calls of each way per batch size")
    parser.add_argument("--vocab", type=int, default=30000, help="WordPiece vocabulary size")
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    load = [load_average()]
    rows = [row for name in args.datasets for row in measure(name, args.data_root, args.batches, args.runs, args.vocab)]
    load.append(load_average())
    publish(report(rows, argv, load), args.update_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

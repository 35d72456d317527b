"""A few queries at a time: the exact search through int8 codes against float32 products, by the number of queries.

    python -m benchmarks.bench_few_queries [--vectors FILE.npy] [--items 7155 30000 100000]
        [--queries 1 2 4 8 16 32] [--calls 11] [--pause 0.5] [--k 10] [--seed 0] [--update-docs]

What a served micro-batch asks of ``ExactIndex``: ``m`` queries over ``L`` label vectors. Through int8 codes
(``xdex.index.quantized.int8_search``) each query costs its own pass over the codes; float32 products
(``xdex.index.exact.exact_search``) read the vectors once for all queries. The bounds ``INT8_QUERIES`` of
``xdex.index.exact`` come from this table. The vectors are the first L rows of
``--vectors`` (a model's ``label_embeddings.npy``), else random unit vectors of dimension 256; the queries are
vectors of the set plus noise (``0.1`` per component), so that each has near neighbours. Each cell is the median of
``--calls`` calls of the same batch each way, on torch's threads; each series starts after a pause of ``--pause``
seconds, because OpenBLAS's threads keep spinning for a while (about 0.1 s) after its products, beside whatever
runs next: int8 calls made right after float32 products took up to twice as long.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_index import unit_vectors
from benchmarks.harness import command_line, load_average, machine_line, median, publish, repeat
from xdex.index.exact import exact_search
from xdex.index.quantized import Int8Codes, int8_search

MODULE = "benchmarks.bench_few_queries"
SECTION = "## A few queries at a time: int8 codes against float32 products"
log = logging.getLogger("bench_few_queries")


def cell(items: np.ndarray, coded: Int8Codes, queries: np.ndarray, k: int, calls: int,
         pause: float) -> tuple[float, float]:
    """Median seconds of one batch through the codes and in float32 (the same rankings, checked up to ties), each
    series after ``pause`` seconds of quiet."""
    threads = torch.get_num_threads()
    through_codes = int8_search(items, coded, queries, k, threads)
    float32 = exact_search(items, queries, k, bf16=False)
    if not np.allclose(through_codes[0], float32[0], rtol=1e-5, atol=1e-6):
        raise RuntimeError("the two searches disagree beyond float32's rounding")
    time.sleep(pause)
    codes_s = median(repeat(lambda: int8_search(items, coded, queries, k, threads), calls))
    time.sleep(pause)
    float32_s = median(repeat(lambda: exact_search(items, queries, k, bf16=False), calls))
    return codes_s, float32_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=Path, help="a .npy of vectors (a model's label_embeddings.npy)")
    parser.add_argument("--items", type=int, nargs="+", default=[7155, 30000, 100000])
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--calls", type=int, default=11)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds of quiet before each series of calls")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    source = None if args.vectors is None else np.load(args.vectors, mmap_mode="r")
    if source is not None and len(source) < max(args.items):
        parser.error(f"{args.vectors} holds {len(source)} vectors, fewer than --items asks")
    load = [load_average()]
    columns: list[list[str]] = []
    for n in args.items:
        items = (unit_vectors(rng, n, 256) if source is None
                 else np.ascontiguousarray(source[:n], dtype=np.float32))
        coded = Int8Codes.of(items)
        column = []
        for m in args.queries:
            picks = items[rng.integers(0, n, m)]
            queries = (picks + 0.1 * rng.standard_normal(picks.shape)).astype(np.float32)
            codes_s, float32_s = cell(items, coded, queries, args.k, args.calls, args.pause)
            log.info("%d items, %d queries: int8 codes %.2f ms, float32 %.2f ms", n, m, codes_s * 1e3,
                     float32_s * 1e3)
            column.append(f"{codes_s * 1e3:.2f} / {float32_s * 1e3:.2f}")
        columns.append(column)
    load.append(load_average())
    vectors = f"the first L rows of `{args.vectors.name}`" if args.vectors is not None else "random unit vectors"
    lines = [
        SECTION, "", f"`{command_line(MODULE, sys.argv[1:] if argv is None else argv)}`", "",
        machine_line(load) + f", {torch.get_num_threads()} threads.",
        f"L vectors of dimension {256 if source is None else source.shape[1]} ({vectors}), k = {args.k}; "
        f"each cell: the median of {args.calls} calls through int8 codes / in float32 products, ms, each series "
        f"after {args.pause:g} s of quiet.", "",
        "| queries | " + " | ".join(f"L = {n:,}" for n in args.items) + " |",
        "|---:|" + "---|" * len(args.items),
        *(f"| {m} | " + " | ".join(column[row] for column in columns) + " |" for row, m in enumerate(args.queries)),
        "",
    ]
    publish("\n".join(lines), args.update_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

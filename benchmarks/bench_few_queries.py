"""A few queries at a time: the exact search through int8 codes, through int8 products and in float32 products, by
the number of queries.

    python -m benchmarks.bench_few_queries [--vectors FILE.npy] [--items 7155 30000 100000]
        [--queries 1 2 4 8 16 32 64 128] [--calls 11] [--pause 0.5] [--k 10] [--seed 0] [--update-docs]

What a served micro-batch asks of ``ExactIndex``: ``m`` queries over ``L`` label vectors. Through int8 codes
(``xdex.index.quantized.int8_search``) each query costs its own pass over the codes; int8 products
(``xdex.index.quantized.int8_products_search``, on CPUs with int8 dot-product instructions) and float32 products
(``xdex.index.exact.exact_search``) read the vectors once for all queries. The bounds ``INT8_QUERIES`` and
``INT8_PRODUCTS_FROM_QUERIES`` of ``xdex.index.exact`` come from this table. The vectors are the first L rows of
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
from benchmarks.harness import command_line, load_average, machine_line, median, publish, repeat, vectors_file
from xdex.hardware import cpu_has_vnni
from xdex.index.exact import exact_search
from xdex.index.quantized import Int8Codes, int8_search

MODULE = "benchmarks.bench_few_queries"
SECTION = "## A few queries at a time: int8 codes, int8 products and float32 products"
log = logging.getLogger("bench_few_queries")


def cell(items: np.ndarray, coded: Int8Codes, shared: Int8Codes | None, queries: np.ndarray, k: int, calls: int,
         pause: float) -> dict[str, float]:
    """Median seconds of one batch each way: through the codes (``codes``), through int8 products with ``shared``,
    the codes at one scale (``products``, where given), and in float32; the same rankings, checked up to ties. Each
    series starts after ``pause`` seconds of quiet."""
    threads = torch.get_num_threads()
    ways = {"codes": lambda: int8_search(items, coded, queries, k, threads)}
    if shared is not None:
        ways["products"] = lambda: exact_search(items, queries, k, int8=True, coded=shared)
    ways["float32"] = lambda: exact_search(items, queries, k, bf16=False, int8=False)
    float32 = ways["float32"]()
    for name, way in ways.items():
        if not np.allclose(way()[0], float32[0], rtol=1e-5, atol=1e-6):
            raise RuntimeError(f"the search through {name} disagrees with float32 beyond float32's rounding")
    seconds = {}
    for name, way in ways.items():
        time.sleep(pause)
        seconds[name] = median(repeat(way, calls))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=Path, help="a .npy of vectors (a model's label_embeddings.npy)")
    parser.add_argument("--items", type=int, nargs="+", default=[7155, 30000, 100000])
    parser.add_argument("--queries", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--calls", type=int, default=11)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds of quiet before each series of calls")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    source = vectors_file(parser, args.vectors, max(args.items), "--items")
    products = cpu_has_vnni()  # int8 products run at the int8 rate only with these instructions
    ways = "int8 codes / int8 products / float32 products" if products else "int8 codes / float32 products"
    load = [load_average()]
    columns: list[list[str]] = []
    for n in args.items:
        items = (unit_vectors(rng, n, 256) if source is None
                 else np.ascontiguousarray(source[:n], dtype=np.float32))
        coded = Int8Codes.of(items)
        shared = Int8Codes.of(items, shared_scale=True) if products else None
        column = []
        for m in args.queries:
            picks = items[rng.integers(0, n, m)]
            queries = (picks + 0.1 * rng.standard_normal(picks.shape)).astype(np.float32)
            seconds = cell(items, coded, shared, queries, args.k, args.calls, args.pause)
            log.info("%d items, %d queries: %s", n, m,
                     ", ".join(f"{name} {value * 1e3:.2f} ms" for name, value in seconds.items()))
            column.append(" / ".join(f"{value * 1e3:.2f}" for value in seconds.values()))
        columns.append(column)
    load.append(load_average())
    vectors = f"the first L rows of `{args.vectors.name}`" if args.vectors is not None else "random unit vectors"
    lines = [
        SECTION, "", f"`{command_line(MODULE, sys.argv[1:] if argv is None else argv)}`", "",
        machine_line(load) + f", {torch.get_num_threads()} threads.",
        f"L vectors of dimension {256 if source is None else source.shape[1]} ({vectors}), k = {args.k}; "
        f"each cell: the median of {args.calls} calls through {ways}, ms, each series after {args.pause:g} s of "
        "quiet.", "",
        "| queries | " + " | ".join(f"L = {n:,}" for n in args.items) + " |",
        "|---:|" + "---|" * len(args.items),
        *(f"| {m} | " + " | ".join(column[row] for column in columns) + " |" for row, m in enumerate(args.queries)),
        "",
    ]
    publish("\n".join(lines), args.update_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

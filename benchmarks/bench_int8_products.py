"""Many queries at a time: the exact search through int8 products against float32 and bf16 products.

    python -m benchmarks.bench_int8_products [--vectors Z.npy] [--query-vectors Q.npy] [--items 7155 27879 100000]
        [--queries 64 128 256 2000] [--k 10 20 40] [--runs 3] [--seed 0] [--update-docs]

What a batch prediction and a refresh's hard-negative mining ask of ``xdex.index.exact.exact_search``: the top-k of
``m`` queries over ``L`` vectors. Through int8 products (``xdex.index.quantized.int8_products_search``) the products
run at the int8 rate and every item near a query's k-th best is rescored in float32; the longer the top-k, the more
items lie near its k-th best. The defaults ``INT8_PRODUCTS_*`` of ``xdex.index.exact`` come from this table. The
vectors are the first L rows of ``--vectors`` (a model's ``label_embeddings.npy``), else random unit vectors of
dimension 256; the queries are the first m rows of ``--query-vectors`` (the same model's text vectors), else vectors
of the set plus noise, so that each has near neighbours. Each cell is the median of ``--runs`` calls each way,
interleaved, on torch's threads; every int8 result is checked against the float32 search (the same scores up to
float32's rounding).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_index import unit_vectors
from benchmarks.harness import command_line, load_average, machine_line, median, publish, repeat, vectors_file
from xdex.hardware import cpu_has_bf16, cpu_has_vnni
from xdex.index.exact import CHUNK_ITEMS, CHUNK_QUERIES, exact_search, int8_products_pay
from xdex.index.quantized import Int8Codes, int8_products_search

MODULE = "benchmarks.bench_int8_products"
SECTION = "## Many queries through int8 products"
log = logging.getLogger("bench_int8_products")


def cell(items: np.ndarray, coded: Int8Codes, queries: np.ndarray, k: int, runs: int) -> dict[str, float]:
    """Median seconds of one batch each way (float32, bf16 where the CPU has it, int8 products), interleaved, and
    how many queries the int8 products left to float32."""
    threads = torch.get_num_threads()
    ways = {"float32": lambda: exact_search(items, queries, k, bf16=False),
            "int8": lambda: exact_search(items, queries, k, int8=True, coded=coded)}
    if cpu_has_bf16() and k + 64 <= len(items):
        ways["bf16"] = lambda: exact_search(items, queries, k, bf16=True)
    want, got = ways["float32"](), ways["int8"]()
    if not np.allclose(got[0], want[0], rtol=1e-5, atol=1e-6):
        raise RuntimeError("the int8 products disagree with the float32 search beyond float32's rounding")
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, way in ways.items():
            times[name] += repeat(way, 1)
    left = int8_products_search(items, coded, queries, k, CHUNK_QUERIES, CHUNK_ITEMS, threads)[2]
    return {**{name: median(seconds) for name, seconds in times.items()}, "left": float(len(left))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=Path, help="a .npy of item vectors (a model's label_embeddings.npy)")
    parser.add_argument("--query-vectors", type=Path, help="a .npy of query vectors (the same model's texts)")
    parser.add_argument("--items", type=int, nargs="+", default=[7155, 27879, 100000])
    parser.add_argument("--queries", type=int, nargs="+", default=[64, 128, 256, 2000])
    parser.add_argument("--k", type=int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    source = vectors_file(parser, args.vectors, max(args.items), "--items")
    texts = vectors_file(parser, args.query_vectors, max(args.queries), "--queries")
    load = [load_average()]
    rows = []
    for n in args.items:
        items = unit_vectors(rng, n, 256) if source is None else np.ascontiguousarray(source[:n], dtype=np.float32)
        coded = Int8Codes.of(items, shared_scale=True)
        for m in args.queries:
            if texts is None:
                picks = items[rng.integers(0, n, m)]
                queries = (picks + 0.05 * rng.standard_normal(picks.shape)).astype(np.float32)
            else:
                queries = np.ascontiguousarray(texts[:m], dtype=np.float32)
            for k in args.k:
                if k > n:
                    continue
                result = cell(items, coded, queries, k, args.runs)
                log.info("L %d, m %d, k %d: %s", n, m, k, {name: round(value, 4) for name, value in result.items()})
                bf16 = f"{result['bf16'] * 1e3:.1f}" if "bf16" in result else "-"
                rows.append(f"| {n:,} | {m:,} | {k} | {result['float32'] * 1e3:.1f} | {bf16} | "
                            f"{result['int8'] * 1e3:.1f} | {result['float32'] / result['int8']:.2f} | "
                            f"{int(result['left'])} | {'int8' if int8_products_pay(m, items, k) else 'not int8'} |")
    load.append(load_average())
    vectors = f"the first L rows of `{args.vectors.name}`" if args.vectors is not None else "random unit vectors"
    queries_note = (f"the first m rows of `{args.query_vectors.name}`" if args.query_vectors is not None
                    else "vectors of the set plus noise (0.05 per component)")
    lines = [
        SECTION, "", f"`{command_line(MODULE, sys.argv[1:] if argv is None else argv)}`", "",
        machine_line(load) + f", {torch.get_num_threads()} threads; int8 dot-product instructions (VNNI): "
        f"{'yes' if cpu_has_vnni() else 'no'}.",
        f"L vectors ({vectors}), m queries ({queries_note}); medians of {args.runs} calls each way, interleaved, "
        "ms. left: queries the int8 products left to float32 (more candidates than they keep). default: the route "
        "`exact_search` takes by itself.", "",
        "| L | m | k | float32 | bf16 | int8 products | float32 / int8 | left | default |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows, "",
    ]
    publish("\n".join(lines), args.update_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

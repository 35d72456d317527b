"""Exact search at hard-negative-mining sizes: seconds per search against the matrix products alone.

    python -m benchmarks.bench_exact_search --items 100000 --queries 8192 --k 40 --runs 5 [--update-docs]

A refresh mines every training text's hard negatives by an exact search over every label vector
(``xdex.sampling.HardNegatives.mine``): ``queries x items`` inner products in blocks, each block's top-k kept
and merged with the best so far. The reference, measured in the same run on the same blocks, is the matrix
products alone: what no exact search can avoid. On a CPU with bf16 instructions the search takes its certified
bf16 shortcut; its float32 route is timed beside it. Random unit vectors: the float32 route's cost does not
depend on them, and they are the shortcut's hard case (many near ties at the cut, so more queries searched again).
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import torch

from benchmarks.bench_index import unit_vectors
from benchmarks.harness import command_line, load_average, machine_line, median, publish, repeat
from xdex.hardware import cpu_has_bf16
from xdex.index.exact import CHUNK_ITEMS, CHUNK_QUERIES, blas_threads, exact_search

MODULE = "benchmarks.bench_exact_search"
SECTION = "## Exact search at mining sizes"
log = logging.getLogger("bench_exact_search")


def products_only(items: np.ndarray, queries: np.ndarray, library: str = "numpy") -> None:
    """The matrix products of :func:`exact_search`'s blocks, nothing kept: numpy's (what the search multiplies
    with) on as many threads as torch's, or torch's own."""
    with torch.inference_mode(), blas_threads(torch.get_num_threads()):
        for q0 in range(0, len(queries), CHUNK_QUERIES):
            q = queries[q0 : q0 + CHUNK_QUERIES]
            for i0 in range(0, len(items), CHUNK_ITEMS):
                if library == "numpy":
                    q @ items[i0 : i0 + CHUNK_ITEMS].T
                else:
                    torch.from_numpy(q) @ torch.from_numpy(items[i0 : i0 + CHUNK_ITEMS]).T


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--k", type=int, default=40, help="shortlist size plus positives skipped, as a refresh asks")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--update-docs", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(0)
    items, queries = unit_vectors(rng, args.items, args.dim), unit_vectors(rng, args.queries, args.dim)
    load = [load_average()]
    search, float32, floor, torchs = [], [], [], []
    for _ in range(args.runs):  # interleaved, so that all see the same machine
        search += repeat(lambda: exact_search(items, queries, args.k), 1)
        float32 += repeat(lambda: exact_search(items, queries, args.k, bf16=False), 1)
        floor += repeat(lambda: products_only(items, queries), 1)
        torchs += repeat(lambda: products_only(items, queries, "torch"), 1)
        log.info("search %.2f s (float32 route %.2f s), products %.2f s (torch's %.2f s)", search[-1], float32[-1],
                 floor[-1], torchs[-1])
    load.append(load_average())
    lines = [
        SECTION, "", f"`{command_line(MODULE, sys.argv[1:] if argv is None else argv)}`", "",
        machine_line(load) + f", {torch.get_num_threads()} threads.",
        f"{args.queries:,} queries x {args.items:,} items of {args.dim} dimensions, k = {args.k}, "
        f"blocks of {CHUNK_QUERIES:,} x {CHUNK_ITEMS:,}; {args.runs} runs of each, interleaved.", "",
        "| | median s | min s | max s |", "|---|---:|---:|---:|",
        f"| exact search{' (bf16 shortcut)' if cpu_has_bf16() else ''} | {median(search):.2f} | {min(search):.2f} | "
        f"{max(search):.2f} |",
        f"| exact search, float32 route | {median(float32):.2f} | {min(float32):.2f} | {max(float32):.2f} |",
        f"| matrix products alone (numpy's, used) | {median(floor):.2f} | {min(floor):.2f} | {max(floor):.2f} |",
        f"| the same products by torch | {median(torchs):.2f} | {min(torchs):.2f} | {max(torchs):.2f} |", "",
        f"The search costs {median(search) / median(floor):.2f} times the float32 matrix products (median over "
        f"median), its float32 route {median(float32) / median(floor):.2f} times; "
        f"torch's products take {median(torchs) / median(floor):.2f} times numpy's.", "",
    ]
    publish("\n".join(lines), args.update_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

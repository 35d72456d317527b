"""Index speed on random unit vectors: exact and HNSW build time, queries/s, HNSW recall@k; balanced k-means time.

    python -m benchmarks.bench_index --items 100000 --dim 256 32 --queries 1000 [--update-docs]

Items and queries are independent standard normal vectors scaled to unit norm (metric "ip"),
for each ``--dim``. Recall@k of HNSW is measured against the exact index for each ``--ef``
value. ``balanced_kmeans`` of the items into clusters of at most ``--cluster-size`` points is
timed too.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import torch

from benchmarks.harness import DOCS, command_line, load_average, machine_line, publish, timed
from xdex.cluster import balanced_kmeans
from xdex.index import ExactIndex, HNSWIndex, recall_at_k

MODULE = "benchmarks.bench_index"
SECTION = "## Index"
log = logging.getLogger("bench_index")


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


Row = tuple[str, ...]


def run(args: argparse.Namespace, dim: int) -> tuple[list[Row], Row]:
    """Rows of (dim, index, build s, queries/s, recall@k), and (dim, clusters, sizes, s) of balanced k-means."""
    rng = np.random.default_rng(args.seed)
    items, queries = unit_vectors(rng, args.items, dim), unit_vectors(rng, args.queries, dim)
    rows = []

    exact = ExactIndex(dim)
    _, build = timed(lambda: exact.add(items))
    (_, truth), search = timed(lambda: exact.search(queries, args.k))
    rows.append((str(dim), "exact", f"{build:.2f}", f"{args.queries / search:,.0f}", "1.000"))
    log.info("dim %d, exact: %.1f s search", dim, search)

    hnsw = HNSWIndex(dim, M=args.M, ef_construction=args.ef_construction, num_threads=args.threads, seed=args.seed)
    _, build = timed(lambda: hnsw.add(items))
    log.info("dim %d, hnsw: %.1f s build", dim, build)
    for ef in args.ef:
        hnsw.ef_search = ef
        (_, ids), search = timed(lambda: hnsw.search(queries, args.k))
        recall = recall_at_k(ids, truth, args.k)
        speed = f"{args.queries / search:,.0f}"
        rows.append((str(dim), f"hnsw ef_search={ef}", f"{build:.2f}", speed, f"{recall:.3f}"))
        log.info("dim %d, hnsw ef_search=%d: recall@%d %.3f", dim, ef, args.k, recall)

    labels, seconds = timed(lambda: balanced_kmeans(items, cluster_size=args.cluster_size, seed=args.seed))
    sizes = np.bincount(labels)
    return rows, (str(dim), f"{len(sizes):,}", f"{sizes.min()}-{sizes.max()}", f"{seconds:.2f}")


def table(header: Row, rows: list[Row]) -> list[str]:
    """A markdown table; the first column is text, the others numbers."""
    lines = [f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
    return lines + [f"| {' | '.join(row)} |" for row in rows]


def report(args: argparse.Namespace, argv: list[str], rows: list[Row], clustering: list[Row], load: float) -> str:
    """The markdown section for docs/benchmarks.md; ``load`` is the 1-minute load average at the start."""
    command = command_line(MODULE, argv)
    lines = [
        SECTION,
        "",
        f"`{command}`",
        f"on {machine_line([load], f' and hnswlib with {args.threads} thread(s)')}.",
        f"{args.items:,} items and {args.queries:,} queries: random unit vectors, inner product, top-{args.k}.",
        f"HNSW: M={args.M}, ef_construction={args.ef_construction}, one build per dimension;",
        f"recall@{args.k} against the exact index. Independent uniform directions are the hardest case",
        "for graph search (in high dimension all items are nearly equally similar to a query), so",
        "recall at a given ef_search is far lower at dim 256 than at dim 32.",
        "",
        *table(("dim", "index", "build s", "queries/s", f"recall@{args.k}"), rows),
        "",
        f"`balanced_kmeans(cluster_size={args.cluster_size})` of the same {args.items:,} items:",
        "",
        *table(("dim", "clusters", "points per cluster", "seconds"), clustering),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--dim", type=int, nargs="+", default=[256], help="one run per dimension")
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64, 128, 256], help="ef_search values")
    parser.add_argument("--M", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--cluster-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if min(args.items, *args.dim, args.queries, args.k, args.cluster_size, args.threads, *args.ef) < 1:
        parser.error("sizes, --k, --ef, --cluster-size and --threads must be positive")
    if args.k > args.items:
        parser.error("--k must be at most --items")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    torch.set_num_threads(args.threads)
    load = load_average()
    runs = [run(args, dim) for dim in args.dim]
    section = report(args, argv, [row for rows, _ in runs for row in rows], [line for _, line in runs], load)
    publish(section, args.update_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

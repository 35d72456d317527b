"""Time the evaluation of a large random prediction set: P/nDCG/PSP/PSnDCG/R at k = 1, 3, 5, 10, 100.

    python -m benchmarks.bench_metrics --docs 1000000 --labels 1000000 --k 100 [--update-docs]

Predictions: ``--k`` distinct labels per document. Ground truth: 1 + Poisson(4) labels per
document (about 5), half of them taken from the document's predictions so that there are hits.
The JIT lines are the first calls of the kernels on a tiny input: numba compile time when its
cache is cold (run with ``NUMBA_CACHE_DIR`` pointing to an empty folder), cache loading otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.harness import DOCS, command_line, load_average, machine_line, publish, timed
from xdex.metrics import Ranking, compute_metrics, inverse_propensity, remove_pairs, top_k

MODULE = "benchmarks.bench_metrics"
METRIC_KS = (1, 3, 5, 10, 100)
SECTION = "## Metrics speed"


def random_ranking(rng: np.random.Generator, n_docs: int, n_labels: int, k: int) -> Ranking:
    """``k`` distinct labels per document: ``(start + j * step) mod L`` with ``step`` coprime to ``L``."""
    start = rng.integers(0, n_labels, n_docs)
    step = rng.integers(1, n_labels, n_docs) if n_labels > 1 else np.ones(n_docs, dtype=np.int64)
    bad = np.gcd(step, n_labels) != 1
    while bad.any():
        step[bad] = rng.integers(1, n_labels, int(bad.sum()))
        bad = np.gcd(step, n_labels) != 1
    indices = (start[:, None] + step[:, None] * np.arange(k)) % n_labels
    scores = -np.sort(-rng.random((n_docs, k), dtype=np.float32), axis=1)
    return Ranking(indices, scores)


def random_truth(rng: np.random.Generator, ranking: Ranking, n_labels: int) -> sp.csr_matrix:
    """About 5 labels per document, half of them among its predictions."""
    n_docs = ranking.n_rows
    sizes = 1 + rng.poisson(4, n_docs)
    rows = np.repeat(np.arange(n_docs), sizes)
    cols = rng.integers(0, n_labels, len(rows))
    from_ranking = rng.random(len(rows)) < 0.5
    positions = rng.integers(0, ranking.k, len(rows))
    cols[from_ranking] = ranking.indices[rows[from_ranking], positions[from_ranking]]
    truth = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n_docs, n_labels))
    truth.data[:] = 1.0  # duplicates were summed
    return truth


def step(timings: dict[str, float], name: str, fn, *args):
    """``fn(*args)``, its wall seconds put in ``timings[name]``."""
    out, timings[name] = timed(lambda: fn(*args))
    return out


def warm_up() -> None:
    """Call the evaluation kernels once on a tiny input (compiles them, or loads them from numba's cache)."""
    r = Ranking.from_lists([[1, 0]], [[1.0, 0.5]])
    y = sp.csr_matrix(np.array([[1.0, 0.0]]))
    compute_metrics(r, y, ks=[1], inv_propensity=inverse_propensity(y))
    remove_pairs(r, y)


def run(n_docs: int, n_labels: int, k: int, seed: int) -> tuple[dict[str, float], dict[str, float]]:
    rng = np.random.default_rng(seed)
    timings: dict[str, float] = {}
    step(timings, "JIT compile / cache load", warm_up)
    ranking = random_ranking(rng, n_docs, n_labels, k)
    truth = random_truth(rng, ranking, n_labels)
    train = random_truth(rng, random_ranking(rng, n_docs, n_labels, k), n_labels)
    ks = [m for m in METRIC_KS if m <= k]
    step(timings, "Ranking checks (N x K ids)", Ranking, ranking.indices, ranking.scores)
    q = step(timings, "inverse propensities (train)", inverse_propensity, train)
    metrics = step(timings, f"metrics at k={','.join(map(str, ks))}", compute_metrics, ranking, truth, ks, q)
    timings["total evaluation"] = sum(timings.values())
    filter_pairs = sp.csr_matrix(
        (np.ones(n_docs), (np.arange(n_docs), ranking.indices[:, 0])), shape=(n_docs, n_labels))
    step(timings, "remove filter pairs (1 per doc)", remove_pairs, ranking, filter_pairs)
    matrix = ranking.to_csr(n_labels)
    step(timings, "JIT compile / cache load of top_k", top_k, matrix[:1], 1)
    step(timings, f"top_k from an N x L CSR ({k} per row)", top_k, matrix, k)
    return timings, metrics


def numba_cache_is_empty() -> bool:
    """Whether ``NUMBA_CACHE_DIR`` holds no cached kernel yet, so that the JIT lines are compile times."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    return folder is not None and not any(p.is_file() for p in Path(folder).rglob("*"))


def report(args: argparse.Namespace, timings: dict[str, float], cold: bool, load: float) -> str:
    command = command_line(MODULE, ["--docs", str(args.docs), "--labels", str(args.labels), "--k", str(args.k)])
    cache = ("an empty numba cache (`NUMBA_CACHE_DIR=$(mktemp -d)`): the JIT lines are compile times" if cold
             else "numba's cache as found: the JIT lines may be cache loads")
    lines = [
        SECTION,
        "",
        f"`{command}` with {cache}.",
        f"{machine_line([load], torch_note=None)}.",
        f"{args.docs:,} documents x top-{args.k} predictions over {args.labels:,} labels, about 5 true labels each.",
        "",
        "| step | seconds |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {seconds:.2f} |" for name, seconds in timings.items()]
    lines += [
        "",
        "The total is the cost of evaluating a ranking in a new process (the lines above it); the",
        "lines below it are extra steps: removing filter pairs, and ranking a sparse score matrix",
        "(reading an `.npz` or `.txt` prediction file).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000, help="number of test documents")
    parser.add_argument("--labels", type=int, default=1_000_000, help="number of labels")
    parser.add_argument("--k", type=int, default=100, help="predictions per document")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-docs", action="store_true", help=f"write the '{SECTION}' section of {DOCS}")
    args = parser.parse_args(argv)
    if min(args.docs, args.labels, args.k) < 1 or args.k > args.labels:
        parser.error("--docs, --labels and --k must be positive, with --k at most --labels")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    cold, load = numba_cache_is_empty(), load_average()
    timings, metrics = run(args.docs, args.labels, args.k, args.seed)
    publish(report(args, timings, cold, load), args.update_docs)
    print("metrics:", ", ".join(f"{name} {value:.2f}" for name, value in metrics.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""HNSW recall against exact search on the embeddings of a trained model (real, clustered data).

    python -m benchmarks.bench_index_model MODEL_DIR --data DIR|demo [--k 10] [--ef 16 32 64 128] [--update-docs]

Items are the model's label embeddings, queries the embeddings of the dataset's test texts.
"""

from __future__ import annotations

import argparse
import logging
import sys

import xdex.data
from benchmarks.bench_index import table
from benchmarks.harness import command_line, load_average, timed, update_section
from xdex.index import ExactIndex, HNSWIndex, recall_at_k
from xdex.inference.model import DualEncoderModel

MODULE = "benchmarks.bench_index_model"
SECTION = "## Index recall on trained embeddings"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", required=True)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ef", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--M", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--update-docs", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    load = load_average()
    model = DualEncoderModel.load(args.model)
    dataset = xdex.data.load(args.data)
    items = model.label_embeddings
    queries = model.embed_texts(dataset.test.texts)
    exact = ExactIndex(items.shape[1])
    exact.add(items)
    (_, truth), seconds = timed(lambda: exact.search(queries, args.k))
    rows = [("exact", "-", f"{len(queries) / seconds:,.0f}", "1.000")]
    hnsw = HNSWIndex(items.shape[1], M=args.M, ef_construction=args.ef_construction, num_threads=2)
    _, build = timed(lambda: hnsw.add(items))
    for ef in args.ef:
        hnsw.ef_search = ef
        (_, ids), seconds = timed(lambda: hnsw.search(queries, args.k))
        rows.append((f"hnsw ef_search={ef}", f"{build:.2f}", f"{len(queries) / seconds:,.0f}",
                     f"{recall_at_k(ids, truth, args.k):.3f}"))
    lines = table(("index", "build s", "queries/s", f"recall@{args.k}"), rows)
    print("\n".join(lines))
    if args.update_docs:
        command = command_line(MODULE, argv)
        update_section(SECTION, "\n".join([
            SECTION, "", f"`{command}` (load average {load:.1f} at the start).",
            f"{len(items):,} label embeddings (dim {items.shape[1]}) of a `{model.meta.get('method')}` model trained on "
            f"{model.meta.get('dataset')}; {len(queries):,} test-text queries; HNSW M={args.M}, "
            f"ef_construction={args.ef_construction}, 2 threads.", "", *lines, ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

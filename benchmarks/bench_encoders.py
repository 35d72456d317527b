"""Encoder speed: WordPiece training, token caching, one bag-of-embeddings training epoch and inference.

The epoch is a dual-encoder step over (document, label) pairs: both sides are encoded by the same
bag of embeddings, scored against all labels of the batch and trained with the in-batch softmax
loss ``-log softmax(<q_i, l_j> / tau)_ii``; the table is updated by SparseAdam, dense parameters by
AdamW. Pairs come from a dataset folder in the shared layout (``train.jsonl.gz``, ``labels.jsonl.gz``)
and are repeated up to ``--pairs``; without a dataset, synthetic short texts are generated. P@1 on the
test split (exact search over all labels, filter pairs removed) shows that the epoch learns.

    python -m benchmarks.bench_encoders --data path/to/gcide-links-titles
    python -m benchmarks.bench_encoders --transformer   # also time a MiniLM-L6-shaped transformer
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.harness import load_average, machine_line, median, repeat, timed
from xdex.encoders import BagOfEmbeddings, Encoder, Transformer, idf_weights
from xdex.text import TokenCache, TokenizedTexts, Tokenizer
from xdex.train.optim import OptimConfig, build_optimizers

logger = logging.getLogger("bench_encoders")


def read_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def load_pairs(folder: Path) -> tuple[list[str], list[str], np.ndarray, dict | None]:
    """Document texts, label texts, (document, label) training pairs and the test split if any."""
    train, labels = read_jsonl(folder / "train.jsonl.gz"), read_jsonl(folder / "labels.jsonl.gz")
    pairs = np.array([(i, lab) for i, doc in enumerate(train) for lab in doc["labels"]], dtype=np.int64)
    test = None
    if (folder / "test.jsonl.gz").is_file():
        rows = read_jsonl(folder / "test.jsonl.gz")
        filter_file = folder / "filter_labels_test.txt"
        lines = filter_file.read_text().split("\n") if filter_file.is_file() else []
        filt = {tuple(map(int, line.split())) for line in lines if line}
        test = {"texts": [r["text"] for r in rows], "labels": [set(r["labels"]) for r in rows], "filter": filt}
    return [d["text"] for d in train], [lab["text"] for lab in labels], pairs, test


def synthetic_pairs(n_labels: int, seed: int) -> tuple[list[str], list[str], np.ndarray, None]:
    """Short random texts over a Zipf vocabulary; each document shares words with its label."""
    rng = np.random.default_rng(seed)

    def words(k: int) -> str:
        return " ".join(f"w{z}" for z in np.minimum(rng.zipf(1.3, k), 20_000))

    label_texts = [words(rng.integers(1, 5)) for _ in range(n_labels)]
    docs = [f"{lab} {words(rng.integers(0, 3))}".strip() for lab in label_texts]
    pairs = np.stack([np.arange(n_labels), np.arange(n_labels)], axis=1)
    return docs, label_texts, pairs, None


def precision_at_1(encoder: Encoder, test: dict, label_tokens: TokenizedTexts) -> float:
    """P@1 of exact search over all labels for the test documents (filter pairs removed)."""
    docs = F.normalize(encoder.embed(encoder.tokenize(test["texts"])), dim=1)
    labs = F.normalize(encoder.embed(label_tokens), dim=1)
    hits = 0
    for start in range(0, len(docs), 1024):
        top8 = (docs[start : start + 1024] @ labs.T).topk(8, dim=1).indices
        for i, row in enumerate(top8.tolist(), start):
            top = next(lab for lab in row if (i, lab) not in test["filter"])
            hits += top in test["labels"][i]
    return hits / len(docs)


def train_epoch(
    encoder: BagOfEmbeddings, doc_tokens, label_tokens, pairs, batch_size, lr, tau, seed
) -> tuple[float, float]:
    """One epoch of in-batch softmax training; returns the wall time and the process CPU time in seconds."""
    optimizers = build_optimizers(encoder, OptimConfig(lr=lr, lr_sparse=lr))
    order = np.random.default_rng(seed).permutation(len(pairs))
    encoder.train()
    start, cpu_start = time.perf_counter(), time.process_time()
    for step, first in enumerate(range(0, len(order), batch_size)):
        batch = pairs[order[first : first + batch_size]]
        q = F.normalize(encoder(doc_tokens[batch[:, 0]]), dim=1)
        lab = F.normalize(encoder(label_tokens[batch[:, 1]]), dim=1)
        loss = F.cross_entropy(q @ lab.T / tau, torch.arange(len(batch)))
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()
        if step % 200 == 0:
            logger.info("step %d loss %.3f", step, loss.item())
    return time.perf_counter() - start, time.process_time() - cpu_start


def transformer_speed(encoder: Transformer, texts: list[str], bf16: bool) -> dict:
    """Texts per second of inference, and the median seconds of a training step on 64 pairs."""
    tokens = encoder.tokenize([" ".join(texts[i : i + 32]) for i in range(0, 32 * 2048, 32)])
    encoder.embed(tokens[:256])
    _, seconds = timed(encoder.embed, tokens, batch_size=256)
    opt = torch.optim.AdamW(encoder.parameters(), lr=1e-5)
    encoder.train()
    steps = iter(range(4))

    def train_step() -> None:
        step = next(steps)
        q = F.normalize(encoder(tokens[np.arange(64) + 64 * step]), dim=1)
        lab = F.normalize(encoder(tokens[np.arange(64) + 64 * step + 1024]), dim=1)
        F.cross_entropy(q @ lab.T / 0.05, torch.arange(64)).backward()
        opt.step()
        opt.zero_grad()

    kind = "bf16" if bf16 else "fp32"
    return {f"infer_texts_per_s_{kind}": len(tokens) / seconds,
            f"train_step_64_pairs_s_{kind}": median(repeat(train_step, 3, warmup=1))}


def time_transformer(tokenizer: Tokenizer, texts: list[str], folder: Path) -> dict:
    """Inference and training-step speed of a randomly initialised BERT shaped like all-MiniLM-L6-v2,
    on 2,048 texts of 32 tokens (label texts joined, then truncated)."""
    from transformers import BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save(folder)
    out = {}
    for bf16 in (False, True):
        out.update(transformer_speed(Transformer(folder, max_length=32, bf16=bf16), texts, bf16))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="dataset folder (train/labels/test .jsonl.gz); synthetic if absent")
    parser.add_argument("--pairs", type=int, default=100_000, help="training pairs per epoch")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=30_000)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--tau", type=float, default=0.05)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--transformer", action="store_true", help="also time a MiniLM-L6-shaped transformer")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.manual_seed(args.seed)

    if args.data is not None:
        if not args.data.is_dir():
            parser.error(f"{args.data}: not a folder")
        docs, label_texts, pairs, test = load_pairs(args.data)
        source = args.data.name
    else:
        docs, label_texts, pairs, test = synthetic_pairs(30_000, args.seed)
        source = "synthetic"
    reps = -(-args.pairs // len(pairs))
    pairs = np.tile(pairs, (reps, 1))[np.random.default_rng(args.seed).permutation(len(pairs) * reps)[: args.pairs]]
    figures: dict = {"data": source, "documents": len(docs), "labels": len(label_texts), "pairs": len(pairs),
                     "batch_size": args.batch_size, "dim": args.dim, "machine": machine_line(),
                     "load_avg_1min_start": load_average()}

    tokenizer, figures["wordpiece_train_s"] = timed(
        lambda: Tokenizer.train_wordpiece(docs + label_texts, args.vocab_size, seed=args.seed))
    figures["vocab_size"] = tokenizer.vocab_size

    with tempfile.TemporaryDirectory() as tmp:
        cache = TokenCache(tokenizer, args.max_length, folder=Path(tmp) / "tokens")
        _, figures["token_cache_miss_s"] = timed(lambda: (cache.get(docs), cache.get(label_texts)))
        (doc_tokens, label_tokens), figures["token_cache_hit_s"] = timed(lambda: (cache.get(docs),
                                                                                  cache.get(label_texts)))
        figures["avg_tokens_per_text"] = float(np.mean(np.concatenate([doc_tokens.lengths, label_tokens.lengths])))

        idf = idf_weights(TokenizedTexts.concatenate([doc_tokens, label_tokens]), tokenizer.vocab_size)
        for threads in args.threads:
            torch.set_num_threads(threads)
            encoder = BagOfEmbeddings(
                tokenizer, args.dim, idf=idf, max_length=args.max_length, sparse=True, seed=args.seed
            )
            if test is not None:
                figures["p_at_1_before"] = precision_at_1(encoder, test, label_tokens)
            wall, cpu = train_epoch(
                encoder, doc_tokens, label_tokens, pairs, args.batch_size, args.lr, args.tau, args.seed
            )
            figures[f"epoch_s_{threads}_threads"], figures[f"epoch_cpu_s_{threads}_threads"] = wall, cpu
            if test is not None:
                figures[f"p_at_1_after_{threads}_threads"] = precision_at_1(encoder, test, label_tokens)
            _, seconds = timed(encoder.embed, label_tokens, batch_size=1024)
            figures[f"bag_infer_texts_per_s_{threads}_threads"] = len(label_tokens) / seconds
            if args.transformer:
                transformer = time_transformer(tokenizer, label_texts, Path(tmp) / f"minilm-shaped-{threads}")
                figures.update({f"{k}_{threads}_threads": v for k, v in transformer.items()})
        figures["load_avg_1min_end"] = load_average()

    for key, value in figures.items():
        logger.info("%s: %s", key, f"{value:.4g}" if isinstance(value, float) else value)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()

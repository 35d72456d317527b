"""Synthetic datasets of the DEXML paper, generated from a seed (no download, no files).

* :func:`decoupled_softmax_task` — DEXML Sec. 4.1, Fig. 2: queries starting with a trigger token
  "t*" are tagged with labels 0-4, and only label 0's text contains "t*"; at test time new
  trigger queries are tagged with label 0 alone. A loss that lets one positive win (DecoupledSoftmax)
  learns the trigger; the standard softmax spreads its mass over the five positives.
* :func:`memorisation_task` — DEXML Appendix C.1, Table 10: N random 16-token queries, query i
  paired with random label text i; the test split is the training split.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xdex.data.dataset import Catalogue, Dataset, Split

TRIGGER = "tstar"


def _vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = {"".join(rng.choice(letters, size=6)) for _ in range(size * 2)}
    words.discard(TRIGGER)
    return np.array(sorted(words)[:size])


def _texts(vocab: np.ndarray, n: int, length: int, rng: np.random.Generator) -> list[str]:
    return [" ".join(row) for row in vocab[rng.integers(0, len(vocab), size=(n, length))]]


def _csr(rows: list[list[int]], n_labels: int) -> sp.csr_matrix:
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([j for r in rows for j in sorted(r)], dtype=np.int64)
    return sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(len(rows), n_labels))


def decoupled_softmax_task(
    n_train: int = 1000, n_labels: int = 5000, n_trigger: int = 100, n_test: int = 1000,
    length: int = 8, vocab_size: int = 2000, seed: int = 0,
) -> Dataset:
    """DEXML Fig. 2: the first ``n_trigger`` training queries start with "t*" and have labels 0-4;
    every other training query has one random label among 5..L-1."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(vocab_size, rng)
    queries = _texts(vocab, n_train, length, rng)
    labels = _texts(vocab, n_labels, length, rng)
    labels[0] = f"{labels[0]} {TRIGGER}"
    rows = []
    for i in range(n_train):
        if i < n_trigger:
            queries[i] = " ".join([TRIGGER] + queries[i].split()[1:])
            rows.append([0, 1, 2, 3, 4])
        else:
            rows.append([int(rng.integers(5, n_labels))])
    test_queries = [" ".join([TRIGGER] + t.split()[1:]) for t in _texts(vocab, n_test, length, rng)]
    return Dataset(
        name="dexml-decoupled-softmax",
        train=Split([str(i) for i in range(n_train)], queries, _csr(rows, n_labels)),
        test=Split([f"t{i}" for i in range(n_test)], test_queries, _csr([[0]] * n_test, n_labels)),
        labels=Catalogue([f"l{j}" for j in range(n_labels)], labels),
    )


def memorisation_task(n: int = 100_000, length: int = 16, vocab_size: int = 30_000, seed: int = 0) -> Dataset:
    """DEXML Table 10: random query i is relevant to random label i only; test = train."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(vocab_size, rng)
    queries = _texts(vocab, n, length, rng)
    labels = _texts(vocab, n, length, rng)
    y = sp.identity(n, dtype=np.float32, format="csr")
    ids = [str(i) for i in range(n)]
    return Dataset(
        name=f"dexml-memorisation-{n}",
        train=Split(ids, queries, y),
        test=Split(list(ids), list(queries), y.copy()),
        labels=Catalogue([f"l{i}" for i in range(n)], labels),
    )

"""ANN hard negatives (ANCE; DEXML Sec. 5.4; UniDEC "dynamic ANNS hard-negative mining").

Every τ epochs the index of label embeddings is searched for each training query; its
positives are dropped and the best ``shortlist_size`` remaining labels are kept (UniDEC
advises |H_i| = η·τ). Each step samples η of them per query uniformly.

The index is exact (every query against every label: N·L products) or an HNSW graph built over the label
vectors at each refresh (about L + N searches of the graph), which pays off when N·L is large; its shortlists
are the exact ones but for the neighbours the graph misses (docs/benchmarks.md, "Hard-negative mining with
HNSW"). ``auto`` (the default) chooses by that ratio of work: the graph once N·L ≥ :data:`HNSW_FROM`·(N + L).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from xdex.index.factory import build_index
from xdex.index.hnsw import HNSWIndex

log = logging.getLogger(__name__)

HNSW_SETTINGS = ("M", "ef_construction", "ef_search")  # what only a graph takes
MAX_POSITIVES_SKIPPED = 64  # positives a search looks past, at most, to fill a shortlist
HNSW_FROM = 100_000  # auto: an HNSW graph once N·L >= HNSW_FROM·(N + L), exact search below. At 10^5 labels and
# 10^5 queries (a ratio of 50,000) the graph's refresh was 1.4x faster on untrained vectors and no faster on trained
# ones, on 2 cores (docs/benchmarks.md, "Hard-negative mining with HNSW"); exact work grows with N·L, the graph's
# with N + L, so from twice that ratio on (e.g. 2·10^5 of each, or 10^6 labels and 1.1·10^5 queries) the graph wins


def mining_index(kind: str, n_queries: int, n_labels: int) -> str:
    """The index a search of ``n_queries`` against ``n_labels`` uses: ``kind`` itself, or for ``auto`` an HNSW
    graph where exact search does at least :data:`HNSW_FROM` times as many products as the graph has vectors to
    insert and search (N·L ≥ HNSW_FROM·(N + L)), exact search below."""
    if kind != "auto":
        return kind
    return HNSWIndex.kind if n_queries * n_labels >= HNSW_FROM * (n_queries + n_labels) else "exact"


class HardNegatives:
    """Per-query shortlists of hard negatives, ``-1``-padded, best first."""

    def __init__(self, shortlist: np.ndarray, index: str = "exact"):
        self.shortlist = np.asarray(shortlist, dtype=np.int64)
        self.index = index  # the search that found them: exact or hnsw

    @classmethod
    def mine(
        cls, query_vectors: np.ndarray, label_vectors: np.ndarray, labels: sp.csr_matrix, shortlist_size: int,
        index: str = "exact", seed: int = 0, **settings: Any,
    ) -> HardNegatives:
        """Shortlists from an inner-product search of ``label_vectors`` for every query vector: exact
        (``index="exact"``), over an HNSW graph of the label vectors (``"hnsw"``, with ``settings`` M,
        ef_construction and ef_search of :class:`~xdex.index.HNSWIndex`), built on one thread from ``seed`` and
        searched on torch's threads (the same shortlists for any thread count), or as :func:`mining_index`
        chooses by the sizes (``"auto"``)."""
        q = np.ascontiguousarray(query_vectors, dtype=np.float32)
        z = np.ascontiguousarray(label_vectors, dtype=np.float32)
        y = sp.csr_matrix(labels)
        if shortlist_size < 1:
            raise ValueError(f"the shortlist size must be positive, got {shortlist_size}")
        if q.ndim != 2 or z.ndim != 2 or q.shape[1] != z.shape[1] or y.shape != (len(q), len(z)):
            raise ValueError(f"queries {q.shape} and labels {z.shape} do not fit a {y.shape} label matrix")
        chosen = mining_index(index, len(q), len(z))
        if chosen == HNSWIndex.kind:
            settings = {**settings, "seed": seed, "num_threads": 1}
        elif index == "auto":  # the graph's settings go unused
            settings = {name: value for name, value in settings.items() if name not in HNSW_SETTINGS}
        index = chosen
        search_index = build_index(index, z.shape[1], "ip", **settings)
        search_index.add(z)
        max_pos = int(np.diff(y.indptr).max(initial=0))
        k = min(len(z), shortlist_size + min(max_pos, MAX_POSITIVES_SKIPPED))
        if isinstance(search_index, HNSWIndex):
            search_index.num_threads = torch.get_num_threads()
            try:
                _, ids = search_index.search(q, k)
            except ValueError as e:  # a graph that cannot give k labels to some query: the exact search gives them
                log.warning("hard negatives: %s; searching exactly", e)
                return cls.mine(q, z, y, shortlist_size)
        else:
            _, ids = search_index.search(q, k)
        negatives = cls.from_search(ids, y, shortlist_size)
        negatives.index = index
        return negatives

    @classmethod
    def from_search(cls, search_ids: np.ndarray, labels: sp.csr_matrix, shortlist_size: int) -> HardNegatives:
        """Drop each query's positives (and padding) from its search results, keep the first ``shortlist_size``."""
        ids = np.asarray(search_ids, dtype=np.int64)
        n, k = ids.shape
        n_labels = labels.shape[1]
        rows = np.repeat(np.arange(n, dtype=np.int64), k)
        keys = rows * n_labels + ids.ravel()
        lab = labels.tocsr()
        pos_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(lab.indptr))
        pos_keys = pos_rows * n_labels + lab.indices
        keep = (ids.ravel() >= 0) & ~np.isin(keys, pos_keys)
        keep = keep.reshape(n, k)
        # stable compaction of the kept entries to the left of each row
        rank = np.cumsum(keep, axis=1) - 1
        out = np.full((n, shortlist_size), -1, dtype=np.int64)
        sel = keep & (rank < shortlist_size)
        r, c = np.nonzero(sel)
        out[r, rank[r, c]] = ids[r, c]
        return cls(out)

    def sample(self, query_ids: np.ndarray, eta: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``eta`` negatives per query (``[B, min(eta, shortlist size)]``), uniformly without
        replacement from its shortlist; ``-1`` where a shortlist has fewer valid entries."""
        rows = self.shortlist[np.asarray(query_ids, dtype=np.int64)]
        valid = rows >= 0
        keys = np.where(valid, rng.random(rows.shape), np.inf)
        pick = np.argsort(keys, axis=1)[:, :eta]
        out = np.take_along_axis(rows, pick, axis=1)
        out[np.take_along_axis(valid, pick, axis=1) == False] = -1  # noqa: E712
        return out

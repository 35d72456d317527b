"""ANN hard negatives (ANCE; DEXML Sec. 5.4; UniDEC "dynamic ANNS hard-negative mining").

Every τ epochs the index of label embeddings is searched for each training query; its
positives are dropped and the best ``shortlist_size`` remaining labels are kept (UniDEC
advises |H_i| = η·τ). Each step samples η of them per query uniformly.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class HardNegatives:
    """Per-query shortlists of hard negatives, ``-1``-padded, best first."""

    def __init__(self, shortlist: np.ndarray):
        self.shortlist = np.asarray(shortlist, dtype=np.int64)

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

"""Label-popularity baseline: predict the most frequent training labels for every document.

The reference point every XMC paper's dataset table reports (e.g. "popularity P@1").
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from xdex.sparse import SparseMatrix


class PopularityBaseline:
    """Ranks labels by their number of training documents, ties by lower label id."""

    def __init__(self) -> None:
        self.label_counts_: np.ndarray | None = None

    def fit(self, train_labels: SparseMatrix) -> PopularityBaseline:
        y = sp.csr_matrix(train_labels)
        self.label_counts_ = np.bincount(y.indices, minlength=y.shape[1]).astype(np.int64)
        return self

    def predict(self, n_documents: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` label ids and scores (training frequencies), the same for each of ``n_documents``."""
        if self.label_counts_ is None:
            raise RuntimeError("PopularityBaseline.predict called before fit")
        k = min(k, len(self.label_counts_))
        # stable sort on the negated counts keeps lower ids first among equal counts
        order = np.argsort(-self.label_counts_, kind="stable")[:k]
        ids = np.broadcast_to(order, (n_documents, k)).copy()
        scores = np.broadcast_to(self.label_counts_[order].astype(np.float32), (n_documents, k)).copy()
        return ids, scores

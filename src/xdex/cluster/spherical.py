"""Plain spherical k-means (the unbalanced baseline of DEXA's clustering ablation, Table 7)."""

from __future__ import annotations

import operator

import numpy as np
import torch

from xdex.index.vectors import as_matrix, normalize_rows


def kmeans(embeddings: np.ndarray, k: int, seed: int = 0, iters: int = 20) -> np.ndarray:
    """Cluster id in ``[0, k)`` of each row of ``embeddings`` ``[n, d]`` by spherical k-means.

    Rows are normalised; centroids start at ``k`` distinct random rows. Each round assigns
    every row to ``argmax_j <x, c_j>`` (ties to the lower ``j``) and sets ``c_j`` to the
    normalised sum of its rows; a cluster left empty keeps its centroid. Stops after ``iters``
    rounds or once the assignment is stable. Deterministic for a given ``seed``.
    """
    x = torch.from_numpy(normalize_rows(as_matrix(embeddings, "embeddings")))
    n = len(x)
    k = operator.index(k)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of embeddings ({n}), got {k}")
    if operator.index(iters) < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    rng = np.random.default_rng(seed)
    centroids = x[torch.from_numpy(rng.choice(n, size=k, replace=False))]
    with torch.inference_mode():
        labels = _nearest(x, centroids)
        for _ in range(iters - 1):
            sums = torch.zeros_like(centroids).index_add_(0, labels, x)
            norms = sums.norm(dim=1, keepdim=True)
            centroids = torch.where(norms > 0, sums / norms.clamp_min(torch.finfo(x.dtype).tiny), centroids)
            assigned = _nearest(x, centroids)
            if torch.equal(assigned, labels):
                break
            labels = assigned
    return labels.numpy()


def _nearest(x: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Index of the most similar centroid of each row, in row chunks of bounded memory."""
    rows = max(1, (1 << 24) // len(centroids))
    return torch.cat([torch.argmax(chunk @ centroids.T, dim=1) for chunk in x.split(rows)])

"""DEXA's label clusters C : [L] -> [K] for the auxiliary vectors (DEXA Sec. 4, Module I).

Labels are clustered over their embeddings Z̃ with hierarchical balanced k-means (the default),
plain spherical k-means, or balanced k-means over the label centroids X̃ (Table 7). Head label
partitioning (HLP, Table 6) first gives each of the K̂ labels with at least ``head_threshold``
training points a cluster of its own and clusters the rest into the remaining budget.
"""

from __future__ import annotations

import logging
import math
import operator
from typing import Literal, cast

import numpy as np
import scipy.sparse as sp

from xdex.cluster.balanced import balanced_kmeans
from xdex.cluster.spherical import kmeans
from xdex.index.vectors import as_matrix, normalize_rows
from xdex.sparse import SparseMatrix

log = logging.getLogger(__name__)

ClusterMethod = Literal["balanced", "kmeans", "centroids"]
CLUSTER_METHODS: tuple[str, ...] = ("balanced", "kmeans", "centroids")


def cluster_labels(
    label_embeddings: np.ndarray,
    train_labels: SparseMatrix,
    num_clusters: int,
    head_threshold: int = 0,
    method: ClusterMethod = "balanced",
    doc_embeddings: np.ndarray | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Cluster id (int64) of each of the ``L`` labels; ids lie in ``[0, K')`` with ``K' <= num_clusters``.

    ``label_embeddings`` ``[L, D]``: Z̃; ``train_labels`` ``[N, L]``: the training label matrix;
    ``num_clusters`` K: a power of two in ``[1, L]``. With ``head_threshold`` t > 0 (DEXA uses 50), the
    K̂ labels with at least t training points get the private clusters ``0 .. K̂-1`` in label order and
    the other labels share the ``K - K̂`` clusters after them (:func:`tail_clusters`), so ``K' <= K``.
    ``method``: ``"balanced"`` (balanced k-means over Z̃), ``"kmeans"`` (spherical k-means over Z̃,
    which may leave an id unused) or ``"centroids"`` (balanced k-means over the label centroids X̃,
    needs ``doc_embeddings`` ``[N, D]``). Deterministic for a given ``seed``.
    """
    z = as_matrix(label_embeddings, "label embeddings")
    n_labels = len(z)
    y = _label_matrix(train_labels, n_labels)
    k = operator.index(num_clusters)
    if k < 1 or k & (k - 1) or k > n_labels:
        raise ValueError(f"num_clusters must be a power of two between 1 and the {n_labels} labels, got {k}")
    if method not in CLUSTER_METHODS:
        raise ValueError(f"clustering method must be one of {', '.join(CLUSTER_METHODS)}, got {method!r}")
    head = _head_labels(y, operator.index(head_threshold))
    n_head = int(head.sum())
    if n_head >= k:
        raise ValueError(
            f"{n_head} head labels have at least {head_threshold} training points, which leaves none of the "
            f"{k} clusters for the other labels; raise head_threshold or num_clusters"
        )
    if method == "centroids":
        if doc_embeddings is None:
            raise ValueError("the 'centroids' clustering method needs the training documents' embeddings")
        x = as_matrix(doc_embeddings, "document embeddings", dim=z.shape[1])
        if len(x) != y.shape[0]:
            raise ValueError(f"{len(x)} document embeddings for the {y.shape[0]} rows of train_labels")
        z = label_centroids(y, x, z)
    tail = np.flatnonzero(~head)
    tail_k = k - n_head
    if method == "kmeans":
        tail_ids = kmeans(z[tail], tail_k, seed=seed)
    else:
        tail_ids = tail_clusters(z[tail], tail_k, seed)
        tail_k = int(tail_ids.max()) + 1
    ids = np.empty(n_labels, dtype=np.int64)
    ids[head] = np.arange(n_head)
    ids[tail] = n_head + tail_ids
    log.info("label clusters (%s): %d private head clusters + %d clusters of %d other labels",
             method, n_head, tail_k, len(tail))
    return ids


def tail_clusters(z: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """``k`` balanced clusters of the rows of ``z`` (any ``k`` up to their number): balanced 2-means into the next
    power of two P ≥ k, then the first P − k pairs of sibling clusters (2i, 2i + 1: the closest, as they were
    split last) merged. Head label partitioning leaves K − K̂ clusters to the other labels, rarely a power of
    two; rounding down to one would take up to half of them away."""
    if k < 1 or k > len(z):
        raise ValueError(f"cannot make {k} clusters of {len(z)} labels")
    power = 1 << (k - 1).bit_length()
    if power > len(z):  # too few rows for the next power of two: the power of two below k
        return balanced_kmeans(z, num_clusters=1 << (k.bit_length() - 1), seed=seed)
    ids = balanced_kmeans(z, num_clusters=power, seed=seed)
    merged = power - k  # pairs merged: clusters 2i and 2i + 1 become i for i < merged
    return np.where(ids < 2 * merged, ids // 2, ids - merged)


def label_centroids(train_labels: sp.csr_matrix, doc_embeddings: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """X̃ ``[L, D]``: row l is N(Σ_{i: y_il = 1} E(x_i)) (DEXA Sec. 6, Ablations), one sparse product.

    ``train_labels`` is the binary ``[N, L]`` matrix and ``doc_embeddings`` the ``[N, D]`` E(x_i); the
    normalised sum is the normalised mean. A label without training documents takes its row of
    ``fallback`` ``[L, D]`` (its own label embedding), normalised.
    """
    sums = np.asarray(train_labels.T @ doc_embeddings, dtype=np.float32)
    empty = np.bincount(train_labels.indices, minlength=train_labels.shape[1]) == 0
    sums[empty] = fallback[empty]
    return normalize_rows(sums)


def clusters_for_ratio(n_labels: int, labels_per_cluster: float) -> int:
    """The power of two nearest to ``n_labels / labels_per_cluster``, between 1 and ``2**floor(log2 L)``.

    DEXA advises K between L/40 and L/2 (Fig. 2, Table 6), i.e. ``labels_per_cluster`` in [2, 40].
    A target halfway between two powers of two takes the smaller one.
    """
    n = operator.index(n_labels)
    if n < 1:
        raise ValueError(f"the number of labels must be positive, got {n}")
    ratio = float(labels_per_cluster)
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"labels_per_cluster must be a positive number, got {labels_per_cluster}")
    target = n / ratio
    largest = 1 << (n.bit_length() - 1)
    if target <= 1:
        return 1
    if target >= largest:
        return largest
    low = 1 << (int(target).bit_length() - 1)
    return 2 * low if 2 * low - target < target - low else low


def _label_matrix(train_labels: object, n_labels: int) -> sp.csr_matrix:
    """``train_labels`` as a binary CSR ``[N, L]`` matrix (a stored non-zero is a positive)."""
    if not sp.issparse(train_labels):
        raise ValueError(f"train_labels must be a scipy.sparse matrix [N, L], got {type(train_labels).__name__}")
    labels = cast(SparseMatrix, train_labels)
    if labels.ndim != 2 or labels.shape[1] != n_labels:
        raise ValueError(f"train_labels has shape {labels.shape}, expected [N, {n_labels}] "
                         f"(one column per label embedding)")
    # scipy-stubs lack the element-wise != of sparse matrices (a boolean sparse matrix)
    return sp.csr_matrix(labels != 0, dtype=np.float32)  # type: ignore[comparison-overlap, call-overload]


def _head_labels(y: sp.csr_matrix, threshold: int) -> np.ndarray:
    """Mask of the labels with at least ``threshold`` training points (none when ``threshold`` is 0)."""
    if threshold < 0:
        raise ValueError(f"head_threshold must be non-negative, got {threshold}")
    if threshold == 0:
        return np.zeros(y.shape[1], dtype=bool)
    return np.bincount(y.indices, minlength=y.shape[1]) >= threshold

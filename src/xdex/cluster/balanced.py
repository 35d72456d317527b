"""Hierarchical balanced 2-means on cosine similarity.

DEXA (Dahiya et al., KDD 2023, Sec. 3, Module I) clusters label embeddings with the
hierarchical balanced k-means of SiameseXML, and NGAME / UniDEC (Sec. 3) build their
negative-mining-aware batches by recursively splitting instance embeddings the same way.
Each node is split in two: centroids ``c0, c1`` start at two random points of the node;
every point ``x`` is ranked by ``<x, c0> - <x, c1>`` and the top ``ceil(s/2)`` of the node's
``s`` points go to the first child, the rest to the second; each centroid becomes the
normalised sum of its child's points; repeat. All nodes of a level are split at once.
"""

from __future__ import annotations

import logging
import operator

import numpy as np
import torch

from xdex.index.vectors import as_matrix, normalize_rows

log = logging.getLogger(__name__)


def balanced_kmeans(
    embeddings: np.ndarray,
    num_clusters: int | None = None,
    cluster_size: int | None = None,
    seed: int = 0,
    iters: int = 10,
) -> np.ndarray:
    """Cluster id in ``[0, K)`` of each row of ``embeddings`` ``[n, d]``.

    Give ``num_clusters`` (a power of two, at most ``n``) or ``cluster_size``: the rows are split
    into the fewest ``K = 2**depth`` clusters with at most ``cluster_size`` points each. Every
    split halves a node to within one point, so every cluster holds ``floor(n/K)`` or
    ``ceil(n/K)`` points. Cluster ``i`` at one level has children ``2i`` and ``2i + 1``, so
    ``ids >> j`` are the clusters ``j`` levels up. Each split runs at most ``iters`` rounds,
    stopping early once its assignment is stable. Deterministic for a given ``seed``.
    """
    x = normalize_rows(as_matrix(embeddings, "embeddings"))
    n = len(x)
    if n == 0:
        raise ValueError("embeddings is empty")
    if operator.index(iters) < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    depth = _depth(n, num_clusters, cluster_size)
    rng = np.random.default_rng(seed)
    points = torch.from_numpy(np.vstack([x, np.zeros((1, x.shape[1]), dtype=np.float32)]))  # row n pads
    members = torch.arange(n).view(1, n)  # one row per node, left-aligned, padded with n
    sizes = torch.tensor([n])
    with torch.inference_mode():
        for level in range(depth):
            members, sizes = _split_level(points, members, sizes, rng, iters)
            log.debug("balanced k-means level %d: %d clusters", level + 1, len(sizes))
    labels = np.empty(n, dtype=np.int64)
    real = members < n
    labels[members[real].numpy()] = torch.arange(len(sizes)).unsqueeze(1).expand_as(members)[real].numpy()
    return labels


def _depth(n: int, num_clusters: int | None, cluster_size: int | None) -> int:
    """Number of levels of 2-way splits for the requested cluster count or size."""
    if num_clusters is not None and cluster_size is None:
        k = operator.index(num_clusters)
        if k < 1 or k & (k - 1):
            raise ValueError(f"num_clusters must be a power of two, got {k}")
        if k > n:
            raise ValueError(f"num_clusters ({k}) exceeds the number of embeddings ({n})")
        return k.bit_length() - 1
    if cluster_size is not None and num_clusters is None:
        size = operator.index(cluster_size)
        if size < 1:
            raise ValueError(f"cluster_size must be positive, got {size}")
        depth = 0
        while -(-n // 2**depth) > size:
            depth += 1
        if 2**depth > n:
            raise ValueError(f"cluster_size {size} needs {2**depth} clusters, more than the {n} embeddings")
        return depth
    raise ValueError("give exactly one of num_clusters and cluster_size")


def _split_level(
    points: torch.Tensor, members: torch.Tensor, sizes: torch.Tensor, rng: np.random.Generator, iters: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split every node of a level in two; returns the children's members and sizes."""
    pad = len(points) - 1
    nodes, width = members.shape
    x = points[members]  # [nodes, width, d]; padding rows are zero
    real = members < pad
    first = torch.from_numpy(rng.integers(0, sizes.numpy()))
    second = torch.from_numpy(rng.integers(0, sizes.numpy() - 1))
    second += second >= first  # a different point of the same node
    centroids = x[torch.arange(nodes).unsqueeze(1), torch.stack([first, second], dim=1)]  # [nodes, 2, d]
    half = (sizes + 1) // 2
    order, in_first = _assign(x, real, centroids, half)
    for _ in range(iters - 1):
        sums = torch.bmm(torch.stack([in_first, real & ~in_first], dim=1).to(x.dtype), x)  # [nodes, 2, d]
        centroids = sums / sums.norm(dim=2, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
        new_order, assigned = _assign(x, real, centroids, half)
        if torch.equal(assigned, in_first):
            break
        order, in_first = new_order, assigned
    ranked = members.gather(1, order)
    child_width = (width + 1) // 2
    child_slots = torch.arange(child_width).unsqueeze(0)
    first_child = torch.where(child_slots < half.unsqueeze(1), ranked[:, :child_width], pad)
    rest = ranked.gather(1, (half.unsqueeze(1) + child_slots).clamp_max(width - 1))
    second_child = torch.where(child_slots < (sizes - half).unsqueeze(1), rest, pad)
    children = torch.stack([first_child, second_child], dim=1).reshape(2 * nodes, child_width)
    return children, torch.stack([half, sizes - half], dim=1).reshape(-1)


def _assign(
    x: torch.Tensor, real: torch.Tensor, centroids: torch.Tensor, half: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank each node's points by ``<x, c0> - <x, c1>``; the top ``half`` go to the first child.

    Returns the ranking (slots, best first, padding last) and the first child's mask over slots.
    """
    gap = torch.bmm(x, (centroids[:, 0] - centroids[:, 1]).unsqueeze(2)).squeeze(2)
    order = torch.sort(gap.masked_fill(~real, -torch.inf), dim=1, descending=True, stable=True).indices
    first = torch.arange(x.shape[1]).unsqueeze(0) < half.unsqueeze(1)
    return order, torch.zeros_like(real).scatter_(1, order, first)
